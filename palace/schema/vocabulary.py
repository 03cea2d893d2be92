"""A palace's vocabulary: the wings, halls and categories its memories are filed by, and the presets to start from.

A palace records its vocabulary in its database when it is created (migration 0009): the preset
PALAZZO_VOCABULARY names (DEFAULT_PRESET when unset), with PALAZZO_WINGS, PALAZZO_HALLS and
PALAZZO_CATEGORIES replacing the preset's lists. From then on the record is the palace's own, carried
by its backups; `palazzo vocabulary` changes it. A palace that already held memories before
vocabularies were recorded keeps the vocabulary it was made with: LEGACY_PRESET (today's environment
overrides applied), so every memory it holds still validates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from palace.errors import InvalidInput

logger = logging.getLogger(__name__)

KINDS = ("wings", "halls", "categories")  # the vocabularies of a palace, as MemoryField.vocabulary names them
MAX_WORD_CHARS = 64


@dataclass(frozen=True)
class Vocabulary:
    """The values a palace files memories by; preset names where they came from ("custom" once edited)."""

    preset: str
    wings: tuple[str, ...]
    halls: tuple[str, ...]
    categories: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The vocabulary as JSON: preset and the three lists."""
        return {
            "preset": self.preset,
            "wings": list(self.wings),
            "halls": list(self.halls),
            "categories": list(self.categories),
        }

    def replacing(self, lists: Mapping[str, tuple[str, ...]]) -> Vocabulary:
        """This vocabulary with some lists replaced; its preset becomes "custom" when a list differs."""
        merged = {kind: tuple(lists.get(kind, getattr(self, kind))) for kind in KINDS}
        changed = any(merged[kind] != getattr(self, kind) for kind in KINDS)
        return Vocabulary(preset="custom" if changed else self.preset, **merged)


PRESETS: dict[str, Vocabulary] = {
    # Areas of work and life, kinds of statement and subjects a stranger recognises; feeding files
    # transcripts in projects / events / project-memory.
    "default": Vocabulary(
        preset="default",
        wings=("projects", "work", "personal", "infrastructure"),
        halls=("facts", "events", "decisions", "preferences", "procedures"),
        categories=("technical", "project-memory", "infrastructure", "person", "general"),
    ),
    # The Rust palazzo's vocabulary (palazzo's default until 0.x): for a palace moved from it.
    "rust-palazzo": Vocabulary(
        preset="rust-palazzo",
        wings=("projects", "infrastructure", "nexpublica", "personal", "career", "vibe"),
        halls=("facts", "events", "decisions", "discoveries", "preferences"),
        categories=("person", "career", "technical", "infrastructure", "project-memory", "vibe", "project"),
    ),
}
DEFAULT_PRESET = "default"
LEGACY_PRESET = "rust-palazzo"  # what a palace made before vocabularies were recorded was filed by


