"""Which harness wrote a file, where each harness keeps its sessions, and parsing by harness."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from palace.feeding.transcripts.model import HARNESSES, Transcript, TranscriptError
from palace.feeding.transcripts.text import bounded_lines

# Parser modules are imported on first use: a hook that only needs the markers stays quick to start.
_PARSER_MODULES = {
    "claude-code": "palace.feeding.transcripts.claude_code",
    "pi": "palace.feeding.transcripts.pi",
    "codex": "palace.feeding.transcripts.codex",
    "opencode": "palace.feeding.transcripts.opencode",
    "gemini": "palace.feeding.transcripts.gemini",
    "jsonl": "palace.feeding.transcripts.generic",
}
_CODEX_TYPES = {"session_meta", "response_item", "event_msg", "turn_context", "compacted", "world_state"}
_CLAUDE_TYPES = {
    "user",
    "assistant",
    "summary",
    "system",
    "attachment",
    "file-history-snapshot",
    "progress",
    "queue-operation",
    "permission-mode",
    "last-prompt",
}
# Line types only Claude Code writes (a file can open with many of them before any message).
_CLAUDE_BOOKKEEPING = {"file-history-snapshot", "queue-operation", "last-prompt", "permission-mode"}
_CODEX_BARE_ITEMS = {"message", "function_call", "function_call_output", "reasoning"}
_SNIFF_LINES = 50
_SNIFF_BYTES = 4 * 1024 * 1024


def default_roots() -> dict[str, Path]:
    """Where each harness keeps its sessions on this machine (environment overrides honoured)."""
    home = Path.home()
    claude = Path(os.environ["CLAUDE_CONFIG_DIR"]) if os.environ.get("CLAUDE_CONFIG_DIR") else home / ".claude"
    if os.environ.get("PI_CODING_AGENT_SESSION_DIR"):
        pi_root = Path(os.environ["PI_CODING_AGENT_SESSION_DIR"])
    elif os.environ.get("PI_CODING_AGENT_DIR"):
        pi_root = Path(os.environ["PI_CODING_AGENT_DIR"]) / "sessions"
    else:
        pi_root = home / ".pi" / "agent" / "sessions"
    codex_home = Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else home / ".codex"
    data_home = Path(os.environ["XDG_DATA_HOME"]) if os.environ.get("XDG_DATA_HOME") else home / ".local" / "share"
    gemini_home = Path(os.environ["GEMINI_CLI_HOME"]) if os.environ.get("GEMINI_CLI_HOME") else home
    return {
        "claude-code": claude / "projects",
        "pi": pi_root,
        "codex": codex_home / "sessions",
        "opencode": data_home / "opencode",
        "gemini": gemini_home / ".gemini" / "tmp",
    }


def parse_transcript(path: Path, harness: str | None = None) -> Transcript:
    """Parse one transcript file; bad lines are skipped and counted, only an unusable file raises."""
    path = Path(path)
    if harness is not None and harness not in HARNESSES:
        raise TranscriptError(f"harness {harness!r} is not one of {', '.join(HARNESSES)}")
    _require_file(path)
    chosen = harness or detect_harness(path)
    parse: Callable[[Path], Transcript] = importlib.import_module(_PARSER_MODULES[chosen]).parse
    try:
        return parse(path)
    except OSError as error:
        raise TranscriptError(f"{path}: cannot read: {error.strerror or error}") from error


def detect_harness(path: Path) -> str:
    """The harness that wrote a transcript, from its content (then its location); TranscriptError if unknown."""
    path = Path(path)
    _require_file(path)
    if _opencode().split_database_path(path) is not None:
        return "opencode"
    if path.suffix == ".json":
        if _opencode().is_session_file(path) or _opencode().is_export_file(path):
            return "opencode"
        if _gemini().is_session_file(path):
            return "gemini"
        raise TranscriptError(f"{path}: not a transcript of a known harness ({', '.join(HARNESSES)})")
    if path.suffix == ".db" and _opencode().is_database(path):
        raise TranscriptError(f"{path}: an opencode database holds many sessions; list them with discover")
    try:
        for record in _head(path):
            found = _classify(record)
            if found is not None:
                return found
    except OSError as error:
        raise TranscriptError(f"{path}: cannot read: {error.strerror or error}") from error
    hinted = _hint_from_location(path)
    if hinted is not None:
        return hinted
    raise TranscriptError(f"{path}: not a transcript of a known harness ({', '.join(HARNESSES)})")


def discover(paths: Sequence[Path], harness: str | None = None) -> Iterator[tuple[str, Path]]:
    """(harness, path) of every main transcript in the given files or directories, in a stable order.

    An opencode database yields one '<opencode.db>#<session id>' path per session; a session opencode
    has migrated into its database is not listed again from the old JSON storage beside it.
    """
    if harness is not None and harness not in HARNESSES:
        raise TranscriptError(f"harness {harness!r} is not one of {', '.join(HARNESSES)}")
    seen: set[Path] = set()
    for given in paths:
        given = Path(given)
        if given.is_dir():
            candidates = list(_walk(given, harness))
        elif given.suffix == ".db" and harness in (None, "opencode") and _opencode().is_database(given):
            candidates = _opencode().database_sessions(given)
        else:
            if given not in seen:
                seen.add(given)
                yield harness or detect_harness(given), given
            continue
        in_databases = {candidate.name.partition("#")[2] for candidate in candidates if "#" in candidate.name}
        for candidate in candidates:
            if candidate in seen or (in_databases and _opencode().session_id_of(candidate) in in_databases):
                continue
            seen.add(candidate)
            try:
                found = harness or detect_harness(candidate)
            except TranscriptError:
                continue
            yield found, candidate


def _walk(root: Path, harness: str | None) -> Iterator[Path]:
    """Transcript files under root: *.jsonl except subagent files, opencode session records and databases."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        base = Path(directory)
        if base.name == "subagents":
            continue
        for name in sorted(files):
            candidate = base / name
            if name.endswith(".jsonl") and harness != "opencode":
                if name.startswith("agent-") and harness in (None, "claude-code") and _is_claude_subagent(candidate):
                    continue
                if harness in (None, "gemini") and _is_gemini_subagent(candidate):
                    continue
                if harness == "gemini" and not (base.name == "chats" and name.startswith("session-")):
                    continue  # ~/.gemini/tmp holds more than chats (logs, tool outputs)
                yield candidate
            elif name.endswith(".json") and harness in (None, "gemini") and base.name == "chats":
                # Gemini CLI's whole-file session (0.38 and older), unless a later CLI resumed it into <name>l
                if not (base / f"{name}l").exists() and _gemini().is_session_file(candidate):
                    yield candidate
            elif harness not in (None, "opencode"):
                continue
            elif name.endswith(".json") and base.parent.name == "session":
                if not _opencode().is_child_session(candidate):
                    yield candidate
            elif name.startswith("opencode") and name.endswith(".db") and _opencode().is_database(candidate):
                yield from _opencode().database_sessions(candidate)


