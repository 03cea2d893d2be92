"""`palazzo runmcp` on an embedded palace: a pipe between the MCP client on stdin/stdout and the palace's holder.

Standard library only (no Django, no MCP SDK): it starts in tens of milliseconds and holds a few MiB,
however many agent windows run. It connects to the data dir's holder (palace.engine.holder), starting
one when none listens, and passes the client's JSON-RPC lines through unchanged: the session, its
clientInfo and so its identity are the client's own.

When the holder goes away (it exited, or was killed), the pipe connects to a new one, which it starts if
nobody else has, and replays the client's `initialize` there (its answer is not passed on: the client
was answered once). Calls the old holder had not answered are sent again when that is safe (anything but
tools/call, and the tools the holder listed as read-only); a write is answered with a retryable error,
since it may or may not have been applied. Nothing waits forever: a holder that cannot be reached within
palace.engine.holder.CONNECT_WAIT_SECONDS fails the calls waiting for it with a retryable error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palace.engine import holder

logger = logging.getLogger("palazzo.runmcp")

RESTARTED = (
    "[palace_restarted] the process holding the palace exited while this call was in flight, so it may or may "
    "not have been applied (nothing acknowledged is ever lost); check with palace_find or palace_recall, then "
    "call again if it is missing"
)
UNAVAILABLE = "[store_unavailable] {reason} (retry in a few seconds; if it persists, tell the operator)"
REPLAY_ID = "palazzo-runmcp-initialize"
# Where a request of MCP's per-request envelope era names its protocol version (it has no initialize).
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
ANSWER_PREFIX = b'{"jsonrpc":"2.0","id":'
# A holder that dies this many times within RESTART_WINDOW_SECONDS is not started again until the next call.
MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 60.0
# How long the end of input waits for the answers still owed (a batch may embed for seconds).
ANSWER_GRACE_SECONDS = 60.0
_DECODER = json.JSONDecoder()


@dataclass
class Pending:
    """A request sent to the holder and not answered yet."""

    line: bytes
    method: str
    tool: str | None
    sent: bool = False  # False while it waits for a holder to send it to
    modern: bool = False  # sent in MCP's per-request envelope era, whose results carry resultType


def _request_key(request_id: object) -> str | None:
    if isinstance(request_id, str) or (isinstance(request_id, int) and not isinstance(request_id, bool)):
        return json.dumps(request_id)
    return None


def _is_jsonrpc(message: Any) -> bool:
    """A JSON-RPC 2.0 request or notification the holder's SDK accepts (it answers each such request)."""
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and ("id" not in message or _request_key(message["id"]) is not None)
        and isinstance(message.get("params", {}), dict)
    )


def _error_answer(request_id_key: str, text: str, *, pending: Pending) -> bytes:
    request_id = json.loads(request_id_key)
    if pending.method == "tools/call":  # a tool's failure reaches the model as the tool's result
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
        if pending.modern:
            result["resultType"] = "complete"
        body: dict[str, Any] = {"result": result}
    else:
        body = {"error": {"code": -32603, "message": text}}
    return holder.encode({"jsonrpc": "2.0", "id": request_id, **body})


