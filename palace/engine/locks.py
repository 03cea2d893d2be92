"""The lock every mutation of the palace takes: in this process, and across processes sharing PostgreSQL."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from types import TracebackType

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction

from palace.errors import StoreUnavailable

# pg_advisory_lock key of the palace's writes: any 64-bit number no other application uses on the database.
PALACE_WRITE_KEY = 0x70616C617A7A6F  # "palazzo"
# How long a write waits for another process's hold before it fails (a write holds it for milliseconds).
DATABASE_LOCK_WAIT = 60.0
LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for a lock wait that hit lock_timeout


class PalaceWriteLock:
    """Serialises the check-then-write of every mutation.

    In one process a re-entrant lock, so two concurrent stores of one text cannot both pass the duplicate
    check. With PostgreSQL, the outermost hold in a process also takes a session advisory lock on the
    database, so several workers or hosts sharing it (with a Qdrant server) serialise their writes the same
    way, and a starting worker's journal replay never runs between another worker's journaling and its
    apply. Only with a Qdrant server: the embedded store allows one writer process, so SQLite or the
    embedded store take no database lock.
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


def shared_palace() -> bool:
    """Whether several processes or hosts may serve this palace: PostgreSQL and a Qdrant server.

    Only a Qdrant server lets several processes write one palace (the embedded store has one writer), and
    only a database server lets them share the journal; then what one host prepares for the others (the
    write lock, wake-up snapshots) lives in the database.
    """
    return connection.vendor == "postgresql" and bool(settings.PALAZZO.qdrant_url)


def _database_lock(*, take: bool) -> None:
    if not shared_palace():
        return
    if take:
        _take_database_lock()
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [PALACE_WRITE_KEY])
    except DatabaseError:
        # A session that cannot run the unlock (an aborted transaction) must not keep the lock: closing it
        # makes PostgreSQL release every lock the session held.
        connection.close()
        raise


def _take_database_lock() -> None:
    """Wait for the lock in PostgreSQL's own queue, handed over the moment it is released, at most DATABASE_LOCK_WAIT.

    A poll with pauses (up to 50 ms) left the lock idle after each release while a waiter slept. A hung
    holder still fails the write after DATABASE_LOCK_WAIT (PostgreSQL's lock_timeout, local to this
    statement's transaction), never hangs it.
    """
    wait_ms = int(DATABASE_LOCK_WAIT * 1000)
    # Inside a caller's transaction a savepoint keeps a timed-out wait from aborting it.
    guard = transaction.atomic() if connection.in_atomic_block else nullcontext()
    try:
        with guard, connection.cursor() as cursor:
            # One statement, one transaction: the timeout applies to this wait only (in autocommit), and a
            # session advisory lock outlives the transaction that took it.
            cursor.execute(
                f"DO $$ BEGIN PERFORM set_config('lock_timeout', '{wait_ms}', true); "
                f"PERFORM pg_advisory_lock({PALACE_WRITE_KEY}); END $$"
            )
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        raise StoreUnavailable(
            f"another palazzo process sharing the database has held the palace's write lock for over "
            f"{DATABASE_LOCK_WAIT:.0f} s; nothing was written (retry; if it persists, restart the servers)"
        ) from None


write_lock = PalaceWriteLock()
