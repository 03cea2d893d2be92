"""opencode sessions in its JSON storage tree (~/.local/share/opencode/storage).

A session is storage/session/<projectID>/<sessionID>.json; its messages are
storage/message/<sessionID>/*.json and each message's parts storage/part/<messageID>/*.json (older
builds: storage/part/*.json naming their messageID). The transcript path is the session file.
Child sessions (parentID set, e.g. the task tool's subagents) are read as the parent's subagents.
The SQLite database of current builds (opencode.db) is not read.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from palace.transcripts.model import Transcript
from palace.transcripts.text import (
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
_METADATA_PARTS = {"step-start", "step-finish", "snapshot", "patch", "compaction", "retry", "agent", "subtask"}


def _load(path: Path) -> Any:
    """One JSON record file, or None when it is unreadable, too big or not JSON."""
    try:
        if path.stat().st_size > _MAX_RECORD_BYTES:
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

    def _flat(self) -> dict[str, list[dict[str, Any]]]:
        if self._flat_parts is None:
            self._flat_parts = {}
            for path in _files(self.root / "part"):
                record = _load(path)
                if isinstance(record, dict) and isinstance(record.get("messageID"), str):
                    self._flat_parts.setdefault(record["messageID"], []).append(record)
        return self._flat_parts


def _created(record: dict[str, Any]) -> tuple[float, str]:
    time = record.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    number = float(created) if isinstance(created, int | float) and not isinstance(created, bool) else 0.0
    identifier = record.get("id")
    return (number if number == number else 0.0, identifier if isinstance(identifier, str) else "")


def parse(path: Path) -> Transcript:
    """An opencode session with its child sessions as subagents."""
    return _parse(path, _Storage(path.parent.parent.parent), depth=0)


def _parse(path: Path, storage: _Storage, *, depth: int) -> Transcript:
    skipped: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    record = _load(path)
    session = record if isinstance(record, dict) else {}
    if not session:
        skipped["invalid_json"] += 1
    session_id = clean_tag(session.get("id")) or clean_tag(path.stem.removeprefix("ses_"))
    raw_id = session.get("id") if isinstance(session.get("id"), str) else None
    turns: list[Turn] = []
    if raw_id is not None and "/" not in raw_id and raw_id not in (".", ".."):
        for number, message in enumerate(storage.messages(raw_id, skipped)):
            stats["messages"] += 1
            guarded(skipped, path, number, partial(_message, message, storage, turns, skipped, stats))
    exchanges = finish_turns(without_bare_commands(turns, skipped), file_mtime(path))
    parent = clean_tag(session.get("parentID"))
    subagents = _children(path, raw_id, storage, depth) if depth < 3 else []
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


def _children(path: Path, session_id: str | None, storage: _Storage, depth: int) -> list[Transcript]:
    if session_id is None:
        return []
    children = []
    for candidate in _files(path.parent):
        record = _load(candidate)
        if candidate != path and isinstance(record, dict) and record.get("parentID") == session_id:
            children.append(_parse(candidate, storage, depth=depth + 1))
    return children


def _message(
    message: dict[str, Any], storage: _Storage, turns: list[Turn], skipped: Counter[str], stats: Counter[str]
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
    if (
        message.get("error")
        or message.get("finish") in ("stop", "length")
        or (isinstance(time, dict) and time.get("completed"))
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
