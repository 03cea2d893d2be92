"""Moving in: memories kept by other memory servers and conversation archives, mapped onto the palace.

Each source reader turns a file (or folder) into records: a memory item for the normal store path
(redaction, validation, the duplicate rule, the journal), or the reason one source record cannot be
one. A source is read and validated whole before anything is stored: one bad record refuses the file
(ImportRefused names each, by line and column where it is not JSON) unless skip_bad stores the others.
Every memory an import stores carries the import's id (`import_id`), and undo_import removes exactly
those, journaled like any delete. Every record keeps its own time; what does not map onto the palace
schema (tags, entity types, relations, ids) goes into the text or `source_file`, never dropped. A record
that names its writer keeps it as `added_by`; the others are stamped `import:<source>`. Re-running an
import stores nothing: the same texts are duplicates. Formats were read from each project's own code
and documentation:

- memory-json: the official MCP memory server (@modelcontextprotocol/server-memory): JSON lines of
  {"type": "entity", "name", "entityType", "observations": [...]} and
  {"type": "relation", "from", "to", "relationType"}; one memory per entity and one per relation, filed
  by entityType and exported back as they came (palace.operations.memory_graph).
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
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from palace.errors import InvalidInput, PalaceError
from palace.feeding.transcripts.model import Exchange
from palace.feeding.transcripts.text import exchange_texts
from palace.operations import memory_graph
from palace.operations.ingest import ImportDefaults
from palace.reads import selectors
from palace.schema.forms import MAX_DELETE_IDS, MemoryForm
from palace.schema.timefmt import format_rfc3339, parse_rfc3339
from palace.schema.vocabulary import active_vocabulary
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
SHOWN_REFUSALS = 20
_IMPORT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


class ImportProblem(InvalidInput):
    """The source cannot be read at all (a missing path, a file that is not the format)."""


class ImportRefused(ImportProblem):
    """The source has bad records and skip_bad was not given: nothing was stored."""

    def __init__(self, path: Path, bad: list[Record]) -> None:
        super().__init__({record.ref: [record.error or "cannot be read"] for record in bad})
        self.bad = bad
        shown = "; ".join(f"{record.ref}: {record.error}" for record in bad[:SHOWN_REFUSALS])
        more = f"; and {len(bad) - SHOWN_REFUSALS} more" if len(bad) > SHOWN_REFUSALS else ""
        self.args = (
            f"{path}: {len(bad)} bad record{'s' if len(bad) != 1 else ''}, nothing stored "
            f"(correct them, or pass --skip-bad to store the others): {shown}{more}",
        )


def new_import_id() -> str:
    """A fresh import id: when it started (UTC) and a random tail, e.g. imp-20261204T235740Z-3fa9c1."""
    return f"imp-{datetime.now(tz=UTC).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


@dataclass
class Record:
    """One source record: the memory item it maps to, or why it cannot be one; `ref` names it in the source."""

    ref: str
    item: dict[str, Any] | None = None
    error: str | None = None
    writer: str | None = None


@dataclass
class Outcome:
    """What happened to one record: stored, duplicate (already in the palace; in a dry run too), would-store, failed."""

    ref: str
    status: str
    id: int | None = None
    error: str | None = None
    memory: dict[str, Any] | None = field(default=None, repr=False)
    import_id: str | None = None

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
    env = active_vocabulary()
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
    raw = path.read_bytes()
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ImportProblem.single("path", f"{path}: line {line}, byte {column}: not UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ImportProblem.single("path", f"{path}: {where}: not JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise ImportProblem.single("path", f"{path} is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from None


def _json_lines(path: Path) -> Iterator[tuple[str, Any, str | None]]:
    """(ref, value, error) for every non-blank line of a JSON Lines file; ref names the line (and column)."""
    if not path.is_file():
        raise ImportProblem.single("path", f"{path} is not a file")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            if len(raw) > MAX_TEXT_CHARS * 8:
                yield f"line {number}", None, f"line is longer than {MAX_TEXT_CHARS * 8} bytes"
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield f"line {number}, byte {exc.start + 1}", None, "not UTF-8"
                continue
            try:
                yield f"line {number}", json.loads(text), None
            except json.JSONDecodeError as exc:
                yield f"line {number}, column {exc.colno}", None, f"not JSON: {exc.msg}"
            except (ValueError, RecursionError) as exc:
                yield f"line {number}", None, f"not JSON ({type(exc).__name__})"


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


def _entity_problem(value: dict[str, Any]) -> str | None:
    name, kind, observations = value.get("name"), value.get("entityType", ""), value.get("observations", [])
    if not isinstance(name, str) or not name.strip():
        return "name: must be a non-empty string"
    if not isinstance(kind, str):
        return "entityType: must be a string"
    if not isinstance(observations, list):
        return "observations: must be a list of strings"
    for index, observation in enumerate(observations):
        if not isinstance(observation, str):
            return f"observations[{index}]: must be a string"
    return None


def read_memory_json(path: Path, defaults: ImportDefaults) -> Iterator[Record]:
    """One memory per entity (name, type, observations; filed by its entityType) and one per relation."""
    entities: dict[str, dict[str, Any]] = {}
    relations: dict[tuple[str, str, str], str] = {}
    refused: list[Record] = []
    for ref, value, error in _json_lines(path):
        refusal = _refusal(value, error)
        if refusal is not None:
            refused.append(Record(ref, error=refusal))
        elif value.get("type") == "entity":
            problem = _entity_problem(value)
            if problem is not None:
                refused.append(Record(ref, error=problem))
                continue
            entry = entities.setdefault(
                value["name"], {"ref": ref, "type": value.get("entityType", ""), "observations": []}
            )
            entry["observations"] += value.get("observations", [])
        elif value.get("type") == "relation":
            subject, verb, target = (value.get(key) for key in ("from", "relationType", "to"))
            if not all(isinstance(end, str) and end.strip() for end in (subject, verb, target)):
                refused.append(Record(ref, error="from, to and relationType: must be non-empty strings"))
                continue
            relations.setdefault((str(subject), str(verb), str(target)), ref)
        else:
            refused.append(Record(ref, error="type: must be entity or relation"))
    yield from refused
    vocabulary = active_vocabulary()
    where = {"wing": _filed("memory-graph", defaults, {})["wing"], "room": defaults.room or "memory-graph"}
    for name, entry in entities.items():
        category, hall = memory_graph.filing_for(
            entry["type"],
            categories=vocabulary.categories,
            halls=vocabulary.halls,
            category=defaults.category,
            hall=defaults.hall,
        )
        item = {
            "text": memory_graph.entity_text(name, entry["type"], entry["observations"]),
            "source_file": memory_graph.entity_stamp(name, entry["type"]),
            "category": category,
            "hall": hall,
        }
        yield Record(entry["ref"], item=item | where)
    for (subject, verb, target), ref in relations.items():
        category, hall = memory_graph.filing_for(
            "", categories=vocabulary.categories, halls=vocabulary.halls, category=defaults.category, hall=defaults.hall
        )
        item = {
            "text": memory_graph.relation_text(subject, verb, target),
            "source_file": memory_graph.relation_stamp(subject, verb, target),
            "category": category,
            "hall": hall,
        }
        yield Record(ref, item=item | where)


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
        for line, value, error in _json_lines(file):
            ref = f"{file.relative_to(base)} {line}"
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
        yield from _json_lines(path)
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
        env = active_vocabulary()
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
    *,
    source: str,
    path: Path,
    defaults: ImportDefaults | None = None,
    dry_run: bool = False,
    added_by: str = "",
    skip_bad: bool = False,
    import_id: str | None = None,
) -> Iterator[Outcome]:
    """Read and validate a source whole, then store its records in batches (a dry run only lists them).

    Raises ImportProblem before anything is stored when the source cannot be read, and ImportRefused
    when a record is bad and skip_bad is false. Every memory stored carries import_id (a new one when
    None); a failure while storing removes what this import had stored before it raises.
    """
    if source not in READERS:
        raise InvalidInput.single("source", f"{source!r} is not one of {', '.join(READERS)}")
    records = [_checked(record) for record in READERS[source](path, defaults or ImportDefaults())]
    bad = [record for record in records if record.item is None]
    if bad and not skip_bad and not dry_run:
        raise ImportRefused(path, bad)
    stamp = import_id or new_import_id()
    try:
        for start in range(0, len(records), BATCH):
            for outcome in _settle(records[start : start + BATCH], source, added_by, dry_run, stamp):
                if outcome.status == "failed" and not skip_bad and not dry_run:
                    raise ImportProblem.single(outcome.ref, outcome.error or "was refused by the store")
                yield outcome
    except PalaceError as exc:
        if dry_run:
            raise
        try:
            removed = undo_import(import_id=stamp, added_by=added_by or f"import:{source}")["deleted"]
        except InvalidInput:  # no memory carries the id: nothing was stored
            removed = 0
        except PalaceError:
            raise ImportProblem.single(
                "import", f"stopped ({exc}); remove what it stored with `palazzo import --undo {stamp}`"
            ) from exc
        raise ImportProblem.single(
            "import", f"stopped, nothing kept ({removed} stored memories removed): {exc}"
        ) from exc


def _settle(records: list[Record], source: str, added_by: str, dry_run: bool, import_id: str) -> Iterator[Outcome]:
    """Outcomes for these records in order: one store_batch per writer among the valid ones."""
    outcomes: dict[int, Outcome] = {}
    by_writer: dict[str, list[int]] = {}
    valid = [record.item["text"] for record in records if record.item is not None]
    held = selectors.held_texts(texts=valid) if dry_run and valid else {}
    for index, record in enumerate(records):
        if record.item is None:
            outcomes[index] = Outcome(record.ref, "failed", error=record.error)
        elif dry_run and record.item["text"] in held:
            outcomes[index] = Outcome(record.ref, "duplicate", id=held[record.item["text"]], memory=record.item)
        elif dry_run:
            outcomes[index] = Outcome(record.ref, "would-store", memory=record.item)
        else:
            by_writer.setdefault(record.writer or added_by or f"import:{source}", []).append(index)
    for writer, indexes in by_writer.items():
        result = services.store_batch(
            items=[records[index].item for index in indexes], added_by=writer, import_id=import_id
        )
        for index, outcome in zip(indexes, result["items"]):
            ref = records[index].ref
            if outcome["status"] == "failed":
                outcomes[index] = Outcome(ref, "failed", error=outcome["error"])
            else:
                stamp = import_id if outcome["status"] == "stored" else None
                outcomes[index] = Outcome(ref, outcome["status"], id=outcome["memory"]["id"], import_id=stamp)
    for index in range(len(records)):
        yield outcomes[index]


def undo_import(*, import_id: Any, added_by: str = "") -> dict[str, Any]:
    """Delete every memory an import stored (journaled, the reason naming the import); again, it deletes nothing.

    InvalidInput when no import of that id ever stored anything in this palace.
    """
    if not isinstance(import_id, str) or not _IMPORT_ID.match(import_id):
        raise InvalidInput.single("import_id", f"{import_id!r} is not an import id (an import reports it, e.g. imp-…)")
    ids = selectors.import_memory_ids(import_id=import_id)
    if not ids and not selectors.import_was_journaled(import_id=import_id):
        raise InvalidInput.single("import_id", f"{import_id}: no import with this id stored anything in this palace")
    deleted = 0
    for start in range(0, len(ids), MAX_DELETE_IDS):
        result = services.delete(
            ids=ids[start : start + MAX_DELETE_IDS],
            reason=f"undo import {import_id}",
            confirm=True,
            added_by=added_by or "import --undo",
        )
        deleted += result["counts"]["deleted"]
    return {"import_id": import_id, "deleted": deleted, "ids": ids}


def dry_run_line(ref: str, memory: dict[str, Any], held_by: int | None = None) -> str:
    """One line of a dry run: the record, where it would be filed (or the memory already holding it), its opening."""
    where = "/".join(str(memory.get(key) or "-") for key in ("wing", "room", "hall"))
    opening = " ".join(str(memory.get("text") or "").split())
    opening = opening if len(opening) <= 60 else opening[:59] + "…"
    if held_by is not None:
        return f"already held {ref} (memory {held_by}): {opening}"
    return f"would store {ref}: {where} category={memory.get('category')}: {opening}"


def summary(outcomes: list[Outcome]) -> dict[str, int]:
    """Outcome counts by status."""
    return dict(Counter(outcome.status for outcome in outcomes))
