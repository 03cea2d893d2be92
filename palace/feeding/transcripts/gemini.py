"""Gemini CLI chats (~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl; up to 0.38, session-*.json).

A chat file is a log that Gemini CLI folds when it loads it: a metadata line (sessionId, projectHash,
startTime), message records keyed by id, where a record whose id was seen before replaces it (a model
message is written again when its tool calls get their results, its tokens, ...), `{"$set": {...}}`
metadata updates, and `{"$rewindTo": id}` (the user rewound: that message and the later ones are gone).
The parser folds the same way: the last version of each id, in the order ids first appeared, except that
a later version keeps the fields it lacks and the first timestamp (resuming, 0.61 rewrites the history
from the model's view: toolCalls and displayContent dropped, every timestamp the resume's). A `$set`
carrying `messages` (a checkpoint: at start, on resume, after a compression or an aborted turn) updates
the messages it names and adds new ones but drops none: 0.61's resume checkpoint leaves out a first prompt
that starts with <hook_context> (a -p prompt behind the wake-up), and a compression leaves out what it
summarised; both were said. The whole-file session-*.json of 0.38 and older is one ConversationRecord.

Prompts are user messages with text (displayContent, what the user typed, before content, where @file
references are expanded); user messages that only carry functionResponse parts are the tool results (also
kept on the model message's toolCalls). The harness's own context is not a prompt: the <session_context>
message (environment, workspace, GEMINI.md), <hook_context> blocks (hook output, where palazzo's wake-up
stands with its angle brackets escaped) and a compression's <state_snapshot> with the model's
acknowledgement. cwd is the project root Gemini CLI wrote in <project dir>/.project_root, taken when its
SHA-256 is the chat's projectHash; older hash-named project dirs have none (cwd is then None). Sub-agent
chats, chats/<session id>/<id>.jsonl, are the session's subagents.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from palace.feeding.transcripts.model import WAKE_UP_CLOSE, WAKE_UP_OPEN, Transcript
from palace.feeding.transcripts.text import (
    IMAGE_PLACEHOLDER,
    Turn,
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

HARNESS = "gemini"
SESSION_PREFIX = "session-"
# Gemini CLI escapes < and > in hook output before putting it in the prompt.
ESCAPED_WAKE_UP_OPEN = WAKE_UP_OPEN.replace("<", "&lt;").replace(">", "&gt;")
ESCAPED_WAKE_UP_CLOSE = WAKE_UP_CLOSE.replace("<", "&lt;").replace(">", "&gt;")
MAX_LEGACY_FILE_BYTES = 64 * 1024 * 1024
MAX_PROJECT_ROOT_BYTES = 4096
_HOOK_CONTEXT = re.compile(r"<hook_context>(.*?)(?:</hook_context>|\Z)", re.DOTALL)
_UNTRUSTED = re.compile(r"\A\s*<untrusted_context>\n?(.*?)\n?</untrusted_context>\s*\Z", re.DOTALL)
_MESSAGE_TYPES = {"user", "gemini", "info", "warning", "error"}


def is_metadata(record: dict[str, Any]) -> bool:
    """The first line of a chat file (or a whole session-*.json of 0.38 and older): it names the session and project."""
    return isinstance(record.get("sessionId"), str) and isinstance(record.get("projectHash"), str)


def is_session_file(path: Path) -> bool:
    """A whole-file session-*.json of Gemini CLI 0.38 and older (its head names the session and the project)."""
    if not path.name.startswith(SESSION_PREFIX) or path.suffix != ".json":
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.lstrip().startswith("{") and '"sessionId"' in head and '"projectHash"' in head


def is_subagent_chat(path: Path) -> bool:
    """A sub-agent's chat (chats/<parent session id>/<id>.jsonl): reached through its parent's session."""
    return path.parent.parent.name == "chats" and not path.name.startswith(SESSION_PREFIX)


def _without_wake_up(text: str, skipped: Counter[str]) -> str:
    if "&lt;" in text:
        text = text.replace(ESCAPED_WAKE_UP_OPEN, WAKE_UP_OPEN).replace(ESCAPED_WAKE_UP_CLOSE, WAKE_UP_CLOSE)
    text, removed = strip_wake_up(text)
    skipped["wake_up"] += removed
    return text


def _without_hook_context(text: str, skipped: Counter[str]) -> str:
    """The prompt without hook output: palazzo's wake-up, or another hook's context."""
    if "<hook_context>" not in text:
        return text

    def drop(match: re.Match[str]) -> str:
        inner = match.group(1)
        is_wake_up = ESCAPED_WAKE_UP_OPEN in inner or WAKE_UP_OPEN in inner
        skipped["wake_up" if is_wake_up else "hook_context"] += 1
        return ""

    return _HOOK_CONTEXT.sub(drop, text)


def _parts(content: Any) -> list[Any]:
    """A PartListUnion as a list: a string, one part, or a list of strings and parts."""
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    return content if isinstance(content, list) else []


def _result_text(result: Any) -> tuple[str, bool]:
    """A tool result (parts with functionResponse, text, or a string) as text, and whether it is an error."""
    texts: list[str] = []
    failed = False
    for part in _parts(result):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"].get("response")
            if isinstance(response, dict) and "error" in response:
                failed = True
                value = response["error"]
            elif isinstance(response, dict) and "output" in response:
                value = response["output"]
            else:
                value = response
            texts.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    text = "\n".join(texts)
    # MCP output comes wrapped for the model; the wrapper says nothing about what the tool did.
    unwrapped = _UNTRUSTED.match(text)
    return (unwrapped.group(1) if unwrapped else text), failed


class _Chat:
    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.messages: dict[str, dict[str, Any]] = {}
        self.session_id: str | None = None
        self.project_hash: str | None = None
        self.kind: str | None = None

    # Folding: the records of the log, into the last version of each message.

    def fold(self, record: dict[str, Any]) -> None:
        if isinstance(record.get("$rewindTo"), str):
            self._rewind(record["$rewindTo"])
        elif isinstance(record.get("$set"), dict):
            update = record["$set"]
            self.stats["metadata_updates"] += 1
            if isinstance(update.get("messages"), list):
                self.stats["checkpoints"] += 1
                for message in update["messages"]:
                    self._message(message)
        elif "id" in record:
            self._message(record)
        elif is_metadata(record):
            self.session_id = self.session_id or clean_tag(record["sessionId"])
            self.project_hash = self.project_hash or record["projectHash"]
            self.kind = self.kind or (record.get("kind") if isinstance(record.get("kind"), str) else None)
            messages = record.get("messages")
            for message in messages if isinstance(messages, list) else []:
                self._message(message)
        else:
            self.skipped["unknown_type"] += 1

    def _message(self, message: Any) -> None:
        if not isinstance(message, dict) or not isinstance(message.get("id"), str) or not message["id"]:
            self.skipped["malformed"] += 1
            return
        earlier = self.messages.get(message["id"])
        if earlier is not None:
            self.stats["updated_records"] += 1
            # A resumed session's checkpoint rewrites messages from the model's history: toolCalls and
            # displayContent dropped, timestamps set to the resume. What the new version lacks is kept.
            message = earlier | message | {"timestamp": earlier.get("timestamp", message.get("timestamp"))}
        self.messages[message["id"]] = message

    def _rewind(self, message_id: str) -> None:
        ids = list(self.messages)
        start = ids.index(message_id) if message_id in ids else 0  # Gemini CLI clears all for an unknown id
        for dropped in ids[start:]:
            del self.messages[dropped]
        self.skipped["rewound"] += len(ids) - start

    # Reading: the folded messages, into turns.

    def turns(self, path: Path) -> list[Turn]:
        turns: list[Turn] = []
        state = {"after_snapshot": False}
        for message_id, message in self.messages.items():
            guarded(self.skipped, path, len(turns), partial(self._read, turns, state, message_id, message))
        return turns

    def _read(self, turns: list[Turn], state: dict[str, bool], message_id: str, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "user":
            self._user(turns, state, message_id, message)
        elif kind == "gemini":
            if state["after_snapshot"]:
                self.skipped["compaction"] += 1  # the model's acknowledgement of the snapshot
            elif not turns:
                self.skipped["orphan_assistant"] += 1
            else:
                self._reply(turns, message_id, message)
        elif kind == "error":
            self.skipped["api_error"] += 1
            if turns:
                turns[-1].finished = True
        elif kind in _MESSAGE_TYPES:
            self.skipped["info"] += 1
        else:
            self.skipped["unknown_type"] += 1

    def _user(self, turns: list[Turn], state: dict[str, bool], message_id: str, message: dict[str, Any]) -> None:
        parts = _parts(message.get("content"))
        responses = [part for part in parts if isinstance(part, dict) and "functionResponse" in part]
        if responses:
            self.stats["tool_result_messages"] += 1
            self._tool_results(turns, responses)
            return
        shown = message.get("displayContent")
        texts: list[str] = []
        for part in _parts(shown) if shown not in (None, "", []) else parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and ("inlineData" in part or "fileData" in part):
                self.skipped["image"] += 1
                texts.append(IMAGE_PLACEHOLDER)
        raw = "".join(texts).strip()
        if raw.startswith("<session_context>"):
            self.skipped["scaffolding"] += 1
            return
        if raw.startswith("<state_snapshot>"):
            self.skipped["compaction"] += 1
            state["after_snapshot"] = True
            return
        injected = self.skipped["wake_up"] + self.skipped["hook_context"]
        prompt = _without_wake_up(_without_hook_context(raw, self.skipped), self.skipped).strip()
        if not prompt:
            if self.skipped["wake_up"] + self.skipped["hook_context"] == injected:
                self.skipped["empty"] += 1  # (a message that was only injected context is counted as that)
            return
        state["after_snapshot"] = False
        turns.append(Turn(key=clean_tag(message_id) or message_id, prompt=prompt, started_at=_when(message)))

    def _tool_results(self, turns: list[Turn], responses: list[dict[str, Any]]) -> None:
        if not turns:
            self.skipped["orphan_tool_result"] += 1
            return
        for part in responses:
            response = part["functionResponse"]
            call_id = clean_tag(response.get("id")) if isinstance(response, dict) else None
            turn = owner_of(turns, call_id)
            step = turn.calls.get(call_id) if call_id is not None else None
            if step is not None and step.result is not None:
                continue  # the model message's toolCalls already carry it
            text, failed = _result_text([part])
            name = response.get("name") if isinstance(response, dict) else None
            turn.add_result(call_id, _without_wake_up(text, self.skipped), is_error=failed, name=_name(name))

    def _reply(self, turns: list[Turn], message_id: str, message: dict[str, Any]) -> None:
        turn = turns[-1]
        self.stats["assistant_messages"] += 1
        thoughts = message.get("thoughts")
        self.skipped["thinking"] += len(thoughts) if isinstance(thoughts, list) else 0
        for part in _parts(message.get("content")):
            if isinstance(part, str):
                turn.add_text(_without_wake_up(part, self.skipped), message_id)
            elif isinstance(part, dict) and part.get("thought") is True:
                self.skipped["thinking"] += 1
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                turn.add_text(_without_wake_up(part["text"], self.skipped), message_id)
            elif isinstance(part, dict) and isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]  # a call as the model's history holds it (resumed sessions)
                turn.add_call(clean_tag(call.get("id")), _name(call.get("name")) or "tool", call.get("args"))
        calls = message.get("toolCalls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict):
                self.skipped["malformed"] += 1
                continue
            call_id = clean_tag(call.get("id"))
            turn.add_call(call_id, _name(call.get("name")) or "tool", call.get("args"))
            status = call.get("status")
            if call.get("result") not in (None, [], "") or status in ("error", "cancelled"):
                text, failed = _result_text(call.get("result"))
                if status == "cancelled" and not text:
                    text = "cancelled"
                turn.add_result(
                    call_id, _without_wake_up(text, self.skipped), is_error=failed or status in ("error", "cancelled")
                )


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _when(message: dict[str, Any]) -> Any:
    return parse_timestamp(message.get("timestamp"))


def _project_root(path: Path, project_hash: str | None) -> str | None:
    """The project root Gemini CLI recorded beside the chats dir, when it is the one the chat was made in."""
    if path.parent.name != "chats":
        return None
    marker = path.parent.parent / ".project_root"
    try:
        with marker.open("rb") as handle:
            raw = handle.read(MAX_PROJECT_ROOT_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_PROJECT_ROOT_BYTES:
        return None
    root = clean_optional(raw.decode("utf-8", errors="replace").splitlines()[0] if raw.strip() else None)
    if root is None:
        return None
    if project_hash is not None and hashlib.sha256(root.encode("utf-8")).hexdigest() != project_hash:
        return None  # the project dir was given to another root since
    return root


def _read_legacy(path: Path, chat: _Chat) -> None:
    """A whole-file session-*.json: one ConversationRecord."""
    with path.open("rb") as handle:
        raw = handle.read(MAX_LEGACY_FILE_BYTES + 1)
    chat.stats["lines"] += 1
    if len(raw) > MAX_LEGACY_FILE_BYTES:
        chat.skipped["oversize_file"] += 1
        return
    try:
        record = json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        chat.skipped["invalid_json"] += 1
        return
    if not isinstance(record, dict):
        chat.skipped["not_an_object"] += 1
        return
    chat.stats["format_version"] = 1
    chat.fold(record)


def parse(path: Path) -> Transcript:
    """A Gemini CLI chat: its records folded (last version of each message), one exchange per prompt."""
    chat = _Chat()
    if path.suffix == ".json":
        _read_legacy(path, chat)
    else:
        chat.stats["format_version"] = 2
        for number, record in read_records(path, chat.skipped, chat.stats):
            guarded(chat.skipped, path, number, partial(chat.fold, record))
    chat.stats["messages"] = len(chat.messages)
    turns = without_bare_commands(chat.turns(path), chat.skipped)
    exchanges = finish_turns(turns, file_mtime(path))
    session_id = chat.session_id or clean_tag(path.stem.rpartition("-")[2] or path.stem)
    subagent = chat.kind == "subagent" or is_subagent_chat(path)
    parent_session_id = clean_tag(path.parent.name) if subagent and is_subagent_chat(path) else None
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=session_id,
        parent_session_id=parent_session_id,
        agent_id=session_id if parent_session_id else None,
        cwd=_project_root(path if not parent_session_id else path.parent, chat.project_hash),
        exchanges=exchanges,
        skipped=counts(chat.skipped),
        worth_keeping=worth_keeping(exchanges),
        subagents=[] if subagent else _subagents(path, session_id),
        stats=dict(chat.stats),
    )


def _subagents(path: Path, session_id: str | None) -> list[Transcript]:
    """The session's sub-agent chats, in chats/<session id>/."""
    if session_id is None or path.parent.name != "chats":
        return []
    folder = path.parent / session_id
    if not folder.is_dir():
        return []
    return [parse(child) for child in sorted(folder.glob("*.jsonl")) if child.is_file()]
