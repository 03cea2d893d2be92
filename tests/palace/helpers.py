"""Small builders shared by the palace tests."""

from __future__ import annotations

from typing import Any


def memory(text: str, **overrides: Any) -> dict[str, Any]:
    """A valid memory item with sensible defaults."""
    item = {"text": text, "category": "technical", "wing": "projects", "room": "palazzo", "hall": "facts"}
    item.update(overrides)
    return item
