"""Operational routes: /healthz (open to all) and /metrics (Prometheus; behind a token when tokens exist)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Router

from palace import health, metrics

router = Router(tags=["operations"])


@router.get("/healthz", response={200: dict[str, Any], 503: dict[str, Any]})
def healthz(request: HttpRequest) -> tuple[int, dict[str, Any]]:
    """Status of the database, the store and the embedder, and the version; 503 when a part is down."""
    report = health.health()
    return (200 if report["status"] == "ok" else 503), report


@router.get("/metrics", include_in_schema=False)
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition: requests, tool calls, embedding time, palace size, journal pending."""
    return HttpResponse(metrics.render(), content_type=metrics.CONTENT_TYPE)
