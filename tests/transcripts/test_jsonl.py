"""The generic JSONL transcript: one {"role", "text", "timestamp"} object per line."""

from __future__ import annotations

from pathlib import Path

from palace.feeding.transcripts import WAKE_UP_CLOSE, WAKE_UP_OPEN, detect_harness, parse_transcript
from tests.transcripts.helpers import write_jsonl


def test_it_pairs_user_lines_with_the_assistant_lines_after_them(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "session-42.jsonl",
        [
            {"role": "user", "text": "Which database?", "timestamp": "2026-02-01T09:00:00+01:00", "cwd": "/src/app"},
            {"role": "assistant", "text": "PostgreSQL in production,", "timestamp": "2026-02-01T09:00:05+01:00"},
            {"role": "assistant", "text": "SQLite in tests."},
            {"role": "system", "text": "ignored"},
            {"role": "user", "text": "And the queue?", "timestamp": 1769936460000},
        ],
    )
    assert detect_harness(path) == "jsonl"
    transcript = parse_transcript(path)
    assert transcript.session_id == "session-42"
    assert transcript.cwd == "/src/app"
    first, second = transcript.exchanges
    assert (first.prompt, first.reply) == ("Which database?", "PostgreSQL in production,\n\nSQLite in tests.")
    assert first.started_at.isoformat() == "2026-02-01T08:00:00+00:00"
    assert first.complete
    assert second.prompt == "And the queue?" and not second.complete
    assert second.started_at.isoformat() == "2026-02-01T09:01:00+00:00"
    assert [first.key, second.key] == ["line-0", "line-4"]
    assert transcript.skipped == {"not_a_message": 1}
    assert transcript.worth_keeping


def test_it_drops_wake_up_blocks_and_bad_lines(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "s.jsonl",
        [
            "not json",
            [1, 2],
            {"role": "user", "text": f"{WAKE_UP_OPEN}ctx{WAKE_UP_CLOSE}"},
            {"role": "user", "text": 42},
            {"role": "user", "text": "real question"},
            {"role": "assistant", "text": "answer"},
        ],
    )
    transcript = parse_transcript(path, "jsonl")
    assert [exchange.prompt for exchange in transcript.exchanges] == ["real question"]
    assert transcript.skipped == {"invalid_json": 1, "not_an_object": 1, "wake_up": 1, "not_a_message": 1}


def test_it_skips_an_oversize_line_and_reads_on(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("wb") as handle:
        handle.write(b'{"role": "user", "text": "' + b"x" * (33 * 1024 * 1024) + b'"}\n')
        handle.write(b'{"role": "user", "text": "after the big one"}\n')
    transcript = parse_transcript(path, "jsonl")
    assert [exchange.prompt for exchange in transcript.exchanges] == ["after the big one"]
    assert transcript.exchanges[0].key == "line-1"
    assert transcript.skipped == {"oversize_line": 1}


def test_it_reads_a_line_still_being_written_next_time(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    path.write_text('{"role": "user", "text": "first"}\n{"role": "assistant", "te')
    transcript = parse_transcript(path, "jsonl")
    assert transcript.skipped == {"unfinished_line": 1}
    assert not transcript.exchanges[0].complete
    with path.open("a") as handle:
        handle.write('xt": "done"}\n')
    transcript = parse_transcript(path, "jsonl")
    assert transcript.skipped == {}
    assert (transcript.exchanges[0].reply, transcript.exchanges[0].complete) == ("done", True)
