"""Moving in: memories kept by other memory servers and conversation archives, mapped onto the palace.

Each source reader turns a file (or folder) into records: a memory item for the normal store path
(redaction, validation, the duplicate rule, the journal), or the reason one source record cannot be
one. Every record keeps its own time; what does not map onto the palace schema (tags, entity types,
relations, ids) goes into the text or `source_file`, never dropped. A record that names its writer keeps
it as `added_by`; the others are stamped `import:<source>`. Re-running an import stores nothing: the
same texts are duplicates. Formats were read from each project's own code and documentation:

- memory-json: the official MCP memory server (@modelcontextprotocol/server-memory): JSON lines of
  {"type": "entity", "name", "entityType", "observations": [...]} and
  {"type": "relation", "from", "to", "relationType"}; one memory per entity, its relations in its text.
- basic-memory: a folder of Markdown notes with YAML-ish front matter (title, type, tags, permalink),
  `- [category] text #tag` observations and `- relation [[Target]]` relations; one memory per note.
- mempalace: its export folder: export-manifest.json and <wing>/<room>.jsonl lines of
  {"id", "document", "metadata": {"wing", "room", "hall", "added_by", "filed_at", "source_file"}}.
- mem0: memory records {"id", "memory", "metadata", "created_at", "updated_at", "user_id", "agent_id"},
  as a JSON list, {"results": [...]} or {"memories": [...]}, or JSON lines.
- mcp-memory-service: its JSON export {"memories": [{"content", "tags", "memory_type", "created_at",
  "created_at_iso", "metadata"}]} (or a bare list).
- chatgpt: a ChatGPT data export's conversations.json (conversations with a `mapping` of message nodes);
  claude-ai: a Claude.ai export's conversations.json (conversations with `chat_messages`); one memory
  per exchange (a prompt and the replies to it), the conversation's own times, as transcripts are fed.
- qdrant: mcp-server-qdrant and Rust palazzo collections (import_qdrant).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from palace.errors import InvalidInput
from palace.feeding.transcripts.model import Exchange
from palace.feeding.transcripts.text import exchange_texts
from palace.operations.ingest import ImportDefaults
from palace.schema.forms import MemoryForm
from palace.schema.timefmt import format_rfc3339, parse_rfc3339
from palace.writes import services

SOURCES = (
    "memory-json",
    "basic-memory",
    "mempalace",
    "mem0",
    "mcp-memory-service",
    "chatgpt",
    "claude-ai",
    "qdrant",
)
BATCH = 64
# A source file larger than this is refused whole (every reader holds one file in memory).
MAX_FILE_BYTES = 512 * 1024 * 1024
MAX_TEXT_CHARS = 32 * 1024


class ImportProblem(InvalidInput):
    """The source cannot be read at all (a missing path, a file that is not the format)."""


@dataclass
class Record:
    """One source record: the memory item it maps to, or why it cannot be one; `ref` names it in the source."""

    ref: str
    item: dict[str, Any] | None = None
    error: str | None = None
    writer: str | None = None


@dataclass
class Outcome:
    """What happened to one record: stored, duplicate (already in the palace), would-store, failed."""

    ref: str
    status: str
    id: int | None = None
    error: str | None = None
    memory: dict[str, Any] | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the memory itself only in a dry run)."""
        data: dict[str, Any] = {"ref": self.ref, "status": self.status}
        if self.id is not None:
            data["id"] = self.id
        if self.error is not None:
            data["error"] = self.error
        if self.memory is not None:
            data["memory"] = self.memory
        return data


