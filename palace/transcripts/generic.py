"""The generic JSONL transcript any harness can write: one {"role", "text", "timestamp"} object per line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from palace.transcripts.model import Transcript
from palace.transcripts.text import (
    Turn,
    clean_optional,
    clean_tag,
    counts,
    file_mtime,
    finish_turns,
    parse_timestamp,
    read_lines,
    strip_wake_up,
    worth_keeping,
)

HARNESS = "jsonl"


def parse(path: Path) -> Transcript:
    """A generic JSONL transcript: user lines start exchanges, assistant lines are their replies."""
    skipped: Counter[str] = Counter()
    stats: Counter[str] = Counter()
    turns: list[Turn] = []
    session_id: str | None = None
    cwd: str | None = None
    for number, record in read_lines(path, skipped):
        stats["lines"] += 1
        if not isinstance(record, dict):
            skipped["not_an_object"] += 1
            continue
        session_id = session_id or clean_tag(record.get("session_id")) or clean_tag(record.get("session"))
        cwd = cwd or clean_optional(record.get("cwd"))
        role = record.get("role")
        raw = record.get("text")
        if raw is None:
            raw = record.get("content")
        if role not in ("user", "assistant") or not isinstance(raw, str):
            skipped["not_a_message"] += 1
            continue
        text, wake_ups = strip_wake_up(raw)
        skipped["wake_up"] += wake_ups
        if role == "user":
            if not text.strip():
                skipped["empty"] += 1
                continue
            key = clean_tag(record.get("id")) or f"line-{number}"
            turns.append(Turn(key=key, prompt=text.strip(), started_at=parse_timestamp(record.get("timestamp"))))
        elif turns:
            turns[-1].add_text(text)
        else:
            skipped["orphan_assistant"] += 1
    exchanges = finish_turns(turns, file_mtime(path))
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=session_id or clean_tag(path.stem),
        parent_session_id=None,
        agent_id=None,
        cwd=cwd,
        version=None,
        exchanges=exchanges,
        skipped=counts(skipped),
        subagents=[],
        worth_keeping=worth_keeping(exchanges),
        stats=dict(stats),
    )
