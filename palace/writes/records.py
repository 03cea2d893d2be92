"""A new memory's record from validated input: secrets redacted first, then the fields it is stored with."""

from __future__ import annotations

from typing import Any

from palace.engine import metrics
from palace.governance import redaction
from palace.schema.forms import writer_stamp
from palace.schema.memories import SCHEMA_KEYS
from palace.schema.timefmt import format_rfc3339


def redact(fields: dict[str, Any]) -> dict[str, int]:
    """Redact a validated record's free text in place, before anything else sees it; counts per rule."""
    redactor = redaction.current()
    counts = redactor.record(fields)
    for rule, count in counts.items():
        metrics.REDACTIONS.labels(rule, redactor.mode).inc(count)
    return dict(counts)


def memory_record(
    fields: dict[str, Any], *, memory_id: int, timestamp: str, added_by: str, import_id: str = ""
) -> dict[str, Any]:
    """The record a new memory is journaled with: its content and filing as validated, id, time, writer, expiry."""
    record = {key: fields.get(key) or None for key in SCHEMA_KEYS}
    record["text"] = fields["text"]
    record.update(id=memory_id, timestamp=timestamp, added_by=writer_stamp(added_by) or None)
    record["expires_at"] = format_rfc3339(fields["expires_at"]) if fields.get("expires_at") else None
    if import_id:  # only imports stamp it: every other record stays as it was
        record["import_id"] = import_id
    return record
