"""`python manage.py runmcp`: the MCP server on stdio (stdout carries only the protocol)."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from django.core.management.base import BaseCommand


def _preload_model() -> None:
    from palace import runtime
    from palace.errors import PalaceError

    try:
        runtime.get_embedder()
    except PalaceError:
        logging.getLogger(__name__).debug("model preload failed; the palace warm-up reports it")


class Command(BaseCommand):
    help = "Serve the palace over MCP on stdin/stdout (logs go to stderr)."
    # System checks cost start-up time and could print; the client is waiting for initialize.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def handle(self, *args: Any, **options: Any) -> None:
        # The model loads in native code that releases the GIL: start it before importing the MCP
        # SDK (about a second of pure-Python imports) so the two overlap.
        threading.Thread(target=_preload_model, name="model-preload", daemon=True).start()
        from mcpserver.stdio import run_stdio

        with contextlib.suppress(KeyboardInterrupt):
            run_stdio()
