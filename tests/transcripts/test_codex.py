"""The Codex rollout parser: the real (redacted) rollouts, the synthetic fixtures, small files."""

from __future__ import annotations

from pathlib import Path

import pytest

from palace.feeding.transcripts import WAKE_UP_CLOSE, WAKE_UP_OPEN, detect_harness, parse_transcript
from tests.transcripts.helpers import sample, write_jsonl

LOCALPUSH = "codex/madshn-localpush"
LONG = f"{LOCALPUSH}/rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"
MID_TURN = f"{LOCALPUSH}/rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl"
ONE_TURN = f"{LOCALPUSH}/rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl"

# sample -> (exchanges, worth keeping, last exchange complete)
EXPECTED = {
    LONG: (38, True, True),
    MID_TURN: (1, True, False),
    ONE_TURN: (1, True, True),
    "codex/jazzyalex-agent-sessions/small.jsonl": (3, True, False),
    "codex/jazzyalex-agent-sessions/large.jsonl": (1, True, True),
    "codex/jazzyalex-agent-sessions/codex_050_legacy.jsonl": (0, False, None),
    "codex/ryoppippi-ccusage/session-alpha.jsonl": (0, False, None),
}


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_it_parses_every_saved_codex_sample(relative: str) -> None:
    exchanges, keep, last_complete = EXPECTED[relative]
    path = sample(relative)
    assert detect_harness(path) == "codex"
    transcript = parse_transcript(path)
    assert len(transcript.exchanges) == exchanges
    assert transcript.worth_keeping is keep
    if exchanges:
        assert transcript.exchanges[-1].complete is last_complete


def test_it_takes_prompts_from_user_message_events_not_the_scaffolding() -> None:
    transcript = parse_transcript(sample(LONG))
    assert transcript.session_id == "019c8a59-e9dd-71f0-9ae3-4079fe9726a9"
    assert transcript.version == "0.104.0-alpha.1"
    assert transcript.cwd == "/redacted/path/59b923df4d"
    first = transcript.exchanges[0]
    assert first.key == "line-9"
    assert first.prompt == "[REDACTED_MESSAGE len=32 sha=821fd802]"  # not the AGENTS.md / environment items
    assert first.started_at.isoformat() == "2026-02-23T11:54:52.353000+00:00"
    assert first.reply.startswith("[REDACTED_TEXT len=173 sha=86998566]\n\n[tool exec_command: ")
    assert "[REDACTED_OUTPUT len=136 sha=b8890189]" in first.reply  # output paired with its call_id
    assert transcript.skipped["thinking"] == 418
    assert transcript.skipped["compaction"] == 1
    patches = sum(exchange.reply.count("[tool apply_patch: ") for exchange in transcript.exchanges)
    assert patches == 49


def test_it_reads_a_small_rollout_with_tool_outputs_and_injected_context(tmp_path: Path) -> None:
    wake_up = f"{WAKE_UP_OPEN}remember: tabs{WAKE_UP_CLOSE}"
    path = write_jsonl(
        tmp_path / "rollout-2026-03-01T10-00-00-0190aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee.jsonl",
        [
            {
                "timestamp": "2026-03-01T10:00:00Z",
                "type": "session_meta",
                "payload": {"id": "0190aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee", "cwd": "/src/tool", "cli_version": "0.120.0"},
            },
            {
                "timestamp": "2026-03-01T10:00:01Z",
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}],
                },
            },
            {
                "timestamp": "2026-03-01T10:00:02Z",
                "type": "event_msg",
                "payload": {"type": "user_message", "message": f"{wake_up}List files", "images": []},
            },
            {
                "timestamp": "2026-03-01T10:00:03Z",
                "type": "response_item",
                "payload": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            },
            {
                "timestamp": "2026-03-01T10:00:04Z",
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "shell",
                    "call_id": "c1",
                    "arguments": '{"command": ["ls", "-la"]}',
                },
            },
            {
                "timestamp": "2026-03-01T10:00:05Z",
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": '{"output": "a.txt\\nb.txt", "metadata": {"exit_code": 0}}',
                },
            },
            {
                "timestamp": "2026-03-01T10:00:06Z",
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Two files."}],
                },
            },
            {
                "timestamp": "2026-03-01T10:00:06Z",
                "type": "event_msg",
                "payload": {"type": "agent_message", "message": "Two files."},
            },
            {
                "timestamp": "2026-03-01T10:00:07Z",
                "type": "event_msg",
                "payload": {"type": "task_complete", "last_agent_message": "Two files."},
            },
        ],
    )
    transcript = parse_transcript(path)
    (exchange,) = transcript.exchanges
    assert exchange.prompt == "List files"
    assert exchange.reply == "[tool shell: ls -la] -> a.txt b.txt\n\nTwo files."
    assert exchange.complete
    assert transcript.skipped["wake_up"] == 1
    assert transcript.cwd == "/src/tool"


def test_it_falls_back_to_user_items_when_a_rollout_has_no_prompt_events(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "rollout-old.jsonl",
        [
            {"id": "old-thread", "timestamp": "2025-08-01T10:00:00Z", "instructions": None},
            {"record_type": "state"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<user_instructions>x"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the typo"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]},
        ],
    )
    transcript = parse_transcript(path, "codex")
    assert transcript.session_id == "old-thread"
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [("Fix the typo", "Fixed.")]
    assert transcript.skipped["scaffolding"] == 1


