"""The site's ASGI middleware: bearer-token access (the rules are palace.governance.auth's) and request metrics."""

from __future__ import annotations

import json
import time

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from palace.engine.metrics import HTTP_REQUESTS, HTTP_SECONDS, METHODS, route_label
from palace.governance import auth
from palace.governance.auth import SCOPE_KEY, WRITE_ROUTES, is_protected


def _bearer(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"authorization":
            scheme, _, credentials = bytes(value).decode("latin-1").partition(" ")
            return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None
    return None


async def _respond(send: Send, status: int, error: str, *, challenge: str | None = None) -> None:
    body = json.dumps({"error": error}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if challenge is not None:
        headers.append((b"www-authenticate", challenge.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """ASGI middleware: 401 without a valid token on the protected routes, 403 for a read token writing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        presented = _bearer(scope)
        server = scope.get("server")
        # A Unix socket (no port) is reachable only through its file permissions: treat it as local.
        server_host = str(server[0]) if server and server[1] is not None else None
        required, identity = await anyio.to_thread.run_sync(auth.check_request, presented, server_host)
        if identity is None and required:
            if presented is None:
                await _respond(send, 401, "this route needs Authorization: Bearer <token>", challenge=auth.challenge())
            else:
                await _respond(
                    send,
                    401,
                    "the bearer token is not valid (unknown, malformed or revoked)",
                    challenge=auth.challenge("invalid_token"),
                )
            return
        if identity is not None and not identity.can_write:
            method = str(scope.get("method", "GET")).upper()
            path = scope.get("path", "")
            if any(method == m and (path == p or path.startswith(p + "/")) for m, p in WRITE_ROUTES):
                await _respond(
                    send,
                    403,
                    f"{identity.described} has the read scope: {method} {path} writes to the palace and needs a "
                    "token with the write scope",
                    challenge=auth.challenge("insufficient_scope", scope="write"),
                )
                return
        if identity is not None:
            scope = dict(scope)
            scope[SCOPE_KEY] = identity
        await self.app(scope, receive, send)


class RequestMetrics:
    """ASGI middleware counting every HTTP request by route, method and status, with its latency."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            route = route_label(scope.get("path", ""))
            method = str(scope.get("method", "")).upper()
            HTTP_REQUESTS.labels(route, method if method in METHODS else "OTHER", str(status)).inc()
            HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)
