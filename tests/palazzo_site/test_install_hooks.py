"""`palazzo install-hooks` refuses a directory the user typed that is not there: a typo must not pass silently."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from palace.feeding import pi_extension
from tests.mcpserver.conftest import server_env
from tests.palazzo_site.test_hook import PALAZZO


def install_hooks(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    env = server_env(tmp_path / "data", HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    for variable in ("CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        env.pop(variable, None)
    return subprocess.run([str(PALAZZO), "install-hooks", *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("harness", "flag"),
    [("pi", "--agent-dir"), ("codex", "--config-dir"), ("opencode", "--config-dir"), ("gemini", "--config-dir")],
)
def test_it_refuses_a_mistyped_agent_or_config_dir_and_creates_nothing(tmp_path: Path, harness: str, flag: str) -> None:
    typo = tmp_path / "wrong" / "path"
    for uninstall in ((), ("--uninstall",)):
        refused = install_hooks(tmp_path, harness, flag, str(typo), *uninstall)
        assert refused.returncode == 1, refused.stdout
        assert (
            refused.stderr
            == f"install-hooks: {flag}: {typo} is not a directory; check the path (nothing was changed)\n"
        )
    assert not (tmp_path / "wrong").exists() and not (tmp_path / "home").exists()
    typo.mkdir(parents=True)
    installed = install_hooks(tmp_path, harness, flag, str(typo))
    assert installed.returncode == 0, installed.stderr
    assert any(typo.iterdir())


def test_it_makes_pi_s_default_agent_dir_which_pi_makes_on_first_run_anyway(tmp_path: Path) -> None:
    installed = install_hooks(tmp_path, "pi")
    assert installed.returncode == 0, installed.stderr
    assert pi_extension.extension_path(tmp_path / "home" / ".pi" / "agent").is_file()


def test_it_refuses_a_settings_file_in_a_missing_dir_but_makes_a_project_s_claude_dir(tmp_path: Path) -> None:
    typo = tmp_path / "projcet" / ".claude" / "settings.local.json"
    refused = install_hooks(tmp_path, "claude-code", "--settings", str(typo))
    assert refused.returncode == 1
    assert f"--settings: {tmp_path / 'projcet'} is not a directory" in refused.stderr
    assert not (tmp_path / "projcet").exists()
    elsewhere = tmp_path / "nowhere" / "settings.json"
    assert (
        f"--settings: {elsewhere.parent} is not a directory"
        in install_hooks(tmp_path, "claude-code", "--settings", str(elsewhere)).stderr
    )
    project = tmp_path / "project"
    project.mkdir()
    target = project / ".claude" / "settings.local.json"
    installed = install_hooks(tmp_path, "claude-code", "--settings", str(target))
    assert installed.returncode == 0, installed.stderr
    assert "palazzo hook claude-code" in target.read_text()
