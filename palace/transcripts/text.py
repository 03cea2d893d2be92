"""Text helpers shared by the parsers: cleaning, markup stripping, condensing, timestamps, splitting."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from palace.transcripts.model import WAKE_UP_CLOSE, WAKE_UP_OPEN, Exchange

logger = logging.getLogger("palace.transcripts")

# Bounds of a condensed tool call: the key arguments and the excerpt of its result.
TOOL_ARGUMENT_CHARS = 200
TOOL_RESULT_CHARS = 400
# A line longer than this is not a conversation line worth reading (images are ~1 MB at most).
MAX_LINE_BYTES = 32 * 1024 * 1024
MAX_TAG_CHARS = 64
IMAGE_PLACEHOLDER = "[image]"

_SURROGATES = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|\Z)", re.DOTALL)
_IDE_CONTEXT = re.compile(r"<(ide_opened_file|ide_selection|ide_diagnostics)>.*?(?:</\1>|\Z)", re.DOTALL)
_LOCAL_COMMAND = re.compile(
    r"<(local-command-stdout|local-command-stderr|local-command-caveat|bash-stdout|bash-stderr)>.*?(?:</\1>|\Z)",
    re.DOTALL,
)
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_COMMAND_TAGS = re.compile(r"<(command-name|command-message|command-args|command-contents)>.*?(?:</\1>|\Z)", re.DOTALL)
_SLASH_ONLY = re.compile(r"/[\w:.\-]*")
_INTERRUPTED = re.compile(r"\[Request interrupted by user[^\]]*\]")


def clean(value: str) -> str:
    """The string as valid UTF-8 without NUL: lone surrogates become U+FFFD, NUL is dropped."""
    if value.isascii():
        return value.replace("\x00", "") if "\x00" in value else value
    if "\x00" in value:
        value = value.replace("\x00", "")
    return _SURROGATES.sub("\ufffd", value)


def clean_tag(value: Any) -> str | None:
    """A short identifier (session id, agent id) fit to be a palace tag, or None."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = _CONTROL.sub("", clean(str(value))).strip()
    if not text:
        return None
    if len(text) > MAX_TAG_CHARS:
        digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
        text = text[: MAX_TAG_CHARS - 9] + "-" + digest
    return text


def counts(counter: Counter[str]) -> dict[str, int]:
    """A counter as a plain dict without zero entries."""
    return {key: value for key, value in counter.items() if value}


def clean_optional(value: Any) -> str | None:
    """A cleaned string field, or None when it is not a non-empty string."""
    if not isinstance(value, str):
        return None
    text = clean(value).strip()
    return text or None


def strip_wake_up(text: str) -> tuple[str, int]:
    """The text without palazzo's own wake-up blocks, and how many were removed."""
    if WAKE_UP_OPEN not in text and WAKE_UP_CLOSE not in text:
        return text, 0
    removed = 0
    out: list[str] = []
    rest = text
    while True:
        start = rest.find(WAKE_UP_OPEN)
        close = rest.find(WAKE_UP_CLOSE)
        if close != -1 and (start == -1 or close < start):
            # A close with no open: the head was cut off (a preview); drop everything up to it.
            rest = rest[close + len(WAKE_UP_CLOSE) :]
            removed += 1
            continue
        if start == -1:
            out.append(rest)
            break
        out.append(rest[:start])
        removed += 1
        end = rest.find(WAKE_UP_CLOSE, start)
        if end == -1:
            break
        rest = rest[end + len(WAKE_UP_CLOSE) :]
    return "".join(out), removed


def strip_harness_markup(text: str, skipped: Counter[str]) -> str:
    """User text without harness-injected markup (reminders, IDE context, local command output)."""
    if "<" not in text and "[Request interrupted" not in text:
        return text
    if "<system-reminder>" in text:
        text, count = _SYSTEM_REMINDER.subn("", text)
        skipped["system_reminder"] += count
    if "<ide_" in text:
        text, count = _IDE_CONTEXT.subn("", text)
        skipped["ide_context"] += count
    if "<local-command-" in text or "<bash-std" in text:
        text, count = _LOCAL_COMMAND.subn("", text)
        skipped["local_command_output"] += count
    if "[Request interrupted" in text:
        text, count = _INTERRUPTED.subn("", text)
        skipped["interrupted"] += count
    if "<command-name>" in text or "<command-message>" in text:
        text = _slash_command_text(text)
    return text