def _time(value: Any) -> str | None:
    """A record's time as RFC 3339 UTC: ISO strings (with or without a zone) or Unix seconds/milliseconds."""
    if isinstance(value, bool) or value in (None, ""):
        return None
    try:
        if isinstance(value, (int, float)):
            seconds = value / 1000 if value > 10**11 else value
            return format_rfc3339(datetime.fromtimestamp(seconds, tz=UTC))
        if isinstance(value, str):
            text = value.strip().replace(" ", "T", 1) if re.match(r"^\d{4}-\d\d-\d\d \d", value) else value.strip()
            try:
                return format_rfc3339(parse_rfc3339(text))
            except ValueError:
                moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
                return format_rfc3339(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


def _filed(source: str, defaults: ImportDefaults, named: dict[str, Any]) -> dict[str, Any]:
    """category/wing/room/hall: the record's own where its vocabulary allows it, else the defaults."""
    env = settings.PALAZZO
    filing: dict[str, Any] = {}
    for key, allowed in (("category", env.categories), ("wing", env.wings), ("hall", env.halls)):
        own = named.get(key)
        filing[key] = own if isinstance(own, str) and own in allowed else getattr(defaults, key) or allowed[0]
    room = named.get("room")
    filing["room"] = room if isinstance(room, str) and room.strip() else defaults.room or source
    return filing


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise ImportProblem.single("path", f"{path} is not a file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ImportProblem.single("path", f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return json.loads(path.read_bytes().decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as exc:
        raise ImportProblem.single("path", f"{path} is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None


def _json_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, error) for every non-blank line of a JSON Lines file."""
    if not path.is_file():
        raise ImportProblem.single("path", f"{path} is not a file")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            if len(raw) > MAX_TEXT_CHARS * 8:
                yield number, None, f"line is longer than {MAX_TEXT_CHARS * 8} bytes"
                continue
            try:
                yield number, json.loads(raw.decode("utf-8", errors="replace")), None
            except (ValueError, RecursionError) as exc:
                yield number, None, f"not JSON ({type(exc).__name__})"


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _refusal(value: Any, error: str | None, text_key: str | None = None) -> str | None:
    """Why a source record is no memory: unreadable, not an object, or without its text under text_key."""
    if error is not None:
        return error
    if not isinstance(value, dict):
        return "must be a JSON object"
    if text_key is not None and not (isinstance(value.get(text_key), str) and value[text_key].strip()):
        return f"{text_key}: must be a non-empty string"
    return None


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str) and item.strip()] if isinstance(value, list) else []


# --- memory-json (the official MCP memory server) --------------------------------------------------


def read_memory_json(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """One memory per entity: its name, type and observations, then the relations it takes part in."""
    entities: dict[str, dict[str, Any]] = {}
    relations: list[tuple[str, str, str]] = []
    for number, value, error in _json_lines(path):
        ref = f"line {number}"
        refusal = _refusal(value, error)
        if refusal is not None:
            yield Record(ref, error=refusal)
        elif value.get("type") == "entity":
            name = value.get("name")
            if not isinstance(name, str) or not name.strip():
                yield Record(ref, error="name: must be a non-empty string")
                continue
            entry = entities.setdefault(name, {"ref": ref, "types": [], "observations": []})
            if isinstance(value.get("entityType"), str):
                entry["types"].append(value["entityType"])
            entry["observations"] += _strings(value.get("observations"))
        elif value.get("type") == "relation":
            ends = [value.get(key) for key in ("from", "to", "relationType")]
            if not all(isinstance(end, str) and end.strip() for end in ends):
                yield Record(ref, error="from, to and relationType must be non-empty strings")
                continue
            relations.append((str(ends[0]), str(ends[2]), str(ends[1])))
        else:
            yield Record(ref, error="type: must be entity or relation")
    for name, entry in entities.items():
        lines = [f"{name} ({', '.join(dict.fromkeys(entry['types'])) or 'entity'})"]
        lines += [f"- {observation}" for observation in entry["observations"]]
        lines += [f"{subject} {verb} {target}" for subject, verb, target in relations if name in (subject, target)]
        item = {"text": _clip("\n".join(lines)), "source_file": f"memory.json entity {name}"[:1024]}
        yield Record(entry["ref"], item=item | _filed("memory-graph", defaults, {}))
    for subject, verb, target in relations:
        if subject not in entities and target not in entities:  # a relation between entities the file lacks
            item = {"text": f"{subject} {verb} {target}", "source_file": "memory.json relation"}
            yield Record(f"relation {subject} {verb} {target}", item=item | _filed("memory-graph", defaults, {}))


# --- basic-memory --------------------------------------------------------------------------------------


_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)


def read_basic_memory(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """One memory per Markdown note: its title, body (observations and relations kept as written)."""
    if not path.is_dir():
        raise ImportProblem.single("path", f"{path} is not a folder of Markdown notes")
    for note in sorted(path.rglob("*.md")):
        ref = str(note.relative_to(path))
        try:
            raw = note.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            yield Record(ref, error=f"cannot read: {exc.strerror or exc}")
            continue
        meta: dict[str, str] = {}
        body = raw
        match = _FRONT_MATTER.match(raw)
        if match:
            body = raw[match.end() :]
            for line in match.group(1).splitlines():
                key, sep, value = line.partition(":")
                if sep and key.strip() and not key.startswith((" ", "-")):
                    meta[key.strip()] = value.strip().strip("'\"")
        title = meta.get("title") or note.stem
        text = body.strip()
        if not text.startswith("# "):  # the note's own H1 is its title; else the front matter's
            text = f"# {title}\n\n{text}".strip()
        tags = meta.get("tags")
        if tags:
            text += f"\n\ntags: {tags}"
        stamp = _time(meta.get("created") or meta.get("date")) or _time(note.stat().st_mtime)
        item = {"text": _clip(text), "timestamp": stamp, "source_file": f"basic-memory {ref}"[:1024]}
        room = note.parent.name if note.parent != path else None
        yield Record(ref, item=item | _filed("basic-memory", defaults, {"room": room}))


# --- MemPalace -----------------------------------------------------------------------------------------


def read_mempalace(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """Its export folder (or one <room>.jsonl): each line's document, filed by its own wing, room and hall."""
    if path.is_dir():
        if not (path / "export-manifest.json").is_file():
            raise ImportProblem.single("path", f"{path} has no export-manifest.json (not a MemPalace export)")
        files = sorted(path.rglob("*.jsonl"))
    else:
        files = [path]
    for file in files:
        base = path if path.is_dir() else file.parent
        wing_dir = file.parent.name if path.is_dir() and file.parent != path else None
        for number, value, error in _json_lines(file):
            ref = f"{file.relative_to(base)}:{number}"
            refusal = _refusal(value, error, "document")
            if refusal is not None:
                yield Record(ref, error=refusal)
                continue
            document = value["document"]
            metadata = _object(value.get("metadata"))
            named = {
                "wing": metadata.get("wing") or wing_dir,
                "room": metadata.get("room") or file.stem,
                "hall": metadata.get("hall"),
                "category": metadata.get("category"),
            }
            source = metadata.get("source_file") if isinstance(metadata.get("source_file"), str) else None
            item = {
                "text": _clip(document),
                "timestamp": _time(metadata.get("filed_at") or metadata.get("timestamp")),
                "source_file": (source or f"mempalace {value.get('id', ref)}")[:1024],
            }
            writer = metadata.get("added_by") if isinstance(metadata.get("added_by"), str) else None
            yield Record(ref, item=item | _filed("mempalace", defaults, named), writer=writer)


# --- mem0 ----------------------------------------------------------------------------------------------


def _record_list(value: Any, keys: tuple[str, ...]) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), list):
                return list(value[key])
    return None


