"""OpenAI Codex CLI rollouts (~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl).

A rollout logs the conversation twice: `response_item` lines (what the model sees, including the
harness scaffolding such as AGENTS.md, <environment_context> and hook context, which Codex sends as
developer messages) and `event_msg` lines (what the UI replays). The user's prompts come from the events,
free of scaffolding: `user_message` (CLIs up to 0.1xx) or, in 0.169, `item_completed` with a UserMessage
item; a rollout with neither (older CLIs) falls back to `response_item` user messages minus scaffolding.
The reply comes from `response_item`: assistant text, tool calls (an MCP tool is called within its
server's namespace and reads `mcp__<server>__<tool>`) and their outputs, without the "Wall time: ...
Output:" header Codex puts before them; an MCP call the events mark failed, or a command that exited
non-zero, is an error.
"""

from __future__ import annotations

import json
import re
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

HARNESS = "codex"
_SCAFFOLDING_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "<permissions",
    "<INSTRUCTIONS>",
    "# AGENTS.md",
    "<turn_aborted>",
    "<user_shell_command>",
)
_RESPONSE_ITEM_TYPES = {
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "web_search_call",
    "local_shell_call",
}
_TURN_END_EVENTS = {"task_complete", "turn_aborted"}
_OUTPUT_HEADER = re.compile(
    r"(Chunk ID: \S+|Wall time: [\d.]+ seconds|Process exited with code (?P<code>-?\d+)|Exit code: (?P<exit>-?\d+)"
    r"|Original token count: \d+|Total output lines: \d+)\s*$"
)


