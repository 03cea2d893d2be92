"""REST routes (django-ninja): health now, ingest and export in their own modules."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import NinjaAPI

from palazzo_site import __version__

api = NinjaAPI(title="palazzo", version=__version__, docs_url="/api/docs", openapi_url="/api/openapi.json")


@api.get("/healthz", tags=["operations"])
def healthz(request: HttpRequest) -> dict[str, Any]:
    """Liveness: the server answers."""
    return {"status": "ok", "version": __version__}
