"""The session-start context for one project: palace status and previews of the most useful memories.

Bounded for the harness (at most MAX_CHARS characters, about 2,000 tokens at 4 characters a token):
previews, never whole 32 KB texts, each with its id for palace_recall. The process holding the palace
writes it to snapshot files (palace.feeding.snapshots) that `palazzo hook` reads; a server also answers it on
GET /wake-up.

When several hosts share the palace (palace.engine.locks.shared_palace: PostgreSQL and a Qdrant server) the
snapshots are rows of the database (WakeUpSnapshot) that every host's refresh writes and every host's
/wake-up and hooks read, so any host answers the same: a row is served while nothing was written since it
was prepared (its journal mark), else the context is prepared again and stored for the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.models import Min
from django.utils import timezone

from palace.engine.locks import shared_palace
from palace.engine.runtime import get_palace
from palace.feeding import snapshots
from palace.governance import audit
from palace.governance.scope import Wings
from palace.models import FedTranscript, JournalEntry, WakeUpSnapshot
from palace.schema.memories import public_memory
from palace.schema.timefmt import utc_now
from palace.store.base import MemoryFilter

# The hook adds its markers around this; Claude Code's own cap is 10,000 characters.
MAX_CHARS = 7900
PREVIEW_CHARS = 280
PROJECT_MEMORIES = 10
KEPT_HALLS = ("decisions", "preferences")
PER_KEPT_HALL = 3
SNAPSHOT_ROOMS = 50
# pg_try_advisory_lock key of a shared palace's snapshot refresh: one host refreshes at a time, the others skip.
REFRESH_KEY = 0x70616C617A7A70  # "palazzp"


def preview(text: str) -> str:
    """A memory's text on one line, cut at PREVIEW_CHARS."""
    line = re.sub(r"\s+", " ", text).strip()
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def _line(memory: dict[str, Any]) -> str:
    day = (memory.get("timestamp") or "")[:10]
    place = f"{memory.get('wing')}/{memory.get('room')}/{memory.get('hall')}"
    return f"- #{memory['id']} {day} {place}: {preview(memory['text'])}"


def context(room: str | None, *, wings: Wings = None, actor: str | None = None) -> dict[str, Any]:
    """The wake-up context of a project (room), or of the whole palace when room is None.

    Expired memories are left out as from every wake-up; a wing-scoped token (wings) sees only its wings.
    A read by a caller (actor: GET /wake-up) is audited; the snapshot files the holder process rewrites are not.
    """
    prepared, sent = _compose(room, wings=wings)
    if actor is not None:
        audit.record_read(operation="wake_up_http", actor=actor, filters={"room": room}, result_ids=sent)
    return prepared


def _compose(room: str | None, *, wings: Wings) -> tuple[dict[str, Any], list[int]]:
    """The context and the ids of the memories it shows."""
    palace = get_palace()
    now = utc_now()
    current = MemoryFilter(include_superseded=False, current_at=now, expired=False, wings=wings)
    total = palace.store.count(memory_filter=MemoryFilter(wings=wings))
    by_wing = palace.store.facet(key="wing", memory_filter=current)
    header = [
        f"palazzo memory palace: {palace.store.count(memory_filter=current)} current memories ({total} with history); "
        + ", ".join(f"{wing} {count}" for wing, count in sorted(by_wing.items(), key=lambda pair: -pair[1])[:8])
    ]
    sections: list[tuple[str, list[dict[str, Any]]]] = []
    seen: set[int] = set()
    if room is not None:
        in_room = MemoryFilter(room=room, include_superseded=False, current_at=now, expired=False, wings=wings)
        header.append(f"This project (room {room!r}): {palace.store.count(memory_filter=in_room)} current memories.")
        newest = [
            public_memory(p.id, p.payload) for p in palace.store.recent(memory_filter=in_room, limit=PROJECT_MEMORIES)
        ]
        sections.append((f"Newest in room {room!r}:", newest))
        seen.update(memory["id"] for memory in newest)
    for hall in KEPT_HALLS:
        hall_filter = MemoryFilter(hall=hall, include_superseded=False, current_at=now, expired=False, wings=wings)
        found = [
            public_memory(p.id, p.payload) for p in palace.store.recent(memory_filter=hall_filter, limit=PER_KEPT_HALL)
        ]
        sections.append((f"Newest {hall}:", [memory for memory in found if memory["id"] not in seen]))
    if room is None:
        newest = [
            public_memory(p.id, p.payload) for p in palace.store.recent(memory_filter=current, limit=PROJECT_MEMORIES)
        ]
        sections.append(("Newest memories:", [memory for memory in newest if memory["id"] not in seen]))
    lines = [*header]
    shown: dict[str, int] = {}  # line -> memory id, for the audit of what the budget let through
    for title, memories in sections:
        if memories:
            lines.append(title)
            for memory in memories:
                line = _line(memory)
                shown[line] = memory["id"]
                lines.append(line)
    lines.append("Search with palace_find; palace_recall fetches a whole memory by id.")
    text = ""
    sent: list[int] = []
    for line in lines:  # whole lines only, within the budget
        if len(text) + len(line) + 1 > MAX_CHARS:
            break
        text += line + "\n"
        if line in shown:
            sent.append(shown[line])
    return {"context": text.rstrip("\n"), "room": room}, sent