class _Rollout:
    def __init__(self, prompt_source: str) -> None:
        # "user_message" or "item_completed" (prompts from those events), else "response_item".
        self.prompt_source = prompt_source
        self.failed_calls: set[str] = set()
        self.skipped: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.turns: list[Turn] = []
        self.session_id: str | None = None
        self.parent_session_id: str | None = None
        self.cwd: str | None = None
        self.version: str | None = None
        self.seen_meta = False

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def feed(self, number: int, record: dict[str, Any]) -> None:
        kind, payload = _envelope(record)
        if payload is None:
            self.skipped["metadata" if kind is not None else "unknown_type"] += 1
            return
        timestamp = record.get("timestamp")
        if kind == "session_meta":
            self._meta(payload)
        elif kind == "turn_context":
            self.cwd = self.cwd or clean_optional(payload.get("cwd"))
            self.skipped["metadata"] += 1
        elif kind == "event_msg":
            self._event(number, payload, timestamp)
        elif kind == "response_item":
            self._item(number, payload, timestamp)
        elif kind == "compacted":
            self.skipped["compaction"] += 1
        else:
            self.skipped["metadata"] += 1

    def _meta(self, payload: dict[str, Any]) -> None:
        if self.seen_meta:
            # Later session_meta lines describe other threads (resumed, forked, sub-agents).
            self.skipped["metadata"] += 1
            return
        self.seen_meta = True
        self.session_id = clean_tag(payload.get("id")) or clean_tag(payload.get("session_id"))
        self.cwd = clean_optional(payload.get("cwd"))
        version = clean_optional(payload.get("cli_version"))
        self.version = version if version is not None and len(version) <= 64 else None
        source = payload.get("source")
        if isinstance(source, dict) and "subagent" in source:
            self.parent_session_id = clean_tag(payload.get("parent_thread_id"))

    def _event(self, number: int, payload: dict[str, Any], timestamp: Any) -> None:
        kind = payload.get("type")
        if kind == "item_completed":
            self._completed_item(number, payload.get("item"), timestamp)
            return
        if kind == "user_message" and self.prompt_source == "user_message":
            message = payload.get("message")
            text = message if isinstance(message, str) else ""
            images = [
                IMAGE_PLACEHOLDER
                for field in ("images", "local_images")
                if isinstance(payload.get(field), list)
                for _ in payload[field]
            ]
            self.skipped["image"] += len(images)
            self._start(number, "\n\n".join([*images, text]) if images else text, timestamp)
            return
        if kind in _TURN_END_EVENTS and self.current is not None:
            self.current.finished = True
        if kind == "agent_reasoning":
            self.skipped["thinking"] += 1
        elif kind == "error":
            self.skipped["api_error"] += 1
        else:
            self.skipped["event"] += 1

    def _completed_item(self, number: int, item: Any, timestamp: Any) -> None:
        """0.169's item events: a UserMessage is a prompt; a failed McpToolCall marks its output an error."""
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "UserMessage" and self.prompt_source == "item_completed":
            assert isinstance(item, dict)
            text = blocks_text(
                item.get("content"),
                separator="\n\n",
                skipped=self.skipped,
                image_types=("image", "local_image", "localImage"),
            )
            self._start(number, text, timestamp)
            return
        if kind == "McpToolCall" and isinstance(item, dict):
            result = item.get("result")
            failed = item.get("status") == "failed" or (isinstance(result, dict) and result.get("isError") is True)
            call_id = clean_tag(item.get("id"))
            if failed and call_id is not None:
                self.failed_calls.add(call_id)
        self.skipped["event"] += 1

    def _start(self, number: int, raw: str, timestamp: Any) -> None:
        text, wake_ups = strip_wake_up(raw)
        self.skipped["wake_up"] += wake_ups
        prompt = text.strip()
        if not prompt:
            if not wake_ups:
                self.skipped["empty"] += 1
            return
        self.turns.append(Turn(key=f"line-{number}", prompt=prompt, started_at=parse_timestamp(timestamp)))

    def _item(self, number: int, payload: dict[str, Any], timestamp: Any) -> None:
        kind = payload.get("type")
        if kind == "message":
            self._message(number, payload, timestamp)
            return
        if kind == "reasoning":
            self.skipped["thinking"] += 1
            return
        turn = self.current
        if turn is None:
            self.skipped["orphan_item"] += 1
            return
        call_id = clean_tag(payload.get("call_id"))
        name = payload.get("name") if isinstance(payload.get("name"), str) else None
        if kind == "function_call":
            namespace = clean_tag(payload.get("namespace"))
            if namespace and name and not name.startswith(f"{namespace}__"):
                name = f"{namespace}__{name}"  # an MCP tool: mcp__<server>__<tool>, as Claude Code names it
            turn.add_call(call_id, name or "function", payload.get("arguments"))
        elif kind == "custom_tool_call":
            turn.add_call(call_id, name or "tool", payload.get("input"))
        elif kind == "local_shell_call":
            action = payload.get("action")
            turn.add_call(call_id, "shell", action.get("command") if isinstance(action, dict) else None)
        elif kind == "web_search_call":
            action = payload.get("action")
            query = action.get("query") if isinstance(action, dict) else None
            turn.add_call(call_id, "web_search", query if isinstance(query, str) else "")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            text, exit_code = _without_output_header(_output_text(payload.get("output")))
            text, wake_ups = strip_wake_up(text)
            self.skipped["wake_up"] += wake_ups
            failed = call_id in self.failed_calls or (exit_code is not None and exit_code != 0)
            owner_of(self.turns, call_id).add_result(call_id, text, is_error=failed)
        else:
            self.skipped["other_item"] += 1

    def _message(self, number: int, payload: dict[str, Any], timestamp: Any) -> None:
        role = payload.get("role")
        if role == "assistant":
            turn = self.current
            if turn is None:
                self.skipped["orphan_item"] += 1
                return
            self.stats["assistant_lines"] += 1
            cleaned, wake_ups = strip_wake_up(_content_text(payload.get("content"), self.skipped))
            self.skipped["wake_up"] += wake_ups
            turn.add_text(cleaned, clean_tag(payload.get("id")) or f"line-{number}")
        elif role == "user" and self.prompt_source == "response_item":
            text = _content_text(payload.get("content"), self.skipped)
            if text.lstrip().startswith(_SCAFFOLDING_PREFIXES):
                self.skipped["scaffolding"] += 1
            else:
                self._start(number, text, timestamp)
        elif role == "user":
            self.skipped["user_item"] += 1  # the model-side copy of a prompt, or scaffolding
        else:
            # Developer and system messages: instructions, and hook context such as palazzo's wake-up.
            _text, wake_ups = strip_wake_up(_content_text(payload.get("content"), Counter()))
            self.skipped["wake_up" if wake_ups else "scaffolding"] += 1


