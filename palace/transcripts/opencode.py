"""opencode sessions (being written: the first commit ships Claude Code and generic JSONL)."""

from __future__ import annotations

from pathlib import Path

from palace.transcripts.model import Transcript, TranscriptError


def is_session_file(path: Path) -> bool:
    """True for storage/session/<project>/<session>.json."""
    return path.suffix == ".json" and path.parent.parent.name == "session"


def parse(path: Path) -> Transcript:
    """Not supported yet."""
    raise TranscriptError(f"{path}: opencode sessions are not supported yet")
