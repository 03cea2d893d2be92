"""The duplicate rule, shared by writes (store) and reads (check_duplicate).

A current memory with exactly the same text is the memory a store returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from palace.engine.runtime import Palace
from palace.schema.memories import public_memory, text_hash
from palace.schema.timefmt import utc_now
from palace.store.base import MemoryFilter


def existing_duplicates(
    palace: Palace, texts: Sequence[str], wings: tuple[str, ...] | None = None
) -> dict[str, dict[str, Any]]:
    """Current memories whose text equals one of texts, by hash.

    The rule is cosine >= 0.95 AND the same text; equal texts embed to equal vectors under
    one model (the collection refuses any other), so an exact-text match is the whole test.
    """
    hashes = tuple(sorted({text_hash(text) for text in texts}))
    if not hashes:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for point in palace.store.scroll(
        memory_filter=MemoryFilter(
            text_hashes=hashes, include_superseded=False, current_at=utc_now(), expired=False, wings=wings
        )
    ):
        text = point.payload.get("text", "")
        if text not in found:
            found[text] = public_memory(point.id, point.payload, score=1.0)
    return found


def fresh_texts(palace: Palace, cleaned: list[dict[str, Any] | None], wings: tuple[str, ...] | None) -> list[str]:
    """Distinct valid texts that no current memory (in the caller's wings) holds yet, in input order."""
    texts = list(dict.fromkeys(fields["text"] for fields in cleaned if fields is not None))
    existing = existing_duplicates(palace, texts, wings)
    return [text for text in texts if text not in existing]
