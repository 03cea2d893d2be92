"""The `palazzo` console script: management commands through Django, `palazzo hook` without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.mcpserver.conftest import server_env

ROOT = Path(__file__).resolve().parents[2]
PALAZZO = Path(sys.executable).with_name("palazzo")


def test_it_is_installed_as_a_console_script_beside_the_interpreter() -> None:
    assert PALAZZO.is_file(), "run `make setup` (it installs the project into .venv)"


def test_it_runs_management_commands_from_any_directory_with_dashes_for_underscores(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = server_env(data_dir)
    subprocess.run([str(PALAZZO), "migrate", "-v0"], cwd=tmp_path, env=env, check=True, timeout=120)
    created = subprocess.run(
        [str(PALAZZO), "token", "create", "laptop"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert created.returncode == 0, created.stderr
    listed = subprocess.run(
        [str(PALAZZO), "token", "list", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert [token["name"] for token in json.loads(listed.stdout)] == ["laptop"]
    unknown = subprocess.run(
        [str(PALAZZO), "no-such-command"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert unknown.returncode != 0 and "no_such_command" in unknown.stderr
