"""Claude Code session transcripts (~/.claude/projects/<project>/<session>.jsonl), CLI 1.0.x to 2.1.x.

The format is internal to Claude Code and changes between versions, so every field is optional and
every line is checked for its shape. Subagents come in three layouts: inline sidechain lines (1.0.x),
sibling agent-<id>.jsonl files (2.0.x) and <session>/subagents/agent-<id>.jsonl (2.1.x).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from palace.feeding.transcripts.model import WAKE_UP_OPEN, Transcript
from palace.feeding.transcripts.text import (
    IMAGE_PLACEHOLDER,
    Turn,
    blocks_text,
    bounded_lines,
    clean_optional,
    clean_tag,
    counts,
    file_mtime,
    finish_turns,
    guarded,
    owner_of,
    parse_timestamp,
    read_records,
    strip_harness_markup,
    strip_wake_up,
    without_bare_commands,
    worth_keeping,
)

HARNESS = "claude-code"

# Line types that are bookkeeping, not conversation.
_METADATA_TYPES = {
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "permission-mode",
    "last-prompt",
    "custom-title",
    "agent-name",
    "ai-title",
    "mode",
    "pr-link",
    "frame-link",
    "worktree-state",
    "agent-setting",
    "bridge-session",
    "atis-latch",
    "relocated",
    "started",
    "result",
}
# The opening of the summary a compaction leaves as the first user message (flagged only on newer CLIs).
_CONTINUATION = "This session is being continued from a previous conversation"
_TERMINAL_STOP_REASONS = {"end_turn", "stop_sequence", "max_tokens", "refusal"}
# System lines Claude Code writes when a turn is over.
_TURN_END_SUBTYPES = {"turn_duration", "stop_hook_summary"}


class _Conversation:
    """Turns assembled from the lines of one conversation (a main session or one subagent)."""

    def __init__(self, skipped: Counter[str], stats: Counter[str]) -> None:
        self.skipped = skipped
        self.stats = stats
        self.turns: list[Turn] = []
        self.keys: set[str] = set()
        self.message_ids: set[str] = set()
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.version: str | None = None
        self.agent_id: str | None = None
        self.subagent_ids: list[str] = []

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def feed(self, number: int, record: dict[str, Any]) -> None:
        self._note_envelope(record)
        kind = record.get("type")
        if kind == "user":
            self._user(number, record)
        elif kind == "assistant":
            self._assistant(record)
        elif kind == "attachment":
            self._attachment(number, record)
        elif kind == "system":
            self._system(record)
        elif kind == "progress":
            self.skipped["progress"] += 1
        elif kind in _METADATA_TYPES:
            self.skipped["metadata"] += 1
        else:
            self.skipped["unknown_type"] += 1

    def _note_envelope(self, record: dict[str, Any]) -> None:
        if self.session_id is None:
            self.session_id = clean_tag(record.get("sessionId"))
        if self.cwd is None:
            self.cwd = clean_optional(record.get("cwd"))
        if self.agent_id is None:
            self.agent_id = clean_tag(record.get("agentId"))
        version = clean_optional(record.get("version"))
        if version is not None and len(version) <= 64:
            self.version = version

    def _user(self, number: int, record: dict[str, Any]) -> None:
        if record.get("isCompactSummary") is True or record.get("isVisibleInTranscriptOnly") is True:
            self.skipped["compact_summary"] += 1
            return
        message = record.get("message")
        if not isinstance(message, dict):
            self.skipped["malformed"] += 1
            return
        if record.get("isMeta") is True and not _has_tool_result(message.get("content")):
            # Harness text (command bodies, caveats, skill text); a tool result flagged meta still pairs.
            self.skipped["meta"] += 1
            return
        result = record.get("toolUseResult")
        if isinstance(result, dict):
            agent_id = clean_tag(result.get("agentId"))
            if agent_id is not None:
                self.subagent_ids.append(agent_id)
        texts, results = _user_content(message.get("content"), self.skipped)
        if results:
            turn = self.current
            if turn is None:
                self.skipped["orphan_tool_result"] += len(results)
                return
            for call_id, text, is_error in results:
                owner_of(self.turns, call_id).add_result(call_id, text, is_error=is_error)
            return
        origin = record.get("origin")
        if isinstance(origin, dict) and origin.get("kind") == "task-notification":
            self.skipped["task_notification"] += 1
            return
        self._start_turn(number, record, "\n\n".join(texts))

    def _start_turn(self, number: int, record: dict[str, Any], raw: str) -> None:
        text, wake_ups = strip_wake_up(raw)
        self.skipped["wake_up"] += wake_ups
        if text.lstrip().startswith("<task-notification>"):
            self.skipped["task_notification"] += 1
            return
        if text.lstrip().startswith(_CONTINUATION):
            self.skipped["compact_summary"] += 1
            return
        before = sum(self.skipped.values())
        prompt = strip_harness_markup(text, self.skipped).strip()
        if not prompt:
            if sum(self.skipped.values()) == before and not wake_ups:
                self.skipped["empty"] += 1
            return
        key = clean_tag(record.get("uuid")) or f"line-{number}"
        current = self.current
        if key in self.keys or (current is not None and not current.answered and current.prompt == prompt):
            # The same line again (a resumed copy), or a queued prompt delivered a second time.
            self.skipped["duplicate"] += 1
            return
        self.keys.add(key)
        self.turns.append(Turn(key=key, prompt=prompt, started_at=parse_timestamp(record.get("timestamp"))))

    def _assistant(self, record: dict[str, Any]) -> None:
        message = record.get("message")
        if not isinstance(message, dict):
            self.skipped["malformed"] += 1
            return
        turn = self.current
        if _is_api_error(record, message):
            self.skipped["api_error"] += 1
            if turn is not None:
                turn.finished = True
            return
        if turn is None:
            self.skipped["orphan_assistant"] += 1
            return
        self.stats["assistant_lines"] += 1
        message_id = clean_tag(message.get("id")) or clean_tag(record.get("uuid"))
        if message_id is not None:
            self.message_ids.add(message_id)
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                text, wake_ups = strip_wake_up(block["text"])
                self.skipped["wake_up"] += wake_ups
                turn.add_text(text, message_id)
            elif kind in ("thinking", "redacted_thinking"):
                self.skipped["thinking"] += 1
            elif kind in ("tool_use", "server_tool_use"):
                name = block.get("name")
                turn.add_call(clean_tag(block.get("id")), name if isinstance(name, str) else "tool", block.get("input"))
            elif kind == "image":
                self.skipped["image"] += 1
                turn.add_text(IMAGE_PLACEHOLDER, None)
        if message.get("stop_reason") in _TERMINAL_STOP_REASONS:
            turn.finished = True

    def _attachment(self, number: int, record: dict[str, Any]) -> None:
        attachment = record.get("attachment")
        if not isinstance(attachment, dict):
            self.skipped["attachment"] += 1
            return
        kind = attachment.get("type")
        queued = kind == "queued_command" and attachment.get("commandMode") in (None, "prompt")
        if queued and isinstance(attachment.get("prompt"), str):
            self._start_turn(number, record, attachment["prompt"])
            return
        if isinstance(kind, str) and kind.startswith("hook_"):
            if _mentions_wake_up(attachment):
                self.skipped["wake_up"] += 1
            else:
                self.skipped["hook_attachment"] += 1
            return
        self.skipped["attachment"] += 1

    def _system(self, record: dict[str, Any]) -> None:
        subtype = record.get("subtype")
        if subtype == "api_error":
            self.skipped["api_error"] += 1
            return
        if isinstance(subtype, str) and subtype in _TURN_END_SUBTYPES and self.current is not None:
            self.current.finished = True
        if _mentions_wake_up(record):
            self.skipped["wake_up"] += 1
            return
        self.skipped["system"] += 1


def _has_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def _user_content(content: Any, skipped: Counter[str]) -> tuple[list[str], list[tuple[str | None, str, bool]]]:
    """The prompt texts and the tool results (id, text, is_error) of a user message's content."""
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    results: list[tuple[str | None, str, bool]] = []
    if not isinstance(content, list):
        return texts, results
    for block in content:
        if isinstance(block, str):
            texts.append(block)
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "image":
            skipped["image"] += 1
            texts.append(IMAGE_PLACEHOLDER)
        elif kind == "document":
            texts.append("[document]")
        elif kind == "tool_result":
            text, wake_ups = strip_wake_up(blocks_text(block.get("content"), separator="\n"))
            skipped["wake_up"] += wake_ups
            results.append((clean_tag(block.get("tool_use_id")), text, block.get("is_error") is True))
    return texts, results


