"""Carries journaled mutations out on the store: right after journaling, at start-up (replay) and in rebuild."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from palace.engine import journal
from palace.engine.handle import Palace
from palace.engine.locks import write_lock
from palace.engine.points import build_points, embed_or_defer
from palace.errors import PalaceError, ReadOnlyPalace, StoreLocked, StoreUnavailable
from palace.models import JournalEntry
from palace.schema.memories import canonical_room
from palace.store.base import MemoryFilter

logger = logging.getLogger(__name__)


def apply_entry(palace: Palace, entry: JournalEntry, vectors: Sequence[npt.NDArray[np.float32]] | None = None) -> None:
    """Carry out a journaled mutation on the store; safe to repeat."""
    payload = entry.payload
    operation = entry.operation
    if operation in (JournalEntry.Operation.STORE, JournalEntry.Operation.SUPERSEDE):
        records = payload["memories"]
        if vectors is None:
            vectors = embed_or_defer(palace, [record["text"] for record in records])
        palace.store.upsert(build_points(records, vectors))
        if operation == JournalEntry.Operation.SUPERSEDE:
            new_id = records[0]["id"]
            palace.store.set_payload(
                payload["supersedes"],
                {
                    "valid_until": payload["valid_until"],
                    "superseded_by": new_id,
                    "superseded_reason": payload["reason"],
                },
            )
    elif operation in (JournalEntry.Operation.DELETE, JournalEntry.Operation.DELETE_BY_FILTER):
        palace.store.delete(payload["ids"])
    else:  # pragma: no cover - the choices above are exhaustive
        raise PalaceError(f"unknown journal operation {operation}")


def journal_and_apply(
    palace: Palace, entry: JournalEntry, vectors: Sequence[npt.NDArray[np.float32]] | None = None
) -> None:
    """Apply a journaled entry under the write lock and mark it applied, or failed (and re-raise)."""
    with write_lock:
        try:
            apply_entry(palace, entry, vectors)
        except Exception as exc:
            journal.mark_failed(entry, str(exc))
            raise
        journal.mark_applied(entry)


def replay_pending(palace: Palace) -> int:
    """Re-apply journal entries the store never confirmed (after a crash); returns how many.

    An entry that cannot be applied is marked failed with the reason and the palace opens anyway (status,
    verify and /healthz report it); only a store that cannot be reached stops the opening, leaving the
    entries pending for the next one.
    """
    replayed = 0
    for entry in journal.pending():
        with write_lock:
            # Read again under the lock: another process sharing the database may have applied it since.
            entry.refresh_from_db(fields=["status"])
            if entry.status != JournalEntry.Status.PENDING:
                continue
            logger.info("re-applying journal entry %s (%s)", entry.pk, entry.operation)
            try:
                apply_entry(palace, entry)
            except (StoreUnavailable, StoreLocked, ReadOnlyPalace):
                raise
            except Exception as exc:
                logger.error(
                    "journal entry %s cannot be applied, marked failed: %s: %s", entry.pk, type(exc).__name__, exc
                )
                journal.mark_failed(entry, f"could not be applied when the palace opened: {type(exc).__name__}: {exc}")
                continue
            journal.mark_applied(entry)
            replayed += 1
    return replayed


def canonicalise_rooms(palace: Palace) -> int:
    """Give memories stored before rooms were canonical their canonical room; returns how many changed.

    Not journaled: the journal's records keep the spelling they were given and every replay of them
    (pending entries, rebuild) writes the canonical form, so the store ends the same either way, and an
    interrupted pass is finished at the next open. One exact facet when there is nothing to do.
    """
    changed = 0
    try:
        with write_lock:
            for room in palace.store.facet(key="room", memory_filter=MemoryFilter()):
                canonical = canonical_room(room)
                if not canonical or canonical == room:
                    continue
                ids = [point.id for point in palace.store.scroll(memory_filter=MemoryFilter(room=room))]
                for start in range(0, len(ids), 256):
                    palace.store.set_payload(ids[start : start + 256], {"room": canonical})
                changed += len(ids)
    except PalaceError as exc:  # a full disk or a read-only server key: serve anyway, retry at the next open
        logger.warning("could not give every memory its canonical room yet: %s", exc)
    if changed:
        logger.info("gave %d memories their canonical room (case and whitespace folded)", changed)
    return changed
