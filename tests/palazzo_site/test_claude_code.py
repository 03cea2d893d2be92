"""End to end with the real Claude Code CLI (from npm, pinned): offline and logged out, `claude -p` still
fires SessionStart and SessionEnd with the real stdin JSON and writes its transcript, so palazzo's hooks,
installed by `palazzo install-hooks` into a temporary CLAUDE_CONFIG_DIR, must inject the wake-up context
into that transcript and feed the session into the palace.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.mcpserver.conftest import migrate, server_env
from tests.npm_tools import npm_tool
from tests.palace.sessions import claude_session, write_session
from tests.palazzo_site.test_hook import PALAZZO, TURNS, wait_for

pytestmark = pytest.mark.slow
PROMPT = "What do we know about the lunar gear of the orrery?"


def claude_cli() -> Path:
    """The pinned CLI under .tools/ (installed from the npm registry on first use)."""
    return npm_tool("install-claude-code.sh", "the Claude Code CLI")


def test_it_injects_the_wake_up_context_and_feeds_a_real_claude_code_session(tmp_path: Path) -> None:
    claude = claude_cli()
    data_dir, config_dir, project = tmp_path / "data", tmp_path / "claude", tmp_path / "work" / "orrery"
    project.mkdir(parents=True)
    migrate(data_dir)
    env = server_env(data_dir, CLAUDE_CONFIG_DIR=str(config_dir), HOME=str(tmp_path / "home"), NO_COLOR="1")
    env.pop("ANTHROPIC_API_KEY", None)
    # An earlier session of this project, fed already: the wake-up context should bring it back.
    earlier = write_session(tmp_path / "earlier.jsonl", claude_session("earlier-session", str(project), TURNS))
    fed = subprocess.run([str(PALAZZO), "feed", str(earlier)], env=env, capture_output=True, text=True, timeout=300)
    assert fed.returncode == 0, fed.stderr
    installed = subprocess.run(
        [str(PALAZZO), "install-hooks", "claude-code"], env=env, capture_output=True, text=True, timeout=60
    )
    assert installed.returncode == 0, installed.stderr
    added = subprocess.run(
        [str(claude), "mcp", "add", "--scope", "user", "palazzo", "--", str(PALAZZO), "runmcp"],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert added.returncode == 0, added.stderr + added.stdout
    session = subprocess.run(
        [str(claude), "-p", PROMPT], env=env, cwd=project, capture_output=True, text=True, timeout=300
    )
    assert "Not logged in" in session.stdout + session.stderr  # offline, no login: the CLI still ran its hooks
    [transcript] = list((config_dir / "projects").glob("*/*.jsonl"))
    lines = [json.loads(line) for line in transcript.read_text().splitlines() if line.strip()]
    contexts = [
        line["attachment"]
        for line in lines
        if line.get("type") == "attachment" and line["attachment"].get("type") == "hook_additional_context"
    ]
    injected = "\n".join(text for attachment in contexts for text in attachment["content"])
    assert injected.startswith("<palazzo-wake-up>") and "lunar gear" in injected
    # The session itself gets fed (by runmcp if it still runs, else by the feeder SessionEnd started).

    def fed_sessions() -> list[dict[str, object]]:
        status = subprocess.run(
            [str(PALAZZO), "feed", "--dry-run", "--json", str(transcript)], env=env, capture_output=True, text=True
        )
        reports = [json.loads(line) for line in status.stdout.splitlines() if line.startswith("{")]
        return [report for report in reports if report.get("status") == "dry-run" and report.get("unchanged")]

    [report] = wait_for(fed_sessions, seconds=240, what="the Claude Code session to be fed")
    assert report["session"] == transcript.stem and report["room"] == "orrery" and report["stored"] == 0
