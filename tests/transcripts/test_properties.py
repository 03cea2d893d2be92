"""Property tests: no input line makes any parser raise, and every string it returns is palace-safe."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.feeding.transcripts import (
    WAKE_UP_CLOSE,
    WAKE_UP_OPEN,
    Transcript,
    discover,
    exchange_texts,
    parse_transcript,
    project_name,
)

LINE_HARNESSES = ("claude-code", "pi", "codex", "jsonl")
DEEP = 100_000

# Strings as hostile as JSON can carry them: lone surrogates, NUL, markers, non-ASCII digits.
hostile_text = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4),
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            WAKE_UP_OPEN,
            WAKE_UP_CLOSE,
            f"{WAKE_UP_CLOSE}x{WAKE_UP_OPEN}",
            "<system-reminder>",
            "<command-name>/x</command-name>",
            "<local-command-stdout>",
            "/model",
            "[Request interrupted by user]",
            "٣٤٥",
            "2026-13-45T99:99:99Z",
            "9999-12-31T23:59:59+14:00",
            "0001-01-01T00:00:00-14:00",
            "",
        ]
    ),
)
numbers = st.one_of(
    st.integers(),
    st.sampled_from([2**64, -(2**63), 10**400, 1e308, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, hostile_text),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(hostile_text, children, max_size=4)),
    max_leaves=12,
)

_TYPES = [
    "user", "assistant", "system", "attachment", "summary", "progress", "session", "message",
    "session_meta", "response_item", "event_msg", "turn_context", "compacted", "custom_message", "compaction",
    "text", "thinking", "tool_use", "tool_result", "image", "toolCall", "function_call", "function_call_output",
    "custom_tool_call", "user_message", "agent_message", "task_complete", "reasoning", "queued_command",
    "hook_success", "input_text", "output_text", "web_search_call", "bashExecution", "toolResult",
]  # fmt: skip
_ROLES = ["user", "assistant", "toolResult", "bashExecution", "developer", "system", None]


def shaped(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts shaped like harness records (known keys, known type names), values anything."""
    # deferred keeps the repr short (hypothesis warns about a 44 kB one otherwise)
    value = st.deferred(lambda: st.one_of(children, st.sampled_from(_TYPES), st.sampled_from(_ROLES)))
    return st.fixed_dictionaries(
        {"type": st.sampled_from(_TYPES)},
        optional={
            "role": st.sampled_from(_ROLES),
            "message": value,
            "content": value,
            "payload": value,
            "attachment": value,
            "text": value,
            "uuid": value,
            "parentUuid": value,
            "id": value,
            "call_id": value,
            "tool_use_id": value,
            "sessionId": value,
            "timestamp": value,
            "cwd": value,
            "version": value,
            "isSidechain": st.booleans(),
            "isMeta": st.booleans(),
            "agentId": value,
            "name": value,
            "input": value,
            "arguments": value,
            "output": value,
            "stop_reason": value,
            "stopReason": value,
            "toolUseResult": value,
            "subtype": value,
            "source": value,
        },
    )


records = st.recursive(
    st.one_of(json_values, shaped(json_values)),
    lambda children: st.one_of(
        shaped(children), st.lists(children, max_size=3), st.dictionaries(hostile_text, children, max_size=3)
    ),
    max_leaves=20,
)
_DEEP_LINES = (
    lambda: "[" * DEEP + "]" * DEEP,
    lambda: '{"a":' * DEEP + "1" + "}" * DEEP,
    lambda: '{"type":"user","message":{"role":"user","content":' + "[" * DEEP + "]" * DEEP + "}}",
    lambda: (
        '{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":'
        + '{"a":' * 900
        + "1"
        + "}" * 900
        + "}]}}"
    ),
    lambda: "[" * DEEP,
)
deep_lines = st.integers(min_value=0, max_value=len(_DEEP_LINES) - 1).map(lambda index: _DEEP_LINES[index]())
raw_lines = st.one_of(
    hostile_text.map(lambda text: text.replace("\n", " ").replace("\r", " ")),
    st.binary(max_size=64),
    deep_lines,
)
line = st.one_of(
    records.map(lambda value: json.dumps(value, ensure_ascii=False)),
    records.map(json.dumps),
    raw_lines,
)


def write_lines(path: Path, lines: list[str | bytes]) -> None:
    with path.open("wb") as handle:
        for item in lines:
            data = item if isinstance(item, bytes) else item.encode("utf-8", errors="surrogatepass")
            handle.write(data.replace(b"\n", b" ") + b"\n")


def assert_palace_safe(text: str | None) -> None:
    if text is None:
        return
    assert "\x00" not in text
    text.encode("utf-8")  # raises on a lone surrogate