def preset(name: str) -> Vocabulary:
    """The preset of that name; InvalidInput naming the presets otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidInput.single("preset", f"{name!r} is not a preset; presets: {', '.join(PRESETS)}") from None


def checked_words(kind: str, words: Iterable[Any]) -> tuple[str, ...]:
    """A vocabulary list as stored: 1 or more unique names; InvalidInput naming the kind and the rule."""
    values = tuple(words)
    if not values:
        raise InvalidInput.single(kind, "needs at least one value")
    for value in values:
        if not isinstance(value, str) or not value.strip() or value != value.strip() or "," in value:
            raise InvalidInput.single(kind, f"{value!r} is not a name: no comma, no space at either end")
        if len(value) > MAX_WORD_CHARS:
            raise InvalidInput.single(kind, f"{value!r} is longer than {MAX_WORD_CHARS} characters")
    if len(set(values)) != len(values):
        raise InvalidInput.single(kind, "values must be unique")
    return values


def vocabulary_to_record(
    *, preset_name: str | None, lists: Mapping[str, tuple[str, ...]], had_memories: bool
) -> Vocabulary:
    """What a palace records when its vocabulary is first recorded.

    preset_name is PALAZZO_VOCABULARY (None when unset) and lists the PALAZZO_WINGS/HALLS/CATEGORIES that
    are set; had_memories says the palace held memories before (then the unset preset is LEGACY_PRESET).
    """
    fallback = LEGACY_PRESET if had_memories else DEFAULT_PRESET
    return preset(preset_name or fallback).replacing(lists)


# The palace's vocabulary as read from its database, once per process (forms read it on every write).
_cached: Vocabulary | None = None
_cache_lock = threading.Lock()


def _environment_choice() -> tuple[str | None, dict[str, tuple[str, ...]]]:
    from django.conf import settings

    env = settings.PALAZZO
    return env.vocabulary_preset, dict(env.vocabulary_lists)


def _had_memories(next_id: int | None) -> bool:
    from palace.schema.memories import FIRST_MEMORY_ID

    return next_id is not None and next_id > FIRST_MEMORY_ID


def record_first_vocabulary(*, palace_vocabulary: Any, id_allocator: Any) -> Vocabulary:
    """Record the palace's vocabulary unless it has one (the migration's step, and a fresh database's)."""
    row = palace_vocabulary.objects.filter(pk=1).first()
    if row is not None:
        return Vocabulary(row.preset, tuple(row.wings), tuple(row.halls), tuple(row.categories))
    allocator = id_allocator.objects.filter(pk=1).first()
    preset_name, lists = _environment_choice()
    chosen = vocabulary_to_record(
        preset_name=preset_name, lists=lists, had_memories=_had_memories(allocator.next_id if allocator else None)
    )
    palace_vocabulary.objects.create(
        pk=1,
        preset=chosen.preset,
        wings=list(chosen.wings),
        halls=list(chosen.halls),
        categories=list(chosen.categories),
    )
    return chosen


def active_vocabulary() -> Vocabulary:
    """The palace's own vocabulary (recorded in its database); what it would record while it has no tables yet."""
    global _cached
    with _cache_lock:
        if _cached is not None:
            return _cached
    from django.db import DatabaseError

    from palace.models import IdAllocator, PalaceVocabulary

    try:
        found = record_first_vocabulary(palace_vocabulary=PalaceVocabulary, id_allocator=IdAllocator)
    except DatabaseError:
        # A database not migrated yet: what its migration will record (kept out of the cache).
        try:
            allocator = IdAllocator.objects.filter(pk=1).first()
        except DatabaseError:
            allocator = None
        preset_name, lists = _environment_choice()
        return vocabulary_to_record(
            preset_name=preset_name, lists=lists, had_memories=_had_memories(allocator.next_id if allocator else None)
        )
    _warn_if_environment_differs(found)
    with _cache_lock:
        _cached = found
    return found


def _warn_if_environment_differs(recorded: Vocabulary) -> None:
    preset_name, lists = _environment_choice()
    if preset_name and preset_name != recorded.preset:
        logger.warning(
            "PALAZZO_VOCABULARY=%s is ignored: this palace records the vocabulary %r "
            "(change it with `palazzo vocabulary set %s`)",
            preset_name,
            recorded.preset,
            preset_name,
        )
    for kind, words in lists.items():
        if words != getattr(recorded, kind):
            logger.warning(
                "PALAZZO_%s is ignored: this palace records its own %s (%s); change them with `palazzo vocabulary`",
                kind.upper(),
                kind,
                ", ".join(getattr(recorded, kind)),
            )


def save_vocabulary(vocabulary: Vocabulary) -> Vocabulary:
    """Record a new vocabulary for the palace (checked first); this process uses it at once, others once restarted."""
    global _cached
    from palace.models import PalaceVocabulary

    checked = {kind: checked_words(kind, getattr(vocabulary, kind)) for kind in KINDS}
    PalaceVocabulary.objects.update_or_create(
        pk=1, defaults={"preset": vocabulary.preset} | {kind: list(words) for kind, words in checked.items()}
    )
    saved = Vocabulary(preset=vocabulary.preset, **checked)
    with _cache_lock:
        _cached = saved
    return saved


def forget_vocabulary() -> None:
    """Read the vocabulary from the database again on next use (a palace closed, a database restored)."""
    global _cached
    with _cache_lock:
        _cached = None
