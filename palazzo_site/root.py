"""The root ASGI app: host/origin guard, lifespan, /mcp to Streamable HTTP, the rest to Django."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from typing import IO, cast

import anyio.to_thread
from django.conf import settings
from django.core.asgi import get_asgi_application
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from mcpserver.server import MAX_MESSAGE_BYTES, PalazzoServer, build_server, open_palace
from palace.engine import holder, runtime
from palace.errors import PalaceError
from palace.feeding import feeder
from palace.governance.audit import stop_audit_writer
from palace.operations.gain import stop_usage_writer
from palace.routes.ingest import limit_ingest_body
from palazzo_site.http import guard_verdict

logger = logging.getLogger(__name__)


MCP_PATH = "/mcp"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _refuse(send: Send, status: int, reason: str) -> None:
    body = reason.encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class PalazzoApplication:
    """Plain ASGI callable at the top of the stack (Django's handler cannot take lifespan)."""

    def __init__(self, *, django_app: ASGIApp | None = None, stateless: bool = False) -> None:
        self.django_app: ASGIApp = limit_ingest_body(django_app or cast(ASGIApp, get_asgi_application()))
        self.mcp = build_server()
        # The guard below is palazzo's DNS-rebinding protection for every route; the SDK's own is off.
        self.mcp_app: ASGIApp = self.mcp.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=stateless,
            max_request_body_size=MAX_MESSAGE_BYTES,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] in ("http", "websocket"):
            verdict = guard_verdict(_header(scope, b"host"), _header(scope, b"origin"))
            if verdict is not None:
                status, reason = verdict
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008, "reason": reason})
                    return
                await _refuse(send, status, reason)
                return
        path = scope.get("path", "")
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            if path != MCP_PATH:
                scope = dict(scope, path=MCP_PATH)
            await self.mcp_app(scope, receive, send)
            return
        await self.django_app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        try:
            # Open the palace before accepting traffic, so a locked store fails start-up clearly.
            # A palace holder serving this data dir hands it over; its sessions reconnect here.
            await anyio.to_thread.run_sync(functools.partial(open_palace, take_over_holder=True))
        except PalaceError as exc:
            await send({"type": "lifespan.startup.failed", "message": f"palazzo cannot start: {exc}"})
            return
        except Exception as exc:
            logger.exception("palazzo could not open the palace")
            await send({"type": "lifespan.startup.failed", "message": f"palazzo cannot start: {exc}"})
            return
        async with self.mcp.session_manager.run(), _local_channel(self.mcp):
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        await anyio.to_thread.run_sync(feeder.stop_spool_watcher)
        await anyio.to_thread.run_sync(stop_usage_writer)
        await anyio.to_thread.run_sync(stop_audit_writer)
        await anyio.to_thread.run_sync(runtime.close_palace)
        await send({"type": "lifespan.shutdown.complete"})


def _holder_lock() -> IO[bytes] | None:
    """The holder lock, asking a holder that a session started meanwhile to leave (it cannot open the palace)."""
    data_dir = settings.PALAZZO.data_dir
    deadline = time.monotonic() + HOLDER_HANDOVER_SECONDS
    while (lock := holder.take_lock(data_dir)) is None and time.monotonic() < deadline:
        if not holder.ask_to_leave(data_dir):
            break  # another `serve` holds it and keeps it
        time.sleep(0.2)
    if lock is None:
        logger.warning("a palace holder keeps %s: sessions beside this server reach the palace through it", data_dir)
    return lock


# How long `serve` asks a palace holder to hand over the local channel before it serves without one.
HOLDER_HANDOVER_SECONDS = 10.0


@contextlib.asynccontextmanager
async def _local_channel(server: PalazzoServer) -> AsyncIterator[None]:
    """While `serve` holds an embedded palace, it is also that palace's holder for this machine's sessions.

    So a `runmcp` or an operator command started beside it reaches the palace through its socket
    (palace.engine.holder) instead of waiting for a palace `serve` will not let go of.
    """
    env = settings.PALAZZO
    lock = await anyio.to_thread.run_sync(_holder_lock) if env.holder and not env.qdrant_url else None
    if lock is None:
        yield
        return
    from mcpserver.local import Channel
    from palazzo_site.holding import is_exclusive, remove_socket, run_command

    listener = holder.listen(env.data_dir)
    stop = asyncio.Event()
    channel = Channel(server, listener, run_command=run_command, is_exclusive=is_exclusive)
    serving = asyncio.create_task(channel.serve(stop))
    try:
        yield
    finally:
        stop.set()
        await serving
        remove_socket(env.data_dir, listener)
        lock.close()
