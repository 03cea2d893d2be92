"""`palazzo serve` stops at once when its gunicorn master alone gets Ctrl-C (SIGINT), an MCP client connected."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.mcpserver.conftest import connect, free_port, migrate, server_env, wait_for_http
from tests.palazzo_site.test_hook import PALAZZO

pytestmark = pytest.mark.slow


def test_it_stops_within_seconds_when_its_master_alone_gets_sigint(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        # `palazzo serve` execs gunicorn in place: this pid is the master's.
        master = subprocess.Popen(
            [str(PALAZZO), "serve", "--bind", f"127.0.0.1:{port}"],
            env=server_env(data_dir, PALAZZO_LOG_LEVEL="info"),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(base_url, master, log)
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(connect(f"{base_url}/mcp", "http"))
            assert client.ok("palace_status")["total"] == 0
            stack.push(lambda *_exc: True)  # the client's closing fails: its server is gone
            started = time.monotonic()
            master.send_signal(signal.SIGINT)
            master.wait(timeout=30)
            took = time.monotonic() - started
    finally:
        if master.poll() is None:
            master.kill()
            master.wait(timeout=10)
    text = log.read_text()
    assert took < 5.0, f"took {took:.1f} s:\n{text}"
    assert "SIGKILL" not in text and "Application shutdown complete." in text, text
    assert master.returncode == 0, text
