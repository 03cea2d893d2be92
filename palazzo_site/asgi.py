"""ASGI entry point: `palazzo_site.asgi:application` (MCP at /mcp, Django for the rest).

Layers, outermost first: request metrics; the root app's host/origin guard and lifespan (with the refusal to
start off loopback without a token); bearer-token access on /mcp, /ingest, /export and /metrics.
"""

from __future__ import annotations

import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
django.setup()

import anyio.to_thread  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import close_old_connections  # noqa: E402

from palace.governance.auth import insecure_start_problem  # noqa: E402
from palazzo_site.middleware import BearerAuth, RequestMetrics  # noqa: E402
from palazzo_site.root import PalazzoApplication  # noqa: E402


def _start_problem() -> str | None:
    close_old_connections()
    try:
        return insecure_start_problem(settings.PALAZZO.bind)
    finally:
        close_old_connections()


class SecuredApplication:
    """The root app with token access on its protected routes and the off-loopback start check."""

    def __init__(self, root: PalazzoApplication) -> None:
        self.root = root
        # Inside the root app, so the host guard answers before authentication does.
        root.mcp_app = BearerAuth(root.mcp_app)
        root.django_app = BearerAuth(root.django_app)
        self.app = RequestMetrics(root)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        first = await receive()
        if first["type"] == "lifespan.startup":
            try:
                problem = await anyio.to_thread.run_sync(_start_problem)
            except Exception as exc:
                problem = f"palazzo cannot start: cannot read the API tokens ({exc}); run `palazzo migrate`"
            if problem:
                await send({"type": "lifespan.startup.failed", "message": problem})
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.root(scope, replay, send)


# Several workers or hosts: no MCP session state between requests (PALAZZO_HTTP_STATELESS, docs/operations.md).
application = SecuredApplication(PalazzoApplication(stateless=settings.PALAZZO.http_stateless))
