"""How transcript feeding goes, per harness and device: the last feed, sessions and exchanges fed, the last error."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, Sum
from pydantic import BaseModel, Field

from palace.feeding import spool
from palace.models import FedTranscript


class FeedSource(BaseModel):
    """Transcript feeding from one harness on one device (palace_status and /healthz publish this shape)."""

    harness: str
    device: str
    sessions: int = Field(description="Sessions (and subagent runs) fed.")
    exchanges: int = Field(description="Exchanges that have a memory.")
    memories: int = Field(description="Memories the feeding stored.")
    last_fed_at: str | None = None
    last_error: str | None = Field(None, description="The latest failure (transcript: reason), or null.")
    last_error_at: str | None = None


def _moment(value: Any) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _failure_text(path: str, error: str) -> str:
    """'transcript: reason', the transcript named once (a reader's error names it already)."""
    return error if error.startswith(f"{path}: ") else f"{path}: {error}"


def feeding_status() -> dict[str, Any]:
    """Per harness and device, and what waits in this data dir's spool."""
    sources = []
    rows = (
        FedTranscript.objects.values("harness", "device")
        .annotate(
            sessions=Count("session", distinct=True, filter=~Q(session="")),
            exchanges_total=Sum("exchanges_fed"),
            memories=Sum("memories_stored"),
            last_fed_at=Max("last_fed_at"),
        )
        .order_by("harness", "device")
    )
    for row in rows:
        failure = (
            FedTranscript.objects.filter(harness=row["harness"], device=row["device"])
            .exclude(last_error="")
            .order_by("-last_error_at")
            .values("last_error", "last_error_at", "path")
            .first()
        )
        source = FeedSource(
            harness=row["harness"],
            device=row["device"],
            sessions=row["sessions"],
            exchanges=row["exchanges_total"] or 0,
            memories=row["memories"] or 0,
            last_fed_at=_moment(row["last_fed_at"]),
            last_error=_failure_text(failure["path"], failure["last_error"]) if failure else None,
            last_error_at=_moment(failure["last_error_at"]) if failure else None,
        )
        sources.append(source.model_dump())
    data_dir = settings.PALAZZO.data_dir
    holder = spool.live_holder(data_dir)
    failed = (
        list(spool.spool_dir(data_dir).glob(f"*{spool.FAILED_SUFFIX}")) if spool.spool_dir(data_dir).is_dir() else []
    )
    return {
        "sources": sources,
        "queued": len(spool.pending(data_dir)),
        "failed_waiting_for_retry": len(failed),
        "fed_by": holder.get("role") if holder else None,
        "remote_error": spool.remote_error(data_dir),
    }
