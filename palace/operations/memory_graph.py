"""The official MCP memory server's knowledge graph as palace memories, and back, without loss.

An entity becomes one memory: its text is the name and type, then one `- ` line per observation (an
observation's own line breaks indented by two spaces, so the text reads back exactly), and its
`source_file` stamps the name and type as JSON (`memory.json entity {"name": ..., "entityType": ...}`).
A relation becomes a memory of its own (`"Ada" maintains "Orrery"`), its `source_file` stamping
from, to and relationType. `palazzo export --format memory-json` reads the stamps back: the same entity
names, types, observations and relations. The entityType chooses the category and hall (FILING below).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

ENTITY_STAMP = "memory.json entity "
RELATION_STAMP = "memory.json relation "

# entityType (casefolded, spaces and underscores as hyphens, a plural's "s" dropped) -> the categories
# and the halls to use, first one the palace's vocabulary has. docs/operations.md shows this map.
FILING: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (("person", "people", "user", "contact", "colleague", "friend", "family"), ("person",), ()),
    (
        ("organization", "organisation", "company", "team", "group", "employer", "client", "customer"),
        ("organization", "organisation", "general", "career"),
        (),
    ),
    (("project", "repository", "repo", "product", "codebase", "app", "application"), ("project", "project-memory"), ()),
    (
        ("technology", "tool", "library", "framework", "language", "software", "api", "service", "concept"),
        ("technical", "technology"),
        (),
    ),
    (
        ("infrastructure", "server", "host", "machine", "device", "network", "database"),
        ("infrastructure", "technical"),
        (),
    ),
    (("job", "role", "career", "skill"), ("career", "person"), ()),
    (("place", "location", "city", "country"), ("place", "location", "general"), ()),
    (("event", "meeting", "incident", "milestone", "release"), (), ("events", "event")),
    (("decision", "choice"), (), ("decisions", "decision")),
    (("preference", "habit", "opinion", "like", "dislike"), ("person",), ("preferences", "preference")),
    (("discovery", "insight", "lesson", "learning", "finding", "idea"), (), ("discoveries", "discovery", "facts")),
    (("procedure", "process", "workflow", "howto", "how-to", "instruction", "recipe"), (), ("procedures", "procedure")),
)
# What an entityType the map does not know (and every relation) is filed by, after --category / --hall.
GENERAL_CATEGORIES = ("general", "reference", "knowledge", "other", "project-memory")
GENERAL_HALLS = ("facts", "fact", "notes")


def _normal(word: str) -> str:
    return "-".join(word.casefold().replace("_", " ").split())


def _first_in(wanted: Sequence[str], allowed: Sequence[str]) -> str | None:
    by_normal = {_normal(value): value for value in allowed}
    return next((by_normal[_normal(value)] for value in wanted if _normal(value) in by_normal), None)


def filing_for(
    entity_type: str, *, categories: Sequence[str], halls: Sequence[str], category: str | None, hall: str | None
) -> tuple[str, str]:
    """(category, hall) for an entityType: the vocabulary's own word, else FILING, else the defaults, else general."""
    normal = _normal(entity_type)
    singular = normal[:-1] if normal.endswith("s") else normal
    row_categories: tuple[str, ...] = ()
    row_halls: tuple[str, ...] = ()
    for types, mapped_categories, mapped_halls in FILING:
        if normal in types or singular in types:
            row_categories, row_halls = mapped_categories, mapped_halls
            break
    chosen_category = (
        _first_in((entity_type, singular), categories)
        or _first_in(row_categories, categories)
        or _first_in((category,) if category else (), categories)
        or _first_in(GENERAL_CATEGORIES, categories)
        or categories[0]
    )
    chosen_hall = (
        _first_in((entity_type, singular), halls)
        or _first_in(row_halls, halls)
        or _first_in((hall,) if hall else (), halls)
        or _first_in(GENERAL_HALLS, halls)
        or halls[0]
    )
    return chosen_category, chosen_hall


def _header(name: str, entity_type: str) -> str:
    return f"{name} ({entity_type})" if entity_type else name


def entity_text(name: str, entity_type: str, observations: Sequence[str]) -> str:
    """An entity's memory text: the name and type, then one `- ` line per observation (inner breaks indented)."""
    return _header(name, entity_type) + "".join("\n- " + item.replace("\n", "\n  ") for item in observations)


def entity_stamp(name: str, entity_type: str) -> str:
    """The source_file of an entity's memory: its name and type as JSON."""
    return ENTITY_STAMP + json.dumps({"name": name, "entityType": entity_type}, ensure_ascii=False)


def relation_text(source: str, relation_type: str, target: str) -> str:
    """A relation's memory text; the names quoted, so two relations never read the same."""
    return f"{json.dumps(source, ensure_ascii=False)} {relation_type} {json.dumps(target, ensure_ascii=False)}"


def relation_stamp(source: str, relation_type: str, target: str) -> str:
    """The source_file of a relation's memory: from, to and relationType as JSON."""
    return RELATION_STAMP + json.dumps(
        {"from": source, "to": target, "relationType": relation_type}, ensure_ascii=False
    )


def _stamp(memory: dict[str, Any], prefix: str, keys: tuple[str, ...]) -> dict[str, str] | None:
    source = memory.get("source_file")
    if not isinstance(source, str) or not source.startswith(prefix):
        return None
    try:
        value = json.loads(source[len(prefix) :])
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(value.get(key), str) for key in keys):
        return None
    return {key: value[key] for key in keys}


def entity_of(memory: dict[str, Any]) -> dict[str, Any] | None:
    """The entity an imported memory holds (name, entityType, observations), or None for any other memory."""
    stamp = _stamp(memory, ENTITY_STAMP, ("name", "entityType"))
    if stamp is None:
        return None
    text = memory.get("text") or ""
    header = _header(stamp["name"], stamp["entityType"])
    rest = text[len(header) :] if text.startswith(header) else None
    if rest == "":
        observations: list[str] = []
    elif rest is not None and rest.startswith("\n- "):
        observations = [item.replace("\n  ", "\n") for item in rest[3:].split("\n- ")]
    else:  # corrected into another shape: the whole text is what is known about it
        observations = [text]
    return {"type": "entity", "name": stamp["name"], "entityType": stamp["entityType"], "observations": observations}


def relation_of(memory: dict[str, Any]) -> dict[str, Any] | None:
    """The relation an imported memory holds (from, to, relationType), or None for any other memory."""
    stamp = _stamp(memory, RELATION_STAMP, ("from", "to", "relationType"))
    return None if stamp is None else {"type": "relation", **stamp}
