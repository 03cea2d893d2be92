"""Real palazzo servers for the MCP tests: `manage.py runmcp` over stdio and `manage.py serve` over HTTP.

Servers are module-scoped (each loads the embedding model once); the SDK client lives in a blocking
portal so plain synchronous tests can drive it.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, Implementation

ROOT = Path(__file__).resolve().parents[2]
CLIENT_INFO = Implementation(name="palazzo-tests", version="1.2.3")
START_TIMEOUT = 120.0
HOLDER_IDLE_SECONDS = "3"


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a server subprocess: real settings, its own data dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PALAZZO_", "QDRANT_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="palazzo_site.settings",
        PALAZZO_DATA_DIR=str(data_dir),
        PALAZZO_LOG_LEVEL="warning",
        # The tests read usage through palace_gain; that it is off by default is tested by name.
        PALAZZO_GAIN_TOOL="1",
        PYTHONUNBUFFERED="1",
        # A palace's holder outlives the runmcp that started it; in tests it leaves soon after the last one.
        PALAZZO_HOLDER_IDLE_SECONDS=HOLDER_IDLE_SECONDS,
    )
    env.update(extra)
    return env


def migrate(data_dir: Path) -> None:
    """A data dir with its database migrated: a copy of one this test process migrated (real `migrate`) once.

    `manage.py migrate` takes one to three seconds and dozens of tests start from a migrated data dir; the
    copy is the same files. With DATABASE_URL (PostgreSQL), or a data dir that holds a database already,
    migrate runs for real.
    """
    if os.environ.get("DATABASE_URL") or (data_dir / "palazzo.sqlite3").exists():
        _run_migrate(data_dir)
        return
    shutil.copytree(_migrated_template(), data_dir, dirs_exist_ok=True)


def _run_migrate(data_dir: Path) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=server_env(data_dir),
        check=True,
        timeout=120,
    )


@functools.cache
def _migrated_template() -> Path:
    """A data dir migrated by the real `migrate` once per test process (removed when the process ends)."""
    parent = Path(tempfile.mkdtemp(prefix="palazzo-migrated-"))
    atexit.register(shutil.rmtree, parent, True)
    template = parent / "data"
    _run_migrate(template)
    return template


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_http(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"server did not answer within {START_TIMEOUT}s:\n{log.read_text()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def http_server(data_dir: Path, *, workers: int = 1, port: int | None = None, **extra_env: str) -> Iterator[str]:
    """`manage.py serve` (with that many workers) on a free port; yields its base URL once /healthz answers."""
    port = port or free_port()
    log = data_dir.parent / f"serve-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--bind", f"127.0.0.1:{port}", "--workers", str(workers)],
            cwd=ROOT,
            env=server_env(data_dir, **extra_env),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(base_url, process, log)
        yield base_url
    finally:
        stop(process)


def stdio_parameters(data_dir: Path, **extra_env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["manage.py", "runmcp"], cwd=ROOT, env=server_env(data_dir, **extra_env)
    )


class Palazzo:
    """A synchronous face over an SDK client session."""

    def __init__(self, portal: BlockingPortal, client: Client, transport: str) -> None:
        self.portal = portal
        self.client = client
        self.transport = transport

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        return self.portal.call(self.client.call_tool, name, arguments or {})

    def ok(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call a tool that must succeed; returns its structured content (checked against the text)."""
        result = self.call(name, arguments)
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
        assert not result.is_error, f"{name} failed: {text}"
        assert result.structured_content is not None
        assert json.loads(text) == result.structured_content
        return result.structured_content

    def error(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Call a tool that must fail with an error result; returns the message."""
        result = self.call(name, arguments)
        assert result.is_error, f"{name} should have failed: {result.content}"
        assert result.structured_content is None
        return result.content[0].text  # type: ignore[union-attr]

    def total(self) -> int:
        total: int = self.ok("palace_status")["total"]
        return total

    def list_tools(self) -> Any:
        return self.portal.call(self.client.list_tools)


@contextmanager
def connect(target: str | StdioServerParameters, transport: str, **client_args: Any) -> Iterator[Palazzo]:
    with start_blocking_portal() as portal:
        client = Client(target, mode="legacy", client_info=CLIENT_INFO, read_timeout_seconds=120, **client_args)
        with portal.wrap_async_context_manager(client):
            yield Palazzo(portal, client, transport)


@dataclass(frozen=True)
class RunningServer:
    base_url: str
    data_dir: Path


@pytest.fixture(scope="session")
def http_palazzo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One HTTP server for the whole run (migrated first)."""
    data_dir = tmp_path_factory.mktemp("http") / "data"
    migrate(data_dir)
    with http_server(data_dir) as base_url:
        yield RunningServer(base_url=base_url, data_dir=data_dir)


@pytest.fixture(scope="module", params=["stdio", "http"])
def palazzo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Palazzo]:
    """A connected client, over stdio (its own runmcp process) or over HTTP (the shared server)."""
    if request.param == "stdio":
        data_dir = tmp_path_factory.mktemp("stdio") / "data"
        migrate(data_dir)
        target: str | StdioServerParameters = stdio_parameters(data_dir)
    else:
        target = request.getfixturevalue("http_palazzo").base_url + "/mcp"
    with connect(target, request.param) as client:
        yield client
