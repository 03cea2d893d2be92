"""`manage.py runmcp`: a clean stdout, a fast first answer, read-only mode and a held palace."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.mcpserver.conftest import ROOT, RunningServer, connect, migrate, server_env, stdio_parameters
from tests.mcpserver.test_tools import READ_TOOLS

FIRST_ANSWER_BUDGET_SECONDS = 15.0


def _request(request_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return (json.dumps(message) + "\n").encode()


def test_it_writes_only_json_rpc_to_stdout_and_answers_at_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    stderr_log = tmp_path / "stderr.log"
    with stderr_log.open("wb") as stderr:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runmcp"],
            cwd=ROOT,
            env=server_env(data_dir, PALAZZO_LOG_LEVEL="debug"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdin is not None and process.stdout is not None
    lines: list[bytes] = []
    try:
        process.stdin.write(
            _request(
                1,
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-test", "version": "0.0.1"},
                },
            )
        )
        process.stdin.flush()
        lines.append(process.stdout.readline())
        first_answer = time.monotonic() - started
        process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        process.stdin.write(_request(2, "tools/list"))
        process.stdin.flush()
        lines.append(process.stdout.readline())
        # A tool call loads the model and opens the palace: anything they print must miss stdout.
        process.stdin.write(_request(3, "tools/call", {"name": "palace_status", "arguments": {}}))
        process.stdin.flush()
        lines.append(process.stdout.readline())
        process.stdin.close()
        lines.extend(process.stdout.read().splitlines(keepends=True))
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"runmcp first answer (initialize) after {first_answer:.2f}s")
    messages = [json.loads(line) for line in lines if line.strip()]
    assert len(messages) == 3 and all(message["jsonrpc"] == "2.0" for message in messages)
    assert [message["id"] for message in messages] == [1, 2, 3]
    assert messages[0]["result"]["serverInfo"]["name"] == "palazzo"
    assert len(messages[1]["result"]["tools"]) == 11
    assert messages[2]["result"]["isError"] is False
    assert messages[2]["result"]["structuredContent"]["total"] == 0
    assert first_answer < FIRST_ANSWER_BUDGET_SECONDS
    assert "Traceback" not in stderr_log.read_text()


def test_it_lists_only_the_read_tools_when_read_only(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    with connect(stdio_parameters(data_dir, PALAZZO_READ_ONLY="1"), "stdio") as palazzo:
        assert {tool.name for tool in palazzo.list_tools().tools} == READ_TOOLS
        assert "palace_store" in palazzo.error("palace_store", {"text": "x"})
        assert palazzo.ok("palace_status")["total"] == 0
        assert "read-only" in (palazzo.client.instructions or "")


def test_it_reports_a_palace_held_by_another_process_as_a_tool_error(http_palazzo: RunningServer) -> None:
    with connect(stdio_parameters(http_palazzo.data_dir), "stdio") as palazzo:
        assert len(palazzo.list_tools().tools) == 11
        message = palazzo.error("palace_status")
        assert "already open" in message and "QDRANT_URL" in message
        again = palazzo.error("palace_find", {"query": "anything"})
        assert "already open" in again


def test_it_prepares_a_brand_new_data_dir_before_the_first_tool_call(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-migrated"
    schema = {"category": "technical", "wing": "projects", "room": "cold start", "hall": "facts"}
    with connect(stdio_parameters(data_dir), "stdio") as palazzo:
        stored = palazzo.ok("palace_store", {"text": "runmcp migrates a fresh data dir itself", **schema})
        assert palazzo.ok("palace_recall", {"ids": [stored["id"]]})["memories"][0]["text"] == stored["text"]
        assert palazzo.total() == 1
    with connect(stdio_parameters(data_dir), "stdio") as palazzo:  # a second start finds it migrated
        assert palazzo.total() == 1
