"""Two real `serve` processes (two hosts, in effect) sharing one PostgreSQL database and one Qdrant server.

The Qdrant server is tests/trust/fake_qdrant.py: a loopback stand-in serving Qdrant's REST endpoints from
qdrant-client's local mode (no Qdrant server binary installs here). PostgreSQL is the real one `make
services` starts (.tools/pg-url); each test gets its own database. The assertions are about palazzo.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from palace.feeding import snapshots
from tests.mcpserver.conftest import ROOT, connect, http_server
from tests.mcpserver.test_auth_http import manage
from tests.palace.helpers import memory
from tests.palazzo_site.test_hook import run_hook, wait_for
from tests.trust.fake_qdrant import FakeQdrant

pytestmark = pytest.mark.slow
PG_URL_FILE = ROOT / ".tools" / "pg-url"


@pytest.fixture
def shared_database() -> Iterator[str]:
    """A fresh PostgreSQL database on the server of `make services`, dropped afterwards."""
    if not PG_URL_FILE.is_file():
        pytest.skip("no PostgreSQL (run `make services`)")
    import psycopg

    base = PG_URL_FILE.read_text().strip()
    name = f"palazzo_workers_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(base)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        # PostgreSQL 15 refuses WITH (FORCE) while an autovacuum worker (a superuser process) is in the
        # database; it is gone within moments, so the drop is tried again.
        for attempt in range(20):
            try:
                with psycopg.connect(admin, autocommit=True) as connection:
                    connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except psycopg.errors.InsufficientPrivilege:
                if attempt == 19:
                    raise
                time.sleep(0.5)


def at_once(*calls: Callable[[], None]) -> None:
    """Run the calls in threads started together, and wait for all of them."""
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)


@pytest.fixture
def shared(tmp_path: Path, shared_database: str) -> Iterator[dict[str, str]]:
    """What servers sharing one palace are given: a fresh PostgreSQL database (migrated) and a Qdrant stand-in."""
    qdrant = FakeQdrant().start()
    try:
        env = {"DATABASE_URL": shared_database, "QDRANT_URL": qdrant.url}
        migrated = manage(tmp_path / "a", "migrate", "--verbosity", "0", **env)
        assert migrated.returncode == 0, migrated.stderr
        yield env
    finally:
        qdrant.stop()


def test_it_keeps_one_memory_per_text_when_two_servers_store_it_at_once(tmp_path: Path, shared: dict[str, str]) -> None:
    run = uuid.uuid4().hex[:8]
    texts = [f"Shared fact {index} of run {run}: the build cache lives on volume {index}" for index in range(16)]
    results: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    with http_server(tmp_path / "a", **shared) as first, http_server(tmp_path / "b", **shared) as second:
        barrier = threading.Barrier(2)

        def store_all(name: str, base_url: str) -> None:
            with connect(base_url + "/mcp", "http") as client:
                for text in texts:
                    barrier.wait(timeout=60)  # both servers get each text at the same moment
                    results[name].append(client.ok("palace_store", memory(text, room="shared")))

        at_once(lambda: store_all("a", first), lambda: store_all("b", second))
        with connect(second + "/mcp", "http") as client:
            listed = client.ok("palace_browse", {"room": "shared", "limit": 100})["memories"]
    for one, other in zip(results["a"], results["b"]):
        assert one["id"] == other["id"], "both servers answered with the same memory"
        assert sorted([one["duplicate"], other["duplicate"]]) == [False, True], (one, other)
    assert sorted(memory["text"] for memory in listed) == sorted(texts), "exactly one memory per text"
    verified = manage(tmp_path / "a", "verify", **shared)
    assert verified.returncode == 0, verified.stdout + verified.stderr


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "lb", "version": "1"}},
}


def status_call(number: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": number + 1,
        "method": "tools/call",
        "params": {"name": "palace_status", "arguments": {}},
    }


def test_it_sums_every_worker_s_metrics_on_one_server(tmp_path: Path, shared: dict[str, str]) -> None:
    with http_server(tmp_path / "data", workers=2, **shared) as base_url:
        for _ in range(40):  # a new connection each: gunicorn hands them to either worker
            assert httpx.get(base_url + "/healthz", timeout=30).status_code == 200

        def scrape() -> tuple[float, float]:
            text = httpx.get(base_url + "/metrics", timeout=30).text
            health = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("palazzo_http_requests_total{") and 'route="/healthz"' in line
            )
            workers = next(
                float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("palazzo_workers ")
            )
            return health, workers

        answers = [scrape() for _ in range(6)]  # whichever worker answers, the sums are the server's
        # MCP over fresh connections (as a load balancer spreads them): every call answered, whichever
        # worker takes it (a session kept in one worker's memory would be "not found" in the other).
        headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
        opened = httpx.post(base_url + "/mcp", headers=headers, json=INITIALIZE, timeout=60)
        assert opened.status_code == 200, opened.text
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]} if "mcp-session-id" in opened.headers else {}
        calls = [
            httpx.post(base_url + "/mcp", headers=headers | session, json=status_call(number), timeout=60)
            for number in range(16)
        ]
        assert [call.status_code for call in calls] == [200] * 16, [call.text[:200] for call in calls]
        assert all('"total"' in call.text for call in calls)
    assert all(health >= 40 for health, _ in answers), answers
    assert {workers for _, workers in answers} == {2.0}, answers


def test_it_resurrects_nothing_when_a_server_starts_while_another_supersedes_and_deletes(
    tmp_path: Path, shared: dict[str, str]
) -> None:
    run = uuid.uuid4().hex[:8]
    with http_server(tmp_path / "a", **shared) as first, connect(first + "/mcp", "http") as client:
        stored = [
            client.ok("palace_store", memory(f"Deploy fact {index} of run {run}: port {8000 + index}", room="churn"))
            for index in range(24)
        ]
        doomed, corrected = stored[::2], stored[1::2]
        successors: dict[int, int] = {}
        started = threading.Event()

        def start_second() -> None:
            with http_server(tmp_path / "b", **shared) as second:
                started.set()
                results["second"] = second
                finished.wait(timeout=300)

        results: dict[str, str] = {}
        finished = threading.Event()
        starter = threading.Thread(target=start_second)
        starter.start()  # its start-up replays whatever is pending while the writes below go on
        for old, gone in zip(corrected, doomed, strict=True):
            new = client.ok(
                "palace_supersede",
                {"supersedes": [old["id"]], "reason": "port moved", "text": old["text"] + " (moved)"},
            )
            successors[old["id"]] = new["memory"]["id"]
            client.ok("palace_delete", {"ids": [gone["id"]], "reason": "operator approved: churn", "confirm": True})
        assert started.wait(timeout=240), "the second server started"
        listings = []
        for base_url in (first, results["second"]):
            with connect(base_url + "/mcp", "http") as reader:
                listed = reader.ok("palace_browse", {"room": "churn", "limit": 100})["memories"]
                listings.append(sorted((item["id"], item["text"]) for item in listed))
                recalled = reader.ok("palace_recall", {"ids": [old["id"] for old in corrected]})["memories"]
                assert {item["id"]: item.get("superseded_by") for item in recalled} == successors
                gone = reader.ok("palace_recall", {"ids": [item["id"] for item in doomed]})["missing"]
                assert sorted(gone) == sorted(item["id"] for item in doomed)
        finished.set()
        starter.join(timeout=120)
    assert listings[0] == listings[1], "both servers answer the same"
    assert sorted(text for _, text in listings[0]) == sorted(old["text"] + " (moved)" for old in corrected)
    assert {memory_id for memory_id, _ in listings[0]} == set(successors.values()), "no deleted or old one is back"
    verified = manage(tmp_path / "a", "verify", **shared)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def feed_body(run: str, count: int) -> dict[str, Any]:
    """What a developer's hook sends POST /feed for one Claude Code session of `count` exchanges."""
    return {
        "harness": "claude-code",
        "device": "laptop",
        "final": True,
        "transcript": {
            "path": f"/home/ada/.claude/projects/orrery/{run}.jsonl",
            "session_id": run,
            "cwd": "/home/ada/code/orrery",
            "exchanges": [
                {
                    "key": f"{run}-{index}",
                    "index": index,
                    "prompt": f"Step {index} of run {run}: how many teeth on gear {index}?",
                    "reply": f"Gear {index} has {100 + index} teeth.",
                    "started_at": f"2026-12-04T09:{index:02d}:00Z",
                    "complete": True,
                }
                for index in range(count)
            ],
        },
    }