def test_it_links_a_sub_agent_thread_to_its_parent(tmp_path: Path) -> None:
    meta = {"id": "child-thread", "parent_thread_id": "parent-thread", "source": {"subagent": {"other": "review"}}}
    path = write_jsonl(
        tmp_path / "rollout-child.jsonl",
        [
            {"timestamp": "2026-03-01T10:00:00Z", "type": "session_meta", "payload": meta},
            {
                "timestamp": "2026-03-01T10:00:01Z",
                "type": "event_msg",
                "payload": {"type": "user_message", "message": "Review the patch"},
            },
        ],
    )
    transcript = parse_transcript(path)
    assert transcript.parent_session_id == "parent-thread"
    assert transcript.agent_id == transcript.session_id == "child-thread"
    assert not transcript.exchanges[0].complete


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "codex"
TWO_TURNS = FIXTURES / "rollout-2026-12-04T23-28-59-01a24363-bd9c-7652-bd24-5412d98dbb5d.jsonl"
IMAGE_AND_ERROR = FIXTURES / "rollout-2026-12-04T23-29-38-01a24364-568c-7243-8f3e-c1d1d4f0e2b0.jsonl"
FACT = "The orrery's lunar gear has 235 teeth (the Metonic cycle)"


def test_it_reads_a_real_0_169_rollout_with_an_mcp_call_in_its_namespace_and_a_shell_call() -> None:
    transcript = parse_transcript(TWO_TURNS)
    assert detect_harness(TWO_TURNS) == "codex"
    assert transcript.session_id == "01a24363-bd9c-7652-bd24-5412d98dbb5d"
    assert transcript.version == "0.169.0" and transcript.cwd == "/tmp/cx/samples/two_turns/work/orrery"
    first, second = transcript.exchanges
    assert first.prompt == "How many teeth has the lunar gear?"  # the UserMessage event, not <environment_context>
    assert first.key == "line-9" and first.started_at.isoformat() == "2026-12-04T23:29:00.502000+00:00"
    assert first.reply.startswith("[tool mcp__palazzo__palace_find: query=teeth of the lunar gear, limit=3] -> {")
    assert FACT in first.reply and "Wall time" not in first.reply
    assert first.reply.endswith("\n\nThe lunar gear has 235 teeth, one per synodic month of the Metonic cycle.")
    assert second.prompt == "Which files does the project hold?"
    assert second.reply == "[tool exec_command: ls] -> gears.txt notes.md\n\nThe project holds notes.md and gears.txt."
    assert first.complete and second.complete and transcript.worth_keeping
    assert transcript.skipped["wake_up"] == 1, "the SessionStart hook's developer message"
    assert all("palazzo-wake-up" not in exchange.prompt + exchange.reply for exchange in transcript.exchanges)


def test_it_reads_a_real_0_169_rollout_with_an_image_prompt_and_a_refused_tool_call() -> None:
    transcript = parse_transcript(IMAGE_AND_ERROR)
    (exchange,) = transcript.exchanges
    assert exchange.prompt == "[image]\n\nRemember what this sketch shows."
    assert exchange.reply.startswith(
        "[tool mcp__palazzo__palace_store: text=The sketch shows the orrery's gear train., category=technical] -> "
        "error: [invalid_input] wing: is required;"
    )
    assert exchange.reply.endswith(
        "\n\npalazzo refused the memory: it needs a wing, a room and a hall. Nothing was stored."
    )
    assert exchange.complete and transcript.skipped["image"] == 1 and transcript.skipped["wake_up"] == 1


def test_it_keeps_a_0_169_turn_open_until_its_tool_call_is_answered_and_marks_failed_commands(tmp_path: Path) -> None:
    lines = TWO_TURNS.read_text().splitlines()
    # Cut the file right after the first turn's function_call: what a Stop hook mid-session could see.
    cut = next(number for number, line in enumerate(lines) if '"type":"function_call"' in line)
    partial = tmp_path / TWO_TURNS.name
    partial.write_text("\n".join(lines[: cut + 1]) + "\n")
    (exchange,) = parse_transcript(partial).exchanges
    assert not exchange.complete and exchange.reply.startswith("[tool mcp__palazzo__palace_find: ")

    failing = write_jsonl(
        tmp_path / "rollout-2026-12-05T10-00-00-0190aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee.jsonl",
        [
            {
                "timestamp": "2026-12-05T10:00:00Z",
                "type": "session_meta",
                "payload": {"id": "t", "cli_version": "0.169.0"},
            },
            {
                "timestamp": "2026-12-05T10:00:01Z",
                "type": "event_msg",
                "payload": {
                    "type": "item_completed",
                    "item": {"type": "UserMessage", "content": [{"type": "text", "text": "Run the tests"}]},
                },
            },
            {
                "timestamp": "2026-12-05T10:00:02Z",
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "exec_command",
                    "call_id": "c1",
                    "arguments": '{"cmd": "pytest"}',
                },
            },
            {
                "timestamp": "2026-12-05T10:00:03Z",
                "type": "response_item",
                "payload": {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": "Chunk ID: 1\nWall time: 1.5 seconds\nProcess exited with code 1\nOutput:\n1 failed",
                },
            },
            {
                "timestamp": "2026-12-05T10:00:04Z",
                "type": "event_msg",
                "payload": {"type": "item_completed", "item": "hostile"},
            },
            {"timestamp": "2026-12-05T10:00:05Z", "type": "event_msg", "payload": {"type": "task_complete"}},
        ],
    )
    transcript = parse_transcript(failing)
    (exchange,) = transcript.exchanges
    assert (exchange.prompt, exchange.reply) == ("Run the tests", "[tool exec_command: pytest] -> error: 1 failed")
    assert exchange.complete and transcript.skipped.get("parser_error", 0) == 0