class HolderPipe:
    """One client's MCP session carried to the palace's holder, across holder restarts."""

    def __init__(
        self, data_dir: Path, *, write_client: Callable[[bytes], Awaitable[None]], read_only: bool = False
    ) -> None:
        self.data_dir = data_dir
        self.read_only = read_only
        self.write_client = write_client
        self.in_flight: dict[str, Pending] = {}
        self.read_only_tools: set[str] = set()
        self.initialize: dict[str, Any] | None = None
        self.initialized: bytes | None = None
        self.client_done = False
        self.unavailable: str | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ready = asyncio.Event()
        self._wanted = asyncio.Event()  # a call arrived while the holder was unavailable: try again
        self._gave_up = asyncio.Event()
        self._restarts: list[float] = []
        self._all_answered = asyncio.Event()
        self._all_answered.set()

    # The client's side -------------------------------------------------------------------------------

    async def from_client(self, line: bytes) -> None:
        """Note one line of the client's and send it to the holder (waiting while it reconnects)."""
        message: Any = None
        with contextlib.suppress(ValueError, RecursionError):
            message = json.loads(line)
        key = None
        if _is_jsonrpc(message):
            method = message["method"]
            key = _request_key(message.get("id")) if "id" in message else None
            params: dict[str, Any] = message.get("params") or {}
            if key is not None:
                tool = params.get("name") if method == "tools/call" and isinstance(params.get("name"), str) else None
                meta = params.get("_meta")
                modern = isinstance(meta, dict) and PROTOCOL_VERSION_META in meta
                self.in_flight[key] = Pending(line=line, method=method, tool=tool, modern=modern)
                self._all_answered.clear()
                if method == "initialize":
                    self.initialize = message
            elif method == "notifications/initialized":
                self.initialized = line
            elif method == "notifications/cancelled":
                self._settle(_request_key(params.get("requestId")))
        if self.unavailable is None and not self._ready.is_set():
            await self._ready_or_unavailable()
        if self.unavailable is not None:
            pending = self.in_flight.pop(key, None) if key is not None else None
            self._settled_check()
            if key is not None and pending is not None:
                reason = UNAVAILABLE.format(reason=self.unavailable)
                await self.write_client(_error_answer(key, reason, pending=pending))
            self._wanted.set()  # try to reach a holder again
            return
        if key is not None:
            pending = self.in_flight.get(key)
            if pending is None or pending.sent:
                return  # answered meanwhile, or sent to the new holder by its replay
            pending.sent = True
        await self._to_holder(line)

    async def _ready_or_unavailable(self) -> None:
        ready = asyncio.ensure_future(self._ready.wait())
        gave_up = asyncio.ensure_future(self._gave_up.wait())
        try:
            await asyncio.wait({ready, gave_up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            gave_up.cancel()

    async def client_ended(self) -> None:
        """The client closed its input: the holder's session ends once every call is answered."""
        self.client_done = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_answered.wait(), ANSWER_GRACE_SECONDS)
        if self.in_flight:
            logger.warning(
                "palazzo: %d calls were not answered within %.0f s of the end",
                len(self.in_flight),
                ANSWER_GRACE_SECONDS,
            )
            self.in_flight.clear()  # nobody is waiting for them any more: the session may end
            self._settled_check()
        self._wanted.set()
        if self._writer is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self._writer.write_eof()

    # The holder's side -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep a connection to the holder until the client is done and everything is answered."""
        first = True
        while True:
            try:
                reader, writer = await self._connect(replay=not first)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                first = False  # the new holder went too, while the session was carried over: again
                await asyncio.sleep(0.2)
                continue
            except holder.HolderUnavailable as exc:
                self._give_up(str(exc))
                if not await self._wanted_again():
                    return
                continue
            first = False
            self._writer = writer
            self._ready.set()
            if self.client_done and not self.in_flight:
                with contextlib.suppress(OSError, RuntimeError):
                    writer.write_eof()
            try:
                await self._answers(reader)
            finally:
                self._ready.clear()
                self._writer = None
                with contextlib.suppress(Exception):
                    writer.close()
            if self.client_done and not self.in_flight:
                return
            logger.warning("palazzo: the palace's holder went away; connecting to a new one")
            now = time.monotonic()
            self._restarts = [at for at in self._restarts if now - at < RESTART_WINDOW_SECONDS] + [now]
            if len(self._restarts) > MAX_RESTARTS:
                self._give_up(f"the palace's holder exited {len(self._restarts)} times within a minute")
                if not await self._wanted_again():
                    return
                self._restarts.clear()

    async def _wanted_again(self) -> bool:
        """After giving up: wait for the client's next call (True) or its end (False)."""
        if not self.client_done:
            await self._wanted.wait()
        self._wanted.clear()
        if self.client_done:
            return False
        self.unavailable = None
        self._gave_up.clear()
        return True

    async def _connect(self, *, replay: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = await asyncio.get_running_loop().run_in_executor(None, self._ensure)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=holder.MAX_MESSAGE_BYTES + 1024)
        preamble = {"palazzo": holder.PROTOCOL_MCP, "pid": os.getpid(), "read_only": self.read_only}
        writer.write(holder.encode(preamble))
        if replay:
            await self._replay(reader, writer)
        return reader, writer

    def _ensure(self) -> Any:
        return holder.ensure(self.data_dir)

    async def _replay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Open the session again on a new holder, then send again what may safely be sent again."""
        initialize_pending = self.initialize is not None and any(
            pending.method == "initialize" for pending in self.in_flight.values()
        )
        if self.initialize is not None and not initialize_pending:
            writer.write(holder.encode({**self.initialize, "id": REPLAY_ID}))
            await writer.drain()
            while True:
                line = await reader.readline()
                if not line:
                    raise ConnectionResetError("the new holder closed the session during initialize")
                if self._answer_key(line) == json.dumps(REPLAY_ID):
                    break
            if self.initialized is not None:
                writer.write(self.initialized)
        for key, pending in list(self.in_flight.items()):
            if not pending.sent:
                pending.sent = True  # it waited for this holder: no question of it having been applied
                writer.write(pending.line)
            elif pending.method != "tools/call" or pending.tool in self.read_only_tools:
                writer.write(pending.line)
            else:
                del self.in_flight[key]
                await self.write_client(_error_answer(key, RESTARTED, pending=pending))
        self._settled_check()
        await writer.drain()

    async def _answers(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                if end.partial:
                    await self.write_client(end.partial)
                return
            except (ConnectionError, asyncio.LimitOverrunError):
                return
            key = self._answer_key(line)
            pending = self.in_flight.get(key) if key is not None else None
            if pending is not None:
                if pending.method == "tools/list":
                    self._learn_tools(line)
                self._settle(key)
            await self.write_client(line)

    def _answer_key(self, line: bytes) -> str | None:
        if line.startswith(ANSWER_PREFIX):
            text = line[:200].decode("utf-8", errors="replace")
            try:
                request_id, end = _DECODER.raw_decode(text, len(ANSWER_PREFIX))
            except ValueError:
                request_id, end = None, 0
            if text.startswith((',"result"', ',"error"'), end):
                return _request_key(request_id)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if isinstance(message, dict) and "method" not in message:
            return _request_key(message.get("id"))
        return None

    def _learn_tools(self, line: bytes) -> None:
        with contextlib.suppress(ValueError, RecursionError, AttributeError, TypeError):
            for tool in json.loads(line)["result"]["tools"]:
                if (tool.get("annotations") or {}).get("readOnlyHint") is True:
                    self.read_only_tools.add(tool["name"])

    def _settle(self, key: str | None) -> None:
        if key is not None:
            self.in_flight.pop(key, None)
        self._settled_check()

    def _settled_check(self) -> None:
        if not self.in_flight:
            self._all_answered.set()

    def _give_up(self, reason: str) -> None:
        """No holder now: fail every call waiting for one, and each call until one is reached again."""
        self.unavailable = reason
        self._gave_up.set()
        logger.warning("palazzo: %s", reason)
        failed = list(self.in_flight.items())
        self.in_flight.clear()
        self._settled_check()
        answers = [_error_answer(key, UNAVAILABLE.format(reason=reason), pending=p) for key, p in failed]
        if answers:
            asyncio.get_running_loop().create_task(self._write_all(answers))

    async def _write_all(self, lines: list[bytes]) -> None:
        for line in lines:
            await self.write_client(line)

    async def _to_holder(self, line: bytes) -> None:
        writer = self._writer
        if writer is None:
            return  # the connection just went; run() sends what is in flight to the next holder
        if not line.endswith(b"\n"):
            line += b"\n"
        try:
            writer.write(line)
            await writer.drain()
        except (ConnectionError, RuntimeError):
            pass  # the same: run() notices the end and carries the call over


# stdin and stdout ------------------------------------------------------------------------------------


async def _client_writer() -> Callable[[bytes], Awaitable[None]]:
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    if holder.loop_can_wait_on(1):
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(os.dup(1), "wb", buffering=0)
        )
        transport.set_write_buffer_limits(high=0)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)

        async def write(data: bytes) -> None:
            async with lock:
                with contextlib.suppress(ConnectionError):
                    writer.write(data)
                    await writer.drain()

        return write
    sink = os.fdopen(os.dup(1), "wb")

    async def write_blocking(data: bytes) -> None:
        async with lock:

            def put() -> None:
                with contextlib.suppress(OSError):
                    sink.write(data)
                    sink.flush()

            await loop.run_in_executor(None, put)

    return write_blocking


async def _client_lines(pipe: HolderPipe) -> None:
    loop = asyncio.get_running_loop()
    if holder.loop_can_wait_on(0):
        reader = asyncio.StreamReader(limit=holder.MAX_MESSAGE_BYTES)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(0), "rb", 0))

        async def next_line() -> bytes | None:
            try:
                return await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                return end.partial or None
            except asyncio.LimitOverrunError as overrun:
                consumed = overrun.consumed
                while True:  # the rest of the line, through its newline or the end of input
                    await reader.readexactly(consumed)
                    try:
                        await reader.readuntil(b"\n")
                        break
                    except asyncio.IncompleteReadError:
                        break
                    except asyncio.LimitOverrunError as more:
                        consumed = more.consumed
                logger.warning("dropped a JSON-RPC line of more than %d bytes", holder.MAX_MESSAGE_BYTES)
                return b"\x00 line too long\n"  # the holder's SDK takes it as the parse error it is

    else:
        source = os.fdopen(os.dup(0), "rb")

        async def next_line() -> bytes | None:
            return await loop.run_in_executor(None, source.readline) or None

    while (line := await next_line()) is not None:
        if line.strip():
            await pipe.from_client(line)
    await pipe.client_ended()


async def _serve(data_dir: Path, read_only: bool) -> None:
    pipe = HolderPipe(data_dir, write_client=await _client_writer(), read_only=read_only)
    holder_side = asyncio.create_task(pipe.run())
    client_side = asyncio.create_task(_client_lines(pipe))
    await holder_side
    client_side.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await client_side


def run_checked(data_dir: Path, *, read_only: bool = False) -> int:
    """runmcp's start: refuse closed standard streams, then serve through the holder."""
    # Python starts with sys.stdin or sys.stdout None when its fd was closed; by now another file may
    # hold that fd number, so the objects are the test, not the descriptors.
    closed = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)) if stream is None]
    if closed:
        sys.stderr.write(
            f"runmcp serves MCP over stdin and stdout, and {' and '.join(closed)} is closed: start it from an "
            "MCP client (e.g. `claude mcp add palazzo -- palazzo runmcp`), or use `serve` for HTTP\n"
        )
        return 2
    return run(data_dir, read_only=read_only)


def run(data_dir: Path, *, read_only: bool = False) -> int:
    """Serve one MCP client on stdin/stdout through data_dir's holder; the exit status.

    read_only (this process's PALAZZO_READ_ONLY): the holder serves this session the read tools only,
    whatever the settings of the process that started the holder.
    """
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(data_dir, read_only))
    return 0
