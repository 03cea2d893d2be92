"""The REST API (django-ninja): each concern's router lives in palace.routes."""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI
from ninja.openapi.schema import REF_TEMPLATE, NinjaGenerateJsonSchema, OpenAPISchema
from pydantic.json_schema import models_json_schema

from palace import __version__
from palace.routes import export, feed, ingest, operations
from palace.routes.schemas import REFERENCED_MODELS


class PalazzoAPI(NinjaAPI):
    """A NinjaAPI that also publishes the models routes refer to without ninja parsing them."""

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: Any = None) -> OpenAPISchema:
        """The OpenAPI document, with REFERENCED_MODELS (and the models they use) under components/schemas."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        _, definitions = models_json_schema(
            [(model, "validation") for model in REFERENCED_MODELS],
            ref_template=REF_TEMPLATE,
            schema_generator=NinjaGenerateJsonSchema,
        )
        schema["components"]["schemas"].update(definitions.get("$defs", {}))
        return schema


api = PalazzoAPI(title="palazzo", version=__version__, docs_url="/api/docs", openapi_url="/api/openapi.json")
api.add_router("", operations.router)
api.add_router("", ingest.router)
api.add_router("", export.router)
api.add_router("", feed.router)
