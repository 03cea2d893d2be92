"""Harness session transcripts parsed into exchanges worth remembering (stdlib only, no Django).

Claude Code, pi, Codex, opencode, Gemini CLI and a generic JSONL ({"role", "text", "timestamp"} per line).
Parsers never raise on a bad line: it is skipped and counted in Transcript.skipped (reason -> count).

What an exchange is, for every harness:
- prompt: the user's text verbatim; images become "[image]"; harness markup is removed (system
  reminders, IDE context, local-command output, hook output); a slash command reads as typed
  ("/name args"). A bare slash command or bash-mode command the model never answered is dropped.
- reply: assistant text verbatim (thinking dropped), tool calls condensed to
  "[tool <name>: <key arguments>] -> <result excerpt>" (arguments <= 200, excerpt <= 400 characters);
  the lines one API response is written as (Claude Code: shared message.id) form one reply, a block
  repeated on a later streamed line is kept once. Synthetic API-error lines ("Not logged in") are not
  replies; they end the turn.
- palazzo's own wake-up context (between WAKE_UP_OPEN and WAKE_UP_CLOSE) is removed wherever it
  appears: hook attachments, system reminders, prompts, replies, tool results (Gemini CLI puts it
  in the prompt inside <hook_context>, its angle brackets escaped).
- Gemini CLI's chat log is folded as Gemini CLI loads it: a message id written again replaces its
  earlier version (last version wins, in the order ids first appeared); a rewind drops what it undid.
- key: stable as the file grows (Claude Code: the prompt line's uuid; pi: "ts-<epoch ms>" of the
  prompt, which survives pi rewriting a v1 file as v3; Codex and generic JSONL: "line-<n>";
  opencode and Gemini CLI: the user message id).
- started_at: the user turn's timestamp; missing or invalid, the previous turn's (else the next one's,
  else the file's mtime).
- complete: False only for the last exchange while the assistant is still at it (no reply yet, a
  tool call without its result, or a tool result not yet answered), unless the log marks the turn
  finished (end_turn, turn_duration, task_complete, pi stopReason, an API error).
- Subagents: Claude Code's inline sidechains (1.0.x), agent-<id>.jsonl siblings (2.0.x) and
  <session>/subagents/agent-<id>.jsonl (2.1.x), opencode child sessions and Gemini CLI sub-agent
  chats (chats/<session id>/<id>.jsonl), are Transcripts in
  `subagents` with parent_session_id set and session_id "<parent>:agent-<id>" (Claude Code) or their
  own id; Codex sub-agent threads are rollouts of their own carrying parent_session_id.
- worth_keeping: at least one exchange whose prompt has text that is not only a slash command or
  placeholder (Claude Code 2.0 "Warmup" subagent runs are not).
"""

from palace.feeding.transcripts.discovery import default_roots, detect_harness, discover, parse_transcript
from palace.feeding.transcripts.model import (
    HARNESSES,
    WAKE_UP_CLOSE,
    WAKE_UP_OPEN,
    Exchange,
    Transcript,
    TranscriptError,
)
from palace.feeding.transcripts.text import exchange_texts, project_name

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
