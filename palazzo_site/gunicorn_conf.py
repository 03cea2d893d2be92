"""gunicorn settings for palazzo (`python manage.py serve` uses them; so can a hand-run gunicorn).

`gunicorn -c python:palazzo_site.gunicorn_conf palazzo_site.asgi:application`
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from palazzo_site.environment import read_environment

# uvicorn's worker, stopping on SIGQUIT too (Ctrl-C on the master alone); see palazzo_site/gunicorn_worker.py.
worker_class = "palazzo_site.gunicorn_worker.PalazzoWorker"
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
    """Refuse to start several workers on the embedded store; give several a shared metrics directory."""
    problem = several_workers_problem(server.cfg.workers, read_environment().qdrant_url)
    if problem:
        server.log.error(problem)
        print(problem, file=sys.stderr, flush=True)
        sys.exit(1)
    if server.cfg.workers > 1 and "PALAZZO_HTTP_STATELESS" not in os.environ:
        # An MCP session lives in one worker's memory and the next request may reach another worker:
        # several workers answer /mcp statelessly (each request stands alone), as several hosts must.
        os.environ["PALAZZO_HTTP_STATELESS"] = "1"
    if server.cfg.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Set before any worker forks (and imports prometheus-client), so every worker writes its counters
        # there and /metrics sums them; removed when the server exits.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="palazzo-metrics-")
        _owned_metrics_dir.append(os.environ["PROMETHEUS_MULTIPROC_DIR"])


_owned_metrics_dir: list[str] = []


def child_exit(server: Any, worker: Any) -> None:
    """A worker that exits stops counting among the live ones (its counters stay in the sums)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    """Remove the metrics directory this server made."""
    for directory in _owned_metrics_dir:
        shutil.rmtree(directory, ignore_errors=True)


PR_SET_PDEATHSIG = 1
PARENT_POLL_SECONDS = 1.0


def _ask_kernel_for_parent_death_signal() -> None:
    """Linux: have the kernel send SIGTERM to this process when its parent dies (a no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _watch_parent(master_pid: int, grace_seconds: float) -> None:
    """Poll for the master's death (whatever the platform): SIGTERM this worker, then exit if it lingers."""
    while os.getppid() == master_pid:
        time.sleep(PARENT_POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_seconds)
    os._exit(1)


def exit_with_master(master_pid: int, grace_seconds: float = graceful_timeout) -> None:
    """Make this worker stop when its master dies, even by SIGKILL, so it never holds the embedded shard alone."""
    _ask_kernel_for_parent_death_signal()
    threading.Thread(
        target=_watch_parent, args=(master_pid, grace_seconds), name="master-watchdog", daemon=True
    ).start()


def post_fork(server: Any, worker: Any) -> None:
    """In each new worker: exit with the master (gunicorn alone leaves an orphaned worker running)."""
    exit_with_master(server.pid)
