"""Faults: a full or read-only data dir, a second process on the embedded palace, a Qdrant server that goes away.

Every case uses real processes: `manage.py serve` subprocesses, a tmpfs mounted for the test (the tests run
as root, so chmod would not stop a write; a small or read-only mount does), and socket servers we control.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.mcpserver.conftest import Palazzo, connect
from tests.palace.helpers import memory
from tests.trust.conftest import killable_server, manage, migrate
from tests.trust.fake_qdrant import FakeQdrant


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 160 MB tmpfs of our own (Qdrant Edge wants ~64 MB): fillable to ENOSPC and remountable read-only."""
    point = tmp_path / "disk"
    point.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", "size=160m", "tmpfs", str(point))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield point
    finally:
        _mount("-o", "remount,rw", str(point))
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


def _fill(path: Path, leave: int = 0) -> Path:
    """Write until the file system is full (or has only `leave` bytes free); returns the filler file."""
    filler = path / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        if leave:
            os.write(descriptor, b"\1" * (shutil.disk_usage(path).free - leave))
            return filler
        for size in (1024 * 1024, 4096, 1):
            block = b"\1" * size
            try:
                while os.write(descriptor, block):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    return filler


def _assert_clear_write_error(message: str) -> None:
    assert "unexpectedly" not in message and "Traceback" not in message, message
    lowered = message.lower()
    assert any(word in lowered for word in ("disk", "space", "read-only", "readonly", "journal", "store")), message


def _reads_work(client: Palazzo, known_id: int, total: int) -> None:
    assert client.total() == total
    assert client.ok("palace_recall", {"ids": [known_id]})["missing"] == []
    assert client.ok("palace_find", {"query": "fault tolerance memory"})["count"] >= 1


def _verify(data_dir: Path, **extra_env: str) -> dict[str, Any]:
    result = manage(data_dir, "verify", "--json", **extra_env)
    assert result.stdout.startswith("{"), f"exit {result.returncode}: {result.stdout}{result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == 0 and report["ok"], result.stdout + result.stderr
    return report


