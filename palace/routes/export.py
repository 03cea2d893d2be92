"""GET /export: every memory as JSON Lines that POST /ingest accepts back, streamed in id order."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import anyio.to_thread
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from ninja import Router

from palace.errors import PalaceError
from palace.governance.auth import token_wings, writer
from palace.operations import ingest as ingest_service
from palace.routes.ingest import NDJSON, stream_from_thread
from palace.routes.schemas import ExportedMemory, stream_content

router = Router(tags=["ingest"])
# Lines per worker-thread hop: one store scroll page.
LINES_PER_PART = 256

OPENAPI = {
    "responses": {
        200: {
            "description": (
                "JSON Lines, streamed: one ExportedMemory per line, every field included (superseded memories "
                "too), in id order. POST /ingest (or `palazzo ingest`) restores it as-is."
            ),
            "content": stream_content(NDJSON, ExportedMemory),
        },
        503: {"description": "The palace cannot be opened (plain text reason)."},
    }
}


def _parts(memories: Iterator[dict[str, object]]) -> Iterator[bytes]:
    block: list[str] = []
    for memory in memories:
        block.append(ingest_service.export_line(memory))
        if len(block) == LINES_PER_PART:
            yield "".join(block).encode()
            block = []
    if block:
        yield "".join(block).encode()


@router.get("/export", openapi_extra=OPENAPI, summary="Export every memory as JSON Lines (streamed)")
async def export(request: HttpRequest) -> HttpResponseBase:
    """Stream every memory as JSON Lines."""
    try:
        actor = writer(request, f"http:{request.META.get('REMOTE_ADDR') or 'unknown'}")
        memories = await anyio.to_thread.run_sync(
            functools.partial(
                ingest_service.export_memories, actor=actor, operation="http_export", wings=token_wings(request)
            )
        )
    except PalaceError as exc:
        return HttpResponse(f"cannot export: {exc}\n", status=503, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(stream_from_thread(_parts(memories)), content_type=NDJSON)
    response["Cache-Control"] = "no-store"
    return response
