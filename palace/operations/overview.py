"""The palace overview the admin shows: counts, the newest memories and tokens saved per day."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import F, IntegerField, Sum, Value
from django.db.models.functions import Greatest, TruncDate

from palace.engine.journal import preview
from palace.models import UsageEvent
from palace.operations import status as palace_status
from palace.operations.gain import flush_usage
from palace.reads import selectors
from palace.schema.timefmt import utc_now


def tokens_saved_per_day(*, days: int = 30) -> list[dict[str, Any]]:
    """Tokens saved on each of the last `days` days (UTC), zero-filled, oldest first."""
    today = utc_now().date()
    first = today - timedelta(days=days - 1)
    flush_usage()
    rows = (
        UsageEvent.objects.filter(created_at__date__gte=first)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            saved=Sum(Greatest(F("baseline_tokens") - F("estimated_tokens"), Value(0), output_field=IntegerField()))
        )
    )
    saved = {row["day"]: int(row["saved"] or 0) for row in rows}
    return [
        {"day": (first + timedelta(days=n)).isoformat(), "tokens_saved": saved.get(first + timedelta(days=n), 0)}
        for n in range(days)
    ]


def overview(*, newest: int = 10, days: int = 30, actor: str = "") -> dict[str, Any]:
    """Counts by wing, room, hall and category, the newest memories (audited) and the daily savings."""
    taxonomy = palace_status.taxonomy()
    status = palace_status.status()
    memories = selectors.recent(count=newest, actor=actor, operation="admin_overview")
    return {
        "total": status["total"],
        "current": status["current"],
        "counts": taxonomy,
        "newest": [memory | {"text_preview": preview(memory.get("text") or "")} for memory in memories],
        "tokens_saved_per_day": tokens_saved_per_day(days=days),
    }
