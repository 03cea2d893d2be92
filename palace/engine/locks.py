"""The lock every mutation of the palace takes: in this process, and across processes sharing PostgreSQL."""

from __future__ import annotations

import threading
from types import TracebackType

from django.db import connection

# pg_advisory_lock key of the palace's writes: any 64-bit number no other application uses on the database.
PALACE_WRITE_KEY = 0x70616C617A7A6F  # "palazzo"


class PalaceWriteLock:
    """Serialises the check-then-write of every mutation.

    In one process a re-entrant lock, so two concurrent stores of one text cannot both pass the duplicate
    check. With PostgreSQL, the outermost hold in a process also takes a session advisory lock on the
    database, so several workers or hosts sharing it (with a Qdrant server) serialise their writes the same
    way, and a starting worker's journal replay never runs between another worker's journaling and its
    apply. SQLite means one process (the embedded store has one writer anyway): no database lock.
    """

    def __init__(self) -> None:
        self._local = threading.RLock()
        self._held = threading.local()

    def __enter__(self) -> PalaceWriteLock:
        self._local.acquire()
        depth = getattr(self._held, "depth", 0)
        if depth == 0:
            try:
                _database_lock(take=True)
            except BaseException:
                self._local.release()
                raise
        self._held.depth = depth + 1
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._held.depth -= 1
        try:
            if self._held.depth == 0:
                _database_lock(take=False)
        finally:
            self._local.release()


def _database_lock(*, take: bool) -> None:
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {'pg_advisory_lock' if take else 'pg_advisory_unlock'}(%s)", [PALACE_WRITE_KEY])


write_lock = PalaceWriteLock()
