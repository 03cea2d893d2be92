"""The read audit: who read what and when, appended off the request path, exported and purged by command.

Rows are append-only in the database (triggers from migration 0005 refuse UPDATE and DELETE); the one
deletion is `purge`, which inserts an AuditPurge marker row, deletes, and removes the marker in a
single transaction: the triggers let a DELETE through only while that marker exists.
"""

from __future__ import annotations

import csv
import getpass
import hashlib
import io
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from palace.engine.background import WriterSlot
from palace.governance import redaction
from palace.models import AuditPurge, AuditRecord
from palace.schema.forms import writer_stamp
from palace.schema.timefmt import format_rfc3339

logger = logging.getLogger(__name__)

EXPORT_FIELDS = (
    "time",
    "actor",
    "operation",
    "query_sha256",
    "query_length",
    "query_plain",
    "filters",
    "result_ids",
    "result_count",
    "degraded",
)


def command_actor(command: str) -> str:
    """The actor of a management command: manage.py <command>/<OS user>."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"manage.py {command}/{user}"


def _query_fields(query: str | None) -> dict[str, Any]:
    if query is None:
        return {}
    fields: dict[str, Any] = {
        "query_sha256": hashlib.sha256(query.encode("utf-8", errors="surrogatepass")).hexdigest(),
        "query_length": len(query),
    }
    if settings.PALAZZO.audit_query_plain:
        # The table is append-only, so a secret pasted into a query would stay forever: redact it first.
        redactor = redaction.current()
        fields["query_plain"] = redaction.Redactor(mode="enforce", rules=redactor.rules).scan(query)[0]
    return fields


def record_read(
    *,
    operation: str,
    actor: str,
    result_ids: Sequence[int],
    query: str | None = None,
    filters: dict[str, Any] | None = None,
    degraded: bool = False,
    result_count: int | None = None,
) -> None:
    """Append one audit record (queued to the background writer in a server, written at once otherwise)."""
    # The row is built by the writer: a model instance costs more on the read path than the dict.
    row = dict(
        created_at=timezone.now(),
        actor=writer_stamp(actor) or "unknown",  # no NUL or lone surrogate reaches the table
        operation=operation[:32],
        filters={key: value for key, value in (filters or {}).items() if value not in (None, "", False, [])},
        result_ids=[int(memory_id) for memory_id in result_ids],
        result_count=len(result_ids) if result_count is None else result_count,
        degraded=degraded,
        **_query_fields(query),
    )
    _slot.write(row)


def _write(rows: list[dict[str, Any]]) -> None:
    try:
        AuditRecord.objects.bulk_create([AuditRecord(**row) for row in rows])
    except Exception:  # a failed audit write is logged (never the query) and must not fail the read
        logger.error("could not write %d audit record(s)", len(rows), exc_info=True)


_slot: WriterSlot[dict[str, Any]] = WriterSlot(name="palazzo-audit-writer", write=_write)


def start_audit_writer() -> None:
    """Write audit records from a background thread from now on (servers; commands write directly)."""
    _slot.start()


def stop_audit_writer() -> None:
    """Write the queued audit records and go back to writing them directly."""
    _slot.stop()


def flush_audit() -> None:
    """Make every audit record so far visible to queries."""
    if not _slot.flush():
        logger.warning("audit records are still being written")


def records(
    *, since: datetime | None = None, until: datetime | None = None, actor: str | None = None
) -> Iterator[AuditRecord]:
    """Audit records in time order, optionally within [since, until] and by one actor."""
    flush_audit()
    rows = AuditRecord.objects.order_by("created_at", "id")
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lte=until)
    if actor:
        rows = rows.filter(actor=actor)
    return rows.iterator()


def as_document(record: AuditRecord) -> dict[str, Any]:
    """One record as exported."""
    return {
        "time": format_rfc3339(record.created_at),
        "actor": record.actor,
        "operation": record.operation,
        "query_sha256": record.query_sha256 or None,
        "query_length": record.query_length,
        "query_plain": record.query_plain or None,
        "filters": record.filters,
        "result_ids": record.result_ids,
        "result_count": record.result_count,
        "degraded": record.degraded,
    }


def export_lines(rows: Iterable[AuditRecord], *, format: str) -> Iterator[str]:
    """JSON Lines (one object per record) or CSV with a header (filters and result_ids as JSON)."""
    if format == "json":
        for row in rows:
            yield json.dumps(as_document(row), ensure_ascii=False) + "\n"
        return
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        document = as_document(row)
        document["filters"] = json.dumps(document["filters"], ensure_ascii=False)
        document["result_ids"] = json.dumps(document["result_ids"])
        writer.writerow(document)
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.getvalue():
        yield buffer.getvalue()


def purge(*, before: datetime, actor: str) -> int:
    """Delete the records older than before (retention), in the one way the triggers allow; audited itself."""
    flush_audit()
    with transaction.atomic():
        marker = AuditPurge.objects.create(before=before, actor=actor[:200])
        deleted, _ = AuditRecord.objects.filter(created_at__lt=before).delete()
        marker.delete()
    record_read(
        operation="audit_purge",
        actor=actor,
        result_ids=[],
        result_count=deleted,
        filters={"before": format_rfc3339(before)},
    )
    logger.info("audit purge by %s removed %d records older than %s", actor, deleted, format_rfc3339(before))
    return deleted
