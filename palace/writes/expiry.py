"""Expiry: memories whose expires_at has passed are deleted for good, journaled with their full records."""

from __future__ import annotations

from collections import Counter
from typing import Any

from palace.engine import journal
from palace.engine.applier import journal_and_apply
from palace.engine.locks import write_lock
from palace.engine.runtime import get_palace
from palace.models import JournalEntry
from palace.schema.forms import MAX_FILTER_DELETE
from palace.schema.memories import public_memory
from palace.schema.timefmt import format_rfc3339, utc_now
from palace.store.base import MemoryFilter


def expire(*, dry_run: bool = False, added_by: str = "") -> dict[str, Any]:
    """Hard-delete every memory whose expires_at has passed, journaled with the full records (in chunks)."""
    palace = get_palace()
    now = utc_now()
    with write_lock:
        expired = list(palace.store.scroll(memory_filter=MemoryFilter(expired=True, current_at=now)))
        summary: dict[str, Any] = {
            "dry_run": dry_run,
            "expired_count": len(expired),
            "deleted_count": 0,
            "breakdown_by_wing": dict(Counter(p.payload.get("wing", "") for p in expired)),
            "ids": [p.id for p in expired],
        }
        if dry_run:
            return summary
        for start in range(0, len(expired), MAX_FILTER_DELETE):
            chunk = expired[start : start + MAX_FILTER_DELETE]
            ids = [p.id for p in chunk]
            entry = journal.record(
                operation=JournalEntry.Operation.DELETE,
                payload={"ids": ids, "memories": [public_memory(p.id, p.payload) for p in chunk]},
                memory_ids=ids,
                added_by=added_by,
                reason=f"expired (expires_at before {format_rfc3339(now)})",
                wing=chunk[0].payload.get("wing", ""),
            )
            journal_and_apply(palace, entry)
            summary["deleted_count"] += len(chunk)
    return summary
