"""`palazzo feed` as a user runs it: a dry run says what it would store, `--room` files the sessions there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.mcpserver.conftest import migrate, server_env
from tests.palace.sessions import claude_session, write_session
from tests.palazzo_site.test_hook import PALAZZO, TURNS

pytestmark = pytest.mark.slow


def palazzo(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PALAZZO), *args], env=env, capture_output=True, text=True, timeout=300)


def rooms(env: dict[str, str]) -> dict[str, int]:
    status = palazzo(["status", "--json"], env)
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)["rooms"]


def test_it_says_a_dry_run_would_store_and_stores_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir)
    transcript = write_session(tmp_path / "a.jsonl", claude_session("session-a", "/src/orrery", TURNS))
    dry = palazzo(["feed", "--dry-run", str(transcript)], env)
    assert dry.returncode == 0, dry.stderr
    [line] = dry.stdout.splitlines()
    assert line.startswith(f"dry-run {transcript} [session session-a, room orrery]: would store 2,")
    assert " stored" not in line
    assert dry.stderr.strip().endswith("2 memories would be stored, 0 superseded, 0 unchanged; nothing was written")
    assert rooms(env) == {}
    fed = palazzo(["feed", str(transcript)], env)
    assert fed.returncode == 0, fed.stderr
    assert ": 2 stored, 0 superseded" in fed.stdout and "2 memories stored" in fed.stderr
    assert rooms(env) == {"orrery": 2}


def test_it_files_every_session_of_a_run_in_the_room_named_by_room(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir)
    sessions = tmp_path / "sessions"
    write_session(sessions / "a.jsonl", claude_session("session-a", "/src/orrery", TURNS[:1]))
    write_session(sessions / "b.jsonl", claude_session("session-b", "/src/astrolabe", TURNS[1:]))
    for bad, reason in (("   ", "room: is required"), ("x" * 65, "room: must be at most 64 characters (it has 65)")):
        refused = palazzo(["feed", "--room", bad, str(sessions)], env)
        assert refused.returncode != 0 and reason in refused.stderr, refused.stderr
    assert rooms(env) == {}
    fed = palazzo(["feed", "--room", "  Antikythera  Mechanism ", str(sessions)], env)
    assert fed.returncode == 0, fed.stderr
    assert fed.stdout.count("room antikythera mechanism]") == 2, fed.stdout
    assert rooms(env) == {"antikythera mechanism": 2}
