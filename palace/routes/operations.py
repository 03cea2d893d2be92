"""Operational routes: /healthz (open to all) and /metrics (Prometheus; behind a token when tokens exist)."""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from palace.engine import metrics
from palace.feeding.status import FeedSource
from palace.models import JournalEntry
from palace.operations import health
from palace.operations import status as palace_status

logger = logging.getLogger(__name__)

router = Router(tags=["operations"])


class PartHealth(Schema):
    """The state of one part the server depends on."""

    status: Literal["ok", "error", "unknown"]
    error: str | None = Field(None, description="Why the part is not ok (at most 300 characters).")


class DatabaseHealth(PartHealth):
    """The database: SQLite in the data dir, or PostgreSQL."""

    engine: str | None = Field(None, description="Django's vendor name: sqlite or postgresql.")


class StoreHealth(PartHealth):
    """The vector store: the embedded shard, or a Qdrant server."""

    kind: str | None = Field(None, description="EdgeStore or ServerStore.")
    memories: int | None = Field(None, description="Memories in the palace, superseded ones included.")


class EmbedderHealth(PartHealth):
    """The embedding model."""

    model: str | None = None
    dimension: int | None = None


class JournalHealth(PartHealth):
    """The write-ahead journal: entries still to apply, and entries that could not be applied."""

    pending: int | None = Field(None, description="Entries written but not yet confirmed by the store.")
    failed: int | None = Field(None, description="Entries refused or unappliable; the admin shows their reasons.")


class FeedingHealth(Schema):
    """Transcript feeding per harness and device, and the hook spool of this server's data dir."""

    sources: list[FeedSource] | None = None
    queued: int | None = Field(None, description="Transcripts waiting in the spool.")
    failed_waiting_for_retry: int | None = Field(None, description="Transcripts retried at the next trigger.")
    fed_by: str | None = Field(None, description="Who feeds the spool now: server or feeder (a detached process).")
    remote_error: str | None = Field(None, description="Why the last feed could not reach PALAZZO_URL.")
    error: str | None = Field(None, description="Why the feeding state could not be read (at most 300 characters).")


class HealthReport(Schema):
    """/healthz: each part's state, and ok overall only when every part is."""

    status: Literal["ok", "degraded"]
    version: str
    database: DatabaseHealth
    store: StoreHealth
    embedder: EmbedderHealth
    journal: JournalHealth | None = None
    feeding: FeedingHealth | None = None


def render_metrics() -> bytes:
    """The exposition text, with the palace gauges read now."""
    metrics.JOURNAL_PENDING.set(JournalEntry.objects.filter(status=JournalEntry.Status.PENDING).count())
    try:
        status = palace_status.status()
    except Exception as exc:  # a scrape must still answer (and say so) when the store is down
        logger.warning("metrics: cannot read the store: %s", exc)
        metrics.STORE_UP.set(0)
    else:
        metrics.STORE_UP.set(1)
        metrics.MEMORIES.labels("all").set(status["total"])
        metrics.MEMORIES.labels("current").set(status["current"])
        metrics.INDEX_BUILDING.set(1 if status["search_index"]["building"] else 0)
        _feeding_gauges(status["feeding"])
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # several workers: every worker's series, summed
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()


def _seconds(moment: str | None) -> float:
    from palace.schema.timefmt import parse_rfc3339

    return parse_rfc3339(moment).timestamp() if moment else 0.0


def _feeding_gauges(feeding: dict[str, Any]) -> None:
    for source in feeding["sources"]:
        labels = (source["harness"], source["device"])
        metrics.FEED_SESSIONS.labels(*labels).set(source["sessions"])
        metrics.FEED_EXCHANGES.labels(*labels).set(source["exchanges"])
        metrics.FEED_LAST.labels(*labels).set(_seconds(source["last_fed_at"]))
        metrics.FEED_FAILING.labels(*labels).set(_seconds(source["last_error_at"]))
    metrics.FEED_QUEUED.set(feeding["queued"] + feeding["failed_waiting_for_retry"])


@router.get("/healthz", response={200: HealthReport, 503: HealthReport}, exclude_none=True)
def healthz(request: HttpRequest) -> tuple[int, dict[str, Any]]:
    """Status of the database, the store and the embedder, and the version; 503 when a part is down."""
    report = health.health()
    return (200 if report["status"] == "ok" else 503), report


@router.get("/metrics", include_in_schema=False)
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition: requests, tool calls, embedding time, palace size, journal pending, feeding."""
    return HttpResponse(render_metrics(), content_type=metrics.CONTENT_TYPE)
