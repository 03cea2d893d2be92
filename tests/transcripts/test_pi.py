"""The pi session parser: the real v1 sessions, the v3 sample, and small v3 files."""

from __future__ import annotations

from pathlib import Path

import pytest

from palace.feeding.transcripts import WAKE_UP_CLOSE, WAKE_UP_OPEN, detect_harness, parse_transcript
from tests.transcripts.helpers import sample, write_jsonl

# sample -> (exchanges, session layout version, skipped slash commands)
EXPECTED = {
    "pi/badlogic-pi-mono/before-compaction.jsonl": (55, 1, 0),
    "pi/badlogic-pi-mono/large-session.jsonl": (83, 1, 5),
    "pi/jazzyalex-agent-sessions/small.jsonl": (2, 3, 0),
}


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_it_parses_every_saved_pi_sample(relative: str) -> None:
    exchanges, layout, slash_commands = EXPECTED[relative]
    path = sample(relative)
    assert detect_harness(path) == "pi"
    transcript = parse_transcript(path)
    assert len(transcript.exchanges) == exchanges
    assert transcript.stats["format_version"] == layout
    assert transcript.skipped.get("slash_command", 0) == slash_commands
    assert transcript.worth_keeping
    assert transcript.subagents == []
    assert all(exchange.complete for exchange in transcript.exchanges)
    assert [exchange.index for exchange in transcript.exchanges] == list(range(exchanges))


def test_it_reads_a_real_v1_session() -> None:
    transcript = parse_transcript(sample("pi/badlogic-pi-mono/before-compaction.jsonl"))
    assert transcript.session_id == "ffae836b-9420-4060-ac13-7745215f90ff"
    assert transcript.cwd == "/Users/badlogic/workspaces/pi-mono"
    assert transcript.skipped["compaction"] == 2
    assert transcript.skipped["thinking"] == 49
    first = transcript.exchanges[0]
    assert first.key == "ts-1765233665292"  # the prompt's epoch-ms timestamp
    assert first.prompt.startswith("alright, read @packages/coding-agent/src/main.ts")
    assert first.started_at.isoformat() == "2025-12-08T22:41:05.306000+00:00"
    assert first.reply.startswith(
        "[tool read: /Users/badlogic/workspaces/pi-mono/packages/coding-agent/src/main.ts] -> "
    )
    user_shell = [
        exchange for exchange in transcript.exchanges if "[tool user shell: ls] -> AGENTS.md" in exchange.reply
    ]
    assert len(user_shell) == 2  # !ls commands the user ran, with their output


def test_it_keys_v3_exchanges_by_prompt_timestamp() -> None:
    transcript = parse_transcript(sample("pi/jazzyalex-agent-sessions/small.jsonl"))
    assert [exchange.key for exchange in transcript.exchanges] == ["ts-1778547747671", "ts-1778547765782"]
    assert transcript.exchanges[0].prompt == "Read hello.py and summarize what it prints without editing files."
    assert transcript.exchanges[0].reply == "hello.py prints a fixture greeting."


def test_it_condenses_tools_and_drops_thinking_and_injected_context(tmp_path: Path) -> None:
    header = {"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-05-01T10:00:00Z", "cwd": "/w/app"}
    wake_up = f"{WAKE_UP_OPEN}palace says hi{WAKE_UP_CLOSE}"
    path = write_jsonl(
        tmp_path / "--w-app--" / "2026-05-01T10-00-00-000Z_sess-1.jsonl",
        [
            header,
            {"type": "custom_message", "id": "c1", "customType": "palazzo", "content": wake_up, "display": False},
            {
                "type": "message",
                "id": "u1",
                "timestamp": "2026-05-01T10:00:01Z",
                "message": {
                    "role": "user",
                    "content": [{"type": "image", "data": "AAAA" * 1000, "mimeType": "image/png"}, 42],
                },
            },
            {"type": "message", "id": "u2", "message": {"role": "user", "content": f"{wake_up}Fix the build"}},
            {
                "type": "message",
                "id": "a1",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm"},
                        {"type": "toolCall", "id": "t1", "name": "bash", "arguments": {"command": "make"}},
                    ],
                    "stopReason": "toolUse",
                },
            },
            {
                "type": "message",
                "id": "r1",
                "message": {
                    "role": "toolResult",
                    "toolCallId": "t1",
                    "toolName": "bash",
                    "isError": True,
                    "content": [{"type": "text", "text": "make: *** no rule"}],
                },
            },
        ],
    )
    transcript = parse_transcript(path)
    assert transcript.session_id == "sess-1"
    image_only, build = transcript.exchanges
    assert image_only.prompt == "[image]"
    assert build.prompt == "Fix the build"
    assert build.reply == "[tool bash: make] -> error: make: *** no rule"
    assert not build.complete  # the model has not answered the tool result yet
    assert build.started_at == image_only.started_at  # no timestamp of its own: the previous one
    assert transcript.skipped["wake_up"] == 2
    assert transcript.skipped["thinking"] == 1


def test_it_keeps_exchange_keys_when_pi_migrates_a_v1_file_to_v3(tmp_path: Path) -> None:
    # pi rewrites a v1 session as v3 when it loads it (ids and parentIds added): nothing must look new.
    v1 = [
        {"type": "session", "id": "s1", "timestamp": "2025-11-20T10:00:00.000Z", "cwd": "/w/pi"},
        {"type": "message", "timestamp": "2025-11-20T10:00:01.000Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1763632801000}},
        {"type": "message", "timestamp": "2025-11-20T10:00:02.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "stopReason": "stop"}},
        {"type": "message", "timestamp": "2025-11-20T10:00:03.000Z",
         "message": {"role": "user", "content": "again", "timestamp": 1763632803000}},
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "session.jsonl", v1)
    before = parse_transcript(path).exchanges
    v3 = [{**v1[0], "version": 3}] + [
        {**entry, "id": f"{number:08x}", "parentId": f"{number - 1:08x}" if number > 1 else None}
        for number, entry in enumerate(v1[1:], start=1)
    ]
    write_jsonl(path, v3)
    after = parse_transcript(path)
    assert after.stats["format_version"] == 3
    assert after.exchanges == before
    assert [exchange.key for exchange in before] == ["ts-1763632801000", "ts-1763632803000"]
