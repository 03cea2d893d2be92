"""The REST API (django-ninja): each concern's router lives in palace.routes."""

from __future__ import annotations

from ninja import NinjaAPI

from palace import __version__
from palace.routes import export, feed, ingest, operations

api = NinjaAPI(title="palazzo", version=__version__, docs_url="/api/docs", openapi_url="/api/openapi.json")
api.add_router("", operations.router)
api.add_router("", ingest.router)
api.add_router("", export.router)
api.add_router("", feed.router)
