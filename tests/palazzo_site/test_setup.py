"""`palazzo setup claude-code` with the real Claude Code CLI (from npm, pinned) in a private config dir:
the MCP server is registered (as `claude mcp get` reports it) and the hooks are in settings.json, a second
run changes nothing, and `--uninstall` removes both.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.mcpserver.conftest import migrate, server_env
from tests.palazzo_site.test_claude_code import claude_cli
from tests.palazzo_site.test_hook import PALAZZO

pytestmark = pytest.mark.slow


def _environment(tmp_path: Path, *, with_claude: bool = True) -> dict[str, str]:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir, CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), HOME=str(tmp_path / "home"), NO_COLOR="1")
    env.pop("ANTHROPIC_API_KEY", None)
    # Only the pinned `claude` and the system's tools: no `claude` a developer installed elsewhere.
    claude_dir = [str(claude_cli().parent)] if with_claude else []
    env["PATH"] = os.pathsep.join([*claude_dir, "/usr/local/bin", "/usr/bin", "/bin"])
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PALAZZO), *args], env=env, capture_output=True, text=True, timeout=180)


def _claude_mcp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    claude = claude_cli()
    return subprocess.run([str(claude), "mcp", *args], env=env, capture_output=True, text=True, timeout=120)


def _hook_events(tmp_path: Path) -> set[str]:
    settings = tmp_path / "claude" / "settings.json"
    hooks = json.loads(settings.read_text()).get("hooks", {}) if settings.exists() else {}
    return {event for event, groups in hooks.items() if "palazzo" in json.dumps(groups)}


def test_it_registers_the_server_and_the_hooks_once_and_removes_both(tmp_path: Path) -> None:
    env = _environment(tmp_path)
    done = _run(env, "setup", "claude-code")
    assert done.returncode == 0, done.stderr
    assert "registered with Claude Code" in done.stdout
    listed = _claude_mcp(env, "get", "palazzo")
    assert listed.returncode == 0, listed.stderr
    assert f"Command: {PALAZZO}" in listed.stdout and "Args: runmcp" in listed.stdout
    assert "User config" in listed.stdout
    # The health check starts `palazzo runmcp` over stdio: it answers Claude Code's initialize.
    assert "✔ Connected" in _claude_mcp(env, "list").stdout
    assert {"SessionStart", "Stop", "SessionEnd"} <= _hook_events(tmp_path)
    settings_before = (tmp_path / "claude" / "settings.json").read_text()

    again = _run(env, "setup", "claude-code")
    assert again.returncode == 0, again.stderr
    assert "already registered" in again.stdout and "nothing to change" in again.stdout
    assert (tmp_path / "claude" / "settings.json").read_text() == settings_before

    removed = _run(env, "setup", "claude-code", "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert _claude_mcp(env, "get", "palazzo").returncode != 0
    assert _hook_events(tmp_path) == set()


def test_it_replaces_another_installs_palazzo_but_not_a_stranger(tmp_path: Path) -> None:
    env = _environment(tmp_path)
    old = str(tmp_path / "old-checkout" / ".venv" / "bin" / "palazzo")
    assert _claude_mcp(env, "add", "--scope", "user", "palazzo", "--", old, "runmcp").returncode == 0
    done = _run(env, "setup", "claude-code")
    assert done.returncode == 0, done.stderr
    assert f"Command: {PALAZZO}" in _claude_mcp(env, "get", "palazzo").stdout

    assert _claude_mcp(env, "remove", "palazzo", "--scope", "user").returncode == 0
    assert _claude_mcp(env, "add", "--scope", "user", "palazzo", "--", "/usr/bin/env", "true").returncode == 0
    refused = _run(env, "setup", "claude-code")
    assert refused.returncode == 1
    assert "already has a user-scope MCP server named palazzo" in refused.stderr
    assert "Command: /usr/bin/env" in _claude_mcp(env, "get", "palazzo").stdout


def test_it_says_claude_is_missing_and_changes_nothing(tmp_path: Path) -> None:
    env = _environment(tmp_path, with_claude=False)
    done = _run(env, "setup", "claude-code")
    assert done.returncode == 1
    assert "`claude` is not on PATH" in done.stderr
    assert not (tmp_path / "claude" / "settings.json").exists()
