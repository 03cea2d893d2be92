"""The palazzo MCP server: the palace tools, the wake-up prompt and resource, one error and usage wrapper."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import gc
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio.to_thread
from django.conf import settings
from django.core.management.base import CommandError
from django.db import close_old_connections, connection
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.mcpserver.resources import FunctionResource
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, ContentBlock, TextContent
from pydantic import BaseModel, ConfigDict

from mcpserver import models
from mcpserver.schemas import PalazzoEnvironment
from mcpserver.tools import TOOLS, Caller, ToolSpec
from palace import __version__
from palace.engine import metrics
from palace.engine.holder import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES  # what any transport takes at most
from palace.errors import InvalidInput, PalaceError, StoreLocked
from palace.governance import auth
from palace.governance.audit import start_audit_writer
from palace.operations.gain import record_usage, start_usage_writer
from palace.schema.forms import shown_name, writer_stamp
from palace.schema.vocabulary import active_vocabulary

if TYPE_CHECKING:
    from mcp.shared._stream_protocols import ReadStream, WriteStream
    from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

WAKE_UP_URI = "palace://wake-up"
GAIN_URI = "palace://gain"
CONTEXT_KWARG = "_palazzo_mcp_context"
TOKEN_STAMP_PREFIX = "token:"


def instructions(env: PalazzoEnvironment) -> str:
    """The server instructions clients show the model."""
    writes = (
        "This server is read-only: only the read tools are available."
        if env.read_only
        else (
            "Write: palace_store (one memory; an identical text returns the existing memory), "
            "palace_store_batch (1-256), palace_supersede (correct out-of-date memories, keeping history), "
            "palace_delete and palace_delete_by_filter (permanent; only with the operator's explicit approval, "
            "confirm=true, dry_run first for filters)."
        )
    )
    return (
        "palazzo is a long-term memory palace shared by your sessions: verbatim memories filed by wing (area: "
        f"{', '.join(env.wings)}), room (free-text topic), hall (kind: {', '.join(env.halls)}) and category "
        f"({', '.join(env.categories)}), searched by meaning. "
        f"At session start read the wake-up context (prompt wake_up or resource {WAKE_UP_URI}) or call "
        "palace_status (counts and the rooms in use). Before answering from memory, palace_find; palace_browse "
        "lists a room or wing newest first; palace_recall fetches known ids; palace_check_duplicate tests a "
        f"text before storing. {writes} Superseded memories are hidden from palace_find unless "
        "include_superseded=true. A memory in a result leaves out the fields it has no value for. "
        "Errors start with a [code], name the field and the rule, and say what to do; "
        "nothing is written when a call fails."
    )


def with_palace_vocabulary(env: PalazzoEnvironment) -> PalazzoEnvironment:
    """The configuration with the palace's own vocabulary (recorded in its database) for the environment's."""
    if not dataclasses.is_dataclass(env) or isinstance(env, type):
        return env
    vocabulary = active_vocabulary()
    return dataclasses.replace(env, wings=vocabulary.wings, halls=vocabulary.halls, categories=vocabulary.categories)


class _RawArguments(ArgModelBase):
    """Accepts any arguments unchanged: the palace validates and names the field and the rule."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class PalaceWarmup:
    """Loads the model and opens the palace in a background thread; tool calls wait for it.

    wait_for_store (the holder): a palace another process has open (an operator command run with
    PALAZZO_HOLDER=off, a `serve`) is tried again every STORE_RETRY_SECONDS until it is released, and a
    tool call waits for it at most OPEN_WAIT_SECONDS before it tries itself and reports who holds it.
    """

    def __init__(self, *, wait_for_store: bool = False) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._done = threading.Event()
        self.wait_for_store = wait_for_store
        self.store_held_elsewhere = threading.Event()  # the last attempt to open found another process holding it
        self._cancelled = threading.Event()

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="palace-warmup", daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    open_palace(prepare_database=True)
                    break
                except StoreLocked as exc:
                    if not self.wait_for_store or self._cancelled.is_set():
                        raise
                    if not self.store_held_elsewhere.is_set():
                        logger.warning("%s; trying again every %.0f s", exc, STORE_RETRY_SECONDS)
                    self.store_held_elsewhere.set()
                    self._cancelled.wait(STORE_RETRY_SECONDS)
        except PalaceError as exc:
            logger.error("%s", exc)
        except Exception:
            logger.exception("could not open the palace")
        finally:
            self._done.set()

    def cancel(self) -> None:
        """Stop trying again to open a palace another process holds (the holder is leaving)."""
        self._cancelled.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background opening finished (at once when none was started); False on timeout."""
        return not self._started or self._done.wait(timeout)

    def wait_for_call(self) -> None:
        """What a tool call waits for: the opening, or (the holder) until it found another process holding the store.

        Then the call opens the palace itself, which succeeds once that process let go and otherwise reports
        at once who holds it, instead of waiting for a `serve` that will not let go.
        """
        if not self.wait_for_store:
            self.wait()
            return
        deadline = time.monotonic() + OPEN_WAIT_SECONDS
        while not self.wait(0.05) and not self.store_held_elsewhere.is_set() and time.monotonic() < deadline:
            pass


# The holder tries a store another process holds again this often, and a call waits this long for it.
STORE_RETRY_SECONDS = 1.0
OPEN_WAIT_SECONDS = 30.0


def open_palace(*, prepare_database: bool = False, take_over_holder: bool = False) -> None:
    """Load the model and open the palace (replaying the journal); raises PalaceError. Call off the loop.

    prepare_database migrates first (stdio: a brand-new data dir has no tables yet; runmcp leaves it to
    this warm-up so initialize is answered before any migration check), while the model loads in a
    second thread: the first answer waits for the longer of the two, not their sum.
    """
    from palace.feeding import feeder  # numpy and the store bindings: loaded off the start-up path
    from palace.management.database import prepare_database as migrate_database

    close_old_connections()
    try:
        if prepare_database:
            # A failure here is raised again, with its message, by get_palace below.
            loading = threading.Thread(target=_load_model_quietly, name="palace-model", daemon=True)
            loading.start()
            try:
                migrate_database()
            except CommandError as exc:
                logger.error("%s", exc)
            loading.join()
        # A detached transcript feeder may hold the palace: it is asked to let go, never a reason to fail.
        feeder.get_palace_taking_over(ask_holder=take_over_holder)
    finally:
        connection.close()
    start_usage_writer()
    start_audit_writer()
    feeder.start_spool_watcher()  # this process holds the palace now: it feeds what hooks queue
    freezer = threading.Timer(FREEZE_HEAP_AFTER_SECONDS, _freeze_heap)
    freezer.daemon = True
    freezer.start()


# The full collection before the freeze takes ~150 ms of the GIL: run then, not in the first call's way.
FREEZE_HEAP_AFTER_SECONDS = 3.0


def _freeze_heap() -> None:
    # Everything loaded so far (Django, the SDK, the model's Python side) lives as long as the
    # process; frozen, the cyclic collector stops re-scanning it: its full collections had paused
    # the server for 100-400 ms under load (bench/load_mcp.py), and now stay under 20 ms.
    gc.collect()
    gc.freeze()


def _load_model_quietly() -> None:
    from palace.engine import runtime

    with contextlib.suppress(Exception):
        runtime.get_embedder()


@dataclass(frozen=True)
class Outcome:
    """What one recorded palace call produced: JSON text and data, or an error message."""

    ok: bool
    text: str
    data: dict[str, Any] | None = None


def run_recorded(
    *,
    operation: str,
    tool: str,
    work: Callable[[], dict[str, Any]],
    output_model: type[BaseModel],
    warmup: PalaceWarmup,
    items: int = 1,
    added_by: str = "",
) -> Outcome:
    """The single wrapper (runs in a worker thread): call the palace, map PalaceError, record usage."""
    warmup.wait_for_call()
    close_old_connections()
    started = time.perf_counter()
    try:
        try:
            data = output_model.model_validate(work()).model_dump(mode="json")
            outcome = Outcome(ok=True, text=json.dumps(data, ensure_ascii=False, separators=(",", ":")), data=data)
        except PalaceError as exc:
            outcome = Outcome(ok=False, text=exc.for_agent())
        except Exception:
            logger.exception("%s failed", tool)
            outcome = Outcome(
                ok=False,
                text=f"[internal_error] {tool} failed unexpectedly (retry once; if it fails again, tell the operator: "
                "the server log has the details)",
            )
        elapsed = time.perf_counter() - started
        metrics.observe_tool(tool=tool, ok=outcome.ok, seconds=elapsed)
        record_usage(
            operation=operation,
            tool=tool,
            ok=outcome.ok,
            exec_ms=elapsed * 1000.0,
            bytes_out=len(outcome.text.encode("utf-8", errors="replace")),
            items=items,
            added_by=added_by,
        )
        return outcome
    finally:
        close_old_connections()


def client_identity(ctx: Context[Any]) -> str:
    """name/version from the MCP client's clientInfo: the added_by stamp of its writes."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    if info is None or not info.name:
        return "unknown-client"
    name = f"{info.name}/{info.version}" if info.version else info.name
    # A declared name can never pass for a token's stamp (token:<name>, given only to a bearer token).
    if name.strip().lower().startswith(TOKEN_STAMP_PREFIX):
        name = f"client:{name}"
    return writer_stamp(name)