def _slash_command_text(text: str) -> str:
    """'<command-name>/x</command-name><command-args>a</command-args>' as the user typed it: '/x a'."""
    name_match = _COMMAND_NAME.search(text)
    args_match = _COMMAND_ARGS.search(text)
    remainder = _COMMAND_TAGS.sub("", text).strip()
    name = name_match.group(1).strip() if name_match else ""
    if name and not name.startswith("/"):
        name = "/" + name
    args = args_match.group(1).strip() if args_match else ""
    command = " ".join(part for part in (name, args) if part)
    return "\n\n".join(part for part in (command, remainder) if part)


def is_slash_command_only(prompt: str) -> bool:
    """True for a prompt that is nothing but a slash command name (/model, /clear, /init)."""
    return bool(_SLASH_ONLY.fullmatch(prompt.strip()))


def one_line(text: str, limit: int) -> str:
    """Text on one line, cut to about limit characters with a marker saying how much was left out."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}… [+{len(flat) - limit} chars]"


def excerpt(text: str, limit: int = TOOL_RESULT_CHARS) -> str:
    """The head of a (tool result) text, bounded, whitespace runs collapsed."""
    return one_line(text, limit)


def brief(value: Any, limit: int = TOOL_ARGUMENT_CHARS, depth: int = 0) -> str:
    """A bounded one-line rendering of any JSON value (never recursing deeper than 3 levels)."""
    if isinstance(value, str):
        return one_line(clean(value), limit)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        text = str(value) if abs(value) < 10**30 else f"{str(value)[:12]}…"
        return text
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    if depth >= 3:
        return "{…}" if isinstance(value, dict) else "[…]"
    if isinstance(value, dict):
        parts: list[str] = []
        used = 0
        for key, item in value.items():
            piece = f"{one_line(clean(str(key)), 40)}={brief(item, max(20, limit // 3), depth + 1)}"
            parts.append(piece)
            used += len(piece) + 2
            if used >= limit:
                break
        return one_line(", ".join(parts), limit)
    if isinstance(value, list):
        items = [brief(item, max(20, limit // 3), depth + 1) for item in value[:8]]
        more = f", +{len(value) - 8} more" if len(value) > 8 else ""
        return one_line("[" + ", ".join(items) + more + "]", limit)
    return one_line(clean(str(value)), limit)


# Which argument says what a tool call did, per tool name (lower-cased); the rest are summarised.
_KEY_ARGUMENTS = {
    "bash": ("command",),
    "shell": ("command", "cmd"),
    "exec_command": ("cmd", "command"),
    "run_shell_command": ("command",),
    "read": ("file_path", "path"),
    "write": ("file_path", "path"),
    "edit": ("file_path", "path"),
    "multiedit": ("file_path",),
    "notebookedit": ("notebook_path",),
    "glob": ("pattern", "path"),
    "grep": ("pattern", "path", "glob"),
    "ls": ("path",),
    "task": ("description", "subagent_type"),
    "agent": ("description", "subagent_type"),
    "webfetch": ("url",),
    "websearch": ("query",),
    "web_search": ("query",),
    "apply_patch": ("input",),
}


def tool_arguments(name: str, arguments: Any) -> str:
    """The key arguments of a tool call, bounded, on one line."""
    if isinstance(arguments, str):
        stripped = arguments.strip()
        if stripped.startswith("{"):
            try:
                arguments = json.loads(stripped)
            except (ValueError, RecursionError):
                return brief(arguments)
        else:
            return brief(arguments)
    if not isinstance(arguments, dict):
        return brief(arguments) if arguments is not None else ""
    lowered = name.lower()
    if lowered == "todowrite" and isinstance(arguments.get("todos"), list):
        return f"{len(arguments['todos'])} todos"
    keys = _KEY_ARGUMENTS.get(lowered, ())
    chosen = [arguments[key] for key in keys if key in arguments and arguments[key] not in (None, "", [], {})]
    if chosen:
        return one_line(", ".join(_argument(item) for item in chosen), TOOL_ARGUMENT_CHARS)
    return brief(arguments)


def _argument(value: Any) -> str:
    """One key argument; a command given as a list of words reads as the command line."""
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value[:50]):
        return one_line(clean(" ".join(value[:50])), TOOL_ARGUMENT_CHARS)
    return brief(value)


def parse_timestamp(value: Any) -> datetime | None:
    """An aware UTC datetime from an ISO-8601 string or epoch seconds/milliseconds, or None."""
    try:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            if not math.isfinite(value):
                return None
            seconds = float(value) / 1000 if abs(value) > 10**11 else float(value)
            return datetime.fromtimestamp(seconds, tz=UTC)
        if not isinstance(value, str) or not (10 <= len(value) <= 40) or not value[:4].isascii():
            return None
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return None


def file_mtime(path: Path) -> datetime:
    """The file's modification time as an aware UTC datetime (the fallback timestamp)."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    except (OSError, ValueError, OverflowError):
        return datetime.now(tz=UTC)