def _is_claude_subagent(path: Path) -> bool:
    """A 2.0.x subagent file (agent-<id>.jsonl with sidechain lines) is reached through its parent."""
    for record in _head(path, lines=5):
        return record.get("isSidechain") is True or "agentId" in record
    return True


def _is_gemini_subagent(path: Path) -> bool:
    """A Gemini CLI sub-agent chat (chats/<session id>/<id>.jsonl) is reached through its parent's session."""
    if path.parent.parent.name != "chats" or path.name.startswith("session-"):
        return False  # not where Gemini CLI keeps them (and its module stays unloaded)
    return any(_gemini().is_metadata(record) for record in _head(path, lines=1))


def _opencode() -> Any:
    return importlib.import_module(_PARSER_MODULES["opencode"])


def _gemini() -> Any:
    return importlib.import_module(_PARSER_MODULES["gemini"])


def _require_file(path: Path) -> None:
    located = _opencode().split_database_path(path) if "#" in path.name else None
    if located is not None:
        path = located[0]
    if not path.exists():
        raise TranscriptError(f"{path}: no such file")
    if path.is_dir():
        raise TranscriptError(f"{path}: is a directory, not a transcript file")
    if not path.is_file():
        raise TranscriptError(f"{path}: not a regular file")


def _head(path: Path, lines: int = _SNIFF_LINES) -> Iterator[dict[str, Any]]:
    """The first JSON-object lines of a file (bounded in lines and bytes)."""
    read = 0
    with path.open("rb") as handle:
        for count, raw in bounded_lines(handle, _SNIFF_BYTES):
            read += len(raw) if raw is not None else _SNIFF_BYTES
            if count >= lines or read > _SNIFF_BYTES or raw is None:
                return
            try:
                record = json.loads(raw.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                yield record


def _classify(record: dict[str, Any]) -> str | None:
    kind = record.get("type")
    if isinstance(record.get("sessionId"), str) and isinstance(record.get("projectHash"), str) and kind is None:
        return "gemini"  # a Gemini CLI chat's first line (Claude Code's lines with a sessionId all have a type)
    if kind == "gemini" and isinstance(record.get("id"), str):
        return "gemini"
    if kind == "session" and ("cwd" in record or "version" in record or "id" in record):
        return "pi"
    if kind == "message" and isinstance(record.get("message"), dict):
        return "pi"
    if kind in _CODEX_TYPES and "payload" in record:
        return "codex"
    if "record_type" in record or (kind in _CODEX_BARE_ITEMS and isinstance(record.get("content"), list)):
        return "codex"  # a rollout from before the envelope (bare items)
    if kind in _CLAUDE_BOOKKEEPING:
        return "claude-code"
    if kind in _CLAUDE_TYPES and any(key in record for key in ("sessionId", "uuid", "message", "leafUuid")):
        return "claude-code"
    text = record.get("text") if "text" in record else record.get("content")
    if record.get("role") in ("user", "assistant") and isinstance(text, str) and "payload" not in record:
        return "jsonl"
    return None


def _hint_from_location(path: Path) -> str | None:
    parts = path.resolve().parts
    if ".claude" in parts or (len(parts) > 2 and parts[-3] == "projects"):
        return "claude-code"
    if ".pi" in parts:
        return "pi"
    if ".codex" in parts or path.name.startswith("rollout-"):
        return "codex"
    if ".gemini" in parts and "chats" in parts:
        return "gemini"
    return None