def _is_api_error(record: dict[str, Any], message: dict[str, Any]) -> bool:
    """Synthetic assistant lines Claude Code writes for API failures ("Not logged in", rate limits)."""
    if record.get("isApiErrorMessage") is True:
        return True
    error = record.get("error")
    if isinstance(error, str) and error.strip():
        return True
    return message.get("model") == "<synthetic>"


def _mentions_wake_up(value: dict[str, Any]) -> bool:
    try:
        return WAKE_UP_OPEN in json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return False


def parse(path: Path) -> Transcript:
    """A Claude Code transcript with its subagents (inline sidechains and subagent files)."""
    return _parse_file(path, parent_session_id=None, with_subagents=not path.name.startswith("agent-"))


def _parse_file(path: Path, *, parent_session_id: str | None, with_subagents: bool) -> Transcript:
    skipped: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    main = _Conversation(skipped, stats)
    sidechains: dict[str, _Conversation] = {}
    group_of: dict[str, str] = {}
    agent_file = parent_session_id is not None or path.name.startswith("agent-")
    for number, record in read_records(path, skipped, stats):
        if record.get("isSidechain") is True and not agent_file:
            guarded(
                skipped, path, number, partial(_feed_sidechain, number, record, sidechains, group_of, skipped, stats)
            )
            continue
        guarded(skipped, path, number, partial(main.feed, number, record))
    fallback = file_mtime(path)
    session_id = main.session_id or clean_tag(path.stem)
    subagents: list[Transcript] = []
    if with_subagents:
        for group, conversation in sidechains.items():
            agent_id = conversation.agent_id or group
            subagents.append(_transcript(path, conversation, fallback, session_id, agent_id))
        subagents.extend(_subagent_files(path, session_id, main.subagent_ids))
    exchanges = finish_turns(without_bare_commands(main.turns, skipped), fallback)
    stats["assistant_messages"] = len(main.message_ids)
    if agent_file:
        own_id = main.agent_id or clean_tag(path.stem.removeprefix("agent-"))
        parent = parent_session_id or session_id
        return Transcript(
            harness=HARNESS,
            path=path,
            session_id=_subagent_session(parent, own_id),
            parent_session_id=parent,
            agent_id=own_id,
            cwd=main.cwd,
            version=main.version,
            exchanges=exchanges,
            skipped=counts(skipped),
            worth_keeping=_worth_keeping_subagent(exchanges),
            stats=dict(stats),
        )
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=session_id,
        cwd=main.cwd,
        version=main.version,
        exchanges=exchanges,
        skipped=counts(skipped),
        subagents=subagents,
        worth_keeping=worth_keeping(exchanges),
        stats=dict(stats),
    )


