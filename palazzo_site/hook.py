"""`palazzo hook <harness>`: what a harness runs on session events (hook JSON on stdin).

Standard library only, and it never opens the palace or takes its lock (runmcp may be starting at
the same moment): SessionStart prints the wake-up context from a snapshot file (or, with PALAZZO_URL,
from the server's /wake-up; with PostgreSQL and a Qdrant server, several hosts sharing the palace, from
the database's snapshots, with psycopg); Stop, PreCompact and SessionEnd queue the transcript in the spool
(when its file exists: a session that wrote none has nothing to feed) and return, and the process holding
the palace feeds it; when nobody holds it (or the palace is remote) a detached `palazzo feed --spool` is
started. Every failure is one line on stderr and exit status 0: the agent keeps working.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from palace.feeding import snapshots, spool
from palazzo_site.environment import ConfigurationError, PalazzoEnvironment, read_environment

HARNESSES = ("claude-code", "pi", "codex", "opencode", "gemini", "jsonl")
# Gemini CLI names the end of a turn AfterAgent (Claude Code and Codex: Stop).
FEED_EVENTS = ("Stop", "PreCompact", "SessionEnd", "SubagentStop", "AfterAgent")
MAX_STDIN_BYTES = 4 * 1024 * 1024
# Claude Code caps additionalContext at 10,000 characters; the budget is 2,000 tokens (chars / 4).
MAX_CONTEXT_CHARS = 8000
# The SessionStart budget is 300 ms; a remote palace gets this long to answer before the session starts without it.
REMOTE_WAKE_UP_TIMEOUT = 1.0


class HookProblem(Exception):
    """Why a hook did nothing; printed as one line on stderr."""


def _text(event: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = event.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise HookProblem(f"the hook input's {key!r} must be a non-empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise HookProblem(f"the hook input's {key!r} is not valid UTF-8") from None
    return value


def read_event(raw: bytes) -> dict[str, Any]:
    """The hook input, checked: a JSON object naming its event."""
    if len(raw) > MAX_STDIN_BYTES:
        raise HookProblem(f"the hook input is larger than {MAX_STDIN_BYTES} bytes")
    try:
        event = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HookProblem(f"the hook input is not JSON ({type(exc).__name__})") from None
    if not isinstance(event, dict):
        raise HookProblem("the hook input must be a JSON object")
    _text(event, "hook_event_name", required=True)
    return event


def wrap_context(body: str) -> str:
    """The injected text between palazzo's markers (so feeding never re-ingests it), within the budget."""
    from palace.feeding.transcripts import WAKE_UP_CLOSE, WAKE_UP_OPEN  # the parsers, which only SessionStart needs

    room = MAX_CONTEXT_CHARS - len(WAKE_UP_OPEN) - len(WAKE_UP_CLOSE) - 2
    if len(body) > room:
        body = body[: room - 1] + "…"
    return f"{WAKE_UP_OPEN}\n{body}\n{WAKE_UP_CLOSE}"


def _remote_request(env: PalazzoEnvironment, path: str, *, timeout: float) -> Any:
    import urllib.error  # http.client and email: only a remote palace needs them
    import urllib.request

    assert env.remote_url is not None
    request = urllib.request.Request(env.remote_url + path, headers={"Accept": "application/json"})
    if env.remote_token:
        request.add_header("Authorization", f"Bearer {env.remote_token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read(1024 * 1024).decode("utf-8"))
    except urllib.error.HTTPError as exc:
        reason = "the token was refused (401)" if exc.code == 401 else f"it answered {exc.code}"
        raise HookProblem(f"cannot reach the palace at {env.remote_url}: {reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise HookProblem(f"cannot reach the palace at {env.remote_url}: {cause}") from None


def wake_up(env: PalazzoEnvironment, event: dict[str, Any], harness: str = "claude-code") -> str | None:
    """The SessionStart output (in the harness's format), or None when nothing is injected."""
    if event.get("source") == "resume":  # the context is already in the resumed conversation
        return None
    from palace.feeding.transcripts import project_name

    room = project_name(_text(event, "cwd"))
    if env.remote_url:
        from urllib.parse import urlencode

        query = urlencode({"room": room})
        snapshot = _remote_request(
            env, f"/wake-up?{query}", timeout=min(REMOTE_WAKE_UP_TIMEOUT, env.remote_timeout_seconds)
        )
    elif database := snapshots.shared_database(env.database_url, env.qdrant_url):
        snapshot = snapshots.read_shared(database, room)  # several hosts share the palace: their database's
    else:
        snapshot = snapshots.read(env.data_dir, room)
    body = snapshot.get("context") if isinstance(snapshot, dict) else None
    if not isinstance(body, str) or not body:
        body = (
            "palazzo: no wake-up context is prepared yet (it is written by the process holding the palace, "
            "runmcp or serve, after its first writes). Use palace_status and palace_find."
        )
    return session_start_output(harness, wrap_context(body))


def session_start_output(harness: str, context: str) -> str:
    """What a harness reads on stdout from its SessionStart hook: the Claude Code schema unless it wants its own."""
    output = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}}
    return json.dumps(output, ensure_ascii=False)


