"""Feeding: harness transcripts become memories through the normal write path, idempotently.

One memory per exchange (split at turn boundaries past 32 KB) with the turn's timestamp, the
harness session, the project as room (or the room `feed --room` names) and the transcript as
source_file; wing, hall and category from PALAZZO_FEED_*. Every write goes through services.store_batch
or services.supersede, so validation, the duplicate check and the journal apply. FedTranscript/FedExchange
remember what each exchange's memory is and the hash of its text: an exchange fed before with the same
text stores nothing, one whose text grew (it was still being written) is superseded by its longer text.
Writes go in batches of FEED_BATCH exchanges, each one embedding pass and one short hold of the
write lock, so finds keep answering while a large transcript is fed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from palace.errors import InvalidInput, PalaceError, StoreLocked
from palace.feeding.transcripts import Transcript, exchange_texts, project_name
from palace.models import FedExchange, FedTranscript
from palace.schema.forms import RoomField
from palace.writes import services

logger = logging.getLogger(__name__)

FEED_BATCH = 32
MAX_KEY_CHARS = 200
MAX_TAG_CHARS = 64
MAX_SOURCE_CHARS = 1024
SUPERSEDE_REASON = "the exchange grew after it was fed (it was still being written)"


def writer(*, harness: str, device: str, token_identity: str | None = None) -> str:
    """The added_by stamp of fed memories: <harness>@<device>, after the token's identity when there is one."""
    stamp = f"{harness}@{device}"
    return f"{token_identity}/{stamp}" if token_identity else stamp


def _fit(value: str, limit: int) -> str:
    """value, or a cut of it ending in a hash of the whole, so distinct long values stay distinct."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{value[: limit - 17]}~{digest}"


def text_hash(text: str) -> str:
    """SHA-256 of a memory text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Part:
    """One memory to be: an exchange, or a part of one past 32 KB."""

    key: str
    part: int
    text: str
    timestamp: str


@dataclass
class FeedReport:
    """What feeding one transcript did (or would do, in a dry run)."""

    harness: str
    path: str
    session: str | None
    room: str
    status: str = "fed"  # fed | unchanged | skipped | dry-run | stopped | failed
    exchanges: int = 0
    stored: int = 0
    duplicates: int = 0
    superseded: int = 0
    unchanged: int = 0
    held_incomplete: int = 0
    failed: int = 0
    reason: str | None = None
    retry: bool = True  # a failed feed is queued again for the next trigger
    errors: list[str] = field(default_factory=list)
    subagents: list[FeedReport] = field(default_factory=list)

    @classmethod
    def failure(cls, *, harness: str, path: str, session: str | None, reason: str, retry: bool = True) -> FeedReport:
        """The report of a transcript that could not be fed (unreadable, or its palace unreachable)."""
        return cls(harness=harness, path=path, session=session, room="", status="failed", reason=reason, retry=retry)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, subagents included."""
        data = {key: value for key, value in self.__dict__.items() if key != "subagents"}
        data["subagents"] = [report.as_dict() for report in self.subagents]
        return data

    def totals(self) -> dict[str, int]:
        """Counts over this transcript and its subagents."""
        keys = ("exchanges", "stored", "duplicates", "superseded", "unchanged", "held_incomplete", "failed")
        sums = {key: getattr(self, key) for key in keys}
        for report in self.subagents:
            for key, value in report.totals().items():
                sums[key] += value
        return sums


def checked_room(room: str) -> str:
    """A room given for fed sessions (`feed --room`), checked and canonical like any memory's room."""
    try:
        return str(RoomField().clean(room))
    except ValidationError as exc:
        raise InvalidInput.single("room", " ".join(exc.messages)) from None


@dataclass(frozen=True)
class Destination:
    """Where fed memories are filed and who wrote them."""

    wing: str
    hall: str
    category: str
    device: str
    added_by: str
    room: str | None = None  # every session's room; None: the project's name, from the session's cwd

    @classmethod
    def configured(
        cls, *, harness: str, device: str | None = None, token_identity: str | None = None, room: str | None = None
    ) -> Destination:
        """The PALAZZO_FEED_* defaults, stamped for this harness and device; room, when given, for every session."""
        env = settings.PALAZZO
        device = device or env.device
        return cls(
            wing=env.feed_wing,
            hall=env.feed_hall,
            category=env.feed_category,
            device=device,
            added_by=writer(harness=harness, device=device, token_identity=token_identity),
            room=checked_room(room) if room is not None else None,
        )


