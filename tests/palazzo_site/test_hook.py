"""`palazzo hook claude-code` with real processes: the hook spools, whoever holds the palace feeds.

No component is simulated: the hook is the installed console script reading the documented stdin JSON,
the palace holder is a real `runmcp` (or a detached `palazzo feed --spool` the hook started), and what
was fed is checked through palace_find over MCP.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.feeding import spool
from palazzo_site import hook
from tests.mcpserver.conftest import Palazzo, connect, migrate, server_env, stdio_parameters
from tests.palace.sessions import claude_session, write_session

PALAZZO = Path(sys.executable).with_name("palazzo")
SESSION = "7d3f2a10-5b6c-4d7e-8f90-a1b2c3d4e5f6"
CWD = "/home/ada/code/orrery"
TURNS = [
    ("How many teeth has the lunar gear?", "The lunar gear has 223 teeth, one per synodic month of the saros."),
    ("And the pin-and-slot mechanism?", "It models the Moon's varying speed along its elliptical orbit."),
]
pytestmark = pytest.mark.slow


def run_hook(data_dir: Path, event: dict[str, Any], **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PALAZZO), "hook", "claude-code"],
        input=json.dumps(event),
        env=server_env(data_dir, **extra_env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def session_event(name: str, transcript: Path, **fields: Any) -> dict[str, Any]:
    return {"session_id": SESSION, "transcript_path": str(transcript), "cwd": CWD, "hook_event_name": name} | fields


def wait_for(condition: Callable[[], Any], *, seconds: float = 180.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def spool_idle(data_dir: Path) -> bool:
    return not spool.pending(data_dir) and not any(spool.spool_dir(data_dir).glob(f"*{spool.WORKING_SUFFIX}"))


def fed_memories(client: Palazzo) -> list[dict[str, Any]]:
    found = client.ok(
        "palace_find", {"query": "lunar gear teeth pin-and-slot", "room": "orrery", "limit": 20, "all_fields": True}
    )
    return found["results"]


def test_it_answers_hooks_without_importing_django(tmp_path: Path) -> None:
    probe = (
        "import sys; from palazzo_site.cli import main; status = main(['hook', 'claude-code']); "
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('django', 'numpy', 'mcp'))); "
        "sys.exit(status)"
    )
    event = {"hook_event_name": "Notification", "session_id": "s", "transcript_path": str(tmp_path / "t.jsonl")}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        input=json.dumps(event),
        env=server_env(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_it_hands_the_transcript_to_the_runmcp_holding_the_palace_and_injects_the_wake_up(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    transcript = write_session(tmp_path / "projects" / f"{SESSION}.jsonl", claude_session(SESSION, CWD, TURNS))
    with connect(stdio_parameters(data_dir), "stdio") as client:
        client.ok("palace_status")  # the palace is open in runmcp
        holder = wait_for(lambda: spool.live_holder(data_dir), what="runmcp to announce itself")
        assert holder["role"] == "server"
        stopped = run_hook(data_dir, session_event("Stop", transcript, stop_hook_active=False))
        assert (stopped.returncode, stopped.stdout, stopped.stderr) == (0, "", "")
        wait_for(lambda: len(fed_memories(client)) == 2, what="runmcp to feed the session")
        memories = sorted(fed_memories(client), key=lambda memory: memory["timestamp"])
        assert [memory["timestamp"] for memory in memories] == ["2026-11-30T09:00:00Z", "2026-11-30T09:01:00Z"]
        assert {memory["session"] for memory in memories} == {SESSION}
        assert {memory["added_by"] for memory in memories} == {f"claude-code@{hook.read_environment().device}"}
        assert {memory["source_file"] for memory in memories} == {str(transcript)}
        assert not (data_dir / spool.FEEDER_LOG).exists(), "no detached feeder while runmcp holds the palace"
        [source] = client.ok("palace_status")["feeding"]["sources"]
        assert (source["harness"], source["sessions"], source["exchanges"], source["last_error"]) == (
            "claude-code",
            1,
            2,
            None,
        )
        total = client.total()
        again = run_hook(data_dir, session_event("SessionEnd", transcript, reason="other"))
        assert again.returncode == 0
        wait_for(lambda: spool_idle(data_dir), what="the second trigger to be drained")
        assert client.total() == total, "re-feeding stored nothing"
        # SessionStart: the snapshot runmcp refreshed after its writes, bounded and wrapped in palazzo's markers.
        started = wait_for(
            lambda: (lambda done: done if "lunar gear" in done.stdout else None)(
                run_hook(data_dir, session_event("SessionStart", transcript, source="startup"))
            ),
            what="the wake-up snapshot to show the fed session",
        )
        output = json.loads(started.stdout)["hookSpecificOutput"]
        assert output["hookEventName"] == "SessionStart"
        context = output["additionalContext"]
        assert context.startswith("<palazzo-wake-up>") and context.endswith("</palazzo-wake-up>")
        assert "orrery" in context and len(context) <= hook.MAX_CONTEXT_CHARS
        resumed = run_hook(data_dir, session_event("SessionStart", transcript, source="resume"))
        assert (resumed.returncode, resumed.stdout) == (0, "")
        # An explicit `palazzo feed` while a session holds the palace is run by the palace's holder at once.
        other = write_session(
            tmp_path / "projects" / "other.jsonl",
            claude_session("other-session", CWD, [("Which gear drives the lunar pointer?", "The b1 gear.")]),
        )
        fed = subprocess.run(
            [str(PALAZZO), "feed", str(other)], env=server_env(data_dir), capture_output=True, text=True, timeout=300
        )
        assert fed.returncode == 0 and "1 memories stored" in fed.stdout + fed.stderr, fed.stderr
        assert len(fed_memories(client)) == 3


SHARD_HOLDER = Path("shards") / "claude-memory" / "holder.json"


def long_session(tmp_path: Path, steps: int) -> tuple[Path, list[tuple[str, str]]]:
    """A session long enough that feeding it outlasts the moves a test makes meanwhile."""
    build_log = "".join(f"[{line:05d}] lunar gear train step ok\n" for line in range(200))
    turns = [*TURNS, *[(f"Step {index}: check the lunar gear build", f"Step {index} clean.") for index in range(steps)]]
    transcript = write_session(
        tmp_path / f"{SESSION}.jsonl", claude_session(SESSION, CWD, turns, tool_output=build_log)
    )
    return transcript, turns


def feeder_holding_the_palace(data_dir: Path) -> dict[str, Any]:
    """Wait for the detached feeder a hook started to open the palace; its holder record."""
    holder: dict[str, Any] = wait_for(
        lambda: (lambda found: found if found and found.get("role") == "feeder" else None)(spool.live_holder(data_dir)),
        what="the detached feeder",
    )
    shard_holder = data_dir / SHARD_HOLDER
    wait_for(
        lambda: shard_holder.is_file() and json.loads(shard_holder.read_text())["pid"] == holder["pid"],
        what="the feeder to open the palace",
    )
    return holder


def test_it_feeds_in_a_detached_process_when_nobody_holds_the_palace_and_runmcp_takes_over(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    transcript, turns = long_session(tmp_path, steps=80)
    started = time.monotonic()
    ended = run_hook(data_dir, session_event("SessionEnd", transcript, reason="prompt_input_exit"))
    assert ended.returncode == 0 and ended.stderr == ""
    assert time.monotonic() - started < 30  # returned without feeding (the feed takes far longer than this)
    feeder_holding_the_palace(data_dir)
    # runmcp starting now must not fail: it asks the feeder to let go, then feeds the rest itself.
    with connect(stdio_parameters(data_dir), "stdio") as client:
        assert client.ok("palace_status")["total"] >= 0
        wait_for(lambda: client.total() == len(turns), what="every exchange to be fed")
        # Its spool watcher claims the spool 2 s after start-up (WATCH_AFTER_SECONDS): when the feeder
        # finished first, the exchanges are all in before that.
        wait_for(
            lambda: (spool.live_holder(data_dir) or {}).get("role") == "server",
            seconds=30,
            what="runmcp to hold the spool",
        )
    log = (data_dir / spool.FEEDER_LOG).read_text()
    assert "Traceback" not in log, log


def test_it_takes_the_session_back_when_the_server_that_took_the_palace_dies_before_feeding(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    transcript, turns = long_session(tmp_path, steps=200)
    ended = run_hook(data_dir, session_event("SessionEnd", transcript, reason="prompt_input_exit"))
    assert ended.returncode == 0 and ended.stderr == ""
    shard_holder = data_dir / SHARD_HOLDER
    feeder = feeder_holding_the_palace(data_dir)
    # runmcp takes the palace over, then is killed (as a harness stops its MCP servers) before its
    # spool watcher starts (WATCH_AFTER_SECONDS): the session must not be left to nobody.
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(connect(stdio_parameters(data_dir), "stdio"))
        client.ok("palace_status")
        server_pid = json.loads(shard_holder.read_text())["pid"]
        assert server_pid != feeder["pid"]
        os.kill(server_pid, signal.SIGKILL)
        with contextlib.suppress(Exception):  # the client finds its server gone
            stack.close()
    wait_for(lambda: spool_idle(data_dir) and spool.live_holder(data_dir) is None, what="the feeder to finish")
    with connect(stdio_parameters(data_dir), "stdio") as client:
        assert client.total() == len(turns)  # fed before this server started, not by it
    log = (data_dir / spool.FEEDER_LOG).read_text()
    assert "Traceback" not in log, log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda children: (
                st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
            ),
            max_leaves=12,
        ).map(lambda value: json.dumps(value).encode()),
        st.fixed_dictionaries(
            {"hook_event_name": st.sampled_from(["SessionStart", "Notification", "UserPromptSubmit"])},
            optional={"cwd": st.text(max_size=30), "source": st.text(max_size=10), "session_id": st.integers()},
        ).map(lambda value: json.dumps(value).encode()),
    )
)
def test_it_never_raises_on_any_hook_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raw: bytes
) -> None:
    monkeypatch.setenv("PALAZZO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PALAZZO_URL", raising=False)

    class Stdin:
        buffer = __import__("io").BytesIO(raw)

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert hook.main(["claude-code"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") <= 1
    if captured.out:
        assert WAKE_OPEN in json.loads(captured.out)["hookSpecificOutput"]["additionalContext"]


WAKE_OPEN = "<palazzo-wake-up>"


def test_it_queues_a_subagent_s_own_transcript_at_subagent_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    spool.claim_holder(data_dir, role="server")  # this process holds the palace: the job waits for it
    try:
        main_transcript, subagent = tmp_path / f"{SESSION}.jsonl", tmp_path / "agent-a1b2.jsonl"
        subagent.write_text("")  # a transcript whose file does not exist is not queued (test_missing_transcript)
        done = run_hook(data_dir, session_event("SubagentStop", main_transcript, agent_transcript_path=str(subagent)))
        assert done.returncode == 0 and done.stderr == ""
        [queued] = spool.pending(data_dir)
        job = json.loads(queued.read_text())
        assert (job["path"], job["event"], job["final"]) == (str(subagent), "SubagentStop", False)
    finally:
        spool.release_holder(data_dir)


def test_it_feeds_the_session_a_killed_server_had_in_hand(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    transcript, turns = long_session(tmp_path, steps=4)
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(connect(stdio_parameters(data_dir), "stdio"))
        assert client.total() == 0
        wait_for(lambda: (spool.live_holder(data_dir) or {}).get("role") == "server", what="runmcp to hold the spool")
        # The state runmcp's watcher is in while it feeds a job: the job renamed .working, the spool empty.
        queued = spool.enqueue(data_dir, spool.Job(harness="claude-code", path=str(transcript), final=True))
        assert spool.claim(queued) is not None and not spool.pending(data_dir)
        feeder = subprocess.Popen([str(PALAZZO), "feed", "--spool"], env=server_env(data_dir), stderr=subprocess.PIPE)
        time.sleep(2)
        assert feeder.poll() is None, "a feeder waits for the live server that has a job in hand"
        os.kill(json.loads((data_dir / SHARD_HOLDER).read_text())["pid"], signal.SIGKILL)
        with contextlib.suppress(Exception):  # the client finds its server gone
            stack.close()
    _, errors = feeder.communicate(timeout=180)
    assert feeder.returncode == 0, errors
    assert spool_idle(data_dir)
    with connect(stdio_parameters(data_dir), "stdio") as client:
        assert client.total() == len(turns)  # fed by the feeder, before this server started
