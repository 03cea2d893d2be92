"""The generic JSONL transcript any harness can write: one {"role", "text", "timestamp"} object per line."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from palace.feeding.transcripts.model import Transcript
from palace.feeding.transcripts.text import (
    Turn,
    clean_optional,
    clean_tag,
    counts,
    file_mtime,
    finish_turns,
    guarded,
    parse_timestamp,
    read_records,
    strip_wake_up,
    worth_keeping,
)

HARNESS = "jsonl"


class _Lines:
    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self.turns: list[Turn] = []
        self.keys: set[str] = set()
        self.session_id: str | None = None
        self.cwd: str | None = None

    def feed(self, number: int, record: dict[str, Any]) -> None:
        self.session_id = self.session_id or clean_tag(record.get("session_id")) or clean_tag(record.get("session"))
        self.cwd = self.cwd or clean_optional(record.get("cwd"))
        role = record.get("role")
        raw = record.get("text")
        if raw is None:
            raw = record.get("content")
        if role not in ("user", "assistant") or not isinstance(raw, str):
            self.skipped["not_a_message"] += 1
            return
        text, wake_ups = strip_wake_up(raw)
        self.skipped["wake_up"] += wake_ups
        if role == "assistant":
            if self.turns:
                self.turns[-1].add_text(text)
            else:
                self.skipped["orphan_assistant"] += 1
            return
        if not text.strip():
            if not wake_ups:
                self.skipped["empty"] += 1
            return
        key = clean_tag(record.get("id"))
        if key is None or key in self.keys:
            key = f"line-{number}"
        self.keys.add(key)
        self.turns.append(Turn(key=key, prompt=text.strip(), started_at=parse_timestamp(record.get("timestamp"))))


def parse(path: Path) -> Transcript:
    """A generic JSONL transcript: user lines start exchanges, assistant lines are their replies."""
    lines = _Lines()
    stats: Counter[str] = Counter()
    for number, record in read_records(path, lines.skipped, stats):
        guarded(lines.skipped, path, number, partial(lines.feed, number, record))
    exchanges = finish_turns(lines.turns, file_mtime(path))
    return Transcript(
        harness=HARNESS,
        path=path,
        session_id=lines.session_id or clean_tag(path.stem),
        cwd=lines.cwd,
        exchanges=exchanges,
        skipped=counts(lines.skipped),
        worth_keeping=worth_keeping(exchanges),
        stats=dict(stats),
    )