def _feed_sidechain(
    number: int,
    record: dict[str, Any],
    sidechains: dict[str, _Conversation],
    group_of: dict[str, str],
    skipped: Counter[str],
    stats: Counter[str],
) -> None:
    """Route an inline sidechain line (CLI 1.0.x) to the subagent run its parentUuid chain starts from."""
    uuid = clean_tag(record.get("uuid"))
    parent = clean_tag(record.get("parentUuid"))
    group = clean_tag(record.get("agentId")) or (group_of.get(parent) if parent else None)
    if group is None:
        group = (uuid or f"line-{number}").replace("-", "")[:8]
    if uuid is not None:
        group_of[uuid] = group
    conversation = sidechains.get(group)
    if conversation is None:
        conversation = sidechains[group] = _Conversation(Counter(), Counter())
    skipped["sidechain"] += 1
    conversation.feed(number, record)


def _transcript(
    path: Path,
    conversation: _Conversation,
    fallback: datetime,
    parent_session_id: str | None,
    agent_id: str,
) -> Transcript:
    exchanges = finish_turns(without_bare_commands(conversation.turns, conversation.skipped), fallback)
    conversation.stats["assistant_messages"] = len(conversation.message_ids)
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=_subagent_session(parent_session_id, agent_id),
        parent_session_id=parent_session_id,
        agent_id=agent_id,
        cwd=conversation.cwd,
        version=conversation.version,
        exchanges=exchanges,
        skipped=counts(conversation.skipped),
        worth_keeping=_worth_keeping_subagent(exchanges),
        stats=dict(conversation.stats),
    )


