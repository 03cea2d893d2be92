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
        from mcpserver.stdio import run_stdio
        from palace.management.database import prepare_database

        prepare_database()

        with contextlib.suppress(KeyboardInterrupt):
            run_stdio()
