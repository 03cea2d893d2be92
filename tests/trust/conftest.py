"""Helpers for the trust tests: palazzo servers that can be killed with SIGKILL, and async MCP sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.mcpserver.conftest import ROOT, free_port, migrate, server_env, wait_for_http

__all__ = ["ROOT", "KillableServer", "killable_server", "manage", "migrate", "server_env", "tool_json"]


@dataclass
class KillableServer:
    """`manage.py serve` in its own process group, so SIGKILL takes the gunicorn master and its worker."""

    data_dir: Path
    port: int
    extra_env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log_dir: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return (self.log_dir or self.data_dir.parent) / f"serve-{self.port}.log"

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--bind", f"127.0.0.1:{self.port}"],
                cwd=ROOT,
                env=server_env(self.data_dir, **self.extra_env),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for_http(self.base_url, self.process, self.log)

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown hook, no flush, no lock release runs."""
        assert self.process is not None
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown); SIGKILL if it does not stop in time."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


@contextmanager
def killable_server(data_dir: Path, log_dir: Path | None = None, **extra_env: str) -> Iterator[KillableServer]:
    """A started server; stopped (or killed) on exit whatever happened."""
    server = KillableServer(data_dir=data_dir, port=free_port(), extra_env=extra_env, log_dir=log_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        if server.process is not None and server.process.poll() is None:
            server.kill()


def manage(data_dir: Path, *args: str, timeout: float = 120, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """Run a management command against data_dir in its own process."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=server_env(data_dir, **extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tool_json(result: Any) -> dict[str, Any]:
    """The structured content of a successful tool result (checked against its text)."""
    text = result.content[0].text if result.content else ""
    assert not result.is_error, text
    data: dict[str, Any] = json.loads(text)
    return data