def assert_transcript_safe(transcript: Transcript) -> None:
    assert "parser_error" not in transcript.skipped, transcript.skipped
    for value in (transcript.session_id, transcript.parent_session_id, transcript.agent_id):
        assert_palace_safe(value)
        assert value is None or 1 <= len(value) <= 64
    assert_palace_safe(transcript.cwd)
    assert_palace_safe(transcript.version)
    room = project_name(transcript.cwd)
    assert 1 <= len(room) <= 64
    assert_palace_safe(room)
    for index, exchange in enumerate(transcript.exchanges):
        assert exchange.index == index
        assert exchange.started_at.utcoffset() is not None
        for text in (exchange.key, exchange.prompt, exchange.reply):
            assert_palace_safe(text)
        assert exchange.prompt.strip()
        for part in exchange_texts(exchange):
            assert_palace_safe(part)
            assert part.strip()
            assert len(part.encode("utf-8")) <= 32 * 1024
    for subagent in transcript.subagents:
        assert_transcript_safe(subagent)
    assert transcript.worth_keeping in (True, False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lines=st.lists(line, max_size=12), harness=st.sampled_from(LINE_HARNESSES))
def test_it_never_raises_on_any_line(lines: list[str | bytes], harness: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "session.jsonl"
        write_lines(path, lines)
        assert_transcript_safe(parse_transcript(path, harness))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    session=records,
    messages=st.lists(st.tuples(records, st.lists(st.one_of(records, raw_lines), max_size=3)), max_size=4),
)
def test_it_never_raises_on_any_opencode_record(session: Any, messages: list[tuple[Any, list[Any]]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        storage = Path(directory) / "storage"
        session_file = storage / "session" / "proj" / "ses_1.json"
        session_file.parent.mkdir(parents=True)
        if isinstance(session, dict):
            session = {**session, "id": "ses_1"}
        session_file.write_text(json.dumps(session), encoding="utf-8", errors="surrogatepass")
        for number, (message, parts) in enumerate(messages):
            message_id = f"msg_{number}"
            if isinstance(message, dict):
                message = {**message, "id": message_id, "role": message.get("role") or "user"}
            target = storage / "message" / "ses_1" / f"{message_id}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(message), encoding="utf-8", errors="surrogatepass")
            for index, part in enumerate(parts):
                part_file = storage / "part" / message_id / f"{index:03}.json"
                part_file.parent.mkdir(parents=True, exist_ok=True)
                data = part if isinstance(part, bytes | str) else json.dumps(part)
                part_file.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        assert_transcript_safe(parse_transcript(session_file, "opencode"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=hostile_text, reply=hostile_text, harness=st.sampled_from(LINE_HARNESSES))
def test_it_drops_every_wake_up_block_whatever_surrounds_it(prompt: str, reply: str, harness: str) -> None:
    secret = "WAKE-UP-SECRET"
    block = f"{WAKE_UP_OPEN}{secret}{WAKE_UP_CLOSE}"
    user_text = f"{prompt}{block}{prompt} question"
    reply_text = f"{reply}{block}"
    shapes = {
        "claude-code": [
            {"type": "user", "uuid": "u1", "message": {"role": "user", "content": user_text}},
            {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": reply_text}]}},
        ],
        "pi": [
            {"type": "message", "id": "u1", "message": {"role": "user", "content": user_text}},
            {"type": "message", "id": "a1",
             "message": {"role": "assistant", "content": [{"type": "text", "text": reply_text}]}},
        ],
        "codex": [
            {"type": "event_msg", "payload": {"type": "user_message", "message": user_text}},
            {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                  "content": [{"type": "output_text", "text": reply_text}]}},
        ],
        "jsonl": [{"role": "user", "text": user_text}, {"role": "assistant", "text": reply_text}],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "session.jsonl"
        write_lines(path, [json.dumps(record) for record in shapes[harness]])
        transcript = parse_transcript(path, harness)
        assert_transcript_safe(transcript)
        for exchange in transcript.exchanges:
            assert secret not in exchange.prompt + exchange.reply


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(st.tuples(line, st.lists(line, max_size=3)), max_size=4),
    session_ids=st.lists(hostile_text, max_size=3),
)
def test_it_never_raises_on_any_opencode_database_row(
    messages: list[tuple[str | bytes, list[str | bytes]]], session_ids: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        database = Path(directory) / "opencode.db"
        connection = sqlite3.connect(database)
        connection.executescript(
            "CREATE TABLE session (id, parent_id, directory, version, time_created);"
            "CREATE TABLE message (id, session_id, time_created, data);"
            "CREATE TABLE part (id, message_id, data);"
        )
        for session_id in ["ses_1", *session_ids]:
            encoded = session_id.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            connection.execute("INSERT INTO session VALUES (?, NULL, '/w/x', '1', 0)", (encoded,))
        for number, (message, parts) in enumerate(messages):
            connection.execute("INSERT INTO message VALUES (?, 'ses_1', ?, ?)", (f"m{number}", number, _blob(message)))
            for index, part in enumerate(parts):
                connection.execute("INSERT INTO part VALUES (?, ?, ?)", (f"p{index}", f"m{number}", _blob(part)))
        connection.commit()
        connection.close()
        for harness, path in discover([Path(directory)]):
            assert harness == "opencode"
            assert_transcript_safe(parse_transcript(path))


def _blob(value: str | bytes) -> str | bytes:
    """A row value as SQLite would hold it: text when it is valid UTF-8, else the raw bytes."""
    data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data
