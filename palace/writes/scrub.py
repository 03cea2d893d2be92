"""Scrubbing an existing palace with the redaction rules in force (`manage.py redact`).

New writes are redacted before anything sees them (palace.writes.services); memories written before a
rule existed are rewritten here: the memories, every journal row that carries their text (stores,
supersedes, the full records of deletes), the JSONL mirror, and then the vector store is rebuilt
from the scrubbed journal and the old shard removed, so no segment or WAL of it keeps the text.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from palace.engine import journal
from palace.engine.locks import write_lock
from palace.engine.runtime import get_palace
from palace.governance import redaction
from palace.models import JournalEntry
from palace.schema.memories import public_memory
from palace.store.base import MemoryFilter
from palace.writes import services


def _enforcing() -> redaction.Redactor:
    # The packs in force, applied for real even when writes run in dry-run or off mode.
    return redaction.Redactor(mode="enforce", rules=redaction.current().rules)


def scrub(*, dry_run: bool = False) -> dict[str, Any]:
    """Redact every memory and journal row that matches; counts per rule, never the text."""
    redactor = _enforcing()
    palace = get_palace()
    memory_counts: Counter[str] = Counter()
    rewritten: list[dict[str, Any]] = []
    for point in palace.store.scroll(memory_filter=MemoryFilter()):
        record = public_memory(point.id, point.payload)
        found = redactor.record(record)
        if found:
            memory_counts.update(found)
            rewritten.append(record)
    entries: list[tuple[int, dict[str, Any], str, str]] = []
    for entry in JournalEntry.objects.order_by("id").iterator():
        found_in_entry: Counter[str] = Counter()
        payload = redactor.deep(entry.payload, found_in_entry)
        reason = redactor.deep(entry.reason, found_in_entry)
        error = redactor.deep(entry.error, found_in_entry)
        if found_in_entry:
            entries.append((entry.pk, payload, reason, error))
    summary: dict[str, Any] = {
        "dry_run": dry_run,
        "memories": len(rewritten),
        "journal_entries": len(entries),
        "redactions": dict(memory_counts),
    }
    if dry_run or not (rewritten or entries):
        summary["wal_lines"] = 0 if dry_run else _rewrite_mirror(redactor, {})
        return summary
    with write_lock:
        with transaction.atomic():
            for pk, payload, reason, error in entries:
                JournalEntry.objects.filter(pk=pk).update(payload=payload, reason=reason, error=error)
        if rewritten:
            # A record that the scrub happened (rule counts only); replayed like any store. `rewrite`
            # tells verify that these ids were written before and are rewritten on purpose.
            journal.record(
                operation=JournalEntry.Operation.STORE,
                payload={"memories": rewritten, "rewrite": True},
                memory_ids=[record["id"] for record in rewritten],
                added_by="manage.py redact",
                reason="redacted: " + ", ".join(f"{rule} {count}" for rule, count in sorted(memory_counts.items())),
                wing=rewritten[0].get("wing") or "",
            )
        summary["wal_lines"] = _rewrite_mirror(redactor, {pk: payload for pk, payload, _, _ in entries})
        rebuilt = services.rebuild()
    previous = rebuilt.get("previous_store") or ""
    if previous and Path(previous).is_dir():
        shutil.rmtree(previous)  # the old shard's segments and WAL still hold the texts
    _compact_database()
    summary["store_rebuilt"] = True
    return summary


def _rewrite_mirror(redactor: redaction.Redactor, payloads: dict[int, Any]) -> int:
    """Rewrite the JSONL mirror from the scrubbed rows (atomically); lines without a row are redacted as they are."""
    path = settings.PALAZZO.wal_path
    if not path.is_file():
        return 0
    staged = path.with_name(path.name + ".redact")
    changed = 0
    with journal._file_lock:
        with path.open(encoding="utf-8") as source, staged.open("w", encoding="utf-8") as target:
            for raw in source:
                line = raw.rstrip("\n")
                try:
                    document = json.loads(line)
                except ValueError:
                    document = None
                counts: Counter[str] = Counter()
                if isinstance(document, dict):
                    if document.get("journal_id") in payloads:
                        document["params"] = journal._file_params(payloads[document["journal_id"]])
                    document = redactor.deep(document, counts)
                    new_line = json.dumps(document, ensure_ascii=False)
                else:
                    new_line = redactor.deep(line, counts)
                changed += new_line != line
                target.write(new_line + "\n")
            target.flush()
            os.fsync(target.fileno())
        os.replace(staged, path)
    return changed


def _compact_database() -> None:
    """Drop the pages that held the old rows: SQLite keeps them in free pages and its WAL, PostgreSQL as dead tuples."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("VACUUM")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        elif connection.vendor == "postgresql":
            cursor.execute(f"VACUUM FULL {JournalEntry._meta.db_table}")
