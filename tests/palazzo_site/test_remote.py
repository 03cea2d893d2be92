"""Hooks and `palazzo feed` against a served palace (PALAZZO_URL + PALAZZO_TOKEN): fail-closed, retried.

A real `manage.py serve` with a real token; the client side is the installed `palazzo` in its own data dir,
which must never get a local palace (no database, no shard) whatever happens to the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from palace.feeding import spool
from tests.mcpserver.conftest import ROOT, free_port, migrate, server_env, stop, wait_for_http
from tests.mcpserver.test_auth_http import create_token, token_client
from tests.palace.sessions import claude_session, write_session
from tests.palazzo_site.test_hook import CWD, PALAZZO, SESSION, TURNS, session_event, spool_idle, wait_for

pytestmark = pytest.mark.slow
DEVICE = "ada-laptop"


@contextmanager
def serve_on(data_dir: Path, port: int) -> Iterator[str]:
    log = data_dir.parent / f"serve-{port}.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=server_env(data_dir),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(base_url, process, log)
        yield base_url
    finally:
        stop(process)


def client_env(client_dir: Path, url: str, token: str) -> dict[str, str]:
    return server_env(client_dir, PALAZZO_URL=url, PALAZZO_TOKEN=token, PALAZZO_DEVICE=DEVICE)


def palazzo(args: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PALAZZO), *args], input=stdin, env=env, capture_output=True, text=True, timeout=120)


def hook(env: dict[str, str], event: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return palazzo(["hook", "claude-code"], env, json.dumps(event))


def no_local_palace(client_dir: Path) -> bool:
    return not (client_dir / "palazzo.sqlite3").exists() and not (client_dir / "shards").exists()


def find(url: str, token: str) -> list[dict[str, Any]]:
    with token_client(f"{url}/mcp", token) as client:
        return client.ok(
            "palace_find", {"query": "lunar gear teeth", "room": "orrery", "limit": 20, "all_fields": True}
        )["results"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    data_dir = tmp_path / "server"
    migrate(data_dir)
    token = create_token(data_dir, "laptop", "write")
    with serve_on(data_dir, free_port()) as url:
        yield url, token, data_dir


def test_it_feeds_a_served_palace_through_the_token_and_writes_nothing_locally(
    served: tuple[str, str, Path], tmp_path: Path
) -> None:
    url, token, _server_dir = served
    client_dir = tmp_path / "client"
    env = client_env(client_dir, url, token)
    transcript = write_session(tmp_path / f"{SESSION}.jsonl", claude_session(SESSION, CWD, TURNS))
    ended = hook(env, session_event("SessionEnd", transcript, reason="other"))
    assert (ended.returncode, ended.stderr) == (0, "")
    memories = wait_for(lambda: (lambda found: found if len(found) == 2 else None)(find(url, token)), what="the feed")
    assert {memory["added_by"] for memory in memories} == {f"token:laptop/claude-code@{DEVICE}"}
    assert {memory["session"] for memory in memories} == {SESSION}
    assert sorted(memory["timestamp"] for memory in memories) == ["2026-11-30T09:00:00Z", "2026-11-30T09:01:00Z"]
    again = palazzo(["feed", "--json", str(transcript)], env)
    assert again.returncode == 0, again.stderr
    done = json.loads(again.stdout.strip().splitlines()[-1])
    assert done["totals"]["stored"] == 0 and done["totals"]["unchanged"] == 2
    started = hook(env, session_event("SessionStart", transcript, source="startup"))
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "lunar gear" in context and context.startswith("<palazzo-wake-up>")
    [source] = httpx.get(f"{url}/healthz", timeout=30).json()["feeding"]["sources"]
    assert (source["harness"], source["device"], source["exchanges"]) == ("claude-code", DEVICE, 2)
    # `feed --room` reaches the served palace too: the session is filed in that room, not the project's.
    other = write_session(
        tmp_path / "other.jsonl",
        claude_session("other-session", CWD, [("Which gear drives the lunar pointer?", "The b1 gear drives it.")]),
    )
    filed = palazzo(["feed", "--room", "Clock Room", str(other)], env)
    assert filed.returncode == 0 and "room clock room]" in filed.stdout, filed.stdout + filed.stderr
    with token_client(f"{url}/mcp", token) as client:
        found = client.ok("palace_find", {"query": "lunar pointer", "room": "clock room", "all_fields": True})[
            "results"
        ]
    assert [memory["session"] for memory in found] == ["other-session"]
    assert no_local_palace(client_dir)


def test_it_keeps_the_work_queued_while_the_server_is_down_and_feeds_it_once_it_is_back(tmp_path: Path) -> None:
    server_dir = tmp_path / "server"
    migrate(server_dir)
    token = create_token(server_dir, "laptop", "write")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    client_dir = tmp_path / "client"
    env = client_env(client_dir, url, token)
    transcript = write_session(tmp_path / f"{SESSION}.jsonl", claude_session(SESSION, CWD, TURNS))
    first = hook(env, session_event("SessionEnd", transcript, reason="other"))
    assert (first.returncode, first.stdout) == (0, "")
    wait_for(lambda: spool.remote_error(client_dir), what="the detached feeder to fail")
    assert any(spool.spool_dir(client_dir).glob(f"*{spool.FAILED_SUFFIX}")), "the job stays queued"
    started = hook(env, session_event("SessionStart", transcript, source="startup"))
    assert started.returncode == 0 and started.stdout == ""
    assert started.stderr.count("\n") == 1 and url in started.stderr
    refused = palazzo(["feed", str(transcript)], env | {"PALAZZO_TOKEN": "pz_wrong"})
    assert refused.returncode != 0 and "cannot reach" in refused.stderr
    with serve_on(server_dir, port):
        retried = hook(env, session_event("Stop", transcript))
        assert retried.returncode == 0
        assert retried.stderr.count("\n") == 1 and "queued" in retried.stderr  # says the last feed failed
        wait_for(lambda: len(find(url, token)) == 2, what="the queued feed to arrive")
        wait_for(lambda: spool_idle(client_dir) and spool.remote_error(client_dir) is None, what="the spool to empty")
        bad_token = hook(env | {"PALAZZO_TOKEN": "pz_wrong"}, session_event("SessionStart", transcript, source="x"))
        assert bad_token.returncode == 0 and "401" in bad_token.stderr
    assert no_local_palace(client_dir)
