"""Finding transcripts, telling harnesses apart, and the errors for unusable paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from palace.feeding.transcripts import (
    HARNESSES,
    TranscriptError,
    default_roots,
    detect_harness,
    discover,
    parse_transcript,
)
from tests.transcripts.helpers import SAMPLES, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def test_it_detects_the_harness_of_every_saved_sample() -> None:
    found = dict((path, harness) for harness, path in discover([SAMPLES]))
    expected_per_folder = {"claude-code": 7, "codex": 7, "pi": 3, "opencode": 3}
    for folder, count in expected_per_folder.items():
        assert [harness for path, harness in found.items() if path.is_relative_to(SAMPLES / folder)] == [folder] * count
    assert len(found) == sum(expected_per_folder.values())


def test_it_lists_each_transcript_once_in_a_stable_order(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "b" / "one.jsonl", [{"role": "user", "text": "hi"}])
    second = write_jsonl(tmp_path / "a" / "two.jsonl", [{"role": "user", "text": "hi"}])
    (tmp_path / "notes.txt").write_text("not a transcript")
    write_jsonl(tmp_path / "junk.jsonl", ["garbage", {"type": "mystery"}])
    assert list(discover([tmp_path, first, tmp_path])) == [("jsonl", second), ("jsonl", first)]
    # with the harness given, every .jsonl is taken as one (a directory's own files come first)
    assert list(discover([tmp_path], harness="pi")) == [
        ("pi", tmp_path / "junk.jsonl"),
        ("pi", second),
        ("pi", first),
    ]


def test_it_names_the_problem_with_an_unusable_path(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="no such file"):
        parse_transcript(tmp_path / "missing.jsonl")
    with pytest.raises(TranscriptError, match="is a directory"):
        parse_transcript(tmp_path)
    with pytest.raises(TranscriptError, match="not a transcript of a known harness"):
        detect_harness(write_jsonl(tmp_path / "x.jsonl", [{"hello": "world"}]))
    with pytest.raises(TranscriptError, match="harness 'vim' is not one of"):
        parse_transcript(tmp_path / "x.jsonl", "vim")
    with pytest.raises(TranscriptError, match="no such file"):
        list(discover([tmp_path / "missing.jsonl"]))


def test_it_finds_each_harness_under_its_configured_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in (
        "CLAUDE_CONFIG_DIR",
        "PI_CODING_AGENT_SESSION_DIR",
        "PI_CODING_AGENT_DIR",
        "CODEX_HOME",
        "GEMINI_CLI_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert default_roots() == {
        "claude-code": tmp_path / ".claude" / "projects",
        "pi": tmp_path / ".pi" / "agent" / "sessions",
        "codex": tmp_path / ".codex" / "sessions",
        "opencode": tmp_path / ".local" / "share" / "opencode",
        "gemini": tmp_path / ".gemini" / "tmp",
    }
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cc"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "pi"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "g"))
    roots = default_roots()
    assert roots["claude-code"] == tmp_path / "cc" / "projects"
    assert roots["pi"] == tmp_path / "pi" / "sessions"
    assert roots["codex"] == tmp_path / "codex" / "sessions"
    assert roots["opencode"] == tmp_path / "data" / "opencode"
    assert roots["gemini"] == tmp_path / "g" / ".gemini" / "tmp"
    monkeypatch.setenv("PI_CODING_AGENT_SESSION_DIR", str(tmp_path / "pi-sessions"))
    assert default_roots()["pi"] == tmp_path / "pi-sessions"
    assert set(roots) <= set(HARNESSES)


def test_it_imports_without_django_or_the_rest_of_palace() -> None:
    # Hooks import this package in short-lived processes; it must stay stdlib-only and light.
    code = (
        "import sys, palace.feeding.transcripts as t\n"
        "t.parse_transcript(t.discover([sys.argv[1]]).__next__()[1])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('django', 'palace', 'qdrant')))\n"
        "print(' '.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(SAMPLES / "pi")], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = result.stdout.split()
    # palace and palace.feeding are packages whose __init__ imports nothing.
    outside = [name for name in loaded if not name.startswith("palace.feeding.transcripts")]
    assert outside == ["palace", "palace.feeding"], loaded
    assert "palace.feeding.transcripts.pi" in loaded
    assert "palace.feeding.transcripts.claude_code" not in loaded  # parsers load on first use


@pytest.mark.parametrize(
    ("first_lines", "harness"),
    [
        ([{"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}] * 60, "claude-code"),
        ([{"type": "summary", "summary": "Title", "leafUuid": "u"}], "claude-code"),
        ([{"type": "session", "version": 3, "id": "s", "cwd": "/w"}], "pi"),
        ([{"type": "message", "timestamp": "t", "message": {"role": "user", "content": "hi"}}], "pi"),
        ([{"timestamp": "t", "type": "turn_context", "payload": {"model": "gpt-5"}}], "codex"),
        ([{"id": "t", "timestamp": "t"}, {"type": "message", "role": "user", "content": []}], "codex"),
        ([{"type": "message", "role": "user", "text": "hi"}], "jsonl"),
        (["not json", {"role": "assistant", "content": "hello"}], "jsonl"),
    ],
)
def test_it_tells_harnesses_apart_by_their_first_lines(tmp_path: Path, first_lines: list, harness: str) -> None:
    assert detect_harness(write_jsonl(tmp_path / "session.jsonl", first_lines)) == harness
