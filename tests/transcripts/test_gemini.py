"""The Gemini CLI chat parser: the real samples of 0.61 (JSONL) and 0.38 (whole-file JSON), and small files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from palace.feeding.transcripts import WAKE_UP_CLOSE, WAKE_UP_OPEN, detect_harness, discover, parse_transcript
from tests.transcripts.helpers import write_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "gemini"
SAMPLES = {
    "cli-0.61.0": "cli-0.61.0/tmp/orrery/chats/session-2026-12-04T23-36-e6b6a30c.jsonl",
    "cli-0.38.2": "cli-0.38.2/tmp/orrery/chats/session-2026-12-04T23-37-d39248bb.json",
}
INTERACTIVE = "interactive-0.61.0/tmp/orrery/chats/session-2026-12-04T23-44-3c82369e.jsonl"
ROOT = "/w/orrery"
HASH = hashlib.sha256(ROOT.encode()).hexdigest()
ESCAPED_WAKE_UP = "&lt;palazzo-wake-up&gt;\npalace says hi\n&lt;/palazzo-wake-up&gt;"


def chat(tmp_path: Path, records: list[Any], *, root: str | None = ROOT, name: str = "session-x-1234abcd") -> Path:
    """A chat file where Gemini CLI keeps it: <tmp>/<project>/chats/<name>.jsonl, with the project's root marker."""
    project = tmp_path / ".gemini" / "tmp" / "orrery"
    if root is not None:
        project.mkdir(parents=True, exist_ok=True)
        (project / ".project_root").write_text(root)
    meta = {"sessionId": "s-1", "projectHash": HASH, "startTime": "2026-05-01T10:00:00Z", "kind": "main"}
    return write_jsonl(project / "chats" / f"{name}.jsonl", [meta, *records])


def user(message_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"id": message_id, "timestamp": "2026-05-01T10:00:01Z", "type": "user", "content": [{"text": text}]} | extra


def model(message_id: str, text: str = "", **extra: Any) -> dict[str, Any]:
    return {"id": message_id, "timestamp": "2026-05-01T10:00:02Z", "type": "gemini", "content": text} | extra


def call(call_id: str, name: str, args: dict[str, Any], output: str | None = None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"id": call_id, "name": name, "args": args, "status": "scheduled"} | extra
    if output is not None:
        response = {"id": call_id, "name": name, "response": {"output": output}}
        record |= {"status": "success", "result": [{"functionResponse": response}]}
    return record


@pytest.mark.parametrize("version", sorted(SAMPLES))
def test_it_parses_the_real_samples_of_both_formats(version: str) -> None:
    path = FIXTURES / SAMPLES[version]
    assert detect_harness(path) == "gemini"
    transcript = parse_transcript(path)
    assert transcript.cwd == f"/tmp/gemini-samples/{version}/work/orrery", "from the project's .project_root"
    assert transcript.session_id is not None and path.stem.endswith(transcript.session_id[:8])
    first, second = transcript.exchanges
    assert first.prompt == "How many teeth has the lunar gear?", "the wake-up before the prompt is removed"
    assert first.reply.startswith('[tool mcp_palazzo_palace_find: query=lunar gear teeth] -> {"results": [{"id": ')
    assert "The orrery's lunar gear has 235 teeth" in first.reply and "untrusted_context" not in first.reply
    assert first.reply.endswith("\n\n235 teeth, one per lunar month of the Metonic cycle.")
    assert first.reply.count("[tool ") == 1, "the call is read once, though three records carry it"
    assert second.prompt == "Recall that memory by its id.", "the session was resumed in the same file"
    assert second.reply == (
        "[tool mcp_palazzo_palace_recall: ids=[not-an-id]] -> error: params/ids/0 must be integer\n\n"
        "That id was refused; the gear still has 235 teeth."
    )
    assert all(exchange.complete for exchange in transcript.exchanges) and transcript.worth_keeping
    assert transcript.skipped["wake_up"] == 1, "the resumed session was not woken up again"
    assert transcript.stats["format_version"] == (2 if version == "cli-0.61.0" else 1)


