"""`python manage.py runmcp`: the MCP server on stdio (stdout carries only the protocol)."""

from __future__ import annotations

import contextlib
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the palace over MCP on stdin/stdout (logs go to stderr)."
    # System checks cost start-up time and could print; the client is waiting for initialize.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def handle(self, *args: Any, **options: Any) -> None:
        # No migrate here: the warm-up prepares the database while the model loads (mcpserver.server
        # open_palace), so initialize is answered at once even on a brand-new data dir.
        from mcpserver.stdio import run_stdio

        with contextlib.suppress(KeyboardInterrupt):
            run_stdio()
