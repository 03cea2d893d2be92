"""The `palazzo` console script: palazzo's own commands, grouped, on Django's framework; `palazzo hook` without it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import django
import pytest
from django.core.management import get_commands, load_command_class

from palazzo_site.cli import COMMAND_GROUPS, DEPRECATED_ALIASES, DJANGO_BASE_OPTIONS, HIDDEN_COMMANDS, OWN_COMMANDS
from tests.mcpserver.conftest import migrate, server_env

ROOT = Path(__file__).resolve().parents[2]
PALAZZO = Path(sys.executable).with_name("palazzo")
# Django's own commands that palazzo lists (a user with no checkout has no manage.py).
LISTED_DJANGO_COMMANDS = {"migrate", "createsuperuser"}


def palazzo(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One real run of the console script."""
    return subprocess.run([str(PALAZZO), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def listing_of(text: str) -> dict[str, list[str]]:
    """The groups of `palazzo --help` and the commands under each (a group line ends in a colon)."""
    groups: dict[str, list[str]] = {}
    group = None
    for line in text.splitlines():
        if re.fullmatch(r"[a-z][a-z ]+:", line):
            group = line[:-1]
            groups[group] = []
        elif group is not None and (match := re.match(r"  ([a-z][a-z-]*)  +\S", line)):
            groups[group].append(match.group(1))
        elif not line.strip():
            group = None
    return groups


def test_it_is_installed_as_a_console_script_beside_the_interpreter() -> None:
    assert PALAZZO.is_file(), "run `make setup` (it installs the project into .venv)"


def test_it_runs_management_commands_from_any_directory_with_dashes_for_underscores(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = server_env(data_dir)
    subprocess.run([str(PALAZZO), "migrate", "-v0"], cwd=tmp_path, env=env, check=True, timeout=120)
    created = palazzo("token", "create", "laptop", cwd=tmp_path, env=env)
    assert created.returncode == 0, created.stderr
    listed = palazzo("token", "list", "--json", cwd=tmp_path, env=env)
    assert [token["name"] for token in json.loads(listed.stdout)] == ["laptop"]
    settings = tmp_path / "claude" / "settings.json"
    settings.parent.mkdir()
    installed = palazzo("install_hooks", "claude-code", "--settings", str(settings), cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr
    assert "palazzo" in settings.read_text(), "the underscore spelling runs install-hooks itself"


def test_it_lists_exactly_palazzos_commands_in_groups_and_no_django_internals(tmp_path: Path) -> None:
    env = server_env(tmp_path / "data")
    shown = palazzo("--help", cwd=tmp_path, env=env)
    assert shown.returncode == 0 and shown.stderr == ""
    groups = listing_of(shown.stdout)
    assert list(groups) == ["serve and connect", "feed and hooks", "move in and out", "operate"]
    listed = [name for names in groups.values() for name in names]
    assert listed == [name for _group, commands in COMMAND_GROUPS for name, _summary in commands]
    assert len(set(listed)) == len(listed)
    ours = {name.replace("_", "-") for name, app in get_commands().items() if app in ("palace", "palazzo_site")}
    assert ours | OWN_COMMANDS == (set(listed) - LISTED_DJANGO_COMMANDS) | HIDDEN_COMMANDS | set(DEPRECATED_ALIASES), (
        "every command of palazzo's is listed, hidden or a deprecated alias, and no other"
    )
    for internal in ("startproject", "sendtestemail", "runserver", "import_qdrant", "import-qdrant", "holder"):
        assert internal not in shown.stdout
    summaries = [summary for _group, commands in COMMAND_GROUPS for _name, summary in commands]
    assert len(set(summaries)) == len(summaries), "no two commands are described alike"
    assert palazzo(cwd=tmp_path, env=env).stdout == shown.stdout, "palazzo alone lists them too"
    assert palazzo("help", cwd=tmp_path, env=env).stdout == shown.stdout


def test_it_prints_palazzos_version_not_djangos(tmp_path: Path) -> None:
    shown = palazzo("--version", cwd=tmp_path, env=server_env(tmp_path / "data"))
    assert shown.returncode == 0
    assert shown.stdout == f"palazzo {version('palazzo')}\n" != f"palazzo {django.get_version()}\n"


def test_it_leaves_djangos_base_options_out_of_a_subcommands_help_and_still_accepts_them(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir, PALAZZO_HOLDER="off")
    shown = palazzo("taxonomy", "--help", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: palazzo taxonomy [-h] [--json]\n")
    for option in DJANGO_BASE_OPTIONS:
        assert option not in shown.stdout
    assert palazzo("help", "taxonomy", cwd=tmp_path, env=env).stdout == shown.stdout
    subcommand = palazzo("token", "create", "--help", cwd=tmp_path, env=env)
    assert "--owner" in subcommand.stdout and "--pythonpath" not in subcommand.stdout
    accepted = palazzo("taxonomy", "--json", "-v", "0", "--traceback", "--no-color", cwd=tmp_path, env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert set(json.loads(accepted.stdout)) >= {"wings", "rooms", "halls", "categories"}


@pytest.mark.parametrize(
    ("command", "holder"),
    [("taxonomy", "off"), ("gain", "off"), ("taxonomy", "on"), ("--help", "off")],
)
def test_it_ends_quietly_when_the_reader_of_its_output_has_gone(tmp_path: Path, command: str, holder: str) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line: every write meets a broken pipe
    try:
        done = subprocess.run(
            [str(PALAZZO), command],
            cwd=tmp_path,
            env=server_env(data_dir, PALAZZO_HOLDER=holder),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode in (0, 141), done.stderr
    assert done.stderr == "", "no traceback, no `Exception ignored`"


def test_it_ends_quietly_in_a_shell_pipe_into_head(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir, PALAZZO_HOLDER="off")
    done = subprocess.run(
        f"'{PALAZZO}' taxonomy | head -1",
        shell=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.count("\n") == 1 and done.stderr == ""


def test_it_still_runs_a_deprecated_spelling_and_names_the_new_one(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir, PALAZZO_HOLDER="off")
    for spelling in ("import_qdrant", "import-qdrant"):
        done = palazzo(spelling, "--path", str(tmp_path / "absent"), "--collection", "notes", cwd=tmp_path, env=env)
        assert done.returncode == 1
        assert f"`{spelling}` is deprecated" in done.stderr and "palazzo import qdrant" in done.stderr
        assert "absent" in done.stderr, "the old command ran and refused the missing directory"
    shown = palazzo("import-qdrant", "--help", cwd=tmp_path, env=env)
    assert shown.returncode == 0 and "--default-category" in shown.stdout
    # The one spelling reads a server too: nothing listens on port 9, and the import says so.
    server = palazzo("import", "qdrant", "--url", "http://127.0.0.1:9", "--collection", "notes", cwd=tmp_path, env=env)
    assert server.returncode == 1 and "deprecated" not in server.stderr
    assert "cannot read the Qdrant collection 'notes'" in server.stderr


def test_it_names_the_closest_command_when_one_is_unknown(tmp_path: Path) -> None:
    env = server_env(tmp_path / "data")
    for typed, meant in (("taxnomy", "taxonomy"), ("install_hook", "install-hooks"), ("imprt", "import")):
        done = palazzo(typed, cwd=tmp_path, env=env)
        assert done.returncode == 2 and done.stdout == ""
        assert f"unknown command `{typed}`; did you mean `palazzo {meant}`?" in done.stderr
    for typed in ("startproject", "no-such-command"):
        done = palazzo(typed, cwd=tmp_path, env=env)
        assert done.returncode == 2 and "did you mean" not in done.stderr
        assert f"unknown command `{typed}`" in done.stderr and "Traceback" not in done.stderr
    assert palazzo("help", "taxnomy", cwd=tmp_path, env=env).returncode == 2


def test_it_describes_no_two_of_its_commands_alike() -> None:
    helps = {
        name: load_command_class(app, name).help
        for name, app in get_commands().items()
        if app in ("palace", "palazzo_site")
    }
    assert len(set(helps.values())) == len(helps), "status and taxonomy once said the same"
    assert not [name for name, text in helps.items() if "see --help" in text or not text]
