"""The write-ahead journal: a database row and a JSONL line before the store is touched."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from palace.engine.ids import allocate_ids
from palace.errors import ReadOnlyPalace
from palace.models import JournalEntry
from palace.schema.forms import safe_text, writer_stamp
from palace.schema.timefmt import format_rfc3339, utc_now

logger = logging.getLogger(__name__)
PREVIEW_CHARS = 120
_file_lock = threading.Lock()


def preview(text: str) -> str:
    """The first 120 characters, with an ellipsis when cut."""
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def _file_params(payload: dict[str, Any]) -> dict[str, Any]:
    if settings.PALAZZO.wal_verbatim:
        return payload

    def shorten(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                ("text_preview" if key == "text" else key): (preview(item) if key == "text" else shorten(item))
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [shorten(item) for item in value]
        return value

    result = shorten(payload)
    assert isinstance(result, dict)
    return result


def _append_line(entry: JournalEntry) -> None:
    line = _line(entry)
    path = settings.PALAZZO.wal_path
    try:
        with _file_lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                # The database row is the durable record; this mirror only needs to survive a process crash.
                handle.flush()
    except OSError as exc:
        raise ReadOnlyPalace(f"cannot append to the journal file {path}: {exc.strerror or exc}") from exc


def _line(entry: JournalEntry) -> str:
    """The entry's JSONL line; escaped to ASCII if some string cannot be UTF-8 (validation should refuse those)."""
    fields = {
        "timestamp": format_rfc3339(utc_now()),
        "journal_id": entry.pk,
        "operation": entry.operation,
        "memory_ids": entry.memory_ids,
        "added_by": entry.added_by,
        "reason": entry.reason,
        "params": _file_params(entry.payload),
    }
    line = json.dumps(fields, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(fields)
    return line


def _database_failure(exc: Exception) -> ReadOnlyPalace | None:
    """A full disk or read-only database as ReadOnlyPalace; None for any other database error."""
    message = str(exc).lower()
    if any(word in message for word in ("readonly", "read-only", "disk", "full")):
        return ReadOnlyPalace(f"cannot write the journal: {exc}")
    return None


def _create_row(**fields: Any) -> JournalEntry:
    try:
        return JournalEntry.objects.create(**fields)
    except DatabaseError as exc:
        failure = _database_failure(exc)
        if failure is not None:
            raise failure from exc
        raise


def _mirror(entry: JournalEntry) -> None:
    """Append the committed entry's JSONL line; when that fails, take the entry back so it is never replayed."""
    try:
        _append_line(entry)
    except ReadOnlyPalace:
        try:
            entry.delete()
        except DatabaseError:
            logger.exception("could not take back journal entry %s: it stays pending and will be applied", entry.pk)
        raise


def record(
    *,
    operation: str,
    payload: dict[str, Any],
    memory_ids: list[int],
    added_by: str = "",
    reason: str = "",
    wing: str = "",
) -> JournalEntry:
    """Write a pending journal entry (row and JSONL line) before touching the store."""
    entry = _create_row(
        operation=operation,
        payload=payload,
        memory_ids=memory_ids,
        added_by=writer_stamp(added_by),
        reason=reason,
        wing=wing[:64],
    )
    _mirror(entry)
    return entry


def record_with_new_ids(
    *, operation: str, count: int, build_payload: Any, added_by: str = "", reason: str = "", wing: str = ""
) -> tuple[JournalEntry, list[int]]:
    """Allocate ids and journal the mutation that uses them, in one transaction."""
    try:
        with transaction.atomic():
            ids = allocate_ids(count)
            entry = _create_row(
                operation=operation,
                payload=build_payload(ids),
                memory_ids=ids,
                added_by=writer_stamp(added_by),
                reason=reason,
                wing=wing[:64],
            )
    except DatabaseError as exc:
        # A full disk often surfaces only at COMMIT, after the INSERT looked fine.
        failure = _database_failure(exc)
        if failure is not None:
            raise failure from exc
        raise
    # Mirrored after the commit: a rolled-back entry must leave no line behind (its id would be reused).
    _mirror(entry)
    return entry, ids


def mark_applied(entry: JournalEntry) -> None:
    """The store confirmed the mutation."""
    entry.status = JournalEntry.Status.APPLIED
    entry.applied_at = timezone.now()
    entry.save(update_fields=["status", "applied_at"])


def mark_failed(entry: JournalEntry, error: str) -> None:
    """The store refused the mutation; the caller was told, so it is not re-applied."""
    entry.status = JournalEntry.Status.FAILED
    entry.error = safe_text(error)[:2000]
    try:
        entry.save(update_fields=["status", "error"])
    except DatabaseError:
        # A full or read-only database cannot record the refusal: the entry stays pending and the
        # next start-up applies it (the write becomes durable late rather than half-done).
        logger.exception("could not mark journal entry %s failed; it will be re-applied at start-up", entry.pk)


def state(limit: int = 5) -> dict[str, Any]:
    """Pending and failed entry counts, with the newest few failures' reasons (status, verify, /healthz)."""
    failed = JournalEntry.objects.filter(status=JournalEntry.Status.FAILED)
    return {
        "pending": JournalEntry.objects.filter(status=JournalEntry.Status.PENDING).count(),
        "failed": failed.count(),
        "latest_failed": [
            {"entry": entry_id, "operation": operation, "error": error[:300]}
            for entry_id, operation, error in failed.order_by("-id").values_list("id", "operation", "error")[:limit]
        ],
    }


def pending() -> list[JournalEntry]:
    """Entries written but not confirmed by the store, oldest first."""
    return list(JournalEntry.objects.filter(status=JournalEntry.Status.PENDING).order_by("id"))
