"""opencode sessions in its JSON storage tree (~/.local/share/opencode/storage).

A session is storage/session/<projectID>/<sessionID>.json; its messages are
storage/message/<sessionID>/*.json and each message's parts storage/part/<messageID>/*.json (older
builds: storage/part/*.json naming their messageID). The transcript path is the session file.
Current builds keep the same records in an SQLite database (opencode.db: tables session, message,
part with the record in a `data` JSON column); one of its sessions is named by the path
'<opencode.db>#<session id>'. Child sessions (parentID / parent_id set, e.g. the task tool's
subagents) are read as the parent's subagents. The database is opened read-only (`mode=ro`) and read one
statement at a time: opencode keeps it in WAL mode, where a reader never blocks its writes.
`opencode export <id>` prints one session as a JSON object ({"info": session, "messages": [{"info":
message, "parts": [...]}]}); saved to a .json file, that is a transcript too (without its child sessions,
which an export does not hold).

opencode 1.18 writes one assistant message per model call: a call that ends in tool calls has
`finish: "tool-calls"` (and `time.completed`), so only `stop`, `length`, an error or an older record with
no `finish` at all ends the turn.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from palace.feeding.transcripts.model import Transcript
from palace.feeding.transcripts.text import (
    IMAGE_PLACEHOLDER,
    Turn,
    brief,
    clean_optional,
    clean_tag,
    counts,
    file_mtime,
    finish_turns,
    guarded,
    parse_timestamp,
    strip_wake_up,
    without_bare_commands,
    worth_keeping,
)

HARNESS = "opencode"
_MAX_RECORD_BYTES = 16 * 1024 * 1024
# An export holds a whole session (tool outputs included) in one JSON document.
_MAX_EXPORT_BYTES = 256 * 1024 * 1024
# Assistant message `finish` values that end the turn (opencode 1.18; "tool-calls" goes on with another call).
_FINAL_FINISHES = {"stop", "length", "content-filter", "error"}
_METADATA_PARTS = {"step-start", "step-finish", "snapshot", "patch", "compaction", "retry", "agent", "subtask"}


def _load(path: Path, limit: int = _MAX_RECORD_BYTES) -> Any:
    """One JSON record file, or None when it is unreadable, too big or not JSON."""
    try:
        if path.stat().st_size > limit:
            return None
        return json.loads(path.read_bytes().decode("utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def is_session_file(path: Path) -> bool:
    """True for storage/session/<project>/<session>.json holding a session record."""
    if path.suffix != ".json" or path.parent.parent.name != "session":
        return False
    record = _load(path)
    return isinstance(record, dict) and isinstance(record.get("id"), str)


def _is_export(record: Any) -> bool:
    info = record.get("info") if isinstance(record, dict) else None
    return (
        isinstance(info, dict)
        and isinstance(info.get("id"), str)
        and isinstance(record.get("messages"), list)
        and any(key in info for key in ("projectID", "directory", "version"))
    )


def is_export_file(path: Path) -> bool:
    """True for a saved `opencode export <id>`: a JSON object with the session's info and its messages."""
    if path.suffix != ".json":
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    # An export opens with the session's "info" (a message's comes first otherwise): other JSON is not read whole.
    return b'"info"' in head and _is_export(_load(path, _MAX_EXPORT_BYTES))


def session_id_of(path: Path) -> str | None:
    """The id a storage session file records (None for anything else)."""
    if path.suffix != ".json":
        return None
    record = _load(path)
    identifier = record.get("id") if isinstance(record, dict) else None
    return identifier if isinstance(identifier, str) else None


def is_child_session(path: Path) -> bool:
    """A session with a parent (a subagent run): reached through its parent, not listed on its own."""
    record = _load(path)
    return isinstance(record, dict) and isinstance(record.get("parentID"), str) and bool(record["parentID"])


def _files(directory: Path) -> list[Path]:
    try:
        return sorted(child for child in directory.iterdir() if child.suffix == ".json" and child.is_file())
    except OSError:
        return []