def read_lines(path: Path, skipped: Counter[str]) -> Iterator[tuple[int, Any]]:
    """(line number, decoded JSON value) for every JSON line of a file; bad lines are counted, not raised."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle):
            if len(raw) > MAX_LINE_BYTES:
                skipped["oversize_line"] += 1
                continue
            if not raw.strip():
                continue
            try:
                value = json.loads(raw.decode("utf-8", errors="replace"))
            except (ValueError, RecursionError):
                skipped["invalid_json"] += 1
                continue
            yield number, value


def guarded(skipped: Counter[str], path: Path, number: int, action: Callable[[], None]) -> None:
    """Run one line's handling; a parser bug on one hostile line costs that line, not the transcript."""
    try:
        action()
    except Exception:
        skipped["parser_error"] += 1
        logger.warning("transcript %s, line %d: could not be parsed", path, number + 1, exc_info=True)


@dataclass
class _Step:
    """One element of a reply: a text, or a tool call with its (later) result."""

    text: str = ""
    tool: str | None = None
    arguments: str = ""
    result: str | None = None
    is_error: bool = False

    def render(self) -> str:
        if self.tool is None:
            return self.text
        call = f"[tool {self.tool}: {self.arguments}]" if self.arguments else f"[tool {self.tool}]"
        if self.result is None:
            return call
        return f"{call} -> {'error: ' if self.is_error else ''}{self.result}"


@dataclass
class Turn:
    """An exchange being assembled: the prompt, then reply steps in order, tool results paired by id."""

    key: str
    prompt: str
    started_at: datetime | None
    steps: list[_Step] = field(default_factory=list)
    calls: dict[str, _Step] = field(default_factory=dict)
    message_texts: dict[str, set[str]] = field(default_factory=dict)
    answered: bool = False
    finished: bool = False
    pending: int = 0

    def add_text(self, text: str, message_id: str | None = None) -> None:
        """Append reply text; a block repeated on a later line of the same message is kept once."""
        text = text.strip("\n")
        if not text.strip():
            return
        if message_id is not None:
            seen = self.message_texts.setdefault(message_id, set())
            if text in seen:
                return
            seen.add(text)
        self.steps.append(_Step(text=text))
        self.answered = True

    def add_call(self, call_id: str | None, name: str, arguments: Any) -> None:
        """Append a condensed tool call; its result is attached when it arrives."""
        if call_id is not None and call_id in self.calls:
            return
        step = _Step(tool=one_line(clean(name), 80) or "tool", arguments=tool_arguments(name, arguments))
        self.steps.append(step)
        if call_id is not None:
            self.calls[call_id] = step
            self.pending += 1
        self.answered = True

    def add_result(self, call_id: str | None, text: str, *, is_error: bool = False, name: str | None = None) -> None:
        """Attach a bounded excerpt of a tool result to its call (or as its own step when unpaired)."""
        step = self.calls.get(call_id) if call_id is not None else None
        if step is None:
            step = _Step(tool=one_line(clean(name or "tool result"), 80))
            self.steps.append(step)
        elif step.result is None:
            self.pending -= 1
        step.result = excerpt(text)
        step.is_error = is_error

    def reply(self) -> str:
        return "\n\n".join(rendered for step in self.steps if (rendered := step.render()))

    def ends_with_text(self) -> bool:
        return bool(self.steps) and self.steps[-1].tool is None


