"""Two real `serve` processes (two hosts, in effect) sharing one PostgreSQL database and one Qdrant server.

The Qdrant server is tests/trust/fake_qdrant.py: a loopback stand-in serving Qdrant's REST endpoints from
qdrant-client's local mode (no Qdrant server binary installs here). PostgreSQL is the real one `make
services` starts (.tools/pg-url); each test gets its own database. The assertions are about palazzo.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.mcpserver.conftest import ROOT, connect, http_server
from tests.mcpserver.test_auth_http import manage
from tests.palace.helpers import memory
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
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_it_keeps_one_memory_per_text_when_two_servers_store_it_at_once(tmp_path: Path, shared_database: str) -> None:
    qdrant = FakeQdrant().start()
    try:
        shared = {"DATABASE_URL": shared_database, "QDRANT_URL": qdrant.url}
        migrated = manage(tmp_path / "a", "migrate", "--verbosity", "0", **shared)
        assert migrated.returncode == 0, migrated.stderr
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

            threads = [threading.Thread(target=store_all, args=pair) for pair in (("a", first), ("b", second))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=300)
            with connect(second + "/mcp", "http") as client:
                listed = client.ok("palace_browse", {"room": "shared", "limit": 100})["memories"]
        for one, other in zip(results["a"], results["b"]):
            assert one["id"] == other["id"], "both servers answered with the same memory"
            assert sorted([one["duplicate"], other["duplicate"]]) == [False, True], (one, other)
        assert sorted(memory["text"] for memory in listed) == sorted(texts), "exactly one memory per text"
        verified = manage(tmp_path / "a", "verify", **shared)
        assert verified.returncode == 0, verified.stdout + verified.stderr
    finally:
        qdrant.stop()


def test_it_sums_every_worker_s_metrics_on_one_server(tmp_path: Path, shared_database: str) -> None:
    qdrant = FakeQdrant().start()
    shared = {"DATABASE_URL": shared_database, "QDRANT_URL": qdrant.url}
    try:
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
        assert all(health >= 40 for health, _ in answers), answers
        assert {workers for _, workers in answers} == {2.0}, answers
    finally:
        qdrant.stop()
