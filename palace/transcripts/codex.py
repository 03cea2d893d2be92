"""codex transcripts (being written: the first commit ships Claude Code and generic JSONL)."""

from __future__ import annotations

from pathlib import Path

from palace.transcripts.model import Transcript, TranscriptError


def parse(path: Path) -> Transcript:
    """Not supported yet."""
    raise TranscriptError(f"{path}: codex transcripts are not supported yet")