def test_it_feeds_one_memory_per_exchange_when_two_servers_get_the_same_transcript_at_once(
    tmp_path: Path, shared: dict[str, str]
) -> None:
    run = uuid.uuid4().hex[:8]
    with http_server(tmp_path / "a", **shared) as first, http_server(tmp_path / "b", **shared) as second:
        answers: list[httpx.Response] = []
        for count in (6, 6, 9):  # the same session twice, then grown by three exchanges
            barrier, body = threading.Barrier(2), feed_body(run, count)

            def post(base_url: str, barrier: threading.Barrier, body: dict[str, Any]) -> None:
                barrier.wait(timeout=60)
                answers.append(httpx.post(base_url + "/feed", json=body, timeout=120))

            at_once(*(partial(post, url, barrier, body) for url in (first, second)))
        with connect(second + "/mcp", "http") as client:
            listed = client.ok("palace_browse", {"room": "orrery", "limit": 100})["memories"]
    assert [answer.status_code for answer in answers] == [200] * 6, [answer.text for answer in answers]
    stored = sum(answer.json()["stored"] for answer in answers)
    assert stored == 9, [answer.json() for answer in answers]
    texts = [item["text"] for item in listed]
    assert len(texts) == len(set(texts)) == 9, texts
    verified = manage(tmp_path / "a", "verify", **shared)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def stored_snapshot(database_url: str, room: str | None) -> dict[str, Any] | None:
    """The wake-up snapshot of a room as the shared database holds it (palace.models.WakeUpSnapshot)."""
    import psycopg

    with psycopg.connect(database_url) as connection:
        row = connection.execute(
            "SELECT payload FROM palace_wakeupsnapshot WHERE key = %s AND payload IS NOT NULL",
            [snapshots.room_key(room)],
        ).fetchone()
    return row[0] if row else None


