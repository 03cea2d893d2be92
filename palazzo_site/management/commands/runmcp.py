"""`python manage.py runmcp`: the MCP server on stdio (stdout carries only the protocol)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve the palace over MCP on stdin/stdout (logs go to stderr)."
    # System checks cost start-up time and could print; the client is waiting for initialize.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def handle(self, *args: Any, **options: Any) -> None:
        # Python starts with sys.stdin or sys.stdout None when its fd was closed; by now another file
        # may hold that fd number, so the objects are the test, not the descriptors.
        closed = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)) if stream is None]
        if closed:
            raise CommandError(
                f"runmcp serves MCP over stdin and stdout, and {' and '.join(closed)} is closed: start it from an "
                "MCP client (e.g. `claude mcp add palazzo -- palazzo runmcp`), or use `serve` for HTTP",
                returncode=2,
            )
        from django.conf import settings

        if settings.PALAZZO.holder and not settings.PALAZZO.qdrant_url:
            # An embedded palace has one holder process, and this one becomes a pipe to it
            # (palazzo_site.proxy): the same process, without the ~35 MiB Django and the settings hold.
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, "-m", "palazzo_site.cli", "runmcp"])
        # No migrate here: the warm-up prepares the database while the model loads (mcpserver.server
        # open_palace), so initialize is answered at once even on a brand-new data dir.
        from mcpserver.stdio import run_stdio

        with contextlib.suppress(KeyboardInterrupt):
            run_stdio()
