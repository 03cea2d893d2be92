"""Leaving: a palace written in the formats other tools read (the official MCP memory server, Markdown notes).

`export --format memory-json` writes the knowledge graph of @modelcontextprotocol/server-memory: one
entity per memory (name `<room>/<id>`, entityType its hall, the text as its first observation and its
filing as the second) and a `supersedes` relation per correction. `export --format markdown` writes one
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

_UNSAFE = re.compile(r"[^\w.-]+")


def _entity_name(memory: dict[str, Any]) -> str:
    return f"{memory.get('room') or 'memory'}/{memory['id']}"


def memory_json_lines(memories: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The memory server's memory.json lines: entities first as they come, then the relations."""
    names: dict[int, str] = {}
    links: list[tuple[int, int]] = []
    for memory in memories:
        name = names[memory["id"]] = _entity_name(memory)
        filing = ", ".join(
            f"{key}: {memory[key]}" for key in ("wing", "room", "hall", "category", "timestamp") if memory.get(key)
        )
        entity = {
            "type": "entity",
            "name": name,
            "entityType": memory.get("hall") or "memory",
            "observations": [memory["text"], f"palazzo {filing}"],
        }
        yield json.dumps(entity, ensure_ascii=False) + "\n"
        links += [(memory["id"], older) for older in memory.get("supersedes") or ()]
    for newer, older in links:
        relation = {
            "type": "relation",
            "from": names[newer],
            "to": names.get(older, f"memory/{older}"),
            "relationType": "supersedes",
        }
        yield json.dumps(relation, ensure_ascii=False) + "\n"


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