def parts(transcript: Transcript, *, final: bool) -> tuple[list[Part], int]:
    """The memories a transcript's exchanges make, and how many incomplete exchanges wait for the session's end."""
    result: list[Part] = []
    held = 0
    seen: set[str] = set()
    for exchange in transcript.exchanges:
        if not exchange.complete and not final:
            held += 1
            continue
        stamp = exchange.started_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        texts = exchange_texts(exchange)
        for number, text in enumerate(texts):
            key = _fit(exchange.key if number == 0 else f"{exchange.key}#{number}", MAX_KEY_CHARS)
            if key in seen:  # one feed-state row per key: a repeated (or cut to equal) key keeps its first part
                continue
            seen.add(key)
            result.append(Part(key=key, part=number, text=text, timestamp=stamp))
    return result, held


def _state_path(transcript: Transcript, parent: Transcript | None) -> str:
    # Inline sidechains (Claude Code 1.0.x) live in their parent's file: their state needs its own name.
    path = str(transcript.path)
    if parent is not None and transcript.path == parent.path:
        path = f"{path}#{transcript.agent_id or transcript.session_id}"
    return _fit(path, MAX_SOURCE_CHARS)


def _batches(items: Sequence[Part], size: int) -> Iterator[Sequence[Part]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def feed_transcript(
    *,
    transcript: Transcript,
    destination: Destination,
    final: bool,
    dry_run: bool = False,
    batch_size: int = FEED_BATCH,
    should_stop: Callable[[], bool] | None = None,
    parent: Transcript | None = None,
) -> FeedReport:
    """Feed a parsed transcript and its subagents; safe to repeat (already fed exchanges store nothing)."""
    session = _fit(transcript.session_id, MAX_TAG_CHARS) if transcript.session_id else None
    room = destination.room or project_name(transcript.cwd or (parent.cwd if parent else None))
    report = FeedReport(harness=transcript.harness, path=str(transcript.path), session=session, room=room)
    report.exchanges = len(transcript.exchanges)
    if not transcript.worth_keeping:
        report.status, report.reason = "skipped", "nothing worth keeping (no user prompt with text)"
        return report
    todo, report.held_incomplete = parts(transcript, final=final)
    state = None
    if not dry_run:
        state, _created = FedTranscript.objects.get_or_create(
            harness=transcript.harness,
            device=destination.device,
            path=_state_path(transcript, parent),
            defaults={
                "session": session or "",
                "parent_session": _fit(transcript.parent_session_id or "", MAX_TAG_CHARS),
                "room": room,
            },
        )
    else:
        state = FedTranscript.objects.filter(
            harness=transcript.harness, device=destination.device, path=_state_path(transcript, parent)
        ).first()
    known = {row.key: row for row in FedExchange.objects.filter(transcript=state)} if state and state.pk else {}
    base = {
        "category": destination.category,
        "wing": destination.wing,
        "room": room,
        "hall": destination.hall,
        "session": session,
        "source_file": _fit(str(transcript.path), MAX_SOURCE_CHARS),
    }
    for batch in _batches(todo, batch_size):
        if should_stop is not None and should_stop():
            report.status, report.reason = "stopped", "asked to release the palace; the rest is fed next time"
            break
        fresh = [part for part in batch if part.key not in known]
        grown = [part for part in batch if part.key in known and known[part.key].text_hash != text_hash(part.text)]
        report.unchanged += len(batch) - len(fresh) - len(grown)
        if dry_run:
            report.stored += len(fresh)
            report.superseded += len(grown)
            continue
        assert state is not None
        try:
            if fresh:
                _store(fresh, base, destination, state, known, report)
            for part in grown:
                _supersede(part, base, destination, state, known, report)
        except StoreLocked:
            raise  # not this transcript's failure: another process holds the palace (the caller hands over)
        except PalaceError as exc:
            report.status, report.reason = "failed", str(exc)
            _record_error(state, str(exc))
            break
        _record_progress(state)
    if dry_run:
        report.status = "dry-run"
    elif report.status == "fed" and not (report.stored or report.superseded or report.duplicates):
        report.status = "unchanged"
    if report.status == "fed" and state is not None and state.last_error:
        FedTranscript.objects.filter(pk=state.pk).update(last_error="")
    for subagent in transcript.subagents:
        if report.status in ("stopped", "failed"):
            break
        child = feed_transcript(
            transcript=subagent,
            destination=destination,
            final=final,
            dry_run=dry_run,
            batch_size=batch_size,
            should_stop=should_stop,
            parent=transcript,
        )
        report.subagents.append(child)
        if child.status in ("stopped", "failed"):
            report.status, report.reason = child.status, child.reason
    return report


def _store(
    fresh: Sequence[Part],
    base: dict[str, Any],
    destination: Destination,
    state: FedTranscript,
    known: dict[str, FedExchange],
    report: FeedReport,
) -> None:
    result = services.store_batch(
        items=[base | {"text": part.text, "timestamp": part.timestamp} for part in fresh],
        added_by=destination.added_by,
    )
    rows = []
    for part, outcome in zip(fresh, result["items"]):
        if outcome["status"] == "failed":
            report.failed += 1
            report.errors.append(f"exchange {part.key}: {outcome['error']}")
            continue
        if outcome["status"] == "stored":
            report.stored += 1
        else:  # the same text is in the palace already (fed from another copy of the file, or stored by hand)
            report.duplicates += 1
        row = FedExchange(
            transcript=state,
            key=part.key,
            part=part.part,
            memory_id=outcome["memory"]["id"],
            text_hash=text_hash(part.text),
        )
        rows.append(row)
    # Another server fed the same transcript at the same moment (hooks on two hosts, a retried delivery):
    # the store's duplicate rule gave both the same memories, and the unique key lets one row per exchange in.
    FedExchange.objects.bulk_create(rows, ignore_conflicts=True)
    known.update((row.key, row) for row in FedExchange.objects.filter(transcript=state, key__in=[r.key for r in rows]))
    stored = sum(1 for outcome in result["items"] if outcome["status"] == "stored")
    FedTranscript.objects.filter(pk=state.pk).update(memories_stored=state.memories_stored + stored)
    state.memories_stored += stored


def _supersede(
    part: Part,
    base: dict[str, Any],
    destination: Destination,
    state: FedTranscript,
    known: dict[str, FedExchange],
    report: FeedReport,
) -> None:
    row = known[part.key]
    fields = base | {"text": part.text, "timestamp": part.timestamp}
    try:
        result = services.supersede(
            supersedes=[row.memory_id], reason=SUPERSEDE_REASON, added_by=destination.added_by, **fields
        )
        memory_id = result["memory"]["id"]
        report.superseded += 1
        state.memories_superseded += 1
    except InvalidInput as exc:
        if "supersedes" not in exc.errors:
            raise
        # Its old memory was deleted meanwhile: the grown exchange is stored afresh.
        outcome = services.store_batch(items=[fields], added_by=destination.added_by)["items"][0]
        memory_id = outcome["memory"]["id"]
        report.stored += outcome["status"] == "stored"
    row.memory_id = memory_id
    row.text_hash = text_hash(part.text)
    row.save(update_fields=["memory_id", "text_hash", "fed_at"])
    FedTranscript.objects.filter(pk=state.pk).update(memories_superseded=state.memories_superseded)


def _record_progress(state: FedTranscript) -> None:
    exchanges = FedExchange.objects.filter(transcript=state, part=0).count()
    FedTranscript.objects.filter(pk=state.pk).update(last_fed_at=timezone.now(), exchanges_fed=exchanges)


def _record_error(state: FedTranscript, error: str) -> None:
    FedTranscript.objects.filter(pk=state.pk).update(last_error=error[:2000], last_error_at=timezone.now())


def record_failure(*, harness: str, device: str, path: Path | str, error: str) -> None:
    """Remember that a transcript could not be fed (unreadable, palace refused), for status."""
    state, _created = FedTranscript.objects.get_or_create(harness=harness, device=device, path=_fit(str(path), 1024))
    _record_error(state, error)
