"""Many agent sessions, one embedded palace: every `runmcp` is a pipe to the one process that holds it.

Real processes throughout: `manage.py runmcp` spawned by the MCP SDK's stdio client, the detached
`palazzo holder` it starts, the operator commands as subprocesses, SIGKILL for the holder.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp_types import Implementation

from palace.engine import holder
from tests.conftest import holders_under
from tests.mcpserver.conftest import connect, http_server, stdio_parameters
from tests.palace.helpers import memory
from tests.trust.conftest import ROOT, server_env, tool_json

SESSIONS = 8
PER_SESSION = 3
# A killed holder's successor serves every session again within this (the bound).
RECOVERY_SECONDS = 10.0


def palazzo(data_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The `palazzo` console script, as a user runs it (from another working directory)."""
    return subprocess.run(
        [sys.executable, "-m", "palazzo_site.cli", *args],
        cwd=data_dir.parent,
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def live_holders(data_dir: Path) -> list[int]:
    return holders_under(data_dir)


def client(data_dir: Path, name: str, *, mode: Literal["legacy", "auto"] = "legacy") -> Client:
    return Client(
        stdio_parameters(data_dir),
        mode=mode,
        client_info=Implementation(name=name, version="1"),
        read_timeout_seconds=120,
    )


def test_it_lets_eight_sessions_store_and_find_each_others_memories_while_commands_run(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"  # brand new: no migrate, no holder
    stored: dict[str, list[tuple[int, str]]] = {}
    errors: list[str] = []
    commands: dict[str, subprocess.CompletedProcess[str]] = {}
    all_stored = anyio.Event()
    found: Counter[str] = Counter()

    async def session(number: int) -> None:
        name = f"agent-{number}"
        # Both eras of MCP: the legacy handshake (initialize) and the per-request envelope.
        async with client(data_dir, name, mode="legacy" if number % 2 else "auto") as session_client:
            mine = []
            for index in range(PER_SESSION):
                text = f"session {number} note {index}: the {uuid.uuid4().hex} lighthouse keeps log {number}{index}"
                result = await session_client.call_tool("palace_store", memory(text, room="shared"))
                if result.is_error:
                    errors.append(f"{name} store: {result.content}")
                    continue
                mine.append((tool_json(result)["id"], text))
            stored[name] = mine
            if len(stored) == SESSIONS:
                all_stored.set()
            await all_stored.wait()
            for other, memories in stored.items():
                for memory_id, text in memories:
                    result = await session_client.call_tool("palace_find", {"query": text, "limit": 3})
                    if result.is_error:
                        errors.append(f"{name} find: {result.content}")
                    elif memory_id in [hit["id"] for hit in tool_json(result)["results"]]:
                        found[name if other == name else "others"] += 1

    async def operator() -> None:
        await all_stored.wait()
        for args in (
            ("status", "--json"),
            ("export", "--out", "export.jsonl"),
            ("backup", "--out", "backup"),
            ("verify",),
        ):
            commands[args[0]] = await anyio.to_thread.run_sync(functools.partial(palazzo, data_dir, *args))

    async def main() -> None:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as group:
                for number in range(SESSIONS):
                    group.start_soon(session, number)
                group.start_soon(operator)

    anyio.run(main)
    assert errors == []
    assert sum(len(memories) for memories in stored.values()) == SESSIONS * PER_SESSION
    assert found["others"] == SESSIONS * (SESSIONS - 1) * PER_SESSION  # every session finds every other's
    for name, result in commands.items():
        assert result.returncode == 0, f"{name}: {result.stderr}"
    assert json.loads(commands["status"].stdout)["total"] >= 1
    exported = [json.loads(line) for line in (tmp_path / "export.jsonl").read_text().splitlines()]
    assert len(exported) == SESSIONS * PER_SESSION
    # Each memory carries the identity of the session that stored it, not of the process holding the palace.
    by_id = {line["id"]: line["added_by"] for line in exported}
    for name, memories in stored.items():
        assert {by_id[memory_id] for memory_id, _ in memories} == {f"{name}/1"}
    assert (tmp_path / "backup" / "manifest.json").exists()
    assert "store and journal agree" in commands["verify"].stdout
    # The read audit names each session as the reader of its own finds.
    with sqlite3.connect(data_dir / "palazzo.sqlite3") as database:
        actors = {row[0] for row in database.execute("SELECT actor FROM palace_auditrecord WHERE operation = 'find'")}
    assert actors == {f"agent-{number}/1" for number in range(SESSIONS)}


def test_it_serves_every_session_again_within_seconds_after_the_holder_is_killed_mid_write(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    acked: dict[int, str] = {}
    outcomes: list[str] = []
    acked_after_kill: Counter[int] = Counter()
    killed_at: list[float] = []
    back_at: dict[int, float] = {}
    stop = anyio.Event()

    async def writer(number: int) -> None:
        async with client(data_dir, f"writer-{number}") as session_client:
            index = 0
            while not stop.is_set():
                text = f"writer {number} memory {index} {uuid.uuid4().hex}"
                result = await session_client.call_tool("palace_store", memory(text))
                index += 1
                if result.is_error:
                    outcomes.append(result.content[0].text)  # type: ignore[union-attr]
                    continue
                acked[tool_json(result)["id"]] = text
                if killed_at:
                    acked_after_kill[number] += 1
                    back_at.setdefault(number, time.monotonic())

    async def killer() -> None:
        while len(acked) < 40:
            await anyio.sleep(0.05)
        [pid] = live_holders(data_dir)
        killed_at.append(time.monotonic())
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(60):
            while len(back_at) < 4:
                await anyio.sleep(0.05)
        await anyio.sleep(1.0)
        stop.set()

    async def main() -> None:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as group:
                for number in range(4):
                    group.start_soon(writer, number)
                group.start_soon(killer)

    anyio.run(main)
    assert max(back_at.values()) - killed_at[0] < RECOVERY_SECONDS
    # A write in flight at the kill may or may not have been applied: it is refused with a retryable error.
    assert all(outcome.startswith("[palace_restarted]") for outcome in outcomes), outcomes
    assert len(outcomes) <= 4
    exported = palazzo(data_dir, "export", "--out", "export.jsonl")
    assert exported.returncode == 0, exported.stderr
    texts = {json.loads(line)["id"]: json.loads(line)["text"] for line in (tmp_path / "export.jsonl").open()}
    assert {memory_id: texts.get(memory_id) for memory_id in acked} == acked  # nothing acknowledged is lost
    verified = palazzo(data_dir, "verify")
    assert verified.returncode == 0 and "store and journal agree" in verified.stdout, verified.stdout


def test_it_starts_one_holder_for_sessions_that_start_together_and_leaves_when_idle(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    holders: set[int] = set()

    async def session(number: int) -> None:
        async with client(data_dir, f"early-{number}") as session_client:
            tool_json(await session_client.call_tool("palace_status", {}))
            holders.update(live_holders(data_dir))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for number in range(4):
                group.start_soon(session, number)

    anyio.run(main)
    assert len(holders) == 1
    # PALAZZO_HOLDER_IDLE_SECONDS (3 in the tests) after the last session left, the holder is gone with its socket.
    deadline = time.monotonic() + 30
    while live_holders(data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert live_holders(data_dir) == []
    assert not holder.socket_path(data_dir).exists()


def test_it_hands_the_palace_to_a_serve_started_beside_a_session_that_goes_on_through_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with connect(stdio_parameters(data_dir), "stdio") as session:
        stored = session.ok("palace_store", memory("stored through the holder before serve started"))
        assert len(live_holders(data_dir)) == 1
        with http_server(data_dir) as base_url:
            # The holder handed the palace over and left (and one its session started meanwhile, if any, found
            # serve holding the holder lock and left too).
            deadline = time.monotonic() + 10
            while live_holders(data_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert live_holders(data_dir) == []
            found = session.ok("palace_find", {"query": "stored through the holder before serve started"})
            assert found["results"][0]["id"] == stored["id"], "the session goes on, answered by serve"
            with connect(base_url + "/mcp", "http") as web:
                assert web.ok("palace_recall", {"ids": [stored["id"]]})["memories"][0]["id"] == stored["id"]
            status = palazzo(data_dir, "status", "--json")
            assert status.returncode == 0 and json.loads(status.stdout)["total"] == 1, status.stderr


def test_it_keeps_a_read_only_session_read_only_beside_a_writing_one_on_the_same_holder(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with (
        connect(stdio_parameters(data_dir), "stdio") as writer,
        connect(stdio_parameters(data_dir, PALAZZO_READ_ONLY="1"), "stdio") as reader,
    ):
        stored = writer.ok("palace_store", memory("the read-only session finds what the writer stored"))
        tools = {tool.name for tool in reader.list_tools().tools}
        assert "palace_find" in tools and "palace_store" not in tools and "palace_delete" not in tools
        assert "Unknown tool" in reader.error("palace_store", memory("a read-only session cannot write"))
        found = reader.ok("palace_find", {"query": "the read-only session finds what the writer stored"})
        assert [hit["id"] for hit in found["results"]][:1] == [stored["id"]]
        assert len(live_holders(data_dir)) == 1, "both sessions are served by one holder"
        assert writer.total() == 1


def test_it_starts_the_holder_from_a_folder_that_holds_a_palace_folder_of_its_own(tmp_path: Path) -> None:
    # A data dir called `palace` in the working directory, as a user may name it: the holder must import
    # palazzo's own `palace` package, not that folder (it did, and every command waited 30 s, then ran alone).
    data_dir = tmp_path / "palace"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "palazzo_site.cli", "status", "--json"],
        cwd=tmp_path,
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "running here" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert live_holders(data_dir), "answered by the holder it started"
    assert time.monotonic() - started < 30


def test_it_admits_only_this_user_on_a_socket_born_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    connection = holder.ensure(data_dir, environ=server_env(data_dir))
    try:
        mode = os.stat(holder.socket_path(data_dir)).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        assert holder.peer_is_this_user(connection)
    finally:
        connection.close()
    # A path too long for a socket address moves the socket to this user's private runtime directory.
    deep = tmp_path / ("d" * 90) / "data"
    assert holder.socket_path(deep).parent == holder.runtime_dir()
    assert stat.S_IMODE(os.stat(holder.runtime_dir()).st_mode) == 0o700


OTHER_USER = 65534  # nobody
CONNECT_AS_OTHER_USER = """
import socket, sys
connection = socket.socket(socket.AF_UNIX)
try:
    connection.connect(sys.argv[1])
except OSError as exc:
    print(f"refused: {exc.strerror}")
    raise SystemExit(0)
connection.sendall(b'{"palazzo": "command", "name": "status", "args": []}\\n')
print(connection.recv(4096).decode())
"""


# The other user runs the system's interpreter: the project's may live where only root may enter.
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(os.geteuid() != 0 or SYSTEM_PYTHON is None, reason="needs root and a system python3")
def test_it_refuses_another_user_by_the_socket_s_mode_and_again_by_its_credentials(tmp_path: Path) -> None:
    # Under a directory anyone may enter, so only the socket's own mode and the holder's check stand in the way.
    open_dir = Path(tempfile.mkdtemp(prefix="palazzo-open-", dir="/tmp"))
    try:
        open_dir.chmod(0o755)
        data_dir = open_dir / "data"
        connection = holder.ensure(data_dir, environ=server_env(data_dir))
        try:
            path = str(holder.socket_path(data_dir))

            def as_other_user() -> str:
                done = subprocess.run(
                    [str(SYSTEM_PYTHON), "-c", CONNECT_AS_OTHER_USER, path],
                    user=OTHER_USER,
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                return done.stdout + done.stderr

            assert "refused: Permission denied" in as_other_user()
            os.chmod(path, 0o666)  # as if the mode were lost: the holder still asks who is at the other end
            answer = as_other_user()
            assert "serves only the user who runs it" in answer and '"exit"' not in answer, answer
        finally:
            connection.close()
    finally:
        for pid in holders_under(open_dir):
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(open_dir, ignore_errors=True)


def _exchange(data_dir: Path, payload: bytes) -> list[bytes]:
    """Send raw bytes on the channel and read what comes back until the holder closes or goes quiet."""
    connection = holder.connect(data_dir)
    assert connection is not None
    connection.settimeout(2.0)
    lines = []
    try:
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        buffer = bytearray()
        while (line := holder.read_line(connection, buffer)) is not None:
            lines.append(line)
    except (TimeoutError, ConnectionError):
        pass
    finally:
        connection.close()
    return lines


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
PREAMBLES = st.one_of(
    st.binary(max_size=200).map(lambda raw: raw.replace(b"\n", b"") + b"\n"),
    JSON.map(lambda value: json.dumps(value).encode() + b"\n"),
    st.fixed_dictionaries(
        {"palazzo": st.just("command")},
        optional={"name": JSON | st.sampled_from(["status", "migrate", "shell", "runmcp", "holder"]), "args": JSON},
    ).map(lambda value: json.dumps(value).encode() + b"\n"),
    st.tuples(st.just(b'{"palazzo":"mcp"}\n'), st.binary(max_size=300)).map(b"".join),
)


@pytest.fixture(scope="module")
def held_palace(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A holder kept alive by one open MCP session, with one memory in its palace."""
    data_dir = tmp_path_factory.mktemp("fuzz") / "data"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runmcp"],
        cwd=ROOT,
        env=server_env(data_dir),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": _initialize_params()},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "palace_store", "arguments": memory("kept")},
        },
    ]
    for request in requests:
        process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 1
    assert json.loads(process.stdout.readline())["result"]["isError"] is False
    yield data_dir
    process.stdin.close()
    process.wait(timeout=60)


def _initialize_params() -> dict[str, Any]:
    return {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=PREAMBLES)
def test_it_answers_any_garbled_channel_message_with_an_error_and_changes_nothing(
    held_palace: Path, payload: bytes
) -> None:
    answers = _exchange(held_palace, payload)
    for answer in answers:
        message = json.loads(answer)  # whatever came in, what goes out is JSON
        assert isinstance(message, dict)
        if "exit" in message and b'"name": "status"' not in payload:
            assert message["exit"] != 0  # nothing but a well-formed command of the holder's runs
    status = _exchange(held_palace, holder.encode({"palazzo": "command", "name": "status", "args": ["--json"]}))
    frames = [json.loads(line) for line in status]
    assert frames[-1] == {"exit": 0}
    assert json.loads("".join(frame.get("out", "") for frame in frames))["total"] == 1
