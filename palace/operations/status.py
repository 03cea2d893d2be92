"""The palace as an operator (and an agent at session start) sees it: counts, index, journal, feeding, wake-up."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from palace.engine import journal
from palace.engine.runtime import get_palace
from palace.feeding.status import feeding_status
from palace.governance import scope
from palace.reads.selectors import recent
from palace.schema.timefmt import utc_now
from palace.store.base import MemoryFilter

STATUS_ROOMS = 200  # palace_status lists the rooms with the most memories, at most this many


def status(*, room_limit: int = STATUS_ROOMS, wings: scope.Wings = None) -> dict[str, Any]:
    """Totals, counts by wing, room, hall and category (of a scoped caller's wings only), the index, journal, feeding.

    current leaves out superseded and expired memories; the other counts take every memory still held.
    """
    palace = get_palace()
    everything = MemoryFilter(wings=wings)
    current = MemoryFilter(include_superseded=False, current_at=utc_now(), expired=False, wings=wings)
    rooms = palace.store.facet(key="room", memory_filter=everything)
    biggest = sorted(rooms.items(), key=lambda item: (-item[1], item[0]))[:room_limit]
    return {
        "collection": palace.collection,
        "embedding_model": palace.embedder.model_name,
        "total": palace.store.count(memory_filter=everything),
        "current": palace.store.count(memory_filter=current),
        "wings": palace.store.facet(key="wing", memory_filter=everything),
        "rooms": dict(biggest),
        "room_count": len(rooms),
        "halls": palace.store.facet(key="hall", memory_filter=everything),
        "categories": palace.store.facet(key="category", memory_filter=everything),
        "search_index": dataclasses.asdict(palace.store.index_state()),
        "journal": journal_state(),
        "feeding": feeding_status(),
    }


def journal_state() -> dict[str, Any]:
    """Pending and failed journal entries, with the newest failures' reasons."""
    return journal.state()


def taxonomy(*, wings: scope.Wings = None) -> dict[str, Any]:
    """Counts by wing, room, hall and category (of a scoped caller's wings only)."""
    palace = get_palace()
    everything = MemoryFilter(wings=wings)
    return {
        plural: palace.store.facet(key=key, memory_filter=everything)
        for key, plural in (("wing", "wings"), ("room", "rooms"), ("hall", "halls"), ("category", "categories"))
    }


WAKE_UP_MAX_CHARS = 7600  # the JSON of the wake-up context: 1,900 tokens at 4 characters each
WAKE_UP_ROOMS = 30
WAKE_UP_PREVIEW_CHARS = 400
_WAKE_UP_KEYS = ("id", "text", "category", "wing", "room", "hall", "timestamp")


def wake_up(
    *,
    count: int,
    max_chars: int = WAKE_UP_MAX_CHARS,
    actor: str = "",
    operation: str = "wake_up",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Session-start context within max_chars of JSON: status (the largest rooms) and the newest memories.

    Each memory carries its filing and at most WAKE_UP_PREVIEW_CHARS of text (truncated=true when cut;
    palace_recall has the rest); memories that would pass the budget are left out, newest kept first.
    """
    summary = status(room_limit=WAKE_UP_ROOMS, wings=wings)
    # Feeding's per-device detail grows with the devices and is the operator's, not the agent's: status has it.
    summary.pop("feeding", None)
    while len(json.dumps(summary, ensure_ascii=False)) > max_chars // 2 and summary["rooms"]:
        summary["rooms"] = dict(list(summary["rooms"].items())[: len(summary["rooms"]) // 2])
    used = len(json.dumps({"status": summary, "recent": []}, ensure_ascii=False))
    memories: list[dict[str, Any]] = []
    for memory in recent(count=count, actor=actor, operation=operation, wings=wings):
        text = memory["text"]
        compact = {key: memory[key] for key in _WAKE_UP_KEYS if memory[key] is not None}
        compact["text"] = text[:WAKE_UP_PREVIEW_CHARS]
        compact["truncated"] = len(text) > WAKE_UP_PREVIEW_CHARS
        size = len(json.dumps(compact, ensure_ascii=False)) + 2
        if used + size > max_chars:
            break
        memories.append(compact)
        used += size
    return {"status": summary, "recent": memories}
