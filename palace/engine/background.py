"""A queue drained by one background thread in batches, so callers never wait on the database.

Under a bulk import the journal keeps SQLite's write lock busy, and a caller waiting for it sleeps
in SQLite's busy handler (1, 2, 5 ... 100 ms steps): with 4 sessions that cost find ~100 ms at p99
(bench/load_mcp.py). Usage events and audit records queue here instead. A graceful stop writes what
is queued; a crash loses what was still queued.

The thread waits up to LINGER_SECONDS after an item for more before it writes: written one at a
time, each find's audit record and usage event cost two transactions (~3.4 ms of CPU and the GIL
while the next call ran its model: find p50 18 ms over a raw pipe instead of 12). A flush, a stop or
a full batch ends the wait at once, so readers of the table never see it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from django.db import close_old_connections, connections

T = TypeVar("T")

MAX_QUEUED = 10_000
WRITE_BATCH = 500
FLUSH_TIMEOUT_SECONDS = 15.0
LINGER_SECONDS = 0.5


class _Flush:
    """Queued by flush(): write what came before without waiting for more."""


_FLUSH = _Flush()


class BatchWriter(Generic[T]):
    """Hands queued items to `write` in batches of up to WRITE_BATCH, on one daemon thread."""

    def __init__(self, *, name: str, write: Callable[[list[T]], None], max_queued: int = MAX_QUEUED) -> None:
        self._write = write
        self._queue: queue.Queue[T | _Flush | None] = queue.Queue(maxsize=max_queued)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> bool:
        """Queue one item; False when the queue is full (the caller then writes it itself)."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def flush(self, *, timeout: float = FLUSH_TIMEOUT_SECONDS) -> bool:
        """Wait until every item queued so far is written; False if that took longer than timeout."""
        deadline = time.monotonic() + timeout
        with contextlib.suppress(queue.Full):  # a full queue is written at once anyway: the batch is full
            self._queue.put_nowait(_FLUSH)
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout=FLUSH_TIMEOUT_SECONDS)

    def _run(self) -> None:
        try:
            while True:
                batch = [self._queue.get()]
                linger_until = time.monotonic() + LINGER_SECONDS
                while len(batch) < WRITE_BATCH and not isinstance(batch[-1], _Flush) and batch[-1] is not None:
                    try:
                        batch.append(self._queue.get(timeout=max(0.0, linger_until - time.monotonic())))
                    except queue.Empty:
                        break
                items = [item for item in batch if item is not None and not isinstance(item, _Flush)]
                if items:
                    # A long-lived thread must drop a connection the database closed (a restart,
                    # an error), as Django does between requests.
                    close_old_connections()
                    self._write(items)
                for _ in batch:
                    self._queue.task_done()
                if batch[-1] is None:
                    return
        finally:
            connections.close_all()


class WriterSlot(Generic[T]):
    """The process's one background writer of a kind: started by servers, absent in commands (they write directly)."""

    def __init__(self, *, name: str, write: Callable[[list[T]], None]) -> None:
        self._name = name
        self._write = write
        self._lock = threading.Lock()
        self._writer: BatchWriter[T] | None = None

    def start(self) -> None:
        """Hand items to a background thread from now on."""
        with self._lock:
            if self._writer is None:
                self._writer = BatchWriter(name=self._name, write=self._write)

    def stop(self) -> None:
        """Write what is queued, then go back to writing directly."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop()

    def flush(self) -> bool:
        """Wait until everything queued so far is written; False if that timed out."""
        writer = self._writer
        return writer is None or writer.flush()

    def write(self, item: T) -> None:
        """Queue the item to the background writer, or write it here when there is none (or its queue is full)."""
        writer = self._writer
        if writer is None or not writer.submit(item):
            self._write([item])
