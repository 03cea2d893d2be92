"""Harness session transcripts parsed into exchanges worth remembering (stdlib only, no Django).

Claude Code, pi, Codex, opencode and a generic JSONL ({"role", "text", "timestamp"} per line).
Parsers never raise on a bad line: it is skipped and counted in Transcript.skipped.
"""

from palace.transcripts.discovery import default_roots, detect_harness, discover, parse_transcript
from palace.transcripts.model import (
    HARNESSES,
    WAKE_UP_CLOSE,
    WAKE_UP_OPEN,
    Exchange,
    Transcript,
    TranscriptError,
)
from palace.transcripts.text import exchange_texts, project_name

__all__ = [
    "HARNESSES",
    "WAKE_UP_CLOSE",
    "WAKE_UP_OPEN",
    "Exchange",
    "Transcript",
    "TranscriptError",
    "default_roots",
    "detect_harness",
    "discover",
    "exchange_texts",
    "parse_transcript",
    "project_name",
]
