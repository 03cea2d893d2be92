"""install-hooks: palazzo's hooks land in Claude Code's settings beside the user's, and leave exactly."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.feeding import claude_settings
from tests.mcpserver.conftest import server_env

PALAZZO = Path(sys.executable).with_name("palazzo")
USER_SETTINGS = {
    "model": "opus",
    "hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "~/bin/load-notes.sh"}]}],
        "PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "ruff format"}]}],
    },
}


def install_hooks(*args: str, config_dir: Path) -> subprocess.CompletedProcess[str]:
    env = server_env(config_dir.parent / "data", CLAUDE_CONFIG_DIR=str(config_dir))
    return subprocess.run(
        [str(PALAZZO), "install-hooks", "claude-code", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_it_installs_into_the_user_settings_idempotently_and_uninstalls_exactly(tmp_path: Path) -> None:
    config_dir = tmp_path / "claude"
    config_dir.mkdir()
    settings_file = config_dir / "settings.json"
    settings_file.write_text(json.dumps(USER_SETTINGS))
    installed = install_hooks(config_dir=config_dir)
    assert installed.returncode == 0, installed.stderr
    data = json.loads(settings_file.read_text())
    command = f"{PALAZZO} hook claude-code"
    for event in ("SessionStart", "Stop", "PreCompact", "SubagentStop", "SessionEnd"):
        assert [h["command"] for g in data["hooks"][event] for h in g["hooks"]][-1] == command
    assert data["hooks"]["SessionStart"][0] == USER_SETTINGS["hooks"]["SessionStart"][0]
    assert data["hooks"]["SessionStart"][1]["matcher"] == "startup|clear|compact"
    assert data["hooks"]["PostToolUse"] == USER_SETTINGS["hooks"]["PostToolUse"] and data["model"] == "opus"
    assert "nothing to change" in install_hooks(config_dir=config_dir).stdout
    assert json.loads(settings_file.read_text()) == data
    removed = install_hooks("--uninstall", config_dir=config_dir)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(settings_file.read_text()) == USER_SETTINGS


def test_it_writes_a_settings_file_given_with_settings_and_refuses_a_broken_one(tmp_path: Path) -> None:
    target = tmp_path / "project" / ".claude" / "settings.local.json"
    target.parent.parent.mkdir()  # the project is there; its .claude dir is made with the file
    assert install_hooks("--settings", str(target), config_dir=tmp_path / "unused").returncode == 0
    assert set(json.loads(target.read_text())["hooks"]) == set(claude_settings.EVENTS)
    assert install_hooks("--settings", str(target), "--uninstall", config_dir=tmp_path / "unused").returncode == 0
    assert json.loads(target.read_text()) == {}
    broken = tmp_path / "broken.json"
    broken.write_text('{"hooks": ')
    refused = install_hooks("--settings", str(broken), config_dir=tmp_path / "unused")
    assert refused.returncode != 0 and "cannot read" in refused.stderr
    assert broken.read_text() == '{"hooks": '


def test_it_replaces_the_handler_of_an_older_installation_instead_of_adding_a_second(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    claude_settings.install(path, Path("/old/venv/bin/palazzo"))
    claude_settings.install(path, Path("/new place/bin/palazzo"))
    commands = [
        h["command"] for groups in json.loads(path.read_text())["hooks"].values() for g in groups for h in g["hooks"]
    ]
    assert commands == ["'/new place/bin/palazzo' hook claude-code"] * len(claude_settings.EVENTS)


handler = st.fixed_dictionaries({"type": st.just("command"), "command": st.text(max_size=30)})
group = st.fixed_dictionaries({"hooks": st.lists(handler, max_size=3)}, optional={"matcher": st.text(max_size=10)})
user_settings = st.fixed_dictionaries(
    {},
    optional={
        "hooks": st.dictionaries(
            st.sampled_from([*claude_settings.EVENTS, "PostToolUse"]), st.lists(group, max_size=3)
        ),
        "env": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    },
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_settings)
def test_it_leaves_any_user_settings_as_they_were_after_install_and_uninstall(
    tmp_path: Path, original: dict[str, Any]
) -> None:
    if any(
        claude_settings.is_ours(h) for groups in original.get("hooks", {}).values() for g in groups for h in g["hooks"]
    ):
        return  # a handler that already is palazzo's is palazzo's to remove
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(original))
    claude_settings.install(path, PALAZZO)
    claude_settings.install(path, PALAZZO)
    claude_settings.uninstall(path)
    expected = copy.deepcopy(original)
    # An event whose list palazzo's handler was the only entry of goes with it (an empty list meant nothing).
    hooks = {
        event: groups
        for event, groups in expected.pop("hooks", {}).items()
        if groups or event not in claude_settings.EVENTS
    }
    if hooks:
        expected["hooks"] = hooks
    assert json.loads(path.read_text()) == expected


@pytest.mark.parametrize(
    "command",
    ["/x/.venv/bin/palazzo hook claude-code", "'/a b/palazzo' hook claude-code", "palazzo hook claude-code"],
)
def test_it_recognises_its_own_handlers(command: str) -> None:
    assert claude_settings.is_ours({"type": "command", "command": command})
    assert not claude_settings.is_ours({"type": "command", "command": "notpalazzo hook claude-code"})