def _envelope(record: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """(kind, payload) of a rollout line; pre-envelope rollouts wrote bare items and a bare meta line."""
    payload = record.get("payload")
    kind = record.get("type")
    if isinstance(kind, str) and isinstance(payload, dict):
        return kind, payload
    if "record_type" in record:
        return "state", None
    if kind in _RESPONSE_ITEM_TYPES:
        return "response_item", record
    if kind is None and "id" in record and "timestamp" in record:
        return "session_meta", record
    return (kind if isinstance(kind, str) else None), None


def _content_text(content: Any, skipped: Counter[str]) -> str:
    return blocks_text(
        content,
        separator="\n\n",
        skipped=skipped,
        text_types=("input_text", "output_text", "text"),
        image_types=("input_image", "image"),
        image_key="image_url",
    )


def _output_text(output: Any) -> str:
    """A tool output: a string (possibly JSON with an "output" field), a text block, or a list of them."""
    if isinstance(output, str):
        if output.startswith("{") and '"output"' in output[:200]:
            try:
                decoded = json.loads(output)
            except (ValueError, RecursionError):
                return output
            if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
                return str(decoded["output"])
        return output
    if isinstance(output, dict):
        text = output.get("text") or output.get("output") or output.get("content")
        return text if isinstance(text, str) else ""
    if isinstance(output, list):
        return "\n".join(_output_text(item) for item in output if isinstance(item, dict | str))
    return ""


def _without_output_header(text: str) -> tuple[str, int | None]:
    """A tool output without the header Codex writes before it, and the exit code it names (None: none).

    The header: lines such as "Chunk ID: ...", "Wall time: 0.02 seconds", "Process exited with code 0",
    "Original token count: 5", then "Output:". Text without that shape is returned as it is.
    """
    lines = text.split("\n")
    exit_code = None
    for number, line in enumerate(lines[:8]):
        if line.strip() == "Output:":
            return "\n".join(lines[number + 1 :]), exit_code
        header = _OUTPUT_HEADER.match(line)
        if header is None:
            break
        code = header.group("code") or header.group("exit")
        if code is not None:
            exit_code = int(code)
    return text, None


def _prompt_source(records: list[tuple[int, dict[str, Any]]]) -> str:
    """Where this rollout's prompts are: user_message events, item_completed UserMessage events, or items."""
    found = set()
    for _, record in records:
        payload = record.get("payload")
        if record.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        if payload.get("type") == "user_message":
            return "user_message"
        item = payload.get("item")
        if payload.get("type") == "item_completed" and isinstance(item, dict) and item.get("type") == "UserMessage":
            found.add("item_completed")
    return "item_completed" if found else "response_item"


def parse(path: Path) -> Transcript:
    """A Codex rollout: one exchange per user prompt, the reply from the model-side items."""
    skipped: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    records = list(read_records(path, skipped, stats))
    rollout = _Rollout(prompt_source=_prompt_source(records))
    rollout.skipped.update(skipped)
    rollout.stats.update(stats)
    for number, record in records:
        guarded(rollout.skipped, path, number, partial(rollout.feed, number, record))
    turns = without_bare_commands(rollout.turns, rollout.skipped)
    exchanges = finish_turns(turns, file_mtime(path))
    session_id = rollout.session_id or clean_tag(path.stem.removeprefix("rollout-")[20:] or path.stem)
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=session_id,
        parent_session_id=rollout.parent_session_id,
        agent_id=session_id if rollout.parent_session_id else None,
        cwd=rollout.cwd,
        version=rollout.version,
        exchanges=exchanges,
        skipped=counts(rollout.skipped),
        worth_keeping=worth_keeping(exchanges),
        stats=dict(rollout.stats),
    )
