"""Usage events and the token-gain estimate.

The estimation model (estimate@v1, palazzo's): a call costs the agent about bytes_out / 4
tokens of context; the baseline is what a hand-coded SSH + curl + jq (+ embedding round
trip) equivalent would have cost for the same call, a fixed figure per operation, and per
item for batches. Tokens saved = max(baseline - estimated, 0).
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum

from palace.engine.background import WriterSlot
from palace.models import UsageEvent
from palace.schema.forms import GainForm
from palace.schema.timefmt import format_rfc3339, utc_now

logger = logging.getLogger(__name__)

ESTIMATE_VERSION = "estimate@v1"
BYTES_PER_TOKEN = 4
BASELINE_TOKENS = {
    "store": 1900,
    "store_batch_item": 1500,
    "find": 1800,
    "recall": 600,
    "browse": 1200,  # a Qdrant scroll ordered by timestamp, with its filter and cursor, through SSH + curl + jq
    "status": 350,
    "taxonomy": 450,
    "check_duplicate": 1700,
    "supersede": 2200,
    "delete": 900,
    "delete_by_filter": 1400,
    "ingest_item": 1500,
    "export": 0,
    "gain": 0,
    "wake_up": 2000,
}


def estimated_tokens(bytes_out: int) -> int:
    """Tokens an agent spends reading a response of this size."""
    return math.ceil(bytes_out / BYTES_PER_TOKEN)


def baseline_tokens(operation: str, items: int = 1) -> int:
    """Tokens the hand-coded equivalent would have cost."""
    if operation in ("store_batch", "ingest"):
        return BASELINE_TOKENS[f"{operation}_item"] * items
    return BASELINE_TOKENS.get(operation, 0)


def record_usage(
    *, operation: str, tool: str = "", ok: bool, exec_ms: float, bytes_out: int, items: int = 1, added_by: str = ""
) -> None:
    """Record one operation (best effort: a failure to record never fails the call)."""
    env = settings.PALAZZO
    if not env.gain_enabled:
        return
    estimate = estimated_tokens(bytes_out)
    baseline = baseline_tokens(operation, items) if ok else 0
    event = UsageEvent(
        operation=operation,
        tool=tool,
        ok=ok,
        exec_ms=exec_ms,
        bytes_out=bytes_out,
        estimated_tokens=estimate,
        baseline_tokens=baseline,
        added_by=added_by[:200],
    )
    line = None
    if env.usage_log is not None:
        line = {
            "ts": format_rfc3339(utc_now()),
            "operation": operation,
            "tool": tool,
            "ok": ok,
            "exec_ms": round(exec_ms, 3),
            "bytes": bytes_out,
            "estimated_tokens": estimate,
            "baseline": baseline,
        }
    _slot.write((event, line))


def _write_usage(events: list[UsageEvent], lines: list[dict[str, Any]]) -> None:
    try:
        UsageEvent.objects.bulk_create(events)
        log = settings.PALAZZO.usage_log
        if log is not None and lines:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a", encoding="utf-8") as handle:
                handle.writelines(json.dumps(line) + "\n" for line in lines)
    except Exception:  # usage is telemetry: never let it break the operation it describes
        logger.warning("could not record usage of %d operation(s)", len(events), exc_info=True)


def _write_queued(items: list[tuple[UsageEvent, dict[str, Any] | None]]) -> None:
    # A crash loses at most the events still queued (usage is telemetry; memories go through the journal).
    _write_usage([event for event, _ in items], [line for _, line in items if line is not None])


_slot: WriterSlot[tuple[UsageEvent, dict[str, Any] | None]] = WriterSlot(
    name="palazzo-usage-writer", write=_write_queued
)


def start_usage_writer() -> None:
    """Record usage from a background thread from now on (servers; commands write directly)."""
    _slot.start()


def stop_usage_writer() -> None:
    """Write the queued usage events and go back to writing them directly."""
    _slot.stop()


def flush_usage() -> None:
    """Make every usage event recorded so far visible to queries (read-your-writes for gain)."""
    if not _slot.flush():
        logger.warning("usage events are still being written; gain figures may lag behind")


def gain_summary(*, since: datetime | None = None) -> dict[str, Any]:
    """Totals of calls and tokens saved, overall and per operation."""
    flush_usage()
    events = UsageEvent.objects.all()
    if since is not None:
        events = events.filter(created_at__gte=since)
    rows = (
        events.values("operation")
        .annotate(
            calls=Count("id"),
            failed=Count("id", filter=Q(ok=False)),
            bytes_out=Sum("bytes_out"),
            estimated_tokens=Sum("estimated_tokens"),
            baseline_tokens=Sum("baseline_tokens"),
            exec_ms=Sum("exec_ms"),
        )
        .order_by("operation")
    )
    per_operation: dict[str, dict[str, Any]] = {}
    totals = {"calls": 0, "failed": 0, "bytes_out": 0, "estimated_tokens": 0, "baseline_tokens": 0, "tokens_saved": 0}
    for row in rows:
        saved = max((row["baseline_tokens"] or 0) - (row["estimated_tokens"] or 0), 0)
        per_operation[row["operation"]] = {
            "calls": row["calls"],
            "failed": row["failed"],
            "estimated_tokens": row["estimated_tokens"] or 0,
            "baseline_tokens": row["baseline_tokens"] or 0,
            "tokens_saved": saved,
            "avg_exec_ms": round((row["exec_ms"] or 0.0) / row["calls"], 3),
        }
        for key in ("calls", "failed", "bytes_out", "estimated_tokens", "baseline_tokens"):
            totals[key] += row[key] or 0
        totals["tokens_saved"] += saved
    baseline = totals["baseline_tokens"]
    return {
        "estimate": ESTIMATE_VERSION,
        "since": format_rfc3339(since) if since else None,
        "enabled": settings.PALAZZO.gain_enabled,
        "totals": totals,
        "saved_percent": round(100.0 * totals["tokens_saved"] / baseline, 1) if baseline else 0.0,
        "per_operation": per_operation,
    }


def gain(*, since: Any = None) -> dict[str, Any]:
    """Token savings, optionally since a moment."""
    fields = GainForm({"since": since} if since is not None else {}).parsed()
    return gain_summary(since=fields["since"])
