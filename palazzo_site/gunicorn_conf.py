"""gunicorn settings for palazzo (`python manage.py serve` uses them; so can a hand-run gunicorn).

`gunicorn -c python:palazzo_site.gunicorn_conf palazzo_site.asgi:application`
"""

from __future__ import annotations

import sys
from typing import Any

from palazzo_site.environment import read_environment

worker_class = "uvicorn_worker.UvicornWorker"
workers = 1
bind = [read_environment().bind]
# Model loading happens in the worker's lifespan; give it time before the arbiter gives up on it.
timeout = 120
graceful_timeout = 10
# Several palazzo servers may run side by side (tests, users); none needs the control socket.
control_socket_disable = True


def several_workers_problem(worker_count: int, qdrant_url: str | None) -> str | None:
    """Why this many workers cannot share the configured store, or None when they can."""
    if worker_count > 1 and not qdrant_url:
        return (
            f"palazzo cannot run {worker_count} workers on the embedded store: it allows one process at a time. "
            "Run one worker (the default), or set QDRANT_URL to a Qdrant server to run several."
        )
    return None


def on_starting(server: Any) -> None:
    """Refuse to start several workers on the embedded store."""
    problem = several_workers_problem(server.cfg.workers, read_environment().qdrant_url)
    if problem:
        server.log.error(problem)
        print(problem, file=sys.stderr, flush=True)
        sys.exit(1)
