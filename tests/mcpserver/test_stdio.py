"""`manage.py runmcp`: a clean stdout, a fast first answer, read-only mode and a held palace."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcpserver.server import MAX_MESSAGE_BYTES
from mcpserver.stdio import DROPPED_LINE, PipeLines, loop_line_reader, threaded_line_reader
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


def test_it_serves_runmcp_through_the_serve_that_holds_the_palace(http_palazzo: RunningServer) -> None:
    with connect(stdio_parameters(http_palazzo.data_dir), "stdio") as palazzo:
        assert len(palazzo.list_tools().tools) == 11
        assert palazzo.ok("palace_status")["total"] >= 0  # answered by serve's process, over its local channel
        assert palazzo.ok("palace_find", {"query": "anything"})["count"] >= 0


def test_it_reports_a_palace_held_by_another_process_as_a_tool_error(http_palazzo: RunningServer) -> None:
    with connect(stdio_parameters(http_palazzo.data_dir, PALAZZO_HOLDER="0"), "stdio") as palazzo:
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


def _initialize(request_id: int = 1) -> bytes:
    return _request(
        request_id,
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "0.0.1"}},
    )


def _runmcp(data_dir: Path, stdin: Any, stderr: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "runmcp"],
        cwd=ROOT,
        env=server_env(data_dir),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'


def _initialized_runmcp(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """A runmcp on a migrated data dir that has answered initialize, and its stderr log."""
    data_dir = tmp_path / "data"
    migrate(data_dir)
    stderr_log = tmp_path / "stderr.log"
    with stderr_log.open("wb") as stderr:
        process = _runmcp(data_dir, subprocess.PIPE, stderr)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(_initialize())
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 1
    return process, stderr_log


def test_it_drops_a_line_over_the_message_limit_whole_and_answers_the_next(tmp_path: Path) -> None:
    process, stderr_log = _initialized_runmcp(tmp_path)
    assert process.stdin is not None and process.stdout is not None
    try:
        # A request-shaped line just over the limit: were its tail read as a line of its own, it would answer.
        filler = "x" * (MAX_MESSAGE_BYTES + 1)
        process.stdin.write(f'{{"pad": "{filler}", '.encode() + _request(2, "tools/list"))
        process.stdin.write(_request(3, "ping"))
        process.stdin.close()
        answers = [json.loads(line) for line in process.stdout.read().splitlines() if line.strip()]
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert [answer["id"] for answer in answers] == [3]
    assert f"dropped a JSON-RPC line of more than {MAX_MESSAGE_BYTES} bytes" in stderr_log.read_text()


def test_it_answers_every_request_read_from_a_file_on_stdin(tmp_path: Path) -> None:
    # A regular file cannot be waited on by the event loop: a worker thread reads it.
    data_dir = tmp_path / "data"
    migrate(data_dir)
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_initialize() + _request(2, "tools/list") + _request(3, "ping"))
    with requests.open("rb") as stdin, (tmp_path / "stderr.log").open("wb") as stderr:
        process = _runmcp(data_dir, stdin, stderr)
        output, _ = process.communicate(timeout=60)
    answers = [json.loads(line) for line in output.splitlines()]
    assert [answer["id"] for answer in answers] == [1, 2, 3]
    assert len(answers[1]["result"]["tools"]) == 11


def test_it_answers_pipelined_requests_each_once_and_whole(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    with (tmp_path / "stderr.log").open("wb") as stderr:
        process = _runmcp(data_dir, subprocess.PIPE, stderr)
    assert process.stdin is not None
    # Sent at once, without waiting: every answer comes back, each on one line, none twice.
    burst = [_request(10 + index, "tools/list" if index % 2 else "ping") for index in range(40)]
    output, _ = process.communicate(_initialize() + INITIALIZED + b"".join(burst), timeout=60)
    answers = [json.loads(line) for line in output.splitlines()]
    assert sorted(answer["id"] for answer in answers) == [1, *range(10, 50)]
    assert all(len(answer["result"]["tools"]) == 11 for answer in answers if answer["id"] > 1 and answer["id"] % 2)


def test_it_answers_the_requests_sent_just_before_stdin_closes_and_exits_cleanly(tmp_path: Path) -> None:
    # The SDK cancels the handlers still running when input ends; the transport passes the end on only
    # once they are answered. The tool call waits for the model, still loading: the exit waits too.
    process, stderr_log = _initialized_runmcp(tmp_path)
    last = _request(2, "tools/call", {"name": "palace_status", "arguments": {}}) + _request(3, "ping")
    # Not JSON-RPC 2.0: the SDK drops it unanswered, so the end of input must not wait for it (60 s).
    unanswerable = b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}\n'
    output, _ = process.communicate(INITIALIZED + last + unanswerable, timeout=30)
    answers = {answer["id"]: answer for answer in map(json.loads, output.splitlines())}
    assert sorted(answers) == [2, 3] and answers[2]["result"]["structuredContent"]["total"] == 0
    assert process.returncode == 0
    assert "terminate called" not in stderr_log.read_text()


async def _read_lines(chunks: list[bytes], limit: int) -> list[str]:
    reader = asyncio.StreamReader(limit=limit)

    async def feed() -> None:
        for chunk in chunks:
            reader.feed_data(chunk)
            await asyncio.sleep(0)
        reader.feed_eof()

    feeding = asyncio.ensure_future(feed())
    lines = [line async for line in PipeLines(loop_line_reader(reader))]
    await feeding
    return lines


async def _read_file_lines(data: bytes, limit: int) -> list[str]:
    return [line async for line in PipeLines(threaded_line_reader(io.BytesIO(data), limit))]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=24).filter(lambda line: b"\n" not in line), max_size=12),
    unterminated=st.binary(max_size=24).filter(lambda line: b"\n" not in line),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    limit=st.integers(min_value=1, max_value=16),
)
def test_it_reads_every_line_as_sent_and_each_over_long_one_as_one_dropped_line_from_a_pipe_or_a_file(
    lines: list[bytes], unterminated: bytes, cuts: list[int], limit: int
) -> None:
    data = b"".join(line + b"\n" for line in lines) + unterminated
    edges = sorted({0, len(data), *(cut for cut in cuts if cut < len(data))})
    chunks = [data[start:end] for start, end in itertools.pairwise(edges)]
    expected = [
        DROPPED_LINE if len(line) > limit else (line + b"\n").decode("utf-8", errors="replace") for line in lines
    ]
    if unterminated:
        expected.append(DROPPED_LINE if len(unterminated) > limit else unterminated.decode("utf-8", errors="replace"))
    assert asyncio.run(_read_lines(chunks, limit)) == expected
    assert anyio.run(_read_file_lines, data, limit) == expected


@pytest.mark.parametrize("closed_fd, name", [(0, "stdin"), (1, "stdout")])
def test_it_refuses_to_serve_with_a_closed_stdin_or_stdout_and_says_why(
    tmp_path: Path, closed_fd: int, name: str
) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "runmcp"],
        cwd=ROOT,
        env=server_env(tmp_path / "data"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(closed_fd),  # the child starts without that fd
        timeout=60,
    )
    assert done.returncode == 2
    message = done.stderr.decode()
    assert f"{name} is closed" in message and "Traceback" not in message