def _records_of(path: Path, keys: tuple[str, ...]) -> Iterator[tuple[str, Any, str | None]]:
    """A JSON list (or an object holding one under keys), else JSON lines: (ref, value, error)."""
    if path.suffix == ".jsonl":
        for number, value, error in _json_lines(path):
            yield f"line {number}", value, error
        return
    listed = _record_list(_read_json(path), keys)
    if listed is None:
        raise ImportProblem.single("path", f"{path} holds no list of records (expected one of: {', '.join(keys)})")
    for index, value in enumerate(listed):
        yield f"record {index}", value, None


def read_mem0(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """mem0 memories: the `memory` text; user, agent, run and metadata kept in source_file and text."""
    for ref, value, error in _records_of(path, ("results", "memories")):
        refusal = _refusal(value, error)
        if refusal is not None:
            yield Record(ref, error=refusal)
            continue
        text = value.get("memory") if isinstance(value.get("memory"), str) else value.get("text")
        if not isinstance(text, str) or not text.strip():
            yield Record(ref, error="memory: must be a non-empty string")
            continue
        metadata = _object(value.get("metadata"))
        owners = {key: value.get(key) for key in ("user_id", "agent_id", "run_id") if isinstance(value.get(key), str)}
        extra = {key: item for key, item in metadata.items() if key not in ("category", "room", "wing", "hall")}
        if extra:
            text = f"{text}\n\nmetadata: {json.dumps(extra, ensure_ascii=False, sort_keys=True)[:2000]}"
        ident = value.get("id") if isinstance(value.get("id"), str) else ref
        label = " ".join(f"{key}={item}" for key, item in owners.items())
        item = {
            "text": _clip(text),
            "timestamp": _time(value.get("created_at") or value.get("updated_at")),
            "source_file": f"mem0 {ident} {label}".strip()[:1024],
        }
        writer = owners.get("agent_id") or owners.get("user_id")
        named = {key: metadata.get(key) for key in ("category", "room", "wing", "hall")}
        yield Record(ref, item=item | _filed("mem0", defaults, named), writer=f"mem0:{writer}" if writer else None)


# --- mcp-memory-service --------------------------------------------------------------------------------


def read_mcp_memory_service(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """mcp-memory-service memories: `content`, its tags and memory_type kept in the text."""
    for ref, value, error in _records_of(path, ("memories",)):
        refusal = _refusal(value, error, "content")
        if refusal is not None:
            yield Record(ref, error=refusal)
            continue
        content = value["content"]
        tags = _strings(value.get("tags"))
        kind = value.get("memory_type") if isinstance(value.get("memory_type"), str) else None
        notes = [f"tags: {', '.join(tags)}"] if tags else []
        notes += [f"type: {kind}"] if kind else []
        text = content + ("\n\n" + "\n".join(notes) if notes else "")
        item = {
            "text": _clip(text),
            "timestamp": _time(value.get("created_at_iso") or value.get("created_at")),
            "source_file": f"mcp-memory-service {value.get('content_hash') or ref}"[:1024],
        }
        env = settings.PALAZZO
        named = {"category": next((tag for tag in tags if tag in env.categories), None)}
        named["hall"] = next((tag for tag in tags if tag in env.halls), None)
        yield Record(ref, item=item | _filed("mcp-memory-service", defaults, named))


# --- conversation archives -----------------------------------------------------------------------------


def _exchanges(turns: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]]:
    """(prompt, reply, time) per exchange from (role, text, time) turns: a user turn opens one."""
    exchanges: list[list[Any]] = []
    for role, text, moment in turns:
        if role == "user":
            exchanges.append([text, [], moment])
        elif exchanges:
            exchanges[-1][1].append(text)
    return [(prompt, "\n\n".join(replies), moment) for prompt, replies, moment in exchanges]


def _conversation_records(
    source: str,
    ref: str,
    conversation_id: str,
    title: str,
    turns: list[tuple[str, str, str | None]],
    defaults: ImportDefaults,
) -> Iterator[Record]:
    for index, (prompt, reply, moment) in enumerate(_exchanges(turns)):
        try:
            (prompt + reply).encode("utf-8")
        except UnicodeEncodeError:
            yield Record(f"{ref} exchange {index + 1}", error="text: is not valid UTF-8 (a lone surrogate)")
            continue
        stamp = moment or format_rfc3339(datetime.now(tz=UTC))
        exchange = Exchange(
            key=str(index), index=index, prompt=prompt, reply=reply, started_at=parse_rfc3339(stamp), complete=True
        )
        for part, text in enumerate(exchange_texts(exchange)):
            item = {
                "text": text,
                "timestamp": stamp,
                "session": conversation_id[:200] or None,
                "source_file": f"{source} {title}"[:1024],
            }
            suffix = f" part {part + 1}" if part else ""
            yield Record(f"{ref} exchange {index + 1}{suffix}", item=item | _filed(source, defaults, {}))


def _conversations(path: Path) -> list[Any]:
    value = _read_json(path)
    listed = _record_list(value, ("conversations",))
    if listed is None:
        raise ImportProblem.single("path", f"{path} holds no list of conversations")
    return listed


def read_chatgpt(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """A ChatGPT conversations.json: each conversation's current branch (current_node up the mapping)."""
    for index, conversation in enumerate(_conversations(path)):
        ref = f"conversation {index + 1}"
        mapping = conversation.get("mapping") if isinstance(conversation, dict) else None
        if not isinstance(mapping, dict):
            yield Record(ref, error="mapping: must be an object of message nodes")
            continue
        chain: list[dict[str, Any]] = []
        node_id = conversation.get("current_node")
        seen: set[str] = set()
        while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
            seen.add(node_id)
            node = mapping[node_id] if isinstance(mapping[node_id], dict) else {}
            chain.append(node)
            node_id = node.get("parent")
        if not chain:  # no current_node: every node, in creation order
            chain = sorted(
                (node for node in mapping.values() if isinstance(node, dict)),
                key=lambda node: (node.get("message") or {}).get("create_time") or 0,
                reverse=True,
            )
        turns: list[tuple[str, str, str | None]] = []
        for node in reversed(chain):
            message = node.get("message") if isinstance(node.get("message"), dict) else None
            if message is None:
                continue
            role = (message.get("author") or {}).get("role") if isinstance(message.get("author"), dict) else None
            content = message.get("content") if isinstance(message.get("content"), dict) else {}
            parts = [part for part in content.get("parts") or [] if isinstance(part, str) and part.strip()]
            if role in ("user", "assistant") and parts:
                turns.append((role, "\n".join(parts), _time(message.get("create_time"))))
        title = conversation.get("title") if isinstance(conversation.get("title"), str) else ref
        ident = str(conversation.get("conversation_id") or conversation.get("id") or ref)
        yield from _conversation_records("chatgpt", ref, ident, title, turns, defaults)


def read_claude_ai(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """A Claude.ai conversations.json: chat_messages, human then assistant, in order."""
    for index, conversation in enumerate(_conversations(path)):
        ref = f"conversation {index + 1}"
        messages = conversation.get("chat_messages") if isinstance(conversation, dict) else None
        if not isinstance(messages, list):
            yield Record(ref, error="chat_messages: must be a list")
            continue
        turns: list[tuple[str, str, str | None]] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            text = str(message["text"]) if isinstance(message.get("text"), str) else ""
            if not text.strip() and isinstance(message.get("content"), list):
                blocks = [_object(block).get("text") for block in message["content"]]
                text = "\n".join(block for block in blocks if isinstance(block, str)).strip()
            role = {"human": "user", "user": "user", "assistant": "assistant"}.get(str(message.get("sender")))
            if role and text.strip():
                turns.append((role, text, _time(message.get("created_at"))))
        title = conversation.get("name") if isinstance(conversation.get("name"), str) else ref
        ident = str(conversation.get("uuid") or ref)
        yield from _conversation_records("claude-ai", ref, ident, title or ref, turns, defaults)


READERS: dict[str, Callable[[Path, ImportDefaults], Iterator[Record]]] = {
    "memory-json": read_memory_json,
    "basic-memory": read_basic_memory,
    "mempalace": read_mempalace,
    "mem0": read_mem0,
    "mcp-memory-service": read_mcp_memory_service,
    "chatgpt": read_chatgpt,
    "claude-ai": read_claude_ai,
}


def _checked(record: Record) -> Record:
    """The record with its item validated as a store would (dry runs report the same refusals)."""
    if record.item is None:
        return record
    item = {key: value for key, value in record.item.items() if value is not None}
    try:
        MemoryForm(item).parsed()
    except InvalidInput as exc:
        return Record(record.ref, error=str(exc), writer=record.writer)
    return Record(record.ref, item=item, writer=record.writer)


def import_records(
    *, source: str, path: Path, defaults: ImportDefaults | None = None, dry_run: bool = False, added_by: str = ""
) -> Iterator[Outcome]:
    """Map a source's records and store them in batches (or, in a dry run, only validate them), one outcome each.

    Raises ImportProblem before anything is stored when the source cannot be read at all.
    """
    if source not in READERS:
        raise InvalidInput.single("source", f"{source!r} is not one of {', '.join(READERS)}")
    reader = READERS[source](path, defaults or ImportDefaults())
    window: list[Record] = []  # outcomes come in source order: failures wait for the batch around them
    for record in reader:
        window.append(_checked(record))
        if sum(1 for held in window if held.item is not None) == BATCH:
            yield from _settle(window, source, added_by, dry_run)
            window = []
    yield from _settle(window, source, added_by, dry_run)


def _settle(records: list[Record], source: str, added_by: str, dry_run: bool) -> Iterator[Outcome]:
    """Outcomes for these records in order: one store_batch per writer among the valid ones."""
    outcomes: dict[int, Outcome] = {}
    by_writer: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        if record.item is None:
            outcomes[index] = Outcome(record.ref, "failed", error=record.error)
        elif dry_run:
            outcomes[index] = Outcome(record.ref, "would-store", memory=record.item)
        else:
            by_writer.setdefault(record.writer or added_by or f"import:{source}", []).append(index)
    for writer, indexes in by_writer.items():
        result = services.store_batch(items=[records[index].item for index in indexes], added_by=writer)
        for index, outcome in zip(indexes, result["items"]):
            ref = records[index].ref
            if outcome["status"] == "failed":
                outcomes[index] = Outcome(ref, "failed", error=outcome["error"])
            else:
                outcomes[index] = Outcome(ref, outcome["status"], id=outcome["memory"]["id"])
    for index in range(len(records)):
        yield outcomes[index]


def summary(outcomes: list[Outcome]) -> dict[str, int]:
    """Outcome counts by status."""
    return dict(Counter(outcome.status for outcome in outcomes))
