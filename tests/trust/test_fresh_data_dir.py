"""Issue 13 through real processes: never-migrated data dirs, a held palace, a dead gunicorn master, bad backups."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp_types import Implementation

from palace.operations.backup import FORMAT, MANIFEST, SQLITE_FILE
from tests.mcpserver.conftest import Palazzo, connect, http_server, stdio_parameters
from tests.palace.helpers import memory
from tests.trust.conftest import killable_server, manage

pytestmark = pytest.mark.slow

# A client whose declared name imitates a token's stamp.
IMPOSTOR = Implementation(name="token:laptop", version="")


def test_it_serves_store_find_status_and_gain_over_stdio_on_a_never_migrated_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-migrated"
    with start_blocking_portal() as portal:
        sdk_client = Client(stdio_parameters(data_dir), mode="legacy", client_info=IMPOSTOR, read_timeout_seconds=120)
        with portal.wrap_async_context_manager(sdk_client):
            client = Palazzo(portal, sdk_client, "stdio")
            stored = client.ok("palace_store", memory("a first memory in a brand-new data dir"))
            found = client.ok("palace_find", {"query": "brand-new data dir"})
            status = client.ok("palace_status")
            gain = client.ok("palace_gain")
            duplicate = client.ok("palace_check_duplicate", {"text": "a first memory in a brand-new data dir"})

    assert [hit["id"] for hit in found["results"]] == [stored["id"]]
    assert status["total"] == 1 and status["journal"] == {"pending": 0, "failed": 0, "latest_failed": []}
    assert gain is not None and duplicate["duplicate"] is True
    # The declared name cannot pass for the stamp of a token called laptop.
    assert stored["added_by"] == "client:token:laptop"


def test_it_ingests_into_a_never_migrated_data_dir(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(memory("ingested into a fresh data dir")) + "\n")

    result = manage(tmp_path / "fresh", "ingest", "--file", str(source))

    assert result.returncode == 0, result.stderr
    assert "1 stored" in result.stderr and "Traceback" not in result.stderr


def test_it_refuses_to_rebuild_under_a_live_session_then_rebuilds_once_it_left(tmp_path: Path) -> None:
    data_dir = tmp_path / "held"
    with connect(stdio_parameters(data_dir), "stdio") as client:
        first = client.ok("palace_store", memory("acknowledged before the rebuild attempt"))
        refused = manage(data_dir, "rebuild")
        second = client.ok("palace_store", memory("acknowledged after the rebuild attempt"))
    assert refused.returncode == 2, refused.stderr
    assert "replaces the store under everyone" in refused.stderr and "1 other session" in refused.stderr
    rebuilt = manage(data_dir, "rebuild")  # the holder is still there (idle), and nobody else is connected
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads(rebuilt.stderr)["entries_replayed"] == 2
    with connect(stdio_parameters(data_dir), "stdio") as client:
        recalled = client.ok("palace_recall", {"ids": [first["id"], second["id"]]})
    assert len(recalled["memories"]) == 2


def test_it_refuses_to_rebuild_under_a_runmcp_holding_the_palace_itself_and_keeps_its_writes(tmp_path: Path) -> None:
    data_dir = tmp_path / "held"
    with connect(stdio_parameters(data_dir, PALAZZO_HOLDER="0"), "stdio") as client:
        first = client.ok("palace_store", memory("acknowledged before the rebuild attempt"))

        rebuild = manage(data_dir, "rebuild", PALAZZO_HOLDER="0")
        holder = rebuild.stderr.split("already open in process ")[-1].split()[0]
        # The holder named is the live runmcp, never the refused command itself.
        assert b"runmcp" in Path(f"/proc/{holder}/cmdline").read_bytes(), rebuild.stderr

        second = client.ok("palace_store", memory("acknowledged after the rebuild attempt"))
        recalled = client.ok("palace_recall", {"ids": [first["id"], second["id"]]})

    assert rebuild.returncode == 2, rebuild.stderr
    assert "already open in process" in rebuild.stderr and "held by a running server" in rebuild.stderr
    assert len(recalled["memories"]) == 2
    verified = manage(data_dir, "verify", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["store_points"] == 2


def _children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry.name))
    return children


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # exited (a zombie waits for whoever adopted it to reap it)


def test_it_stops_the_gunicorn_worker_when_its_master_is_killed(tmp_path: Path) -> None:
    data_dir = tmp_path / "orphan"
    with killable_server(data_dir) as server:
        assert server.process is not None
        master = server.process.pid
        workers = _children(master)
        assert len(workers) == 1, workers

        os.kill(master, signal.SIGKILL)
        server.process.wait(timeout=10)

        deadline = time.monotonic() + 30
        while not _gone(workers[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(workers[0]), "the worker outlived its master"
    # The shard is free again: a command can open it.
    assert manage(data_dir, "status", "--json").returncode == 0


def _backup(directory: Path, manifest: str | None, database: bytes | None = None) -> Path:
    directory.mkdir()
    if manifest is not None:
        (directory / MANIFEST).write_text(manifest)
    if database is not None:
        (directory / SQLITE_FILE).write_bytes(database)
    return directory


def test_it_refuses_malformed_backups_without_a_traceback(tmp_path: Path) -> None:
    good = json.dumps({"format": FORMAT, "engine": "sqlite", "database": SQLITE_FILE})
    backups = [
        _backup(tmp_path / "no-manifest", None),
        _backup(tmp_path / "list-manifest", "[1, 2]"),
        _backup(tmp_path / "deep-manifest", "[" * 100_000 + "]" * 100_000),
        _backup(tmp_path / "no-engine", json.dumps({"format": FORMAT})),
        _backup(tmp_path / "no-database", good),
        _backup(tmp_path / "garbage-database", good, b"this is not SQLite" * 100),
    ]
    for index, backup in enumerate(backups):
        result = manage(tmp_path / f"target-{index}", "restore", str(backup))
        assert result.returncode == 1, (backup.name, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, (backup.name, result.stderr)
        assert str(backup) in result.stderr, (backup.name, result.stderr)


NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `manage.py serve` on a data dir nobody migrated (serve migrates it)."""
    with http_server(tmp_path_factory.mktemp("served") / "data") as base_url:
        yield base_url