def _subagent_session(parent: str | None, agent_id: str | None) -> str | None:
    """A subagent's own session id: '<parent session>:agent-<id>' (at most 64 characters)."""
    if agent_id is None:
        return parent
    return clean_tag(f"{parent}:agent-{agent_id}" if parent else f"agent-{agent_id}")


def _worth_keeping_subagent(exchanges: list[Any]) -> bool:
    """A subagent is worth keeping like a session, except the 'Warmup' runs Claude Code 2.0 starts."""
    if all(exchange.prompt.strip() == "Warmup" for exchange in exchanges):
        return False
    return worth_keeping(exchanges)


def _subagent_files(path: Path, session_id: str | None, referenced: list[str]) -> list[Transcript]:
    """Subagent transcripts in files of their own: <session>/subagents/ (2.1.x) and siblings (2.0.x)."""
    found: dict[Path, None] = {}
    nested = path.parent / path.stem / "subagents"
    try:
        if nested.is_dir():
            for candidate in sorted(nested.glob("agent-*.jsonl")):
                found[candidate] = None
        for agent_id in referenced:
            candidate = path.parent / f"agent-{agent_id}.jsonl"
            if candidate.is_file():
                found[candidate] = None
        if session_id is not None:
            for candidate in _agent_files_by_parent(path.parent).get(session_id, []):
                found.setdefault(candidate, None)
    except OSError:
        pass
    transcripts: list[Transcript] = []
    for candidate in found:
        try:
            transcripts.append(_parse_file(candidate, parent_session_id=session_id, with_subagents=False))
        except OSError:
            continue
    return transcripts


# directory -> (mtime_ns, {parent session: its agent files}, files whose first line was not written yet),
# rebuilt when a file is added or removed; the unsettled files are looked at again every time.
_AGENT_FILES: dict[Path, tuple[int, dict[str, list[Path]], list[Path]]] = {}


def _agent_files_by_parent(directory: Path) -> dict[str, list[Path]]:
    """The 2.0.x agent-<id>.jsonl files of a project directory, grouped by the session they belong to."""
    try:
        stamp = directory.stat().st_mtime_ns
    except OSError:
        return {}
    cached = _AGENT_FILES.get(directory)
    if cached is not None and cached[0] == stamp:
        _, grouped, unsettled = cached
        candidates, unsettled[:] = list(unsettled), []
    else:
        grouped, unsettled = {}, []
        try:
            names = sorted(
                entry.name
                for entry in os.scandir(directory)
                if entry.name.startswith("agent-") and entry.name.endswith(".jsonl")
            )
        except OSError:
            names = []
        candidates = [directory / name for name in names]
        if len(_AGENT_FILES) > 10_000:
            _AGENT_FILES.clear()
        _AGENT_FILES[directory] = (stamp, grouped, unsettled)
    for candidate in candidates:
        parent = _first_session_id(candidate)
        if parent is None:
            unsettled.append(candidate)
        else:
            grouped.setdefault(parent, []).append(candidate)
    return grouped


# agent file -> (size, mtime_ns, its parent session): a project directory of the 2.0.x layout holds
# every session's agent files side by side, and each session would otherwise re-read all of them.
_PARENT_OF_AGENT_FILE: dict[Path, tuple[int, int, str | None]] = {}


def _first_session_id(path: Path) -> str | None:
    """The sessionId of a file's first JSON line (a 2.0.x subagent file names its parent session there)."""
    try:
        status = path.stat()
    except OSError:
        return None
    cached = _PARENT_OF_AGENT_FILE.get(path)
    if cached is not None and cached[:2] == (status.st_size, status.st_mtime_ns):
        return cached[2]
    if len(_PARENT_OF_AGENT_FILE) > 100_000:
        _PARENT_OF_AGENT_FILE.clear()
    found = _read_first_session_id(path)
    _PARENT_OF_AGENT_FILE[path] = (status.st_size, status.st_mtime_ns, found)
    return found


def _read_first_session_id(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            for _, raw in bounded_lines(handle, 1024 * 1024):
                if raw is None:
                    return None
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw.decode("utf-8", errors="replace"))
                except (ValueError, RecursionError):
                    return None
                return clean_tag(record.get("sessionId")) if isinstance(record, dict) else None
    except OSError:
        return None
    return None