def wake_up(room: str | None, *, wings: Wings = None, actor: str) -> dict[str, Any]:
    """GET /wake-up: `context`, from the database's snapshot when several hosts share the palace.

    A shared palace's row is served while it is current (no journal entry settled since it was prepared);
    otherwise, or with no row yet, the context is prepared here and stored for every host. A wing-scoped
    token's context is always its own (snapshots see every wing).
    """
    if wings is not None or not shared_palace():
        return context(room, wings=wings, actor=actor)
    mark = settled_mark()
    row = WakeUpSnapshot.objects.filter(key=snapshots.room_key(room), journal_mark__gte=mark).first()
    payload = row.payload if row is not None else None
    if isinstance(payload, dict) and isinstance(payload.get("context"), str):
        prepared, sent = {"context": payload["context"], "room": room}, list(payload.get("ids") or [])
    else:
        prepared, sent = _compose(room, wings=None)
        _store_shared(room, prepared, sent, mark)
    audit.record_read(operation="wake_up_http", actor=actor, filters={"room": room}, result_ids=sent)
    return prepared


def settled_mark() -> int:
    """The newest journal entry up to which every entry is applied or failed: what a snapshot then shows."""
    newest = JournalEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    oldest_pending = JournalEntry.objects.filter(status=JournalEntry.Status.PENDING).aggregate(first=Min("id"))["first"]
    return newest if oldest_pending is None else min(newest, oldest_pending - 1)


def _store_shared(room: str | None, prepared: dict[str, Any], sent: list[int], mark: int) -> None:
    """Keep a snapshot in the database, unless a host stored one prepared later."""
    key = snapshots.room_key(room)
    values = {
        "room": room,
        "payload": prepared | {"ids": sent},
        "journal_mark": mark,
        "wanted": False,
        "written_at": timezone.now(),
    }
    if not WakeUpSnapshot.objects.filter(key=key, journal_mark__lte=mark).update(**values):
        WakeUpSnapshot.objects.bulk_create([WakeUpSnapshot(key=key, **values)], ignore_conflicts=True)
        # Kept the later one; a hook's wish that came meanwhile is answered by it.
        WakeUpSnapshot.objects.filter(key=key, wanted=True).exclude(payload=None).update(wanted=False)


def wanted_rooms(data_dir: Path) -> list[str]:
    """Projects hooks asked for (their `.want` files, or a shared palace's wanted rows)."""
    if not shared_palace():
        return snapshots.wanted(data_dir)
    return [room for room in WakeUpSnapshot.objects.filter(wanted=True).values_list("room", flat=True) if room]


@contextmanager
def _refreshing() -> Iterator[bool]:
    """Whether this process may refresh a shared palace's snapshots now (no other host is at it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [REFRESH_KEY])
        mine = bool(cursor.fetchone()[0])
    try:
        yield mine
    finally:
        if mine:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [REFRESH_KEY])


def refresh_snapshots(data_dir: Path, *, rooms: list[str] | None = None) -> int:
    """Rewrite the palace-wide snapshot and those of the given rooms (default: recently fed and asked-for ones).

    Files of the data dir; rows of the database when several hosts share the palace, where a host finding
    them prepared since the last write (or being prepared by another host) leaves them. Returns how many
    it wrote.
    """
    shared = shared_palace()
    if not shared:
        rooms = _rooms(data_dir) if rooms is None else rooms
        snapshots.write(data_dir, None, context(None))
        for room in rooms:
            snapshots.write(data_dir, room, context(room))
        return len(rooms) + 1
    with _refreshing() as mine:
        if not mine:
            return 0
        mark = settled_mark()
        if rooms is None:
            current = WakeUpSnapshot.objects.filter(key=snapshots.PALACE_WIDE, journal_mark__gte=mark).exists()
            if current and not WakeUpSnapshot.objects.filter(wanted=True).exists():
                return 0
            rooms = _rooms(data_dir)
        for project in [None, *rooms]:
            prepared, sent = _compose(project, wings=None)
            _store_shared(project, prepared, sent, mark)
    return len(rooms) + 1


def _rooms(data_dir: Path) -> list[str]:
    fed = FedTranscript.objects.exclude(room="").order_by("-last_fed_at").values_list("room", flat=True)
    return list(dict.fromkeys([*wanted_rooms(data_dir), *fed[: SNAPSHOT_ROOMS * 4]]))[:SNAPSHOT_ROOMS]