class _Storage:
    """The storage tree a session file belongs to, with the flat legacy parts indexed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._flat_parts: dict[str, list[dict[str, Any]]] | None = None

    def messages(self, session_id: str, skipped: Counter[str]) -> list[dict[str, Any]]:
        records = []
        for path in _files(self.root / "message" / session_id):
            record = _load(path)
            if isinstance(record, dict):
                records.append(record)
            else:
                skipped["invalid_json"] += 1
        return sorted(records, key=_created)

    def parts(self, message_id: str, skipped: Counter[str]) -> list[dict[str, Any]]:
        nested = self.root / "part" / message_id
        if nested.is_dir():
            parts = []
            for path in _files(nested):
                record = _load(path)
                if isinstance(record, dict):
                    parts.append(record)
                else:
                    skipped["invalid_json"] += 1
            return parts
        return self._flat().get(message_id, [])

    def mtime(self, path: Path) -> datetime:
        return file_mtime(path)

    def children(self, path: Path, session_id: str) -> list[tuple[Path, dict[str, Any]]]:
        """Sessions of the same project whose parentID is this one."""
        found = []
        for candidate in _files(path.parent):
            record = _load(candidate)
            if candidate != path and isinstance(record, dict) and record.get("parentID") == session_id:
                found.append((candidate, record))
        return found

    def _flat(self) -> dict[str, list[dict[str, Any]]]:
        if self._flat_parts is None:
            self._flat_parts = {}
            for path in _files(self.root / "part"):
                record = _load(path)
                if isinstance(record, dict) and isinstance(record.get("messageID"), str):
                    self._flat_parts.setdefault(record["messageID"], []).append(record)
        return self._flat_parts


class _Database:
    """opencode's SQLite database (current builds), read-only; rows become the JSON storage's records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2)

    def __enter__(self) -> _Database:
        return self

    def __exit__(self, *_: object) -> None:
        self.connection.close()

    def rows(self, query: str, *arguments: Any) -> list[tuple[Any, ...]]:
        try:
            return self.connection.execute(query, arguments).fetchall()
        except sqlite3.Error:
            return []

    def session_ids(self) -> list[str]:
        """Main sessions (no parent), oldest first."""
        rows = self.rows("SELECT id FROM session WHERE parent_id IS NULL ORDER BY time_created, id")
        return [row[0] for row in rows if _usable_id(row[0])]

    def session(self, session_id: str) -> dict[str, Any] | None:
        rows = self.rows("SELECT id, parent_id, directory, version FROM session WHERE id = ?", session_id)
        if not rows:
            return None
        identifier, parent, directory, version = rows[0]
        return {"id": identifier, "parentID": parent, "directory": directory, "version": version}

    def mtime(self, path: Path) -> datetime:
        return file_mtime(self.path)

    def children(self, path: Path, session_id: str) -> list[tuple[Path, dict[str, Any]]]:
        found = []
        query = "SELECT id FROM session WHERE parent_id = ? ORDER BY time_created, id"
        for (child_id,) in self.rows(query, session_id):
            record = self.session(child_id) if _usable_id(child_id) else None
            if record is not None:
                found.append((database_session_path(self.path, child_id), record))
        return found

    def messages(self, session_id: str, skipped: Counter[str]) -> list[dict[str, Any]]:
        query = "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id"
        return self._records(self.rows(query, session_id), skipped)

    def parts(self, message_id: str, skipped: Counter[str]) -> list[dict[str, Any]]:
        query = "SELECT id, data FROM part WHERE message_id = ? ORDER BY id"
        return self._records(self.rows(query, message_id), skipped)

    @staticmethod
    def _records(rows: list[tuple[Any, ...]], skipped: Counter[str]) -> list[dict[str, Any]]:
        records = []
        for identifier, data in rows:
            record = None
            if isinstance(data, str | bytes) and len(data) <= _MAX_RECORD_BYTES:
                try:
                    record = json.loads(data)
                except (ValueError, RecursionError):
                    record = None
            if isinstance(record, dict) and isinstance(identifier, str):
                records.append({**record, "id": identifier})
            else:
                skipped["invalid_json"] += 1
        return records


