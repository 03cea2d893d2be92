"""POST /ingest: JSON Lines in, one NDJSON progress line per chunk of 256 out, as each chunk is stored."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator

import anyio.to_thread
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from ninja import Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from palace.errors import PalaceError
from palace.governance import auth
from palace.operations import ingest as ingest_service
from palace.routes.schemas import IngestDone, IngestError, IngestLine, IngestProgress, stream_content

logger = logging.getLogger(__name__)

router = Router(tags=["ingest"])

INGEST_PATH = "/ingest"
NDJSON = "application/x-ndjson"
ACCEPTED_TYPES = (NDJSON, "application/jsonl", "application/x-jsonlines", "application/json-lines")
HTTP_ADDED_BY = "http-ingest"
_END = object()

OPENAPI = {
    "requestBody": {
        "required": True,
        "content": stream_content(NDJSON, IngestLine, format="binary"),
    },
    "responses": {
        200: {
            "description": (
                "NDJSON, streamed: an IngestProgress line per processed chunk of 256 items, then an IngestDone line. "
                "An error while processing (e.g. the store or the journal failing) sends an IngestError line and "
                "closes the stream; the chunks before it stay stored."
            ),
            "content": stream_content(NDJSON, IngestProgress, IngestDone, IngestError),
        },
        400: {"description": "The body cannot be parsed (plain text reason), before any streaming."},
        413: {"description": "The body is larger than PALAZZO_INGEST_MAX_BYTES."},
        503: {"description": "The palace cannot take writes (plain text reason)."},
    },
}


def _plain(status: int, reason: str) -> HttpResponse:
    return HttpResponse(reason + "\n", status=status, content_type="text/plain; charset=utf-8")


def _too_large() -> HttpResponse:
    limit = settings.PALAZZO.ingest_max_bytes
    return _plain(413, f"the request body is larger than {limit} bytes (PALAZZO_INGEST_MAX_BYTES)")


def _lines(reports: Iterator[ingest_service.ChunkReport]) -> Iterator[bytes]:
    running = ingest_service.empty_counts()
    redactions: dict[str, int] = {}
    try:
        for report in reports:
            yield (json.dumps(report.as_line()) + "\n").encode()
            if report.error is not None:
                return
            running, redactions = report.running, report.running_redactions
    except Exception as exc:  # a bug, not a PalaceError: still close the stream with a line saying so
        logger.exception("ingest failed")
        yield (json.dumps({"chunk": None, "error": f"internal error: {type(exc).__name__}: {exc}"}) + "\n").encode()
        return
    yield (json.dumps(ingest_service.done_line(running, redactions)) + "\n").encode()


async def stream_from_thread(parts: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Drive a blocking generator in worker threads, yielding each part as soon as it exists."""
    while True:
        part = await anyio.to_thread.run_sync(next, parts, _END)
        if part is _END:
            return
        yield part  # type: ignore[misc]


@router.post("/ingest", openapi_extra=OPENAPI, summary="Bulk ingest JSON Lines (streamed progress)")
async def ingest(request: HttpRequest, skip_duplicates: bool = False) -> HttpResponseBase:
    """Store a JSON Lines body in chunks of 256, streaming one NDJSON line per chunk."""
    if request.content_type not in ACCEPTED_TYPES:
        return _plain(400, f"Content-Type must be {NDJSON} (JSON Lines, one memory per line)")
    limit = settings.PALAZZO.ingest_max_bytes
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > limit:
        return _too_large()
    raw = ingest_service.limited(ingest_service.read_lines(request.readline), max_bytes=limit)
    try:
        first, lines = await anyio.to_thread.run_sync(ingest_service.first_item, raw)
    except ingest_service.BodyTooLarge:
        return _too_large()
    if first is None:
        return _plain(400, "the body holds no items (only blank lines and # comments)")
    if first.error is not None:
        return _plain(400, f"the body is not JSON Lines: line {first.number} {first.error}")
    added_by = auth.writer(request, HTTP_ADDED_BY)
    wings = auth.token_wings(request)
    try:
        reports = await anyio.to_thread.run_sync(
            lambda: ingest_service.ingest(lines=lines, skip_duplicates=skip_duplicates, added_by=added_by, wings=wings)
        )
    except PalaceError as exc:
        return _plain(503, f"the palace cannot take writes: {exc}")
    response = StreamingHttpResponse(stream_from_thread(_lines(reports)), content_type=NDJSON)
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"
    return response


def limit_ingest_body(app: ASGIApp) -> ASGIApp:
    """Refuse an oversized POST /ingest with 413 while it arrives.

    Django's ASGI handler spools a whole body to a temporary file before any view runs, so the limit is
    enforced here: a declared Content-Length over it is refused unread, and a chunked body is cut off
    (413 sent, Django told the client left) as soon as it passes the limit.
    """

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("path") != INGEST_PATH:
            await app(scope, receive, send)
            return
        limit = settings.PALAZZO.ingest_max_bytes
        for key, value in scope.get("headers", ()):
            if key.lower() == b"content-length" and value.isdigit() and int(value) > limit:
                await _send_plain(send, 413, _too_large().content)
                return
        seen = 0
        refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                refused = True
                await _send_plain(send, 413, _too_large().content)
                return {"type": "http.disconnect"}
            return message

        await app(scope, counted, send)

    return guarded


async def _send_plain(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
