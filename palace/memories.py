"""How a memory looks in the store and to callers."""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any

MEMORY_FIELDS = (
    "text",
    "category",
    "wing",
    "room",
    "hall",
    "timestamp",
    "session",
    "source_file",
    "valid_from",
    "valid_until",
    "superseded_by",
    "superseded_reason",
    "supersedes",
    "added_by",
    "expires_at",
)
INTERNAL_FIELDS = ("text_hash",)


def text_hash(text: str) -> str:
    """Identity of a text for duplicate detection: equal texts have equal vectors."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_room(room: str) -> str:
    """The one stored form of a room: NFKC, casefolded, trimmed, inner whitespace runs as one space.

    "Palazzo", " palazzo " and "PALAZZO" are one room. The form is idempotent (checked over every
    code point), so a canonical room passes through unchanged.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", room).casefold())
    return " ".join(folded.split())


def stored_payload(memory: dict[str, Any]) -> dict[str, Any]:
    """The payload written to the store for a memory record (absent fields omitted, room canonical)."""
    payload = {key: memory[key] for key in MEMORY_FIELDS if memory.get(key) not in (None, "", [])}
    if isinstance(payload.get("room"), str):  # journal entries written before rooms were canonical
        payload["room"] = canonical_room(payload["room"])
    payload["text_hash"] = text_hash(memory["text"])
    return payload


def public_memory(point_id: int, payload: dict[str, Any], score: float | None = None) -> dict[str, Any]:
    """A memory as callers see it: every field present, null when unset."""
    memory: dict[str, Any] = {"id": point_id}
    for key in MEMORY_FIELDS:
        memory[key] = payload.get(key)
    if score is not None:
        memory["score"] = round(score, 6)
    return memory
