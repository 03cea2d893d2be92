"""POST /feed (a harness transcript's exchanges, parsed where the transcript is) and GET /wake-up (session-start
context for a project): how hooks and `palazzo feed` reach a remote palace (PALAZZO_URL + PALAZZO_TOKEN).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from ninja import Router

from palace.errors import InvalidInput, PalaceError
from palace.feeding import exchanges, wakeup
from palace.feeding.devices import DEVICE_PATTERN
from palace.feeding.exchanges import FeedReport
from palace.feeding.transcripts import HARNESSES, Exchange, Transcript
from palace.governance import auth
from palace.routes.schemas import (
    MAX_EXCHANGES_PER_REQUEST,
    MAX_FIELD_CHARS,
    MAX_TEXT_CHARS,
    ApiError,
    FeedRequest,
    WakeUpContext,
    json_body,
)
from palace.schema.forms import string_problem
from palace.schema.timefmt import parse_rfc3339

router = Router(tags=["feeding"])


def _string(data: dict[str, Any], key: str, *, required: bool = False, limit: int = MAX_FIELD_CHARS) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise InvalidInput.single(key, "must be a non-empty string" if required else "must be a string or null")
    if len(value) > limit:
        raise InvalidInput.single(key, f"must be at most {limit} characters")
    problem = string_problem(value)
    if problem is not None:
        raise InvalidInput.single(key, problem)
    return value


def _exchange(data: Any, number: int) -> Exchange:
    where = f"transcript.exchanges[{number}]"
    if not isinstance(data, dict):
        raise InvalidInput.single(where, "must be an object")
    try:
        started = parse_rfc3339(_string(data, "started_at", required=True) or "")
    except ValueError:
        raise InvalidInput.single(f"{where}.started_at", "must be an RFC3339 timestamp") from None
    except InvalidInput as exc:
        raise InvalidInput({f"{where}.{key}": value for key, value in exc.errors.items()}) from None
    index, complete = data.get("index"), data.get("complete")
    if type(index) is not int or not 0 <= index < 10**9:
        raise InvalidInput.single(f"{where}.index", "must be a whole number from 0")
    if type(complete) is not bool:
        raise InvalidInput.single(f"{where}.complete", "must be true or false")
    try:
        return Exchange(
            key=_string(data, "key", required=True, limit=exchanges.MAX_KEY_CHARS) or "",
            index=index,
            prompt=_string(data, "prompt", limit=MAX_TEXT_CHARS) or "",
            reply=_string(data, "reply", limit=MAX_TEXT_CHARS) or "",
            started_at=started,
            complete=complete,
        )
    except InvalidInput as exc:
        raise InvalidInput({f"{where}.{key}": value for key, value in exc.errors.items()}) from None


def transcript_from_json(harness: str, data: Any) -> tuple[Transcript, Transcript | None]:
    """The transcript a client parsed (its exchanges, maybe a slice of them) and its parent's stub, checked."""
    if not isinstance(data, dict):
        raise InvalidInput.single("transcript", "must be an object")
    exchanges = data.get("exchanges")
    if not isinstance(exchanges, list) or len(exchanges) > MAX_EXCHANGES_PER_REQUEST:
        raise InvalidInput.single("transcript.exchanges", f"must be a list of at most {MAX_EXCHANGES_PER_REQUEST}")
    try:
        path = _string(data, "path", required=True) or ""
        session_id, parent_session_id, agent_id, cwd, parent_path, parent_cwd = (
            _string(data, key)
            for key in ("session_id", "parent_session_id", "agent_id", "cwd", "parent_path", "parent_cwd")
        )
    except InvalidInput as exc:
        raise InvalidInput({f"transcript.{key}": value for key, value in exc.errors.items()}) from None
    parsed = [_exchange(item, number) for number, item in enumerate(exchanges)]
    seen: dict[str, int] = {}
    for number, exchange in enumerate(parsed):
        if exchange.key in seen:  # the key names the exchange's memory in the feed state
            raise InvalidInput.single(
                f"transcript.exchanges[{number}].key", f"repeats exchanges[{seen[exchange.key]}].key; keys are unique"
            )
        seen[exchange.key] = number
    transcript = Transcript(
        harness=harness,
        path=Path(path),
        exchanges=parsed,
        worth_keeping=True,  # the client's quality gate decided
        session_id=session_id,
        parent_session_id=parent_session_id,
        agent_id=agent_id,
        cwd=cwd,
    )
    parent = None
    if parent_path:
        parent = Transcript(
            harness=harness,
            path=Path(parent_path),
            session_id=parent_session_id,
            cwd=parent_cwd,
            exchanges=[],
            worth_keeping=True,
        )
    return transcript, parent


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


@router.post(
    "/feed",
    summary="Feed a transcript's exchanges (parsed by the client) into the palace",
    response={200: FeedReport, 400: ApiError, 403: ApiError, 503: ApiError},
    openapi_extra={"requestBody": json_body(FeedRequest)},
)
def feed(request: HttpRequest) -> JsonResponse:
    """Store a transcript's exchanges like `palazzo feed` does here; idempotent per harness, device and path."""
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError):
        return _error(400, "the body must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    harness, device = body.get("harness"), body.get("device")
    if harness not in HARNESSES:
        return _error(400, f"harness: must be one of {', '.join(HARNESSES)}")
    if not isinstance(device, str) or not DEVICE_PATTERN.fullmatch(device):
        return _error(400, "device: must be 1-64 letters, digits, '.', '_' or '-'")
    final, dry_run, room = body.get("final", False), body.get("dry_run", False), body.get("room")
    if type(final) is not bool or type(dry_run) is not bool:
        return _error(400, "final and dry_run: must be true or false")
    if room is not None and not isinstance(room, str):
        return _error(400, "room: must be a string or null")
    wings = auth.token_wings(request)
    if wings is not None and settings.PALAZZO.feed_wing not in wings:
        return _error(
            403,
            f"wing: fed memories go to {settings.PALAZZO.feed_wing!r} (PALAZZO_FEED_WING), outside this token's "
            f"wings ({', '.join(wings)}): nothing was written",
        )
    try:
        transcript, parent = transcript_from_json(harness, body.get("transcript"))
        identity = auth.request_identity(request)
        destination = exchanges.Destination.configured(
            harness=harness, device=device, token_identity=identity.added_by if identity else None, room=room
        )
        report = exchanges.feed_transcript(
            transcript=transcript, destination=destination, final=final, dry_run=dry_run, parent=parent
        )
    except InvalidInput as exc:
        return _error(400, str(exc))
    except PalaceError as exc:
        return _error(503, f"the palace cannot take writes: {exc}")
    return JsonResponse(report.as_dict())


@router.get(
    "/wake-up",
    summary="Session-start context for a project (palace status and memory previews)",
    response={200: WakeUpContext, 400: ApiError, 503: ApiError},
)
def wake_up(request: HttpRequest, room: str | None = None) -> JsonResponse:
    """What `palazzo hook` injects at SessionStart, for the room of the session's project."""
    if room is not None:
        try:
            room = _string({"room": room.strip()}, "room", required=True, limit=exchanges.MAX_TAG_CHARS)
        except InvalidInput:
            return _error(400, "room: must be 1-64 characters of valid UTF-8, without NUL")
    actor = auth.writer(request, f"http:{request.META.get('REMOTE_ADDR') or 'unknown'}")
    try:
        # From the database's snapshot when several hosts share the palace: any host answers the same.
        return JsonResponse(wakeup.wake_up(room, wings=auth.token_wings(request), actor=actor))
    except PalaceError as exc:
        return _error(503, str(exc))