def _parse_arguments(spec: ToolSpec, schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown keys; pass required ones as None when missing so the palace reports them."""
    unknown = sorted(set(arguments) - set(schema["properties"]))
    if unknown:
        raise InvalidInput({shown_name(key): ["is not a known field"] for key in unknown[:10]})
    return {key: None for key in schema.get("required", ())} | arguments


def _tool(spec: ToolSpec, env: PalazzoEnvironment, warmup: PalaceWarmup) -> Tool:
    schema = spec.input_schema(env)

    async def handler(**arguments: Any) -> CallToolResult:
        ctx = cast("Context[Any]", arguments.pop(CONTEXT_KWARG))
        http_request = ctx.request_context.request  # a Starlette request over HTTP, None over stdio
        refusal = None if spec.read_only else auth.read_scope_refusal(http_request, spec.name)
        if refusal:
            return CallToolResult(content=[TextContent(type="text", text=refusal)], is_error=True)
        # The bearer token's identity, when there is one, over the name the client declares.
        added_by = auth.writer(http_request, client_identity(ctx))  # stamped on writes and usage, the audit's actor

        caller = Caller(added_by=added_by, wings=auth.token_wings(http_request))

        def work() -> dict[str, Any]:
            return spec.call(_parse_arguments(spec, schema, arguments), caller)

        outcome = await anyio.to_thread.run_sync(
            functools.partial(
                run_recorded,
                operation=spec.operation,
                tool=spec.name,
                work=work,
                output_model=spec.output_model,
                warmup=warmup,
                items=spec.items(arguments),
                added_by=added_by,
            )
        )
        content: list[ContentBlock] = [TextContent(type="text", text=outcome.text)]
        if outcome.ok:
            return CallToolResult(content=content, structured_content=outcome.data)
        return CallToolResult(content=content, is_error=True)

    return Tool(
        fn=handler,
        name=spec.name,
        title=spec.title,
        description=spec.describe(env),
        parameters=schema,
        # No output_model: run_recorded has already validated the result against it, and the SDK
        # would validate the structured content a second time on every call.
        fn_metadata=FuncMetadata(arg_model=_RawArguments, output_schema=models.output_schema(spec.output_model)),
        is_async=True,
        context_kwarg=CONTEXT_KWARG,
        annotations=spec.annotations(),
    )


def _wake_up_data(caller: Caller, operation: str) -> dict[str, Any]:
    from palace.operations import status

    return status.wake_up(
        count=settings.PALAZZO.wake_up_count, actor=caller.added_by, operation=operation, wings=caller.wings
    )


async def _wake_up(tool: str, warmup: PalaceWarmup, caller: Caller) -> Outcome:
    operation = "wake_up_prompt" if tool.startswith("prompt:") else "wake_up_resource"
    return await anyio.to_thread.run_sync(
        functools.partial(
            run_recorded,
            operation="wake_up",
            tool=tool,
            work=functools.partial(_wake_up_data, caller, operation),
            output_model=models.WakeUp,
            warmup=warmup,
            added_by=caller.added_by,
        )
    )


def _caller(ctx: Context[Any] | None) -> Caller:
    """Who makes a request: its token (and the token's wings), else the client's declared name."""
    if ctx is None:
        return Caller(added_by="unknown-client")
    try:
        request = ctx.request_context.request
    except ValueError:  # outside a request
        return Caller(added_by="unknown-client")
    return Caller(added_by=auth.writer(request, client_identity(ctx)), wings=auth.token_wings(request))


# The reader of the wake-up resource: resource functions get no Context, so PalazzoServer.read_resource
# (which has it) puts the caller here for the one call.
_resource_reader: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "palazzo_resource_reader", default=None
)


class PalazzoServer(MCPServer[Any]):
    """MCPServer that tells resource functions who is reading, and serves any pair of message streams."""

    warmup: PalaceWarmup  # the palace opening its tool calls wait for
    read_only: bool  # only the read tools are served

    async def run_streams(
        self, read_stream: ReadStream[SessionMessage | Exception], write_stream: WriteStream[SessionMessage]
    ) -> None:
        """Serve one connection over the given streams until the read side closes (as run_stdio_async does)."""
        server = self._lowlevel_server
        await server.run(read_stream, write_stream, server.create_initialization_options())

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None) -> Any:
        token = _resource_reader.set(_caller(context))
        try:
            return await super().read_resource(uri, context)
        finally:
            _resource_reader.reset(token)


def build_server(
    *,
    env: PalazzoEnvironment | None = None,
    warm_up_in_background: bool = False,
    wait_for_store: bool = False,
    warmup: PalaceWarmup | None = None,
) -> PalazzoServer:
    """The MCP server over the process's palace; read-only deployments get the read tools only.

    warmup: another server's opening of the same palace, to wait for instead of a new one (the holder's
    read-only sessions are served by a second server over the one palace).
    """
    env = with_palace_vocabulary(env or settings.PALAZZO)
    warmup = warmup or PalaceWarmup(wait_for_store=wait_for_store)

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        if warm_up_in_background:
            warmup.start()
        yield {}

    specs = [
        spec for spec in TOOLS if (spec.read_only or not env.read_only) and (spec.listed_by_default or env.gain_tool)
    ]
    server = PalazzoServer(
        name="palazzo",
        title="palazzo memory palace",
        version=__version__,
        instructions=instructions(env),
        tools=[_tool(spec, env, warmup) for spec in specs],
        log_level=cast(Any, env.log_level),
        lifespan=lifespan,
    )
    server.warmup = warmup
    server.read_only = env.read_only

    async def wake_up(ctx: Context[Any]) -> str:
        outcome = await _wake_up("prompt:wake_up", warmup, _caller(ctx))
        if not outcome.ok:
            raise ValueError(outcome.text)
        return (
            "Context from your memory palace at the start of this session: its status and the most recent "
            "memories, as JSON. Use it to orient yourself; search with palace_find for anything else.\n\n"
            + outcome.text
        )

    server.add_prompt(
        Prompt.from_function(
            wake_up,
            name="wake_up",
            title="Wake up with the palace",
            description=(
                "Session-start context: palace status and the most recent memories "
                f"(the newest {env.wake_up_count}), to read before working."
            ),
        )
    )

    async def wake_up_resource() -> str:
        outcome = await _wake_up(f"resource:{WAKE_UP_URI}", warmup, _resource_reader.get() or _caller(None))
        if not outcome.ok:
            raise ResourceError(outcome.text)
        return outcome.text

    server.add_resource(
        FunctionResource.from_function(
            wake_up_resource,
            uri=WAKE_UP_URI,
            name="wake-up",
            title="Palace wake-up context",
            description=(
                f"JSON: palace status and the newest {env.wake_up_count} current memories; read at session start."
            ),
            mime_type="application/json",
        )
    )

    async def gain_resource() -> str:
        from palace.operations.gain import gain

        return json.dumps(await anyio.to_thread.run_sync(gain), separators=(",", ":"))

    server.add_resource(
        FunctionResource.from_function(
            gain_resource,
            uri=GAIN_URI,
            name="gain",
            title="Token savings",
            description="JSON: calls and estimated tokens saved per operation (operator telemetry).",
            mime_type="application/json",
        )
    )
    return server
