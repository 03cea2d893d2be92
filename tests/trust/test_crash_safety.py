"""Crash safety: SIGKILL a real server while agents store; every acknowledged memory survives exactly once.

Also the verify command itself: it must notice every kind of disagreement between the journal and the store.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from mcp import Client
from mcp_types import Implementation

from palace.engine.locks import write_lock
from palace.engine.runtime import Palace
from palace.models import JournalEntry
from palace.operations.verify import verify
from palace.store.base import PointWrite
from palace.writes import services
from tests.palace.helpers import memory
from tests.trust.conftest import ROOT, KillableServer, killable_server, manage, migrate, server_env

WRITERS = 4
BATCH_WRITERS = 1
BATCH_SIZE = 8
INGEST_ITEMS = 2000
# manage.py ingest: enough chunks that a kill after two lands mid-file, few enough to re-run quickly.
CLI_INGEST_ITEMS = 700
# However the machine's load shares time between the paths, the kill waits for at least this many MCP acks.
MIN_ACKED = 5


class Acknowledged:
    """What the clients were told: id -> text of every memory whose tool result came back."""

    def __init__(self) -> None:
        self.memories: dict[int, str] = {}
        self.calls = 0
        self.failures_after_kill = 0
        self.ingested = 0


async def _writer(
    url: str, number: int, acked: Acknowledged, batch: bool, stop: anyio.Event, killing: anyio.Event
) -> None:
    info = Implementation(name=f"crash-writer-{number}", version="1")
    try:
        async with Client(url, mode="legacy", client_info=info, read_timeout_seconds=30) as client:
            index = 0
            while not stop.is_set():
                texts = [f"crash writer {number} memory {index + k} {uuid.uuid4().hex}" for k in range(BATCH_SIZE)]
                if batch:
                    result = await client.call_tool("palace_store_batch", {"items": [memory(t) for t in texts]})
                else:
                    texts = texts[:1]
                    result = await client.call_tool("palace_store", memory(texts[0]))
                assert not result.is_error, result.content
                data: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
                if batch:
                    for item, text in zip(data["items"], texts):
                        assert item["status"] == "stored"
                        acked.memories[item["memory"]["id"]] = text
                else:
                    acked.memories[data["id"]] = texts[0]
                acked.calls += 1
                index += len(texts)
    except Exception:
        # The server died under us: the call in flight was never acknowledged, which is allowed to be lost.
        if not killing.is_set():
            acked.failures_after_kill += 1


def ingest_texts(count: int) -> list[str]:
    run = uuid.uuid4().hex
    return [f"bulk ingest line {index} of run {run}" for index in range(count)]


async def _ingest(url: str, texts: list[str], acked: Acknowledged, killing: anyio.Event) -> None:
    """POST /ingest; each streamed chunk line acknowledges the next items_in_chunk lines of the body."""
    body = b"".join(json.dumps(memory(text)).encode() + b"\n" for text in texts)
    try:
        async with (
            httpx.AsyncClient(timeout=120) as client,
            client.stream("POST", url, content=body, headers={"Content-Type": "application/x-ndjson"}) as response,
        ):
            assert response.status_code == 200
            async for line in response.aiter_lines():
                report = json.loads(line)
                assert "error" not in report, report
                if "items_in_chunk" in report:
                    assert report["counts"]["failed"] == 0
                    acked.ingested += report["items_in_chunk"]
    except (httpx.HTTPError, AssertionError):
        if not killing.is_set():
            raise


def _time_to_kill(acked: Acknowledged, kill_after: int, chunks_before_kill: int, total: int) -> bool:
    """Enough acknowledged on both paths, or the ingest nearly done: the kill must land mid-stream."""
    ingest_nearly_done = acked.ingested >= total - 2 * 256 and len(acked.memories) >= MIN_ACKED
    return ingest_nearly_done or (len(acked.memories) >= kill_after and acked.ingested >= chunks_before_kill * 256)


async def _store_until_killed(
    server: KillableServer, acked: Acknowledged, kill_after: int, texts: list[str], chunks_before_kill: int
) -> None:
    stop, killing = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(_ingest, server.base_url + "/ingest", texts, acked, killing)
        for number in range(WRITERS + BATCH_WRITERS):
            group.start_soon(_writer, server.base_url + "/mcp", number, acked, number >= WRITERS, stop, killing)
        with anyio.fail_after(120):
            while not _time_to_kill(acked, kill_after, chunks_before_kill, len(texts)):
                await anyio.sleep(0.01)
        # Set before the kill: a request the kill cuts may fail before this task runs again.
        killing.set()
        await anyio.to_thread.run_sync(server.kill)
        stop.set()


def _exported_texts(base_url: str) -> Counter[str]:
    response = httpx.get(base_url + "/export", timeout=120)
    assert response.status_code == 200, response.text
    return Counter(json.loads(line)["text"] for line in response.text.splitlines() if line.strip())


async def _recall_all(url: str, ids: list[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    async with Client(url, mode="legacy", read_timeout_seconds=60) as client:
        for start in range(0, len(ids), 100):
            result = await client.call_tool("palace_recall", {"ids": ids[start : start + 100]})
            data = json.loads(result.content[0].text)  # type: ignore[union-attr]
            assert not result.is_error, data
            for item in data["memories"]:
                assert item["id"] not in found
                found[item["id"]] = item["text"]
    return found


def _journal_statuses(data_dir: Path) -> dict[str, int]:
    # Read-only, beside the running server: SQLite in WAL mode serves readers while a writer holds it.
    with sqlite3.connect(f"file:{data_dir / 'palazzo.sqlite3'}?mode=ro", uri=True) as connection:
        rows = connection.execute("SELECT status, COUNT(*) FROM palace_journalentry GROUP BY status").fetchall()
    return dict(rows)


@pytest.mark.slow
def test_it_keeps_every_acknowledged_memory_exactly_once_after_sigkill(tmp_path: Path) -> None:
    """Agents store over /mcp while a bulk ingest streams over /ingest; SIGKILL mid-stream; restart."""
    data_dir = tmp_path / "data"
    migrate(data_dir)
    acked = Acknowledged()
    kill_after = random.randint(8, 20)
    texts = ingest_texts(INGEST_ITEMS)
    with killable_server(data_dir) as server:
        anyio.run(_store_until_killed, server, acked, kill_after, texts, random.randint(1, 2))
        assert server.process is not None and server.process.returncode is not None
    assert len(acked.memories) >= MIN_ACKED and 0 < acked.ingested < INGEST_ITEMS
    # The kill left the journal as it was: possibly entries written but never confirmed by the store.
    left_pending = _journal_statuses(data_dir).get(JournalEntry.Status.PENDING, 0)
    print(
        f"acknowledged {len(acked.memories)} MCP memories in {acked.calls} calls and {acked.ingested} ingested "
        f"lines; {left_pending} journal entries pending at the kill"
    )
    with killable_server(data_dir) as server:
        assert _journal_statuses(data_dir).get(JournalEntry.Status.PENDING, 0) == 0
        found = anyio.run(_recall_all, server.base_url + "/mcp", sorted(acked.memories))
        exported = _exported_texts(server.base_url)
    assert set(found) == set(acked.memories), "acknowledged memories are missing after the crash"
    assert all(found[memory_id] == text for memory_id, text in acked.memories.items())
    assert all(exported[text] == 1 for text in acked.memories.values()), "an MCP memory is not there exactly once"
    assert all(exported[text] == 1 for text in texts[: acked.ingested]), "an acknowledged ingest line was lost"
    assert all(exported[text] <= 1 for text in texts), "an ingest line was stored twice"
    result = manage(data_dir, "verify", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["ok"] and report["journal_pending"] == 0
    assert report["duplicate_current_texts"] == 0, "a text was stored twice"
    assert report["store_points"] == report["expected_points"] == sum(exported.values())


@pytest.mark.slow
def test_it_finishes_a_killed_manage_py_ingest_when_run_again_without_duplicates(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    texts = ingest_texts(CLI_INGEST_ITEMS)
    source = tmp_path / "memories.jsonl"
    source.write_text("".join(json.dumps(memory(text)) + "\n" for text in texts))
    command = [sys.executable, "manage.py", "ingest", "--file", str(source)]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=server_env(data_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while _journal_statuses(data_dir).get(JournalEntry.Status.APPLIED, 0) < 2:
            assert process.poll() is None, "ingest finished before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    stored_before = _journal_statuses(data_dir)
    rerun = manage(data_dir, "ingest", "--file", str(source), timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    print(f"journal at the kill: {stored_before}; rerun: {rerun.stderr.strip().splitlines()[-1]}")
    assert re.search(rf"ingest: {CLI_INGEST_ITEMS} items: \d+ stored, [1-9]\d* duplicates returned", rerun.stderr)
    report = json.loads(manage(data_dir, "verify", "--json").stdout)
    assert report["ok"], report
    assert report["store_points"] == CLI_INGEST_ITEMS and report["duplicate_current_texts"] == 0


def test_it_verifies_an_agreeing_palace(palace: Palace) -> None:
    first = services.store(**memory("verify: a stored memory"))
    services.store_batch(items=[memory(f"verify: batch memory {i}") for i in range(3)])
    services.supersede(supersedes=[first["id"]], reason="corrected", **memory("verify: the correction"))
    doomed = services.store(**memory("verify: deleted later"))
    services.delete(ids=[doomed["id"]], reason="test", confirm=True)
    report = verify()
    assert report["ok"], report
    assert report["store_points"] == report["expected_points"] == 5
    assert report["journal_entries"] == 5 and report["journal_pending"] == 0


def test_it_reports_every_kind_of_difference(palace: Palace) -> None:
    kept = services.store(**memory("verify: kept but garbled"))
    lost = services.store(**memory("verify: lost by the store"))
    gone = services.store(**memory("verify: deleted, then resurrected"))
    point = palace.store.retrieve([gone["id"]])[0]
    services.delete(ids=[gone["id"]], reason="test", confirm=True)
    vectors = palace.embedder.documents(["stray"])
    # Under the write lock, as every writer of the store does: the embedding thread may be writing
    # these memories' dense vectors back with the payload it read a moment before.
    with write_lock:
        palace.store.delete([lost["id"]])
        palace.store.set_payload([kept["id"]], {"text": "something else", "valid_until": "2020-01-01T00:00:00Z"})
        palace.store.upsert(
            [
                PointWrite(id=gone["id"], chunk_vectors=vectors[0], payload=point.payload, keyword_text="x"),
                PointWrite(id=1_900_000_000, chunk_vectors=vectors[0], payload={"text": "stray"}, keyword_text="stray"),
            ]
        )
    report = verify()
    assert not report["ok"]
    differences = report["differences"]
    assert differences["missing"] == [lost["id"]]
    assert differences["deleted_but_present"] == [gone["id"]]
    assert [item["id"] for item in differences["unexplained"]] == [1_900_000_000]
    (garbled,) = differences["mismatched"]
    assert garbled["id"] == kept["id"]
    assert {"text", "valid_until", "text_hash_of_stored_text"} <= set(garbled["fields"])


def test_it_counts_a_point_from_a_refused_write_as_unexplained(palace: Palace) -> None:
    stored = services.store(**memory("verify: refused but written"))
    JournalEntry.objects.filter(operation="store").update(status=JournalEntry.Status.FAILED)
    report = verify()
    assert report["differences"]["unexplained"][0]["id"] == stored["id"]
    assert report["differences"]["unexplained"][0]["refused_by_entry"] is not None


def test_it_exits_non_zero_and_prints_the_differences_from_the_command(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    with sqlite3.connect(data_dir / "palazzo.sqlite3") as connection:
        payload = {"memories": [memory("never reached the store") | {"id": 1_000_000_000, "timestamp": None}]}
        connection.execute(
            "INSERT INTO palace_journalentry (created_at, operation, status, memory_ids, wing, added_by, reason, "
            "payload, error) VALUES (datetime('now'), 'store', 'applied', '[1000000000]', 'projects', '', '', ?, '')",
            (json.dumps(payload),),
        )
    result = manage(data_dir, "verify")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "missing: 1" in result.stdout and "1000000000" in result.stdout and "DIFFER" in result.stdout