def transcript_exists(path: Path) -> bool:
    """False only when the transcript's file is certainly absent (opencode's '<database>#<session>': the database)."""
    name, separator, _session = path.name.partition("#")
    if separator and name.endswith(".db"):
        path = path.with_name(name)
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True  # there but unreadable (or unnameable): the feeder says why in `palazzo status`
    return True


def schedule_feed(env: PalazzoEnvironment, harness: str, event: dict[str, Any]) -> str | None:
    """Queue the session's transcript; start a detached feeder when nobody who could feed it is running.

    Returns a warning for stderr: with a remote palace, why the previous feed could not reach it.
    """
    name = _text(event, "hook_event_name", required=True)
    path = _text(event, "agent_transcript_path") if name == "SubagentStop" else None
    path = path or _text(event, "transcript_path", required=True)
    assert path is not None
    if not transcript_exists(Path(path).expanduser()):
        # No session happened (`claude mcp list` ends one it never wrote) or the harness has not written
        # its file yet: nothing to feed now, and the next Stop or SessionEnd queues the same path again.
        return None
    job = spool.Job(
        harness=harness,
        path=str(Path(path).expanduser()),
        session_id=_text(event, "session_id"),
        cwd=_text(event, "cwd"),
        event=name,
        final=name == "SessionEnd",
    )
    try:
        spool.enqueue(env.data_dir, job)
        spool.requeue_failed(env.data_dir)  # this trigger is the retry of whatever could not be fed before
    except OSError as exc:
        raise HookProblem(f"cannot queue {path} in {spool.spool_dir(env.data_dir)}: {exc}") from None
    # Written first, checked second: a holder that is just leaving re-reads the spool after it withdrew.
    # At SessionEnd a feeder starts anyway: the harness stops its MCP servers (runmcp, the holder) right
    # after this hook, and the feeder takes over if runmcp goes before the session is fed.
    holder = spool.live_holder(env.data_dir)
    if (env.remote_url or job.final or holder is None) and not spool.feeder_active(env.data_dir):
        try:
            spool.spawn_feeder(env.data_dir)
        except OSError as exc:
            raise HookProblem(f"queued {path}, but cannot start a feeder: {exc}") from None
    if env.remote_url:
        problem = spool.remote_error(env.data_dir)
        if problem:
            return f"the last feed failed ({problem}); the transcripts stay queued and are sent again now"
    return None


def run(harness: str, raw: bytes) -> tuple[str | None, str | None]:
    """Act on one hook event; returns what to print on stdout and a warning for stderr."""
    if harness not in HARNESSES:
        raise HookProblem(f"unknown harness {harness!r}; expected one of {', '.join(HARNESSES)}")
    event = read_event(raw)
    try:
        env = read_environment()
    except ConfigurationError as exc:
        raise HookProblem(str(exc)) from None
    name = event["hook_event_name"]
    if name == "SessionStart":
        return wake_up(env, event, harness), None
    if name in FEED_EVENTS:
        return None, schedule_feed(env, harness, event)
    return None, None


def main(args: list[str]) -> int:
    """`palazzo hook HARNESS` < hook JSON; always exit status 0."""
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write(f"usage: palazzo hook {{{','.join(HARNESSES)}}} < hook-input.json\n")
        return 0
    try:
        output, warning = run(args[0], sys.stdin.buffer.read(MAX_STDIN_BYTES + 1))
    except HookProblem as exc:
        sys.stderr.write(f"palazzo hook: {exc}\n")
        return 0
    except Exception as exc:  # a hook must never break the harness's session
        sys.stderr.write(f"palazzo hook: failed unexpectedly: {type(exc).__name__}: {exc}\n")
        return 0
    if warning:
        sys.stderr.write(f"palazzo hook: {warning}\n")
    if output:
        sys.stdout.write(output + "\n")
    return 0
