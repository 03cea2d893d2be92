"""Operational routes: health (and, later, metrics)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from palazzo_site import __version__

router = Router(tags=["operations"])


@router.get("/healthz")
def healthz(request: HttpRequest) -> dict[str, Any]:
    """Liveness: the server answers."""
    return {"status": "ok", "version": __version__}