def test_it_answers_every_host_s_wake_up_from_the_snapshot_one_host_prepared(
    tmp_path: Path, shared: dict[str, str]
) -> None:
    import psycopg

    run = uuid.uuid4().hex[:8]
    room = {"room": "orrery"}
    with http_server(tmp_path / "a", **shared) as first, http_server(tmp_path / "b", **shared) as second:
        fed = httpx.post(first + "/feed", json=feed_body(run, 3), timeout=120)
        assert fed.status_code == 200 and fed.json()["stored"] == 3, fed.text
        # After the writes, a host's spool watcher prepares the fed project's snapshot, in the database.
        prepared = wait_for(
            lambda: (found := stored_snapshot(shared["DATABASE_URL"], "orrery")) and run in found["context"] and found,
            seconds=120,
            what="the fed project's wake-up snapshot in the database",
        )
        woken = [httpx.get(url + "/wake-up", params=room, timeout=60).json() for url in (second, first)]
        assert woken[0] == woken[1] == {"context": prepared["context"], "room": "orrery"}
        # Host B serves the table's row (nothing was written since it was prepared), not its own reading.
        marker = f"prepared once for every host ({run})"
        with psycopg.connect(shared["DATABASE_URL"], autocommit=True) as connection:
            connection.execute(
                "UPDATE palace_wakeupsnapshot SET payload = jsonb_set(payload, '{context}', to_jsonb(%s::text)) "
                "WHERE key = %s",
                [marker, snapshots.room_key("orrery")],
            )
        assert httpx.get(second + "/wake-up", params=room, timeout=60).json()["context"] == marker
        # A write on host A makes that row stale: host B prepares the context again and stores it for all.
        with connect(first + "/mcp", "http") as client:
            client.ok("palace_store", memory(f"Orrery note of run {run}: the crank turns the date dial", room="orrery"))
        after = httpx.get(second + "/wake-up", params=room, timeout=60).json()["context"]
        assert "the crank turns the date dial" in after and marker not in after
        assert httpx.get(first + "/wake-up", params=room, timeout=60).json()["context"] == after
        assert (stored_snapshot(shared["DATABASE_URL"], "orrery") or {}).get("context") == after
        # A SessionStart hook on a third host, whose data dir holds no snapshot file, reads the same.
        event = {"hook_event_name": "SessionStart", "session_id": run, "cwd": "/home/ada/code/orrery"}
        hooked = run_hook(tmp_path / "c", event, **shared)
        assert hooked.returncode == 0 and not hooked.stderr, hooked.stderr
        assert after in json.loads(hooked.stdout)["hookSpecificOutput"]["additionalContext"]
        # A project nobody prepared yet: the hook gets the palace-wide one and asks for the project's.
        # (A host refreshes the palace-wide row after the last write in the background: wait for that
        # first, or the hook may read the row before the refresh and the test the row after it.)
        palace_wide = wait_for(
            lambda: (
                (found := stored_snapshot(shared["DATABASE_URL"], None))
                and "the crank turns the date dial" in found["context"]
                and found["context"]
            ),
            seconds=120,
            what="the palace-wide wake-up snapshot with the last write",
        )
        other = run_hook(tmp_path / "c", event | {"cwd": f"/home/ada/code/new-{run}"}, **shared)
        assert palace_wide in json.loads(other.stdout)["hookSpecificOutput"]["additionalContext"]
        wait_for(
            lambda: stored_snapshot(shared["DATABASE_URL"], f"new-{run}"),
            seconds=120,
            what="a host to prepare the project the hook asked for",
        )
    assert not list((tmp_path / "c").glob("wake-up/*")), "the hook's host keeps no snapshot file"
