"""The opencode storage-tree parser: the saved v2 and legacy trees, and a tree with a child session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palace.transcripts import detect_harness, discover, parse_transcript
from tests.transcripts.helpers import SAMPLES, sample

TREES = "opencode/jazzyalex-agent-sessions"
# sample -> (exchanges, prompts)
EXPECTED = {
    f"{TREES}/storage_v2/session/proj_test/ses_s_stage0_small.json": ["Hello"],
    f"{TREES}/storage_v2/session/proj_test/ses_s_stage0_large.json": ["Step 1", "Step 2"],
    f"{TREES}/storage_legacy/session/proj_test/ses_s_stage0_drift.json": ["Open README"],
}


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_it_parses_every_saved_opencode_session(relative: str) -> None:
    path = sample(relative)
    assert detect_harness(path) == "opencode"
    transcript = parse_transcript(path)
    assert [exchange.prompt for exchange in transcript.exchanges] == EXPECTED[relative]
    assert transcript.worth_keeping
    assert all(exchange.complete for exchange in transcript.exchanges)


def test_it_lists_sessions_not_messages_or_parts() -> None:
    found = list(discover([SAMPLES / "opencode"]))
    assert sorted(path.name for _, path in found) == [
        "ses_s_stage0_drift.json",
        "ses_s_stage0_large.json",
        "ses_s_stage0_small.json",
    ]
    assert {harness for harness, _ in found} == {"opencode"}


def test_it_condenses_tool_parts_and_skips_synthetic_and_reasoning_parts() -> None:
    transcript = parse_transcript(sample(f"{TREES}/storage_v2/session/proj_test/ses_s_stage0_large.json"))
    assert transcript.session_id == "s_stage0_large"
    assert transcript.cwd == "/tmp/large"
    step_1 = transcript.exchanges[0]
    assert step_1.key == "m_user_large_1"
    assert step_1.started_at.isoformat() == "2024-10-27T03:35:01+00:00"
    assert step_1.reply == (
        "[tool bash: ls /non-existent-directory] -> ls: /non-existent-directory: No such file or directory"
        "\n\n[file: error.log]"
    )
    assert transcript.skipped["synthetic"] == 1
    assert transcript.skipped["thinking"] == 1


def write(path: Path, record: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_it_reads_a_child_session_as_a_subagent(tmp_path: Path) -> None:
    storage = tmp_path / "opencode" / "storage"
    sessions = storage / "session" / "proj"
    write(sessions / "ses_parent.json", {"id": "ses_parent", "directory": "/code/shop", "parentID": None})
    write(sessions / "ses_child.json", {"id": "ses_child", "directory": "/code/shop", "parentID": "ses_parent"})
    for session, prompt, reply in (("ses_parent", "Plan the sale", "Delegated."), ("ses_child", "Price it", "$5")):
        write(
            storage / "message" / session / "m1.json",
            {"id": f"{session}_u", "sessionID": session, "role": "user", "time": {"created": 1_770_000_000_000}},
        )
        write(
            storage / "message" / session / "m2.json",
            {
                "id": f"{session}_a",
                "sessionID": session,
                "role": "assistant",
                "time": {"created": 1_770_000_001_000, "completed": 1_770_000_002_000},
            },
        )
        write(storage / "part" / f"{session}_u" / "p1.json", {"type": "text", "text": prompt})
        write(storage / "part" / f"{session}_a" / "p1.json", {"type": "text", "text": reply})
    (storage / "part" / "ses_parent_a" / "p2.json").write_text("{not json")
    assert [path.name for _, path in discover([tmp_path])] == ["ses_parent.json"]
    transcript = parse_transcript(sessions / "ses_parent.json")
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [("Plan the sale", "Delegated.")]
    assert transcript.skipped["invalid_json"] == 1
    (child,) = transcript.subagents
    assert child.parent_session_id == "ses_parent"
    assert child.agent_id == child.session_id == "ses_child"
    assert child.exchanges[0].reply == "$5"