def test_it_folds_the_records_a_resumed_0_61_session_rewrote() -> None:
    transcript = parse_transcript(FIXTURES / SAMPLES["cli-0.61.0"])
    # Resuming, 0.61 rewrote the history as a checkpoint without the first prompt (it starts with
    # <hook_context>, which its resume skips), with the model's call as a functionCall part, no toolCalls,
    # and new timestamps; what was said and when stays as first written.
    assert transcript.stats["checkpoints"] == 3 and transcript.stats["updated_records"] == 7
    assert transcript.exchanges[0].started_at.isoformat() == "2026-12-04T23:36:39.008000+00:00"
    assert transcript.skipped == {"scaffolding": 1, "wake_up": 1}


def test_it_parses_the_real_interactive_chat_whose_wake_up_is_a_turn_of_its_own() -> None:
    transcript = parse_transcript(FIXTURES / INTERACTIVE)
    [exchange] = transcript.exchanges
    assert exchange.prompt == "How many teeth has the lunar gear", "as typed"
    assert exchange.reply == (
        '[tool mcp_palazzo_palace_find: query=lunar gear] -> {"results": [], "count": 0, "degraded": false, '
        '"degraded_reason": null, "cut": null}\n\nNothing stored yet.'
    )
    assert exchange.complete and transcript.skipped == {"scaffolding": 1, "wake_up": 1}
    assert transcript.cwd == "/tmp/gemini-samples/interactive-0.61.0/work/orrery"


def test_it_discovers_the_samples_under_gemini_clis_tmp_dirs() -> None:
    found = list(discover([FIXTURES]))
    expected = [Path(sample).name for sample in [*SAMPLES.values(), INTERACTIVE]]
    assert sorted(path.name for _harness, path in found) == sorted(expected)
    assert {harness for harness, _path in found} == {"gemini"}


def test_it_keeps_the_last_version_of_a_message_in_the_order_ids_first_appeared(tmp_path: Path) -> None:
    find = call("c1", "mcp_palazzo_palace_find", {"query": "gear"})
    path = chat(
        tmp_path,
        [
            user("u1", "How many teeth?"),
            model("m1", ""),
            {"$set": {"lastUpdated": "2026-05-01T10:00:03Z"}},
            model("m1", "", toolCalls=[find]),
            model("m1", "", toolCalls=[find | call("c1", "mcp_palazzo_palace_find", {"query": "gear"}, "235")]),
            user("r1", "", content=[{"functionResponse": {"id": "c1", "name": "mcp_palazzo_palace_find"}}]),
            model("m2", "235 teeth."),
            user("u2", "And the pointer?"),
            model("m2", "235 teeth, the Metonic cycle."),  # an earlier message updated late: it keeps its place
        ],
    )
    transcript = parse_transcript(path)
    first, second = transcript.exchanges
    assert first.key == "u1" and first.prompt == "How many teeth?"
    assert first.reply == "[tool mcp_palazzo_palace_find: query=gear] -> 235\n\n235 teeth, the Metonic cycle."
    assert second.key == "u2" and second.reply == "" and not second.complete, "not answered yet"
    assert transcript.stats["updated_records"] == 3
    assert transcript.session_id == "s-1" and transcript.cwd == ROOT


def test_it_drops_what_a_rewind_undid(tmp_path: Path) -> None:
    path = chat(
        tmp_path,
        [
            user("u1", "First"),
            model("m1", "one"),
            user("u2", "Second, regretted"),
            model("m2", "two"),
            {"$rewindTo": "u2"},
            user("u3", "Second, again"),
            model("m3", "three"),
        ],
    )
    transcript = parse_transcript(path)
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [
        ("First", "one"),
        ("Second, again", "three"),
    ]
    assert transcript.skipped["rewound"] == 2


