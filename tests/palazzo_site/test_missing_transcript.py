"""A session that wrote no transcript has nothing to feed: its hooks queue nothing and `palazzo status` shows
no error. The real Claude Code CLI ends such sessions itself (`claude mcp list` checking its servers fires
SessionEnd with a transcript path it never created).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from palace.feeding import spool
from tests.mcpserver.conftest import migrate, server_env
from tests.palace.sessions import claude_session, write_session
from tests.palazzo_site.test_claude_code import claude_cli
from tests.palazzo_site.test_hook import CWD, PALAZZO, SESSION, TURNS, run_hook, session_event, wait_for

pytestmark = pytest.mark.slow


def feeding(env: dict[str, str]) -> dict[str, Any]:
    status = subprocess.run([str(PALAZZO), "status", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)["feeding"]


def test_it_shows_no_error_after_claude_code_ends_a_session_that_wrote_no_transcript(tmp_path: Path) -> None:
    claude = claude_cli()
    data_dir, config_dir, project = tmp_path / "data", tmp_path / "claude", tmp_path / "work" / "orrery"
    project.mkdir(parents=True)
    migrate(data_dir)
    env = server_env(data_dir, CLAUDE_CONFIG_DIR=str(config_dir), HOME=str(tmp_path / "home"), NO_COLOR="1")
    env.pop("ANTHROPIC_API_KEY", None)
    installed = subprocess.run(
        [str(PALAZZO), "install-hooks", "claude-code"], env=env, capture_output=True, text=True, timeout=60
    )
    assert installed.returncode == 0, installed.stderr
    # A second SessionEnd hook beside palazzo's records what Claude Code sent, so the test knows the event fired.
    seen = tmp_path / "session-end.jsonl"
    settings_file = config_dir / "settings.json"
    settings = json.loads(settings_file.read_text())
    settings["hooks"]["SessionEnd"].append(
        {"hooks": [{"type": "command", "command": f"cat >> {seen}; echo >> {seen}"}]}
    )
    settings_file.write_text(json.dumps(settings, indent=2))
    for command in (["mcp", "add", "palazzo", "--", str(PALAZZO), "runmcp"], ["mcp", "list"]):
        done = subprocess.run(
            [str(claude), *command], env=env, cwd=project, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr + done.stdout
    events = [json.loads(line) for line in seen.read_text().splitlines() if line.strip()]
    assert events and {event["hook_event_name"] for event in events} == {"SessionEnd"}
    assert not any(Path(event["transcript_path"]).exists() for event in events)
    # Claude Code waits for its hooks: had palazzo's queued the path, the job (or the feeder it started) is there.
    assert not spool.pending(data_dir)
    assert not (data_dir / spool.FEEDER_LOG).exists()
    state = feeding(env)
    assert (state["sources"], state["queued"], state["failed_waiting_for_retry"]) == ([], 0, 0)


def test_it_queues_a_transcript_at_the_next_stop_once_its_file_is_written(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    transcript = tmp_path / "projects" / f"{SESSION}.jsonl"
    early = run_hook(data_dir, session_event("Stop", transcript, stop_hook_active=False))
    assert (early.returncode, early.stdout, early.stderr) == (0, "", "")
    assert not spool.pending(data_dir) and not (data_dir / spool.FEEDER_LOG).exists()
    write_session(transcript, claude_session(SESSION, CWD, TURNS))
    later = run_hook(data_dir, session_event("Stop", transcript, stop_hook_active=False))
    assert (later.returncode, later.stderr) == (0, "")

    # Queued by the second Stop: the feeder it started (nobody holds the palace) feeds the whole session.
    def fed_sources() -> list[dict[str, Any]]:
        return [source for source in feeding(server_env(data_dir))["sources"] if source["exchanges"] == len(TURNS)]

    [source] = wait_for(fed_sources, seconds=240, what="the session to be fed")
    assert (source["sessions"], source["last_error"]) == (1, None)
