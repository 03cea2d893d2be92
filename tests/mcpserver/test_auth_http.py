"""Token access over real HTTP against `manage.py serve`: 401s, scopes, identity stamping, /healthz, /metrics."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.mcpserver.conftest import CLIENT_INFO, ROOT, Palazzo, free_port, http_server, migrate, server_env, stop

pytestmark = pytest.mark.slow

MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def manage(data_dir: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=server_env(data_dir, **extra_env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def create_token(data_dir: Path, name: str, scope: str) -> str:
    result = manage(data_dir, "token", "create", name, "--scope", scope)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@dataclass(frozen=True)
class Secured:
    base_url: str
    data_dir: Path
    writer: str
    reader: str
    revoked: str


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data_dir = tmp_path_factory.mktemp("auth") / "data"
    migrate(data_dir)
    writer = create_token(data_dir, "writer", "write")
    reader = create_token(data_dir, "reader", "read")
    revoked = create_token(data_dir, "gone", "write")
    assert manage(data_dir, "token", "revoke", "gone").returncode == 0
    with http_server(data_dir) as base_url:
        yield Secured(base_url, data_dir, writer, reader, revoked)


@contextmanager
def http_session(url: str, make_http: Callable[[], Any]) -> Iterator[Palazzo]:
    """An SDK client session over Streamable HTTP through the httpx2 client make_http returns (headers, auth)."""

    @asynccontextmanager
    async def transport() -> Any:
        async with make_http() as http, streamable_http_client(url, http_client=http) as streams:
            yield streams

    with start_blocking_portal() as portal:
        client = Client(transport(), mode="legacy", client_info=CLIENT_INFO, read_timeout_seconds=120)
        with portal.wrap_async_context_manager(client):
            yield Palazzo(portal, client, "http")


@contextmanager
def token_client(url: str, token: str) -> Iterator[Palazzo]:
    """An SDK client session presenting a bearer token."""
    with http_session(url, lambda: create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})) as palazzo:
        yield palazzo


def test_it_answers_healthz_without_a_token(secured: Secured) -> None:
    response = httpx.get(f"{secured.base_url}/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["version"]
    assert body["database"]["status"] == body["store"]["status"] == body["embedder"]["status"] == "ok"
    # The HealthReport schema shapes the body without adding the fields a healthy part has not got.
    assert set(body["database"]) == {"status", "engine"} and set(body["store"]) == {"status", "kind", "memories"}
    assert body["store"]["kind"] == "EdgeStore" and isinstance(body["store"]["memories"], int)
    assert set(body["embedder"]) == {"status", "model", "dimension"}


@pytest.mark.parametrize("path", ["/mcp", "/ingest", "/export", "/metrics"])
def test_it_refuses_protected_routes_without_a_token(secured: Secured, path: str) -> None:
    response = httpx.post(f"{secured.base_url}{path}", json=MCP_INIT, headers=MCP_HEADERS)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("which", ["bad", "revoked", "malformed"])
def test_it_refuses_bad_and_revoked_tokens(secured: Secured, which: str) -> None:
    token = {"bad": secured.writer[:-4] + "abcd", "revoked": secured.revoked, "malformed": "hello"}[which]
    response = httpx.post(
        f"{secured.base_url}/mcp", json=MCP_INIT, headers=MCP_HEADERS | {"authorization": f"Bearer {token}"}
    )
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert token not in response.text


def test_it_refuses_a_read_token_posting_to_ingest(secured: Secured) -> None:
    response = httpx.post(f"{secured.base_url}/ingest", json={}, headers={"authorization": f"Bearer {secured.reader}"})
    assert response.status_code == 403
    assert "read scope" in response.json()["error"]


def test_it_refuses_a_read_token_calling_a_write_tool(secured: Secured) -> None:
    with token_client(f"{secured.base_url}/mcp", secured.reader) as client:
        assert client.ok("palace_status")["total"] >= 0
        message = client.error(
            "palace_store",
            {
                "text": "a read token must not write this",
                "wing": "projects",
                "room": "auth",
                "hall": "facts",
                "category": "technical",
            },
        )
    assert "read scope" in message and "palace_store" in message


def test_it_stamps_the_token_identity_over_the_client_name(secured: Secured) -> None:
    with token_client(f"{secured.base_url}/mcp", secured.writer) as client:
        stored = client.ok(
            "palace_store",
            {
                "text": "tokens stamp their name on every write",
                "wing": "projects",
                "room": "auth",
                "hall": "facts",
                "category": "technical",
            },
        )
        recalled = client.ok("palace_recall", {"ids": [stored["id"]]})
    assert recalled["memories"][0]["added_by"] == "token:writer"
    with sqlite3.connect(secured.data_dir / "palazzo.sqlite3") as db:
        stamps = {row[0] for row in db.execute("SELECT added_by FROM palace_journalentry")}
        used = db.execute("SELECT last_used_at FROM palace_apitoken WHERE name = 'writer'").fetchone()[0]
    assert stamps == {"token:writer"}
    assert used is not None


def test_it_serves_prometheus_metrics_with_a_token(secured: Secured) -> None:
    with token_client(f"{secured.base_url}/mcp", secured.reader) as client:
        client.ok("palace_find", {"query": "what do tokens stamp"})
    response = httpx.get(f"{secured.base_url}/metrics", headers={"authorization": f"Bearer {secured.reader}"})
    assert response.status_code == 200
    text = response.text
    assert 'palazzo_tool_calls_total{outcome="ok",tool="palace_find"}' in text
    assert 'palazzo_http_requests_total{method="POST",route="/mcp",status="200"}' in text
    assert 'palazzo_embedding_duration_seconds_count{kind="query"}' in text
    assert "palazzo_journal_pending 0.0" in text
    assert 'palazzo_memories{state="all"}' in text
    assert "palazzo_search_index_building 0.0" in text


@pytest.mark.parametrize("path", ["/mcp", "/ingest", "/export", "/metrics", "/healthz", "/admin/"])
def test_it_guards_the_host_before_asking_for_a_token(secured: Secured, path: str) -> None:
    response = httpx.get(f"{secured.base_url}{path}", headers={"host": "evil.example"})
    assert response.status_code == 421


def test_it_refuses_to_start_off_loopback_without_a_token(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    port = free_port()
    refused = manage(data_dir, "serve", "--bind", f"0.0.0.0:{port}")
    assert refused.returncode != 0
    assert "off loopback" in refused.stderr and "PALAZZO_ALLOW_INSECURE" in refused.stderr
    # Started without `serve` (gunicorn on its own, as under systemd), the ASGI lifespan refuses too.
    gunicorn = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "python:palazzo_site.gunicorn_conf", "palazzo_site.asgi:application"],
        cwd=ROOT,
        env=server_env(data_dir, PALAZZO_BIND=f"0.0.0.0:{port}"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gunicorn.returncode != 0
    assert "off loopback" in gunicorn.stderr


def test_it_starts_off_loopback_without_a_token_only_when_told_it_is_insecure(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    port = free_port()
    log = tmp_path / "insecure.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--bind", f"0.0.0.0:{port}"],
            cwd=ROOT,
            env=server_env(data_dir, PALAZZO_ALLOW_INSECURE="1", PALAZZO_LOG_LEVEL="warning"),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        from tests.mcpserver.conftest import wait_for_http

        wait_for_http(f"http://127.0.0.1:{port}", process, log)
        response = httpx.post(f"http://127.0.0.1:{port}/mcp", json=MCP_INIT, headers=MCP_HEADERS)
        assert response.status_code == 200
    finally:
        stop(process)
    assert "PALAZZO_ALLOW_INSECURE=1" in log.read_text()
