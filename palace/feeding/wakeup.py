"""The session-start context for one project: palace status and previews of the most useful memories.

Bounded for the harness (at most MAX_CHARS characters, about 2,000 tokens at 4 characters a token):
previews, never whole 32 KB texts, each with its id for palace_recall. The process holding the palace
writes it to snapshot files (palace.feeding.snapshots) that `palazzo hook` reads; a server also answers it on
GET /wake-up.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from palace.engine.runtime import get_palace
from palace.feeding import snapshots
from palace.governance import audit
from palace.governance.scope import Wings
from palace.models import FedTranscript
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
    if actor is not None:
        audit.record_read(operation="wake_up_http", actor=actor, filters={"room": room}, result_ids=sent)
    return {"context": text.rstrip("\n"), "room": room}


def refresh_snapshots(data_dir: Path, *, rooms: list[str] | None = None) -> int:
    """Rewrite the palace-wide snapshot and those of the given rooms (default: recently fed and asked-for ones)."""
    if rooms is None:
        fed = FedTranscript.objects.exclude(room="").order_by("-last_fed_at").values_list("room", flat=True)
        rooms = list(dict.fromkeys([*snapshots.wanted(data_dir), *fed[: SNAPSHOT_ROOMS * 4]]))[:SNAPSHOT_ROOMS]
    snapshots.write(data_dir, None, context(None))
    for room in rooms:
        snapshots.write(data_dir, room, context(room))
    return len(rooms) + 1
