"""Restores: exported memories stored under their own ids with their temporal fields (imports, /ingest)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from django.db import transaction

from palace.engine import journal
from palace.engine.applier import journal_and_apply
from palace.engine.ids import reserve_existing_ids
from palace.engine.locks import write_lock
from palace.engine.points import embed_or_defer
from palace.engine.runtime import get_palace
from palace.governance import scope
from palace.models import JournalEntry
from palace.schema.memories import public_memory
from palace.writes.records import redact

# How far ahead of the current Unix milliseconds a restored id may be: ids start at the clock and a palace
# allocates one per memory, so an export can run ahead of its clock by its memory count, never by 10**10.
RESTORE_IDS_AHEAD = 10**10


def restore_records(
    *, records: list[dict[str, Any]], skip_duplicates: bool = False, added_by: str = "", wings: scope.Wings = None
) -> list[dict[str, Any]]:
    """Store validated memory records under their own ids and temporal fields (imports, restores).

    A record whose id the palace already holds (or that repeats an earlier record's id) is a duplicate
    of that id; texts are not compared, so a superseded memory and its successor with equal text both
    come back. Journaled as a STORE entry carrying the full records, so rebuild restores them too.
    """
    palace = get_palace()
    for record in records:
        scope.refuse_outside(record["wing"], wings)
    records = [dict(record) for record in records]
    found = [redact(record) for record in records]
    with write_lock:
        wanted = {record["id"] for record in records} | {
            record["superseded_by"] for record in records if record.get("superseded_by") is not None
        }
        existing = {point.id: point for point in palace.store.retrieve(sorted(wanted))}
        deleted = _deleted_ids()
        outcomes: list[dict[str, Any]] = []
        fresh: dict[int, dict[str, Any]] = {}
        for index, record in enumerate(records):
            memory_id = record["id"]
            if memory_id in existing and wings is not None and existing[memory_id].payload.get("wing") not in wings:
                # A scoped caller must neither overwrite nor read a memory of another wing.
                error = f"id {memory_id} belongs to a wing outside this token's wings; nothing was written"
                outcomes.append({"index": index, "status": "failed", "error": error, "redactions": {}})
                continue
            problem = _restore_problem(record, held=existing, deleted=deleted)
            if problem is not None:
                outcomes.append({"index": index, "status": "failed", "error": problem, "redactions": {}})
                continue
            if memory_id in existing:
                memory = public_memory(memory_id, existing[memory_id].payload)
            elif memory_id in fresh:
                memory = public_memory(memory_id, fresh[memory_id])
            else:
                fresh[memory_id] = record
                outcomes.append(
                    {
                        "index": index,
                        "status": "stored",
                        "memory": public_memory(memory_id, record),
                        "redactions": found[index],
                    }
                )
                continue
            status = "skipped" if skip_duplicates else "duplicate"
            outcomes.append(
                {
                    "index": index,
                    "status": status,
                    "memory": memory,
                    "duplicate_of": memory_id,
                    "redactions": found[index],
                }
            )
        if fresh:
            ordered = list(fresh.values())
            vectors = embed_or_defer(palace, [record["text"] for record in ordered])
            with transaction.atomic():
                reserve_existing_ids(list(fresh))
                entry = journal.record(
                    operation=JournalEntry.Operation.STORE,
                    payload={"memories": ordered},
                    memory_ids=list(fresh),
                    added_by=added_by,
                    reason="restored with explicit ids",
                    wing=Counter(record["wing"] for record in ordered).most_common(1)[0][0],
                )
            journal_and_apply(palace, entry, vectors)
    return outcomes


def _deleted_ids() -> set[int]:
    """Ids of memories the journal deleted: never given to another memory, so a restore may not take them."""
    rows = (
        JournalEntry.objects.filter(
            operation__in=(JournalEntry.Operation.DELETE, JournalEntry.Operation.DELETE_BY_FILTER)
        )
        .exclude(status=JournalEntry.Status.FAILED)
        .values_list("memory_ids", flat=True)
    )
    return {int(memory_id) for ids in rows for memory_id in ids or ()}


def _restore_problem(record: dict[str, Any], *, held: dict[int, Any], deleted: set[int]) -> str | None:
    """Why a restore record cannot be stored (id of a deleted memory, a supersede link that cannot hold), or None.

    A successor is always newer, so its id is larger: superseded_by must be above the record's id and
    supersedes below it, which rules out cycles. What is valid but dangling is kept, whatever the input's
    order or chunking: a successor that was deleted, or that a wing-filtered export left out, is a link a
    palace holds (`verify` lists such links); so is one to a memory that a later chunk brings.
    """
    memory_id = record["id"]
    if memory_id in deleted and memory_id not in held:
        return f"id: {memory_id} belonged to a memory that was deleted; ids are never reused"
    newest_possible = time.time_ns() // 1_000_000 + RESTORE_IDS_AHEAD
    if memory_id > newest_possible and memory_id not in held:
        # A restored id moves the allocator past it: one far ahead of the clock would use up the id space.
        return (
            f"id: {memory_id} is ahead of every id a palace can have allocated by now (at most {newest_possible}: "
            "new ids start at the current Unix milliseconds)"
        )
    successor = record.get("superseded_by")
    if successor is not None and successor <= memory_id:
        return f"superseded_by: {successor} must be newer (larger) than the memory's own id {memory_id}"
    for older in record.get("supersedes") or ():
        if older >= memory_id:
            return f"supersedes: {older} must be older (smaller) than the memory's own id {memory_id}"
    return None
