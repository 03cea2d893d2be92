"""Rebuild: the vector store recreated from the journal, re-embedding with the configured model."""

from __future__ import annotations

import contextlib
from typing import Any

from palace.engine import journal
from palace.engine.applier import journal_and_apply
from palace.engine.points import build_points
from palace.models import JournalEntry


def rebuild(*, batch_size: int = 256) -> dict[str, Any]:
    """Recreate the vector store from the journal, re-embedding with the configured model."""
    from palace.engine import runtime

    runtime.close_palace()
    store = runtime.build_store()
    # The embedded shard is moved aside only while no server holds it (its writes would vanish).
    held_exclusively = getattr(store, "held_exclusively", None)
    with held_exclusively() if held_exclusively is not None else contextlib.nullcontext():
        moved_to = store.discard()
    palace = runtime.get_palace()
    entries = JournalEntry.objects.exclude(status=JournalEntry.Status.FAILED).order_by("id")
    replayed = 0
    queued: list[JournalEntry] = []

    def flush_stores() -> None:
        records = [record for entry in queued for record in entry.payload["memories"]]
        for start in range(0, len(records), batch_size):
            chunk = records[start : start + batch_size]
            vectors = palace.embedder.documents([record["text"] for record in chunk])
            palace.store.upsert(build_points(chunk, vectors))
        for entry in queued:
            if entry.status == JournalEntry.Status.PENDING:
                journal.mark_applied(entry)
        queued.clear()

    for entry in entries.iterator():
        replayed += 1
        if entry.operation == JournalEntry.Operation.STORE:
            queued.append(entry)
            continue
        flush_stores()
        journal_and_apply(palace, entry)
    flush_stores()
    return {"entries_replayed": replayed, "previous_store": moved_to, "embedding_model": palace.embedder.model_name}
