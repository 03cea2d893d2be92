"""Leaving: a palace written in the formats other tools read (the official MCP memory server, Markdown notes).

`export --format memory-json` writes the knowledge graph of @modelcontextprotocol/server-memory: what
`palazzo import memory-json` brought in goes back as the same entities and relations (palace.operations.memory_graph);
every other memory is an entity named `<room>/<id>` (entityType its hall, the text as its first observation
and its filing as the second), with a `supersedes` relation per correction. `export --format markdown` writes one
note per memory, `<wing>/<room>/<id>.md`, with the front matter basic-memory reads (title, type,
permalink, tags, created) and a Relations section for corrections: readable by a person as it is, and
importable back with `palazzo import memory-json` / `palazzo import basic-memory`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from palace.operations import memory_graph

_UNSAFE = re.compile(r"[^\w.-]+")


def _entity_name(memory: dict[str, Any]) -> str:
    return f"{memory.get('room') or 'memory'}/{memory['id']}"


def memory_json_lines(memories: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The memory server's memory.json lines: the entities, then the relations.

    A current memory that `palazzo import memory-json` made from an entity or a relation goes back as
    that entity (same name, type and observations; one entity per name) or relation; every other
    memory, and a superseded one, is an entity named `<room>/<id>`, linked to its correction by `supersedes`.
    """
    names: dict[int, str] = {}
    entities: dict[str, dict[str, Any]] = {}
    relations: list[dict[str, Any]] = []
    links: list[tuple[int, int]] = []
    for memory in memories:
        current = not memory.get("superseded_by") and not memory.get("valid_until")
        imported = memory_graph.entity_of(memory) if current else None
        relation = memory_graph.relation_of(memory) if current else None
        if relation is not None:
            relations.append(relation)
            continue
        if imported is not None:
            name = names[memory["id"]] = imported["name"]
            if name in entities:  # the same entity imported twice (from two files): one entity again
                entities[name]["observations"] += imported["observations"]
            else:
                entities[name] = imported
        else:
            name = names[memory["id"]] = _entity_name(memory)
            filing = ", ".join(
                f"{key}: {memory[key]}" for key in ("wing", "room", "hall", "category", "timestamp") if memory.get(key)
            )
            entities[name] = {
                "type": "entity",
                "name": name,
                "entityType": memory.get("hall") or "memory",
                "observations": [memory["text"], f"palazzo {filing}"],
            }
        links += [(memory["id"], older) for older in memory.get("supersedes") or ()]
    for entity in entities.values():
        yield json.dumps(entity, ensure_ascii=False) + "\n"
    for newer, older in links:
        relations.append(
            {
                "type": "relation",
                "from": names[newer],
                "to": names.get(older, f"memory/{older}"),
                "relationType": "supersedes",
            }
        )
    for line in dict.fromkeys(json.dumps(relation, ensure_ascii=False) for relation in relations):
        yield line + "\n"


def _segment(value: Any, fallback: str) -> str:
    cleaned = _UNSAFE.sub("-", str(value or "")).strip(".-")[:80]
    return cleaned or fallback


def note_text(memory: dict[str, Any]) -> str:
    """One memory as a Markdown note with basic-memory's front matter."""
    first = memory["text"].strip().splitlines()[0] if memory["text"].strip() else str(memory["id"])
    title = first[:80].replace('"', "'")
    front = [
        "---",
        f'title: "{title}"',
        f"type: {memory.get('hall') or 'note'}",
        f"permalink: {_segment(memory.get('room'), 'memory')}/{memory['id']}",
        f"tags: [{memory.get('category') or ''}]",
        f"created: {memory.get('timestamp') or ''}",
        "---",
        "",
    ]
    relations = [f"- supersedes [[{older}]]" for older in memory.get("supersedes") or ()]
    if memory.get("superseded_by"):
        relations.append(f"- superseded_by [[{memory['superseded_by']}]]")
    body = memory["text"].rstrip() + "\n"
    if relations:
        body += "\n## Relations\n" + "\n".join(relations) + "\n"
    return "\n".join(front) + body


def write_markdown_notes(memories: Iterable[dict[str, Any]], folder: Path) -> int:
    """Write one note per memory under folder/<wing>/<room>/<id>.md; how many."""
    count = 0
    for memory in memories:
        target = (
            folder / _segment(memory.get("wing"), "wing") / _segment(memory.get("room"), "room") / f"{memory['id']}.md"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(note_text(memory), encoding="utf-8")
        count += 1
    return count
