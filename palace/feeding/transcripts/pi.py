"""pi coding agent sessions (~/.pi/agent/sessions/--<cwd>--/<timestamp>_<uuid>.jsonl), layouts v1 to v3.

v1 entries have no id, v2/v3 entries carry an 8-hex id and parentId, and pi rewrites a v1 file as
v3 when it loads it; an exchange is keyed by its prompt's epoch-ms timestamp, which all versions
carry and the migration keeps. File order is followed, like pi's own linear view.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from palace.feeding.transcripts.model import Transcript
from palace.feeding.transcripts.text import (
    IMAGE_PLACEHOLDER,
    Turn,
    blocks_text,
    clean_optional,
    clean_tag,
    counts,
    file_mtime,
    finish_turns,
    guarded,
    owner_of,
    parse_timestamp,
    read_records,
    strip_wake_up,
    without_bare_commands,
    worth_keeping,
)

HARNESS = "pi"
_FINAL_STOP_REASONS = {"stop", "length", "error", "aborted"}
_METADATA_TYPES = {"model_change", "thinking_level_change", "label", "session_info", "custom"}


class _Session:
    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.turns: list[Turn] = []
        self.keys: set[str] = set()
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.format_version = 1

    def feed(self, number: int, entry: dict[str, Any]) -> None:
        kind = entry.get("type")
        if kind == "session":
            self._header(entry)
        elif kind == "message":
            message = entry.get("message")
            if isinstance(message, dict):
                self._message(number, entry, message)
            else:
                self.skipped["malformed"] += 1
        elif kind in ("compaction", "branch_summary"):
            self.skipped["compaction"] += 1
        elif kind == "custom_message":
            _, wake_ups = strip_wake_up(blocks_text(entry.get("content"), separator="\n\n", skipped=self.skipped))
            self.skipped["wake_up" if wake_ups else "custom_message"] += 1
        elif kind in _METADATA_TYPES:
            self.skipped["metadata"] += 1
        else:
            self.skipped["unknown_type"] += 1

    def _header(self, entry: dict[str, Any]) -> None:
        self.session_id = self.session_id or clean_tag(entry.get("id"))
        self.cwd = self.cwd or clean_optional(entry.get("cwd"))
        version = entry.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= 1000:
            self.format_version = version

    def _message(self, number: int, entry: dict[str, Any], message: dict[str, Any]) -> None:
        role = message.get("role")
        turn = self.turns[-1] if self.turns else None
        if role == "user":
            self._prompt(number, entry, message)
        elif role == "assistant":
            if turn is None:
                self.skipped["orphan_assistant"] += 1
                return
            self._reply(turn, entry, message)
        elif role == "toolResult":
            if turn is None:
                self.skipped["orphan_tool_result"] += 1
                return
            text, wake_ups = strip_wake_up(blocks_text(message.get("content"), separator="\n\n", skipped=self.skipped))
            self.skipped["wake_up"] += wake_ups
            name = message.get("toolName")
            call_id = clean_tag(message.get("toolCallId"))
            owner_of(self.turns, call_id).add_result(
                call_id,
                text,
                is_error=message.get("isError") is True,
                name=name if isinstance(name, str) else None,
            )
        elif role == "bashExecution":
            # A command the user ran with !cmd: part of the turn it happened in.
            if turn is None:
                self.skipped["bash_execution"] += 1
                return
            command = message.get("command")
            output = message.get("output")
            call_id = f"bash-execution-{number}"
            turn.add_call(call_id, "user shell", command if isinstance(command, str) else "")
            turn.add_result(call_id, output if isinstance(output, str) else "")
        elif role in ("branchSummary", "compactionSummary"):
            self.skipped["compaction"] += 1
        else:
            self.skipped["custom_message"] += 1

    def _prompt(self, number: int, entry: dict[str, Any], message: dict[str, Any]) -> None:
        text, wake_ups = strip_wake_up(blocks_text(message.get("content"), separator="\n\n", skipped=self.skipped))
        self.skipped["wake_up"] += wake_ups
        prompt = text.strip()
        if not prompt:
            if not wake_ups:
                self.skipped["empty"] += 1
            return
        key = _prompt_key(entry, message, number)
        if key in self.keys:
            key = f"{key}-line-{number}"  # two prompts in the same millisecond
        self.keys.add(key)
        started = parse_timestamp(entry.get("timestamp")) or parse_timestamp(message.get("timestamp"))
        self.turns.append(Turn(key=key, prompt=prompt, started_at=started))

    def _reply(self, turn: Turn, entry: dict[str, Any], message: dict[str, Any]) -> None:
        self.stats["assistant_lines"] += 1
        message_id = clean_tag(entry.get("id")) or clean_tag(message.get("responseId"))
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = content if isinstance(content, list) else []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                text, wake_ups = strip_wake_up(block["text"])
                self.skipped["wake_up"] += wake_ups
                turn.add_text(text, message_id)
            elif kind == "thinking":
                self.skipped["thinking"] += 1
            elif kind == "toolCall":
                name = block.get("name")
                turn.add_call(
                    clean_tag(block.get("id")), name if isinstance(name, str) else "tool", block.get("arguments")
                )
            elif kind == "image":
                self.skipped["image"] += 1
                turn.add_text(IMAGE_PLACEHOLDER)
        stop_reason = message.get("stopReason")
        if stop_reason in ("error", "aborted") and not blocks:
            self.skipped["api_error"] += 1
        if stop_reason in _FINAL_STOP_REASONS:
            turn.finished = True


def _prompt_key(entry: dict[str, Any], message: dict[str, Any], number: int) -> str:
    """The prompt's epoch-ms timestamp: pi rewrites a v1 file as v3 (adding entry ids) when it loads it,
    and the timestamp is what survives that, so a migrated session is not fed twice."""
    stamp = message.get("timestamp")
    if isinstance(stamp, int) and not isinstance(stamp, bool) and 0 <= stamp < 10**15:
        return f"ts-{stamp}"
    envelope = clean_tag(entry.get("timestamp"))
    if envelope is not None:
        return f"at-{envelope}"
    return clean_tag(entry.get("id")) or f"line-{number}"


def parse(path: Path) -> Transcript:
    """A pi session: user messages start exchanges; assistant, tool and !cmd messages form the reply."""
    session = _Session()
    for number, entry in read_records(path, session.skipped, session.stats):
        guarded(session.skipped, path, number, partial(session.feed, number, entry))
    turns = without_bare_commands(session.turns, session.skipped)
    exchanges = finish_turns(turns, file_mtime(path))
    session.stats["format_version"] = session.format_version
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=session.session_id or clean_tag(path.stem.rpartition("_")[2] or path.stem),
        cwd=session.cwd,
        exchanges=exchanges,
        skipped=counts(session.skipped),
        worth_keeping=worth_keeping(exchanges),
        stats=dict(session.stats),
    )
