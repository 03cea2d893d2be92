"""Operational routes: /healthz (open to all) and /metrics (Prometheus; behind a token when tokens exist)."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Router
from prometheus_client import generate_latest

from palace import health, metrics, selectors
from palace.models import JournalEntry

logger = logging.getLogger(__name__)

router = Router(tags=["operations"])


def render_metrics() -> bytes:
    """The exposition text, with the palace gauges read now."""
    metrics.JOURNAL_PENDING.set(JournalEntry.objects.filter(status=JournalEntry.Status.PENDING).count())
    try:
        status = selectors.status()
    except Exception as exc:  # a scrape must still answer (and say so) when the store is down
        logger.warning("metrics: cannot read the store: %s", exc)
        metrics.STORE_UP.set(0)
    else:
        metrics.STORE_UP.set(1)
        metrics.MEMORIES.labels("all").set(status["total"])
        metrics.MEMORIES.labels("current").set(status["current"])
        metrics.INDEX_BUILDING.set(1 if status["search_index"]["building"] else 0)
    return generate_latest()


@router.get("/healthz", response={200: dict[str, Any], 503: dict[str, Any]})
def healthz(request: HttpRequest) -> tuple[int, dict[str, Any]]:
    """Status of the database, the store and the embedder, and the version; 503 when a part is down."""
    report = health.health()
    return (200 if report["status"] == "ok" else 503), report


@router.get("/metrics", include_in_schema=False)
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition: requests, tool calls, embedding time, palace size, journal pending."""
    return HttpResponse(render_metrics(), content_type=metrics.CONTENT_TYPE)