def test_it_keeps_what_a_compression_leaves_out_and_skips_its_snapshot(tmp_path: Path) -> None:
    snapshot = user("s1", "<state_snapshot>\n<overall_goal>gears</overall_goal>\n</state_snapshot>")
    path = chat(
        tmp_path,
        [
            user("u1", "First"),
            model("m1", "one"),
            user("u2", "Second"),
            model("m2", "two"),
            {
                "$set": {
                    "messages": [
                        snapshot,
                        model("a1", "Got it. Thanks for the additional context!"),
                        model("m2", "two"),
                    ]
                }
            },
            user("u3", "Third"),
            model("m3", "three"),
        ],
    )
    transcript = parse_transcript(path)
    assert [exchange.prompt for exchange in transcript.exchanges] == ["First", "Second", "Third"]
    assert transcript.exchanges[1].reply == "two", "the acknowledgement of the snapshot is no reply"
    assert transcript.skipped["compaction"] == 2


def test_it_removes_palazzos_wake_up_in_every_form_gemini_cli_records(tmp_path: Path) -> None:
    path = chat(
        tmp_path,
        [
            user("w0", f"<hook_context>{ESCAPED_WAKE_UP}</hook_context>"),  # interactive: a turn of its own
            user("u1", f"<hook_context>{ESCAPED_WAKE_UP}</hook_context>\n\nFix the build"),  # -p: before the prompt
            model("m1", f"Done.{WAKE_UP_OPEN}echoed{WAKE_UP_CLOSE}"),
            user("u2", "<hook_context>branch: main</hook_context>\n\nAnd the tests?"),
            model("m2", "Green."),
            user("u3", f"Quoting {ESCAPED_WAKE_UP} back"),
            model("m3", "ok"),
        ],
    )
    transcript = parse_transcript(path)
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [
        ("Fix the build", "Done."),
        ("And the tests?", "Green."),
        ("Quoting  back", "ok"),
    ]
    assert transcript.skipped["wake_up"] == 4 and transcript.skipped["hook_context"] == 1
    assert "palace says hi" not in json.dumps([exchange.reply for exchange in transcript.exchanges])


def test_it_reads_the_users_words_images_and_what_is_not_a_prompt(tmp_path: Path) -> None:
    path = chat(
        tmp_path,
        [
            user("ctx", "<session_context>\nThis is the Gemini CLI.\n</session_context>"),
            user(
                "u1",
                "Explain @gear.py\n--- Content from referenced files ---\nprint(235)",
                displayContent=[{"text": "Explain @gear.py"}],
            ),
            model("m1", "", content=[{"text": "thinking…", "thought": True}, {"text": "It prints 235."}]),
            user(
                "u2", "", content=[{"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": "AA"}}]
            ),
            model("m2", "A gear.", thoughts=[{"subject": "Looking", "description": "at it"}]),
            {"id": "i1", "type": "info", "content": "Request cancelled."},
            {"id": "e1", "type": "error", "content": "[API Error: quota]"},
            user("u3", "/stats"),
        ],
    )
    transcript = parse_transcript(path)
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [
        ("Explain @gear.py", "It prints 235."),
        ("What is this?[image]", "A gear."),
    ]
    assert transcript.exchanges[-1].complete, "the API error ended that turn"
    assert transcript.skipped == {
        "scaffolding": 1,
        "thinking": 2,
        "image": 1,
        "info": 1,
        "api_error": 1,
        "slash_command": 1,
    }


def test_it_holds_the_last_exchange_open_while_a_tool_runs(tmp_path: Path) -> None:
    running = call("c1", "run_shell_command", {"command": "make test"}, status="executing")
    path = chat(tmp_path, [user("u1", "Run the tests"), model("m1", "", toolCalls=[running])])
    [exchange] = parse_transcript(path).exchanges
    assert exchange.reply == "[tool run_shell_command: make test]" and not exchange.complete
    cancelled = call("c1", "run_shell_command", {"command": "make test"}, status="cancelled")
    path = chat(tmp_path, [user("u1", "Run the tests"), model("m1", "", toolCalls=[cancelled])], name="session-y")
    [exchange] = parse_transcript(path).exchanges
    assert exchange.reply == "[tool run_shell_command: make test] -> error: cancelled"


