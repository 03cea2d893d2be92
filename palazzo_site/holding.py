"""`palazzo holder`: the one process that opens an embedded palace and serves every other palazzo process on it.

Started on demand (by `runmcp` or an operator command that finds no holder), detached in its own session,
and gone again once nothing used it for PALAZZO_HOLDER_IDLE_SECONDS. The holder lock and the socket are
taken before Django is imported, so a second holder started at the same moment leaves within tens of
milliseconds and clients can connect while the model loads (their first tool call waits for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from palace.engine import holder

logger = logging.getLogger("palazzo.holder")

TICK_SECONDS = 0.5


def main(args: list[str]) -> int:
    """Hold the palace of PALAZZO_DATA_DIR until idle; 0 also when another holder already serves it."""
    from palazzo_site.environment import ConfigurationError, read_environment

    if args:
        sys.stderr.write("usage: palazzo holder (started by runmcp and the operator commands; takes no arguments)\n")
        return 2
    try:
        env = read_environment()
    except ConfigurationError as exc:
        sys.stderr.write(f"palazzo holder: {exc}\n")
        return 2
    data_dir = env.data_dir
    try:
        lock = holder.take_lock(data_dir)
    except OSError as exc:
        sys.stderr.write(f"palazzo holder: cannot lock {holder.lock_path(data_dir)}: {exc}\n")
        return 2
    if lock is None:
        return 0  # another holder serves this data dir
    try:
        listener = holder.listen(data_dir)
    except (OSError, holder.HolderUnavailable) as exc:
        sys.stderr.write(f"palazzo holder: cannot listen on {holder.socket_path(data_dir)}: {exc}\n")
        lock.close()
        return 2
    try:
        return _serve(data_dir, listener, idle_seconds=env.holder_idle_seconds)
    finally:
        remove_socket(data_dir, listener)
        lock.close()


def _serve(data_dir: Path, listener: Any, *, idle_seconds: float) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
    import django

    django.setup()
    # The model loads (mostly in onnxruntime, off the GIL) while the MCP SDK imports (pure Python, ~1.3 s):
    # a cold holder's first tool call waits for the longer of the two, not their sum.
    threading.Thread(target=_load_model, name="palace-model-early", daemon=True).start()
    from mcpserver.local import Channel
    from mcpserver.server import build_server

    server = build_server(warm_up_in_background=True, wait_for_store=True)
    channel = Channel(server, listener, run_command=run_command, is_exclusive=is_exclusive, leaves_on_request=True)
    logger.info("palazzo holder %d serving %s on %s", os.getpid(), data_dir, holder.socket_path(data_dir))
    server.warmup.start()
    try:
        asyncio.run(_until_idle(channel, data_dir, idle_seconds))
    finally:
        _close(server)
    logger.info("palazzo holder %d leaves %s", os.getpid(), data_dir)
    return 0


async def _until_idle(channel: Any, data_dir: Path, limit: float) -> None:
    from palace.feeding import spool

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)
    serving = asyncio.create_task(channel.serve(stop))
    while not stop.is_set():
        await asyncio.sleep(TICK_SECONDS)
        if not data_dir.is_dir():
            logger.warning("the data dir %s is gone; leaving", data_dir)
            stop.set()
        elif (channel.leave_requested.is_set() and not channel.state.commands) or (
            channel.state.idle_for() >= limit and not spool.has_work(data_dir)
        ):  # asked to hand the palace over (a command running is let finish; `serve` asks again), or idle
            stop.set()
    await serving


def _load_model() -> None:
    from palace.engine import runtime

    with contextlib.suppress(Exception):  # the palace's opening reports a model that cannot load
        runtime.get_embedder()


def _close(server: Any) -> None:
    """Let every background writer finish and close the palace (its lock goes with it)."""
    from palace.engine import runtime
    from palace.feeding.feeder import stop_spool_watcher
    from palace.governance.audit import stop_audit_writer
    from palace.operations.gain import stop_usage_writer

    server.warmup.cancel()
    server.warmup.wait(timeout=30.0)
    stop_spool_watcher()
    stop_usage_writer()
    stop_audit_writer()
    with contextlib.suppress(Exception):
        runtime.close_palace()


def remove_socket(data_dir: Path, listener: Any) -> None:
    """Remove the socket file (called with the holder lock still held: no successor has bound one yet)."""
    with contextlib.suppress(OSError, holder.HolderUnavailable):
        holder.socket_path(data_dir).unlink()
    with contextlib.suppress(OSError):
        listener.close()


def is_exclusive(name: str) -> bool:
    """Whether a forwarded command replaces the store under everyone (runs alone)."""
    from palace.management.forwarding import exclusive

    return exclusive(name)


def run_command(request: dict[str, Any], emit: Any) -> int:
    """Run an operator command a client forwarded (palace.management.forwarding), its output sent back."""
    from palace.management.forwarding import run_forwarded

    return run_forwarded(request, emit)
