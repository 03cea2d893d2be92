"""The Claude Code transcript parser, on every saved sample and on small files written per FORMATS.md."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from palace.feeding.transcripts import WAKE_UP_CLOSE, WAKE_UP_OPEN, detect_harness, discover, parse_transcript
from tests.transcripts.helpers import SAMPLES, sample, write_jsonl

VIEWER = "claude-code/d-kimuson-claude-code-viewer/sample-project"
ORCHESTRATOR_10 = f"{VIEWER}/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
ORCHESTRATOR_108 = f"{VIEWER}/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
INIT_ONLY = f"{VIEWER}/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
SESSION = "11111111-2222-3333-4444-555555555555"
WAKE_UP_CONTEXT = f"{WAKE_UP_OPEN}palace status: 3 memories in shop\n- prices are in cents{WAKE_UP_CLOSE}"

# sample -> (exchanges, worth keeping, subagents, exchanges per subagent)
EXPECTED = {
    ORCHESTRATOR_10: (2, True, 5, [1, 1, 1, 1, 1]),
    ORCHESTRATOR_108: (1, True, 2, [1, 1]),
    INIT_ONLY: (1, False, 0, []),
    "claude-code/simonw-claude-code-transcripts/sample_session.jsonl": (2, True, 0, []),
    "claude-code/bporterfield-watch-claude-think/compacted-session.jsonl": (1, True, 0, []),
    "claude-code/jazzyalex-agent-sessions/schema_drift.jsonl": (1, True, 0, []),
    "claude-code/jazzyalex-agent-sessions/small.jsonl": (2, True, 1, [1]),
}

_uuids = itertools.count(1)


def line(kind: str, **fields: Any) -> dict[str, Any]:
    """A Claude Code 2.1-style envelope with a fresh uuid."""
    record: dict[str, Any] = {
        "type": kind,
        "uuid": f"00000000-0000-0000-0000-{next(_uuids):012d}",
        "parentUuid": None,
        "sessionId": SESSION,
        "timestamp": "2026-03-01T10:00:00.000Z",
        "cwd": "/home/dev/projects/palazzo",
        "version": "2.1.114",
        "isSidechain": False,
        "userType": "external",
    }
    record.update(fields)
    return record


def user(content: Any, **fields: Any) -> dict[str, Any]:
    return line("user", message={"role": "user", "content": content}, **fields)


def assistant(message_id: str, *blocks: dict[str, Any], stop_reason: str | None = None, **fields: Any) -> dict:
    message = {"id": message_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5"}
    message.update({"content": list(blocks), "stop_reason": stop_reason})
    return line("assistant", message=message, **fields)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": arguments}


def tool_result(tool_id: str, content: Any, **fields: Any) -> dict[str, Any]:
    return user([{"type": "tool_result", "tool_use_id": tool_id, "content": content}], **fields)


def session_file(tmp_path: Path, records: list[Any], name: str = SESSION) -> Path:
    return write_jsonl(tmp_path / "projects" / "-home-dev-projects-palazzo" / f"{name}.jsonl", records)


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_it_parses_every_saved_claude_code_sample(relative: str) -> None:
    exchanges, keep, subagents, per_subagent = EXPECTED[relative]
    transcript = parse_transcript(sample(relative))
    assert transcript.harness == "claude-code"
    assert len(transcript.exchanges) == exchanges
    assert transcript.worth_keeping is keep
    assert [len(sub.exchanges) for sub in transcript.subagents] == per_subagent
    assert len(transcript.subagents) == subagents
    assert "parser_error" not in transcript.skipped
    assert [exchange.index for exchange in transcript.exchanges] == list(range(exchanges))
    for exchange in transcript.exchanges:
        assert exchange.prompt.strip()
        assert exchange.started_at.utcoffset() is not None


def test_it_sees_every_claude_code_sample_as_claude_code() -> None:
    files = sorted((SAMPLES / "claude-code").rglob("*.jsonl"))
    assert len(files) == len(EXPECTED)
    assert {detect_harness(path) for path in files} == {"claude-code"}
    assert sorted(path for _, path in discover([SAMPLES / "claude-code"])) == files


def test_it_reads_the_session_envelope_of_a_real_1_0_transcript() -> None:
    transcript = parse_transcript(sample(ORCHESTRATOR_10))
    assert transcript.session_id == "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    assert transcript.cwd == "/path/to/Demo"
    assert transcript.version == "1.0.98"
    first, second = transcript.exchanges
    assert first.key.startswith("62e0bdc0-")
    assert first.prompt == "/orchestrator create TODO app by Next.js"
    assert first.started_at.isoformat() == "2025-09-03T00:52:31.217000+00:00"
    assert second.prompt == "Thanks! Please update CLAUDE.md for current changes"
    assert second.reply.endswith(transcript.exchanges[1].reply.split("\n\n")[-1])
    assert (
        "[tool Write: /path/to/Demo/CLAUDE.md] -> File created successfully at: /path/to/Demo/CLAUDE.md" in second.reply
    )
    assert first.complete and second.complete


def test_it_links_inline_sidechains_of_1_0_as_subagents() -> None:
    transcript = parse_transcript(sample(ORCHESTRATOR_10))
    assert transcript.skipped["sidechain"] == 405
    prompts = [sub.exchanges[0].prompt for sub in transcript.subagents]
    assert prompts[0].startswith("Create React components for the TODO app")
    assert prompts[1].startswith("Create a new Next.js project structure for a TODO app")
    for sub in transcript.subagents:
        assert sub.parent_session_id == transcript.session_id
        assert sub.agent_id and sub.session_id == f"{transcript.session_id}:agent-{sub.agent_id}"
        assert len(sub.session_id) <= 64
        assert sub.exchanges[0].reply
        assert sub.path == transcript.path
    main_text = " ".join(exchange.prompt + exchange.reply for exchange in transcript.exchanges)
    assert "Create a new Next.js project structure" not in main_text.split("[tool Task:")[0]


def test_it_merges_the_lines_of_one_assistant_response() -> None:
    transcript = parse_transcript(sample(ORCHESTRATOR_108))
    assert transcript.stats["assistant_lines"] == 16
    assert transcript.stats["assistant_messages"] == 10
    reply = transcript.exchanges[0].reply
    # msg_01QdKEzwwjhMrbE13LjZjnMA is written as two lines: a text block, then a TodoWrite call.
    opening = "I'll help you update the CLAUDE.md file to the latest state."
    assert reply.startswith(opening)
    assert reply.count(opening) == 1
    assert reply.split("\n\n")[1].startswith("[tool TodoWrite: 4 todos] -> Todos have been modified successfully.")
    # the three tool calls of msg_014fJ8dncc8t7mNss9o1poH3 each got their own result, paired by id
    assert "[tool Glob: **/*.md, ~/.claude/commands] -> No files found" in reply
    assert "[tool Glob: **/*.md, ./.claude/commands] -> No files found" in reply


def test_it_keeps_a_block_repeated_on_a_streamed_line_once(tmp_path: Path) -> None:
    prompt = user("Explain the journal")
    path = session_file(
        tmp_path,
        [
            prompt,
            assistant("msg_1", text("The journal is written first.")),
            assistant("msg_1", text("The journal is written first.")),
            assistant("msg_1", tool_use("toolu_1", "Read", {"file_path": "palace/journal.py"})),
            tool_result("toolu_1", "class Journal: ..."),
            assistant("msg_2", text("So every mutation is replayable."), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    (exchange,) = transcript.exchanges
    assert exchange.key == prompt["uuid"]
    assert exchange.reply == (
        "The journal is written first.\n\n[tool Read: palace/journal.py] -> class Journal: ...\n\n"
        "So every mutation is replayable."
    )
    assert transcript.stats["assistant_messages"] == 2
    assert exchange.complete


def test_it_skips_meta_lines_and_slash_command_noise(tmp_path: Path) -> None:
    init = parse_transcript(sample(INIT_ONLY))
    assert init.skipped["meta"] == 1
    assert init.exchanges[0].prompt == "/init"
    assert "Please analyze this codebase" not in init.exchanges[0].prompt
    assert not init.worth_keeping  # only a slash command
    caveat = "Caveat: The messages below were generated by the user while running local commands."
    path = session_file(
        tmp_path,
        [
            user(caveat, isMeta=True),
            user(
                "<command-name>/model</command-name>\n<command-message>model</command-message>\n<command-args></command-args>"
            ),
            user("<local-command-stdout>Set model to opus</local-command-stdout>"),
            user("Rename the journal module"),
            assistant("msg_1", text("Done."), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    assert [exchange.prompt for exchange in transcript.exchanges] == ["Rename the journal module"]
    assert transcript.skipped["meta"] == 1
    assert transcript.skipped["slash_command"] == 1
    assert transcript.skipped["local_command_output"] == 1
    assert transcript.worth_keeping


def test_it_keeps_slash_command_arguments_as_the_prompt() -> None:
    transcript = parse_transcript(sample(ORCHESTRATOR_108))
    assert transcript.exchanges[0].prompt == "/orchestrator @CLAUDE.md を最新の状態にアップデートしてください"
    assert transcript.skipped["meta"] == 1  # the expanded command body


def test_it_drops_thinking_and_replaces_images(tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K" * 20000}}
    path = session_file(
        tmp_path,
        [
            user([image, text("What is wrong in this screenshot?")]),
            assistant("msg_1", {"type": "thinking", "thinking": "secret reasoning", "signature": "c2ln"}),
            assistant("msg_1", text("The legend overlaps the chart."), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    (exchange,) = transcript.exchanges
    assert exchange.prompt == "[image]\n\nWhat is wrong in this screenshot?"
    assert exchange.reply == "The legend overlaps the chart."
    assert "secret reasoning" not in exchange.reply
    assert "iVBORw0K" not in exchange.prompt + exchange.reply
    assert transcript.skipped["thinking"] == 1
    assert transcript.skipped["image"] == 1


def test_it_condenses_tool_calls_and_bounds_their_results(tmp_path: Path) -> None:
    path = session_file(
        tmp_path,
        [
            user("Run the tests"),
            assistant("msg_1", tool_use("toolu_1", "Bash", {"command": "pytest -q", "description": "Run tests"})),
            tool_result("toolu_1", "F" * 100_000, toolUseResult={"stdout": "F" * 100_000}),
            assistant("msg_2", tool_use("toolu_2", "Edit", {"file_path": "a.py", "old_string": "x" * 5000})),
            user([{"type": "tool_result", "tool_use_id": "toolu_2", "content": "no match", "is_error": True}]),
            assistant("msg_3", text("One test fails."), stop_reason="end_turn"),
        ],
    )
    reply = parse_transcript(path).exchanges[0].reply
    assert reply.startswith("[tool Bash: pytest -q] -> FFFF")
    assert "[tool Edit: a.py] -> error: no match" in reply
    assert len(reply) < 1000
    assert reply.endswith("One test fails.")


def test_it_drops_the_wake_up_context_palazzo_injected(tmp_path: Path) -> None:
    wake_up = f"{WAKE_UP_OPEN}palace status: 12 memories\n- use uv, not pip{WAKE_UP_CLOSE}"
    hook_output = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": wake_up}})
    path = session_file(
        tmp_path,
        [
            line(
                "attachment",
                attachment={
                    "type": "hook_success",
                    "hookName": "SessionStart:startup",
                    "hookEvent": "SessionStart",
                    "stdout": hook_output,
                    "exitCode": 0,
                },
            ),
            line(
                "attachment",
                attachment={"type": "hook_additional_context", "content": [wake_up], "hookEvent": "SessionStart"},
            ),
            user(f"<system-reminder>SessionStart hook additional context: {wake_up}</system-reminder>", isMeta=True),
            user([text(f"<system-reminder>{wake_up}</system-reminder>"), text("Which package manager do we use?")]),
            assistant("msg_1", text("uv."), stop_reason="end_turn"),
            user(f"Before {wake_up} after"),
            assistant("msg_2", text(f"Quoting it: {wake_up} done"), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    prompts = [exchange.prompt for exchange in transcript.exchanges]
    assert prompts == ["Which package manager do we use?", "Before  after"]
    assert transcript.exchanges[1].reply == "Quoting it:  done"
    everything = " ".join(exchange.prompt + exchange.reply for exchange in transcript.exchanges)
    assert "palace status" not in everything and "use uv, not pip" not in everything
    assert transcript.skipped["wake_up"] >= 4


def test_it_skips_the_synthetic_not_logged_in_line(tmp_path: Path) -> None:
    not_logged_in = assistant("msg_err", text("Not logged in · Please run /login"), error="authentication_failed")
    not_logged_in["isApiErrorMessage"] = True
    not_logged_in["message"]["model"] = "<synthetic>"
    path = session_file(tmp_path, [user("Say hello"), not_logged_in])
    transcript = parse_transcript(path)
    (exchange,) = transcript.exchanges
    assert exchange.prompt == "Say hello"
    assert exchange.reply == ""
    assert exchange.complete  # the harness gave up on this turn: nothing more will come
    assert transcript.skipped["api_error"] == 1
    assert transcript.worth_keeping


def test_it_marks_a_turn_still_running_as_incomplete(tmp_path: Path) -> None:
    records: list[Any] = [
        user("First"),
        assistant("msg_1", text("One."), stop_reason="end_turn"),
        user("Second"),
        assistant("msg_2", tool_use("toolu_1", "Bash", {"command": "make"})),
    ]
    path = session_file(tmp_path, records)
    first, second = parse_transcript(path).exchanges
    assert first.complete and not second.complete
    write_jsonl(path, [*records, tool_result("toolu_1", "ok"), assistant("msg_3", text("Built."))])
    grown = parse_transcript(path).exchanges
    assert [exchange.key for exchange in grown] == [first.key, second.key]
    assert grown[1].complete
    assert grown[1].reply == "[tool Bash: make] -> ok\n\nBuilt."


def test_it_keeps_exchange_keys_when_the_file_grows(tmp_path: Path) -> None:
    records: list[Any] = [user("One"), assistant("m1", text("1"), stop_reason="end_turn")]
    path = session_file(tmp_path, records)
    before = parse_transcript(path).exchanges
    records += [user("Two"), assistant("m2", text("2"), stop_reason="end_turn")]
    write_jsonl(path, records)
    after = parse_transcript(path).exchanges
    assert after[: len(before)] == before
    assert [exchange.prompt for exchange in after] == ["One", "Two"]


def test_it_links_subagent_files_of_2_0_and_2_1(tmp_path: Path) -> None:
    # Layouts from FORMATS.md 1.1 (no real 2.x sample with subagents is saved in ../shared).
    project = tmp_path / "projects" / "-home-dev-projects-palazzo"
    main = session_file(
        tmp_path,
        [
            user("Review the diff with two agents"),
            assistant("m1", tool_use("toolu_a", "Task", {"description": "review", "prompt": "Review it"})),
            tool_result("toolu_a", [text("Looks fine")], toolUseResult={"agentId": "a1b2c3d4", "status": "completed"}),
            assistant("m2", text("Both agents agree."), stop_reason="end_turn"),
        ],
    )
    sidechain = {"isSidechain": True, "sessionId": SESSION}
    write_jsonl(
        project / "agent-a1b2c3d4.jsonl",
        [
            user("Review it", agentId="a1b2c3d4", **sidechain),
            assistant("m3", text("Looks fine"), agentId="a1b2c3d4", stop_reason="end_turn", **sidechain),
        ],
    )
    write_jsonl(project / "agent-0badf00d.jsonl", [user("Warmup", agentId="0badf00d", **sidechain)])
    write_jsonl(
        project / "agent-99999999.jsonl",
        [user("Other session", agentId="99999999", isSidechain=True, sessionId="other-session")],
    )
    nested = project / SESSION / "subagents"
    write_jsonl(
        nested / "agent-a0123456789abcdef.jsonl",
        [
            user("Check the tests", agentId="a0123456789abcdef", **sidechain),
            assistant("m4", text("They pass"), agentId="a0123456789abcdef", stop_reason="end_turn", **sidechain),
        ],
    )
    (nested / "agent-a0123456789abcdef.meta.json").write_text('{"agentType": "general-purpose"}')
    transcript = parse_transcript(main)
    by_agent = {sub.agent_id: sub for sub in transcript.subagents}
    assert set(by_agent) == {"a0123456789abcdef", "a1b2c3d4", "0badf00d"}
    for agent_id, sub in by_agent.items():
        assert sub.parent_session_id == SESSION
        assert sub.session_id == f"{SESSION}:agent-{agent_id}"
    assert by_agent["a1b2c3d4"].exchanges[0].reply == "Looks fine"
    assert by_agent["a0123456789abcdef"].exchanges[0].prompt == "Check the tests"
    assert not by_agent["0badf00d"].worth_keeping  # Claude Code 2.0's warm-up run
    assert by_agent["a1b2c3d4"].worth_keeping
    # subagent files are reached through their parent, never listed as sessions of their own
    assert [path for _, path in discover([tmp_path])] == [main]


def test_it_treats_an_empty_or_metadata_only_file_as_nothing_to_keep(tmp_path: Path) -> None:
    empty = session_file(tmp_path, [], name="empty")
    summary_only = session_file(tmp_path, [{"type": "summary", "summary": "x", "leafUuid": "y"}], name="summary")
    for path in (empty, summary_only):
        transcript = parse_transcript(path, "claude-code")
        assert transcript.exchanges == []
        assert not transcript.worth_keeping
    assert detect_harness(empty) == "claude-code"  # from its place under projects/


@pytest.mark.slow
def test_it_parses_what_the_real_claude_code_cli_writes(tmp_path: Path) -> None:
    # The pinned CLI from the npm registry; offline and logged out it still runs the hooks and writes
    # its transcript, ending with a synthetic "Not logged in" line.
    installer = Path(__file__).resolve().parents[2] / "scripts" / "install-claude-code.sh"
    claude = subprocess.run(["bash", str(installer)], capture_output=True, text=True, check=True).stdout.strip()
    config = tmp_path / "config"
    project = tmp_path / "shop"
    project.mkdir()
    config.mkdir()
    output = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": WAKE_UP_CONTEXT}}
    hook = f"printf '%s' {shlex.quote(json.dumps(output))}"
    (config / "settings.json").write_text(
        json.dumps({"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": hook}]}]}})
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ANTHROPIC")}
    environment["CLAUDE_CONFIG_DIR"] = str(config)
    subprocess.run(
        [claude, "-p", "Which package manager do we use?"],
        cwd=project,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    (path,) = config.glob("projects/*/*.jsonl")
    assert WAKE_UP_OPEN in path.read_text()  # the injected context did reach the transcript
    assert detect_harness(path) == "claude-code"
    transcript = parse_transcript(path)
    assert transcript.session_id == path.stem
    assert transcript.cwd == str(project)
    assert transcript.version and transcript.version.startswith("2.")
    (exchange,) = transcript.exchanges
    assert exchange.prompt == "Which package manager do we use?"
    assert exchange.reply == ""  # "Not logged in" is not a reply worth keeping
    assert exchange.complete
    assert transcript.skipped["api_error"] == 1
    assert transcript.skipped["wake_up"] == 2  # the hook_success and hook_additional_context lines
    assert "palace status" not in exchange.prompt + exchange.reply
    assert transcript.worth_keeping


def test_it_skips_bash_mode_hook_output_and_compaction_summaries(tmp_path: Path) -> None:
    path = session_file(
        tmp_path,
        [
            user("<bash-input>git status</bash-input>"),
            user("<bash-stdout>On branch main</bash-stdout><bash-stderr></bash-stderr>"),
            user("This session is being continued from a previous conversation that ran out of context. Summary: ..."),
            user("Ship it<user-prompt-submit-hook>lint passed</user-prompt-submit-hook>"),
            assistant("m1", text("Shipped."), stop_reason="end_turn"),
            user("[Request interrupted by user for tool use]"),
            user("<bash-input>make deploy</bash-input>"),
            assistant("m2", text("I see you deployed."), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [
        ("Ship it", "Shipped."),
        ("!make deploy", "I see you deployed."),  # answered, so it was a turn of the conversation
    ]
    assert transcript.skipped["shell_command"] == 1
    assert transcript.skipped["local_command_output"] == 2
    assert transcript.skipped["compact_summary"] == 1
    assert transcript.skipped["hook_output"] == 1
    assert transcript.skipped["interrupted"] == 1


def test_it_starts_a_turn_for_a_queued_prompt_once(tmp_path: Path) -> None:
    queued = {"type": "queued_command", "prompt": "Also update the README", "commandMode": "prompt"}
    path = session_file(
        tmp_path,
        [
            user("Rename the module"),
            assistant("m1", tool_use("t1", "Bash", {"command": "git mv a.py b.py"})),
            line("attachment", attachment=queued),
            user("Also update the README"),
            tool_result("t1", ""),
            assistant("m2", text("Renamed, and the README says b.py now."), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    assert [exchange.prompt for exchange in transcript.exchanges] == ["Rename the module", "Also update the README"]
    assert transcript.skipped["duplicate"] == 1
    assert transcript.exchanges[1].reply == "Renamed, and the README says b.py now."


def test_it_finds_a_2_0_agent_file_whose_first_line_came_late(tmp_path: Path) -> None:
    main = session_file(tmp_path, [user("Start an agent"), assistant("m1", text("Started."), stop_reason="end_turn")])
    agent = main.parent / "agent-5eed5eed.jsonl"
    agent.write_text("")  # created by Claude Code, not yet written
    assert parse_transcript(main).subagents == []
    stamp = main.parent.stat().st_mtime_ns
    write_jsonl(agent, [user("Look around", agentId="5eed5eed", isSidechain=True)])
    assert main.parent.stat().st_mtime_ns == stamp  # nothing tells the directory listing apart
    (subagent,) = parse_transcript(main).subagents
    assert subagent.agent_id == "5eed5eed"
    assert subagent.exchanges[0].prompt == "Look around"


def test_it_pairs_a_tool_result_even_on_a_line_flagged_meta(tmp_path: Path) -> None:
    path = session_file(
        tmp_path,
        [
            user("Load the skill"),
            assistant("m1", tool_use("t1", "Skill", {"skill": "pdf"})),
            tool_result("t1", "Launching skill: pdf", isMeta=True),
            user([text("Base directory for this skill: /skills/pdf ...")], isMeta=True),
            assistant("m2", text("The pdf skill is loaded."), stop_reason="end_turn"),
        ],
    )
    transcript = parse_transcript(path)
    (exchange,) = transcript.exchanges
    assert exchange.reply == "[tool Skill: skill=pdf] -> Launching skill: pdf\n\nThe pdf skill is loaded."
    assert transcript.skipped["meta"] == 1
    assert exchange.complete