def finish_turns(turns: list[Turn], fallback: datetime, *, last_complete: bool | None = None) -> list[Exchange]:
    """Exchanges from assembled turns: timestamps filled in, the last one marked complete or not."""
    exchanges: list[Exchange] = []
    previous: datetime | None = None
    later = [turn.started_at for turn in turns if turn.started_at is not None]
    for index, turn in enumerate(turns):
        started = turn.started_at or previous or (later[0] if later else fallback)
        previous = started
        is_last = index == len(turns) - 1
        if not is_last:
            complete = True
        elif last_complete is not None:
            complete = last_complete
        else:
            complete = turn.finished or (turn.answered and turn.pending <= 0 and turn.ends_with_text())
        exchanges.append(
            Exchange(
                key=turn.key,
                index=len(exchanges),
                prompt=clean(turn.prompt),
                reply=clean(turn.reply()),
                started_at=started,
                complete=complete,
            )
        )
    return exchanges


def without_bare_commands(turns: list[Turn], skipped: Counter[str]) -> list[Turn]:
    """Turns minus bare slash commands the model never answered (/model, /clear: local commands)."""
    kept: list[Turn] = []
    for turn in turns:
        if not turn.answered and is_slash_command_only(turn.prompt):
            skipped["slash_command"] += 1
            continue
        kept.append(turn)
    return kept


def worth_keeping(exchanges: list[Exchange]) -> bool:
    """At least one prompt with real text, not only slash commands or placeholders."""
    for exchange in exchanges:
        prompt = exchange.prompt.replace(IMAGE_PLACEHOLDER, "").strip()
        if prompt and not is_slash_command_only(prompt):
            return True
    return False


_PATH_SEPARATORS = re.compile(r"[\\/]+")


def project_name(cwd: str | None) -> str:
    """The room for a project: the last component of its working directory, cleaned, 1-64 chars."""
    if not isinstance(cwd, str):
        return "unknown-project"
    parts = [part for part in _PATH_SEPARATORS.split(clean(cwd)) if part.strip()]
    if not parts:
        return "unknown-project"
    name = " ".join(_CONTROL.sub("", parts[-1]).split())
    if re.fullmatch(r"[A-Za-z]:", name) or name in (".", ".."):
        return "unknown-project"
    name = name[:MAX_TAG_CHARS].strip()
    return name or "unknown-project"


def exchange_texts(exchange: Exchange, *, max_bytes: int = 32 * 1024) -> list[str]:
    """The memory text(s) of one exchange, split at turn then line then space boundaries to fit max_bytes."""
    if max_bytes < 64:
        raise ValueError("max_bytes must be at least 64")
    segments = [("User: ", exchange.prompt.strip() or IMAGE_PLACEHOLDER)]
    reply = exchange.reply.strip()
    if reply:
        segments.append(("Assistant: ", reply))
    whole = "\n\n".join(label + body for label, body in segments)
    if _size(whole) <= max_bytes:
        return [whole]
    parts: list[str] = []
    for label, body in segments:
        # Every piece leaves room for the label, which goes in front of the first one.
        pieces = _split(body, max_bytes - _size(label), ("\n\n", "\n", " "))
        if pieces:
            pieces[0] = label + pieces[0]
            parts.extend(pieces)
    return _pack(parts, max_bytes, "\n\n")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _split(text: str, max_bytes: int, separators: tuple[str, ...]) -> list[str]:
    """Pieces of text, each within max_bytes, cut at the first separator that helps (else at characters)."""
    if _size(text) <= max_bytes:
        return [text] if text.strip() else []
    if not separators:
        return _hard_split(text, max_bytes)
    separator, rest = separators[0], separators[1:]
    if separator not in text:
        return _split(text, max_bytes, rest)
    pieces: list[str] = []
    for piece in text.split(separator):
        pieces.extend(_split(piece, max_bytes, rest))
    return _pack(pieces, max_bytes, separator)


def _pack(pieces: list[str], max_bytes: int, separator: str) -> list[str]:
    """Greedily join consecutive pieces with separator while they fit in max_bytes."""
    packed: list[str] = []
    current = ""
    for piece in pieces:
        if not piece.strip():
            continue
        candidate = f"{current}{separator}{piece}" if current else piece
        if _size(candidate) <= max_bytes:
            current = candidate
        else:
            if current:
                packed.append(current)
            current = piece
    if current.strip():
        packed.append(current)
    return packed


def _hard_split(text: str, max_bytes: int) -> list[str]:
    """Cut text into chunks of at most max_bytes UTF-8 bytes, never inside a character."""
    chunks: list[str] = []
    data = text.encode("utf-8")
    start = 0
    while start < len(data):
        end = min(start + max_bytes, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1
        chunk = data[start:end].decode("utf-8")
        if chunk.strip():
            chunks.append(chunk)
        start = end
    return chunks
