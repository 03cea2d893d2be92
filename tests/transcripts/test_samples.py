"""Every saved sample in ../shared/transcripts, end to end: what each parser keeps and what it excludes."""

from __future__ import annotations

import pytest

from palace.feeding.transcripts import discover, exchange_texts, parse_transcript
from tests.transcripts.helpers import SAMPLES, sample

# sample -> (exchanges, subagents, subagent exchanges, exclusions: reason -> count)
EXPECTED = {
    "claude-code/bporterfield-watch-claude-think/compacted-session.jsonl": (1, 0, 0, {"metadata": 2}),
    "claude-code/d-kimuson-claude-code-viewer/sample-project/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl": (
        1,
        0,
        0,
        {"meta": 1},
    ),
    "claude-code/d-kimuson-claude-code-viewer/sample-project/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl": (
        1,
        2,
        2,
        {"meta": 1, "sidechain": 22},
    ),
    "claude-code/d-kimuson-claude-code-viewer/sample-project/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl": (
        2,
        5,
        5,
        {"meta": 1, "metadata": 1, "sidechain": 405},
    ),
    "claude-code/jazzyalex-agent-sessions/schema_drift.jsonl": (
        1,
        0,
        0,
        {"attachment": 1, "metadata": 2, "system": 2, "task_notification": 1, "unknown_type": 2},
    ),
    "claude-code/jazzyalex-agent-sessions/small.jsonl": (
        2,
        1,
        1,
        {
            "api_error": 5,
            "attachment": 33,
            "duplicate": 4,
            "hook_attachment": 3,
            "image": 1,
            "metadata": 18,
            "orphan_assistant": 1,
            "orphan_tool_result": 1,
            "progress": 1,
            "sidechain": 9,
            "system": 7,
            "thinking": 4,
        },
    ),
    "claude-code/simonw-claude-code-transcripts/sample_session.jsonl": (2, 0, 0, {"metadata": 1}),
    "codex/jazzyalex-agent-sessions/codex_050_legacy.jsonl": (0, 0, 0, {"event": 4}),
    "codex/jazzyalex-agent-sessions/large.jsonl": (
        1,
        0,
        0,
        {"event": 1, "metadata": 1, "other_item": 2, "user_item": 7},
    ),
    "codex/jazzyalex-agent-sessions/small.jsonl": (
        3,
        0,
        0,
        {
            "api_error": 1,
            "compaction": 6,
            "event": 63,
            "image": 1,
            "metadata": 21,
            "other_item": 7,
            "scaffolding": 1,
            "thinking": 3,
            "user_item": 1,
        },
    ),
    "codex/madshn-localpush/rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl": (
        38,
        0,
        0,
        {
            "compaction": 1,
            "event": 895,
            "image": 13,
            "metadata": 286,
            "scaffolding": 45,
            "thinking": 418,
            "user_item": 46,
        },
    ),
    "codex/madshn-localpush/rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl": (
        1,
        0,
        0,
        {"event": 4, "metadata": 1, "scaffolding": 4, "thinking": 2, "user_item": 4},
    ),
    "codex/madshn-localpush/rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl": (
        1,
        0,
        0,
        {"event": 20, "metadata": 6, "scaffolding": 4, "thinking": 12, "user_item": 3},
    ),
    "codex/ryoppippi-ccusage/session-alpha.jsonl": (0, 0, 0, {"event": 2, "metadata": 1}),
    "opencode/jazzyalex-agent-sessions/storage_legacy/session/proj_test/ses_s_stage0_drift.json": (1, 0, 0, {}),
    "opencode/jazzyalex-agent-sessions/storage_v2/session/proj_test/ses_s_stage0_large.json": (
        2,
        0,
        0,
        {"metadata": 4, "synthetic": 1, "thinking": 1},
    ),
    "opencode/jazzyalex-agent-sessions/storage_v2/session/proj_test/ses_s_stage0_small.json": (1, 0, 0, {}),
    "pi/badlogic-pi-mono/before-compaction.jsonl": (
        55,
        0,
        0,
        {"api_error": 13, "compaction": 2, "metadata": 10, "thinking": 49},
    ),
    "pi/badlogic-pi-mono/large-session.jsonl": (
        83,
        0,
        0,
        {"api_error": 14, "metadata": 104, "slash_command": 5, "thinking": 1},
    ),
    "pi/jazzyalex-agent-sessions/small.jsonl": (2, 0, 0, {"compaction": 2, "metadata": 2}),
}


def test_it_knows_every_saved_sample() -> None:
    assert sorted(str(path.relative_to(SAMPLES)) for _, path in discover([SAMPLES])) == sorted(EXPECTED)


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_it_keeps_and_excludes_what_it_should(relative: str) -> None:
    exchanges, subagents, subagent_exchanges, skipped = EXPECTED[relative]
    transcript = parse_transcript(sample(relative))
    assert len(transcript.exchanges) == exchanges
    assert len(transcript.subagents) == subagents
    assert sum(len(subagent.exchanges) for subagent in transcript.subagents) == subagent_exchanges
    assert transcript.skipped == skipped
    for exchange in [*transcript.exchanges, *(item for sub in transcript.subagents for item in sub.exchanges)]:
        for text in exchange_texts(exchange):
            assert 0 < len(text.encode("utf-8")) <= 32 * 1024
            assert "\x00" not in text
