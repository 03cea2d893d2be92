"""`manage.py serve`: the host/origin guard, stateful sessions and start-up refusals."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.mcpserver.conftest import ROOT, RunningServer, connect, free_port, http_server, migrate, server_env

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize("path", ["/mcp", "/healthz"])
def test_it_refuses_a_foreign_host(http_palazzo: RunningServer, path: str) -> None:
    response = httpx.post(http_palazzo.base_url + path, json=INITIALIZE, headers=MCP_HEADERS | {"Host": "evil.example"})
    assert response.status_code == 421
    assert "evil.example" in response.text


@pytest.mark.parametrize("path", ["/mcp", "/healthz"])
def test_it_refuses_a_foreign_origin_with_403(http_palazzo: RunningServer, path: str) -> None:
    response = httpx.post(
        http_palazzo.base_url + path, json=INITIALIZE, headers=MCP_HEADERS | {"Origin": "http://evil.example"}
    )
    assert response.status_code == 403
    assert "Origin" in response.text


def test_it_accepts_local_hosts_and_origins(http_palazzo: RunningServer) -> None:
    port = http_palazzo.base_url.rsplit(":", 1)[1]
    response = httpx.get(
        http_palazzo.base_url + "/healthz", headers={"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}
    )
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_it_opens_a_stateful_session_on_initialize(http_palazzo: RunningServer) -> None:
    response = httpx.post(http_palazzo.base_url + "/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert response.status_code == 200
    assert response.headers.get("mcp-session-id")
    assert '"serverInfo"' in response.text


def test_it_answers_tools_while_another_process_holds_the_database_write_lock(http_palazzo: RunningServer) -> None:
    # Usage events are written by a background thread: a call never waits for SQLite's write lock
    # (a bulk import keeps it busy), and the event still counts once the lock is free.
    with connect(http_palazzo.base_url + "/mcp", "http") as client:
        before = client.ok("palace_gain")["per_operation"].get("find", {"calls": 0})["calls"]
        holder = sqlite3.connect(http_palazzo.data_dir / "palazzo.sqlite3", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            assert client.ok("palace_find", {"query": "anything at all"})["degraded"] is False
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert client.ok("palace_gain")["per_operation"]["find"]["calls"] == before + 1


def test_it_writes_the_queued_usage_events_before_it_stops(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    database = data_dir / "palazzo.sqlite3"
    holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    with http_server(data_dir) as base_url:
        with connect(base_url + "/mcp", "http") as client:
            holder.execute("BEGIN IMMEDIATE")  # the event of the next call waits in the queue
            client.ok("palace_find", {"query": "anything at all"})
        # Freed while the server is stopping (on leaving this block), which must wait for the write.
        release = threading.Timer(1.0, lambda: holder.execute("ROLLBACK"))
        release.start()
    release.join()
    holder.close()
    with sqlite3.connect(database) as reader:
        finds = reader.execute("SELECT count(*) FROM palace_usageevent WHERE operation = 'find'").fetchone()[0]
    assert finds == 1


def test_it_fails_start_up_when_another_server_holds_the_palace(http_palazzo: RunningServer) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--bind", f"127.0.0.1:{free_port()}"],
        cwd=ROOT,
        env=server_env(http_palazzo.data_dir, PALAZZO_LOG_LEVEL="info"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "already open in process" in output and "QDRANT_URL" in output
    assert "Traceback" not in output


def test_it_refuses_several_workers_on_the_embedded_store(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    result = subprocess.run(
        [sys.executable, "manage.py", "serve", "--workers", "2", "--bind", f"127.0.0.1:{free_port()}"],
        cwd=ROOT,
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "2 workers" in result.stderr and "QDRANT_URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_refuses_several_workers_in_the_gunicorn_config_too(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "python:palazzo_site.gunicorn_conf",
            "--workers",
            "3",
            "--bind",
            f"127.0.0.1:{free_port()}",
            "palazzo_site.asgi:application",
        ],
        cwd=ROOT,
        env=server_env(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "3 workers" in result.stderr and "QDRANT_URL" in result.stderr
