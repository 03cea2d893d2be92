"""The parsed shape of a harness session: a Transcript of Exchanges (no Django, stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

HARNESSES = ("claude-code", "pi", "codex", "opencode", "gemini", "jsonl")

# palazzo wraps every wake-up context it injects in these markers; parsers drop them and what is
# between, so the palace never re-ingests its own output.
WAKE_UP_OPEN = "<palazzo-wake-up>"
WAKE_UP_CLOSE = "</palazzo-wake-up>"


class TranscriptError(Exception):
    """A file that cannot be read as a transcript at all (missing, a directory, undetectable)."""


@dataclass(frozen=True)
class Exchange:
    """One user prompt and the assistant's reply to it."""

    key: str
    index: int
    prompt: str
    reply: str
    started_at: datetime
    complete: bool


@dataclass(kw_only=True)
class Transcript:
    """One harness session (or one subagent run) as exchanges worth remembering."""

    harness: str
    path: Path
    session_id: str | None
    cwd: str | None
    exchanges: list[Exchange]
    worth_keeping: bool
    skipped: dict[str, int] = field(default_factory=dict)
    # A subagent run names the session that started it and its own id; a main session names neither.
    parent_session_id: str | None = None
    agent_id: str | None = None
    version: str | None = None
    subagents: list[Transcript] = field(default_factory=list)
    # Counters that are not exclusions (lines read, assistant lines merged into messages, format version).
    stats: dict[str, int] = field(default_factory=dict)