class _Export:
    """One session as `opencode export` prints it: the records are all in the document."""

    def __init__(self, path: Path, record: dict[str, Any]) -> None:
        self.path = path
        self.session: dict[str, Any] = record["info"]
        self.malformed = 0
        self._messages: list[dict[str, Any]] = []
        self._parts: dict[str, list[dict[str, Any]]] = {}
        for entry in record["messages"]:
            message = entry.get("info") if isinstance(entry, dict) else None
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                self.malformed += 1
                continue
            self._messages.append(message)
            parts = entry.get("parts")
            kept = [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []
            self.malformed += (len(parts) if isinstance(parts, list) else 0) - len(kept)
            self._parts.setdefault(message["id"], []).extend(kept)

    def messages(self, session_id: str, skipped: Counter[str]) -> list[dict[str, Any]]:
        if self.malformed:
            skipped["malformed"] += self.malformed
        return sorted(self._messages, key=_created)

    def parts(self, message_id: str, skipped: Counter[str]) -> list[dict[str, Any]]:
        return self._parts.get(message_id, [])

    def mtime(self, path: Path) -> datetime:
        return file_mtime(self.path)

    def children(self, path: Path, session_id: str) -> list[tuple[Path, dict[str, Any]]]:
        return []  # an export holds its own session only


def _usable_id(value: Any) -> bool:
    """A session id that can name a path component (hostile databases hold anything)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 200
        and not any(character in value for character in "/\\\x00")
        and value not in (".", "..")
    )


_Source = _Storage | _Database | _Export


def database_session_path(database: Path, session_id: str) -> Path:
    """The path naming one session of an opencode database: '<database>#<session id>'."""
    return database.with_name(f"{database.name}#{session_id}")


def split_database_path(path: Path) -> tuple[Path, str] | None:
    """(database, session id) for a '<database>#<session id>' path, else None."""
    name, separator, session_id = path.name.partition("#")
    if not separator or not name.endswith(".db") or not session_id:
        return None
    return path.with_name(name), session_id


def is_database(path: Path) -> bool:
    """True for an SQLite file with opencode's session, message and part tables."""
    try:
        with path.open("rb") as handle:
            if handle.read(16) != b"SQLite format 3\x00":
                return False
        with _Database(path) as database:
            tables = {row[0] for row in database.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except (OSError, sqlite3.Error):
        return False
    return {"session", "message", "part"} <= tables


def database_sessions(path: Path) -> list[Path]:
    """The main sessions of an opencode database, as '<database>#<session id>' paths."""
    try:
        with _Database(path) as database:
            return [database_session_path(path, session_id) for session_id in database.session_ids()]
    except sqlite3.Error:
        return []


def _created(record: dict[str, Any]) -> tuple[float, str]:
    time = record.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    number = float(created) if isinstance(created, int | float) and not isinstance(created, bool) else 0.0
    identifier = record.get("id")
    return (number if number == number else 0.0, identifier if isinstance(identifier, str) else "")


def parse(path: Path) -> Transcript:
    """An opencode session (storage session file, '<opencode.db>#<session id>' or saved export) with its children."""
    located = split_database_path(path)
    if located is not None:
        database, session_id = located
        with _Database(database) as source:
            return _parse(path, source, source.session(session_id), depth=0)
    record = _load(path, _MAX_EXPORT_BYTES)
    if _is_export(record):
        export = _Export(path, record)
        return _parse(path, export, export.session, depth=0)
    storage = _Storage(path.parent.parent.parent)
    return _parse(path, storage, record if isinstance(record, dict) else None, depth=0)


def _parse(path: Path, source: _Source, session: dict[str, Any] | None, *, depth: int) -> Transcript:
    skipped: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    if session is None:
        skipped["invalid_json"] += 1
        session = {}
    session_id = clean_tag(session.get("id")) or clean_tag(path.stem.removeprefix("ses_"))
    raw_id = session.get("id") if isinstance(session.get("id"), str) else None
    turns: list[Turn] = []
    if raw_id is not None and "/" not in raw_id and raw_id not in (".", ".."):
        for number, message in enumerate(source.messages(raw_id, skipped)):
            stats["messages"] += 1
            guarded(skipped, path, number, partial(_message, message, source, turns, skipped, stats))
    exchanges = finish_turns(without_bare_commands(turns, skipped), source.mtime(path))
    parent = clean_tag(session.get("parentID"))
    subagents = []
    if depth < 3 and raw_id is not None:
        for child_path, child in source.children(path, raw_id):
            subagents.append(_parse(child_path, source, child, depth=depth + 1))
    version = clean_optional(session.get("version"))
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=session_id,
        parent_session_id=parent,
        agent_id=session_id if parent else None,
        cwd=clean_optional(session.get("directory")),
        version=version if version is not None and len(version) <= 64 else None,
        exchanges=exchanges,
        skipped=counts(skipped),
        subagents=subagents,
        worth_keeping=worth_keeping(exchanges),
        stats=dict(stats),
    )


def _message(
    message: dict[str, Any],
    storage: _Source,
    turns: list[Turn],
    skipped: Counter[str],
    stats: Counter[str],
) -> None:
    message_id = message.get("id")
    if not isinstance(message_id, str) or "/" in message_id or message_id in (".", ".."):
        skipped["malformed"] += 1
        return
    parts = storage.parts(message_id, skipped)
    role = message.get("role")
    if role == "user":
        texts = []
        for part in parts:
            rendered = _user_part(part, skipped)
            if rendered:
                texts.append(rendered)
        if not texts:
            # Older records carry the prompt only in the message summary.
            summary = message.get("summary")
            body = summary.get("body") if isinstance(summary, dict) else None
            if isinstance(body, str) and body.strip():
                texts.append(body)
        text, wake_ups = strip_wake_up("\n\n".join(texts))
        skipped["wake_up"] += wake_ups
        if not text.strip():
            skipped["empty"] += 1
            return
        time = message.get("time")
        started = parse_timestamp(time.get("created")) if isinstance(time, dict) else None
        turns.append(Turn(key=clean_tag(message_id) or message_id, prompt=text.strip(), started_at=started))
        return
    if role != "assistant":
        skipped["unknown_role"] += 1
        return
    if not turns:
        skipped["orphan_assistant"] += 1
        return
    turn = turns[-1]
    stats["assistant_lines"] += 1
    for part in parts:
        _assistant_part(part, turn, message_id, skipped)
    time = message.get("time")
    finish = message.get("finish")
    if (
        message.get("error")
        or finish in _FINAL_FINISHES
        or (finish is None and isinstance(time, dict) and time.get("completed"))  # builds before `finish`
    ):
        turn.finished = True


def _user_part(part: dict[str, Any], skipped: Counter[str]) -> str:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        if part.get("synthetic") is True:
            skipped["synthetic"] += 1
            return ""
        return str(part["text"])
    if kind == "file":
        mime = part.get("mime")
        if isinstance(mime, str) and mime.startswith("image/"):
            skipped["image"] += 1
            return IMAGE_PLACEHOLDER
        name = part.get("filename")
        return f"[file: {name}]" if isinstance(name, str) else "[file]"
    skipped["metadata"] += 1
    return ""


def _assistant_part(part: dict[str, Any], turn: Turn, message_id: str, skipped: Counter[str]) -> None:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        if part.get("synthetic") is True:
            skipped["synthetic"] += 1
            return
        text, wake_ups = strip_wake_up(part["text"])
        skipped["wake_up"] += wake_ups
        turn.add_text(text, message_id)
    elif kind == "reasoning":
        skipped["thinking"] += 1
    elif kind == "tool":
        raw_state = part.get("state")
        state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
        call_id = clean_tag(part.get("callID")) or clean_tag(part.get("id"))
        name = part.get("tool")
        turn.add_call(call_id, name if isinstance(name, str) else "tool", state.get("input"))
        output = state.get("output") if state.get("output") is not None else state.get("error")
        if output is not None:
            text = output if isinstance(output, str) else brief(output, 2000)
            turn.add_result(call_id, strip_wake_up(text)[0], is_error=state.get("status") == "error")
    elif kind == "file":
        name = part.get("filename")
        turn.add_text(f"[file: {name}]" if isinstance(name, str) else "[file]")
    elif kind in _METADATA_PARTS:
        skipped["metadata"] += 1
    else:
        skipped["unknown_part"] += 1