def test_it_counts_bad_lines_and_hostile_values_and_never_raises(tmp_path: Path) -> None:
    path = chat(
        tmp_path,
        [
            "not json",
            [1, 2],
            {"mystery": True},
            {"id": 42, "type": "user", "content": "an id that is not a string"},
            user("u1", "Hello"),
            {"id": "m1", "type": "gemini", "content": 12, "toolCalls": "nope", "thoughts": {"a": 1}},
            {"id": "m2", "type": "gemini", "content": [None, 3, {"text": 5}], "toolCalls": [7, {"name": None}]},
            {"id": "x1", "type": "robot", "content": "?"},
            {"$set": {"messages": "not a list"}},
            {"$set": {}},
            model("m3", "Hi."),
        ],
    )
    with path.open("a") as handle:
        handle.write('{"id": "m4", "type": "gem')  # the line Gemini CLI is still writing
    transcript = parse_transcript(path)
    [exchange] = transcript.exchanges
    assert exchange.prompt == "Hello" and exchange.reply == "[tool tool]\n\nHi."
    assert transcript.skipped == {
        "invalid_json": 1,
        "not_an_object": 1,
        "unknown_type": 2,
        "malformed": 2,
        "unfinished_line": 1,
    }


def test_it_reads_cwd_only_from_the_marker_of_the_chats_project(tmp_path: Path) -> None:
    assert parse_transcript(chat(tmp_path / "a", [user("u1", "Hi")], root="/elsewhere")).cwd is None
    assert parse_transcript(chat(tmp_path / "b", [user("u1", "Hi")], root=None)).cwd is None
    assert parse_transcript(chat(tmp_path / "c", [user("u1", "Hi")])).cwd == ROOT


def test_it_reads_sub_agent_chats_through_their_parents_session(tmp_path: Path) -> None:
    parent = chat(tmp_path, [user("u1", "Investigate the gears"), model("m1", "They mesh.")])
    sub_meta = {"sessionId": "sub-9", "projectHash": HASH, "kind": "subagent", "directories": [ROOT]}
    write_jsonl(parent.parent / "s-1" / "sub-9.jsonl", [sub_meta, user("t1", "List gear files"), model("n1", "a.py")])
    assert [path for _harness, path in discover([tmp_path])] == [parent]
    transcript = parse_transcript(parent)
    [sub] = transcript.subagents
    assert sub.parent_session_id == "s-1" and sub.session_id == sub.agent_id == "sub-9"
    assert sub.cwd == ROOT and sub.exchanges[0].prompt == "List gear files"


def test_it_takes_a_whole_file_session_unless_a_later_cli_moved_it_on(tmp_path: Path) -> None:
    chats = tmp_path / ".gemini" / "tmp" / "orrery" / "chats"
    chats.mkdir(parents=True)
    record = {"sessionId": "old-1", "projectHash": HASH, "messages": [user("u1", "Hi"), model("m1", "Hello")]}
    legacy = chats / "session-2025-11-12T09-44-2f32182a.json"
    legacy.write_text(json.dumps(record, indent=2))
    (chats.parent / "logs.json").write_text("[]")
    assert list(discover([tmp_path])) == [("gemini", legacy)]
    [exchange] = parse_transcript(legacy).exchanges
    assert (exchange.prompt, exchange.reply) == ("Hi", "Hello")
    moved = write_jsonl(chats / f"{legacy.name}l", [{"sessionId": "old-1", "projectHash": HASH}])
    assert list(discover([tmp_path])) == [("gemini", moved)]
    write_jsonl(chats.parent / "logs" / "events.jsonl", [{"sessionId": "old-1", "projectHash": HASH}])
    assert list(discover([tmp_path / ".gemini" / "tmp"], "gemini")) == [("gemini", moved)], "only chats"


@pytest.mark.parametrize(
    ("first_line", "harness"),
    [
        ({"sessionId": "s", "projectHash": "h", "startTime": "t"}, "gemini"),
        ({"id": "m", "type": "gemini", "content": "hi"}, "gemini"),
        ({"type": "user", "sessionId": "s", "uuid": "u", "message": {"role": "user", "content": "hi"}}, "claude-code"),
    ],
)
def test_it_tells_a_gemini_chat_from_others_by_its_first_line(
    tmp_path: Path, first_line: dict[str, Any], harness: str
) -> None:
    assert detect_harness(write_jsonl(tmp_path / "any.jsonl", [first_line])) == harness
