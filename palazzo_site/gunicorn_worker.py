"""palazzo's gunicorn worker: uvicorn's, stopping cleanly on every signal the master sends to stop it."""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

from uvicorn_worker import UvicornWorker

# How long open requests (an MCP client's event stream never ends by itself) may run after a stop signal
# before they are cancelled; below gunicorn's graceful_timeout, so the palace is closed before any SIGKILL.
GRACEFUL_SHUTDOWN_SECONDS = 3


class PalazzoWorker(UvicornWorker):
    """UvicornWorker that also stops on SIGQUIT, gunicorn's quick shutdown (its master's answer to SIGINT).

    uvicorn_worker 0.4 routes SIGQUIT to gunicorn's handle_exit, which only clears `alive`, a flag uvicorn
    never reads: the worker served on until the master's graceful_timeout ran out and it was SIGKILLed
    ("Perhaps out of memory?"), the palace left open. SIGTERM is what uvicorn itself stops on.
    """

    CONFIG_KWARGS: dict[str, Any] = {
        **UvicornWorker.CONFIG_KWARGS,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS,
    }

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Stop serving: the lifespan shutdown runs (the spool watcher, the writers, the palace are closed)."""
        super().handle_exit(sig, frame)
        os.kill(os.getpid(), signal.SIGTERM)