@pytest.mark.slow
def test_it_refuses_writes_clearly_on_a_full_disk_keeps_reading_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    data_dir = small_disk / "data"
    migrate(data_dir)
    with killable_server(data_dir, log_dir=tmp_path) as server, connect(server.base_url + "/mcp", "http") as client:
        known = client.ok("palace_store", memory("fault tolerance memory stored before the disk filled"))
        total = client.total()
        filler = _fill(small_disk)
        refused = [client.error("palace_store", memory(f"on a full disk {i} {uuid.uuid4().hex}")) for i in range(3)]
        for message in refused:
            _assert_clear_write_error(message)
        _reads_work(client, known["id"], total)
        filler.unlink()
        after = client.ok("palace_store", memory("stored once the disk had room again"))
        assert client.ok("palace_recall", {"ids": [after["id"]]})["missing"] == []
        assert client.total() == total + 1
    report = _verify(data_dir)
    assert report["store_points"] == total + 1


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory bind-mounted read-only (remountable read-write while nothing writes under it)."""
    source, point = tmp_path / "journal-source", tmp_path / "journal"
    source.mkdir()
    point.mkdir()
    bound = _mount("--bind", str(source), str(point))
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root): {bound.stderr.strip()}")
    try:
        assert _mount("-o", "remount,ro,bind", str(point)).returncode == 0
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


@pytest.mark.slow
def test_it_refuses_writes_clearly_when_the_journal_is_read_only_keeps_reading_and_recovers(
    tmp_path: Path, read_only_dir: Path
) -> None:
    # Linux refuses to remount a file system read-only while a process holds files open for writing (the
    # server does: SQLite, the shard), so the read-only part is where the journal file lives.
    data_dir = tmp_path / "data"
    migrate(data_dir)
    wal = read_only_dir / "wal.jsonl"
    with killable_server(data_dir, PALAZZO_WAL=str(wal)) as server, connect(server.base_url + "/mcp", "http") as client:
        message = client.error("palace_store", memory("fault tolerance memory refused by a read-only journal"))
        _assert_clear_write_error(message)
        assert "Read-only file system" in message and str(wal) in message
        assert client.total() == 0
        assert client.ok("palace_find", {"query": "fault tolerance memory"})["count"] == 0
        assert _mount("-o", "remount,rw,bind", str(read_only_dir)).returncode == 0
        stored = client.ok("palace_store", memory("fault tolerance memory stored once the journal was writable"))
        _reads_work(client, stored["id"], 1)
    assert len(wal.read_text().splitlines()) == 1
    report = _verify(data_dir, PALAZZO_WAL=str(wal))
    assert report["store_points"] == 1 and report["journal_entries"] == 1


def test_it_reports_a_read_only_data_dir_clearly_at_start_up(tmp_path: Path) -> None:
    # Honest limit: Qdrant Edge memory-maps its files read-write, so it cannot even read a read-only shard.
    source, point = tmp_path / "palace", tmp_path / "read-only"
    migrate(source / "data")
    # In this process: a holder would stay on, and the read-only view of the same folder would reach it.
    assert manage(source / "data", "status", PALAZZO_HOLDER="0").returncode == 0
    point.mkdir()
    if _mount("--bind", str(source), str(point)).returncode != 0:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        assert _mount("-o", "remount,ro,bind", str(point)).returncode == 0
        result = manage(point / "data", "status")
        served = manage(point / "data", "serve", "--bind", "127.0.0.1:6399", timeout=60)
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)
    assert result.returncode == 1
    assert "could not open the embedded palace" in result.stderr and "Read-only file system" in result.stderr
    assert served.returncode == 1 and "cannot prepare the database" in served.stderr and "writable" in served.stderr
    assert "Traceback" not in result.stderr + served.stderr


def test_it_refuses_to_open_the_embedded_palace_on_a_nearly_full_disk_instead_of_crashing(
    small_disk: Path,
) -> None:
    # Qdrant Edge grows memory-mapped files on open; without room the process dies of SIGBUS (exit -7).
    data_dir = small_disk / "data"
    migrate(data_dir)
    _fill(small_disk, leave=24 * 1024 * 1024)
    result = manage(data_dir, "status")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "MB free" in result.stderr and "free some space" in result.stderr
    assert "Traceback" not in result.stderr


# Single writer on the embedded store.


@pytest.fixture(scope="module")
def held_palace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    data_dir = tmp_path_factory.mktemp("held") / "data"
    migrate(data_dir)
    with killable_server(data_dir) as server:
        yield data_dir, server.base_url


@pytest.mark.parametrize("command", [("status",), ("verify",), ("taxonomy", "--json")])
def test_it_runs_operator_commands_inside_the_serve_that_holds_the_palace(
    held_palace: tuple[Path, str], command: tuple[str, ...]
) -> None:
    data_dir, _ = held_palace
    result = manage(data_dir, *command)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.strip(), "the command's own output, from the server's process"


@pytest.mark.parametrize("command", [("status",), ("verify",), ("taxonomy", "--json")])
def test_it_names_the_holder_and_the_alternatives_to_a_second_process(
    held_palace: tuple[Path, str], command: tuple[str, ...]
) -> None:
    data_dir, _ = held_palace
    holder = json.loads((data_dir / "shards" / "claude-memory" / "holder.json").read_text())
    result = manage(data_dir, *command, PALAZZO_HOLDER="0")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"process {holder['pid']} on {holder['host']}" in output
    assert "manage.py serve" in output or "gunicorn" in output, output
    assert "QDRANT_URL" in output and "stop that process" in output
    assert "Traceback" not in output


async def _store_same_text(url: str, text: str, clients: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    async def one() -> None:
        async with Client(url, mode="legacy", read_timeout_seconds=60) as client:
            result = await client.call_tool("palace_store", memory(text))
            assert not result.is_error, result.content
            results.append(json.loads(result.content[0].text))  # type: ignore[union-attr]

    async with anyio.create_task_group() as group:
        for _ in range(clients):
            group.start_soon(one)
    return results


def test_it_serializes_concurrent_stores_of_one_text_into_one_memory(held_palace: tuple[Path, str]) -> None:
    _, base_url = held_palace
    text = f"stored by eight clients at once {uuid.uuid4().hex}"
    results = anyio.run(_store_same_text, base_url + "/mcp", text, 8)
    assert len({result["id"] for result in results}) == 1
    assert sorted(result["duplicate"] for result in results) == [False] + [True] * 7
    with connect(base_url + "/mcp", "http") as client:
        found = client.ok("palace_find", {"query": text, "limit": 20})["results"]
        assert [hit["text"] for hit in found].count(text) == 1


# A Qdrant server (QDRANT_URL) that goes away and comes back.

QDRANT_TIMEOUT = 1.0
# Each failing call may wait out the timeout once (plus its retry-free error path and the MCP round trip).
FAIL_FAST_SECONDS = QDRANT_TIMEOUT + 4.0


@pytest.fixture
def fake_qdrant() -> Iterator[FakeQdrant]:
    fake = FakeQdrant().start()
    try:
        yield fake
    finally:
        fake.stop()


def _timed_error(client: Palazzo, tool: str, arguments: dict[str, Any]) -> tuple[str, float]:
    started = time.monotonic()
    message = client.error(tool, arguments)
    elapsed = time.monotonic() - started
    assert elapsed < FAIL_FAST_SECONDS, f"{tool} took {elapsed:.1f} s to fail"
    assert "unexpectedly" not in message and "Traceback" not in message, message
    return message, elapsed


def _journal_rows(data_dir: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(f"file:{data_dir / 'palazzo.sqlite3'}?mode=ro", uri=True) as connection:
        return connection.execute("SELECT status, memory_ids FROM palace_journalentry ORDER BY id").fetchall()


@pytest.mark.slow
def test_it_fails_fast_refuses_writes_and_recovers_without_a_restart_when_qdrant_goes_away(
    tmp_path: Path, fake_qdrant: FakeQdrant
) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = {"QDRANT_URL": fake_qdrant.url, "PALAZZO_QDRANT_TIMEOUT": str(QDRANT_TIMEOUT), "COLLECTION": "faults"}
    with killable_server(data_dir, **env) as server, connect(server.base_url + "/mcp", "http") as client:
        first = client.ok("palace_store", memory("fault tolerance memory on a served Qdrant"))
        # Silent: accepts connections, never answers. Reads and writes fail within the timeout, clearly.
        fake_qdrant.mode = "silent"
        message, _ = _timed_error(client, "palace_find", {"query": "fault tolerance memory"})
        assert fake_qdrant.url in message and f"within {QDRANT_TIMEOUT} s" in message
        _timed_error(client, "palace_recall", {"ids": [first["id"]]})
        message, _ = _timed_error(client, "palace_store", memory("refused while Qdrant is silent"))
        assert fake_qdrant.url in message
        # Down: every connection closed at once.
        fake_qdrant.mode = "down"
        message, elapsed = _timed_error(client, "palace_status", {})
        assert "could not be reached" in message and elapsed < QDRANT_TIMEOUT + 1
        # Writes that reach the journal and then time out are refused to the caller and marked failed.
        fake_qdrant.mode = "silent_writes"
        message, _ = _timed_error(client, "palace_store", memory("journaled, then refused by a silent Qdrant"))
        assert "upsert" in message
        refused = [json.loads(ids) for status, ids in _journal_rows(data_dir) if status == "failed"]
        assert len(refused) == 1
        # Back: the same server process serves again, no restart.
        fake_qdrant.mode = "up"
        second = client.ok("palace_store", memory("stored after Qdrant came back"))
        recalled = client.ok("palace_recall", {"ids": [first["id"], second["id"], *refused[0]]})
        assert recalled["missing"] == refused[0], "a refused write was applied"
        assert client.total() == 2
    assert [status for status, _ in _journal_rows(data_dir)] == ["applied", "failed", "applied"]
    # A restart does not re-apply the refused write either.
    with killable_server(data_dir, **env) as server, connect(server.base_url + "/mcp", "http") as client:
        assert client.total() == 2
    assert fake_qdrant.count("faults") == 2
    report = _verify(data_dir, **env)
    assert report["journal_failed"] == 1 and report["store_points"] == 2


@pytest.mark.slow
def test_it_flags_a_refused_write_that_qdrant_applied_after_the_timeout(
    tmp_path: Path, fake_qdrant: FakeQdrant
) -> None:
    # A timed-out write's outcome is unknown: Qdrant may apply it after palazzo told the caller it failed.
    # palazzo cannot prevent that; `verify` must show it rather than report agreement.
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = {"QDRANT_URL": fake_qdrant.url, "PALAZZO_QDRANT_TIMEOUT": str(QDRANT_TIMEOUT), "COLLECTION": "late"}
    with killable_server(data_dir, **env) as server, connect(server.base_url + "/mcp", "http") as client:
        fake_qdrant.hold_seconds = QDRANT_TIMEOUT + 1
        fake_qdrant.mode = "late_writes"
        _timed_error(client, "palace_store", memory("applied by Qdrant after palazzo gave up"))
        fake_qdrant.mode = "up"
    result = manage(data_dir, "verify", "--json", **env)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and not report["ok"]
    (late,) = report["differences"]["unexplained"]
    assert late["refused_by_entry"] is not None