def post_ingest(base_url: str, lines: list[str]) -> httpx.Response:
    return httpx.post(f"{base_url}/ingest", content="\n".join(lines) + "\n", headers=NDJSON, timeout=120)


def test_it_answers_a_deeply_nested_first_ingest_line_with_400(served: str) -> None:
    response = post_ingest(served, ["[" * 100_000 + "]" * 100_000])
    assert response.status_code == 400 and "nested too deeply" in response.text


def test_it_keeps_the_chunk_of_a_deeply_nested_later_line(served: str) -> None:
    response = post_ingest(
        served,
        [
            json.dumps(memory("before a deep line")),
            "[" * 100_000 + "]" * 100_000,
            json.dumps(memory("after a deep line")),
        ],
    )
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[-1]["done"] is True and lines[-1]["counts"]["stored"] == 2 and lines[-1]["counts"]["failed"] == 1


def test_it_stamps_http_restores_with_the_writer_not_the_lines_added_by(served: str) -> None:
    forged = memory("a restore line claiming a token's stamp", id=1_700_000_000_500, added_by="token:admin")
    response = post_ingest(served, [json.dumps(forged)])
    assert json.loads(response.text.splitlines()[-1])["counts"]["stored"] == 1
    exported = [json.loads(line) for line in httpx.get(f"{served}/export", timeout=60).text.splitlines()]
    assert [m["added_by"] for m in exported if m["id"] == 1_700_000_000_500] == ["http-ingest"]


def test_it_refuses_a_host_whose_port_is_not_a_number(served: str) -> None:
    response = httpx.get(f"{served}/healthz", headers={"Host": "localhost:evil.example"}, timeout=30)
    assert response.status_code == 421


def test_it_reports_journal_counts_on_healthz(served: str) -> None:
    health = httpx.get(f"{served}/healthz", timeout=30).json()
    assert health["journal"] == {"status": "ok", "pending": 0, "failed": 0}
