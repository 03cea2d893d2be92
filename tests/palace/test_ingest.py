"""manage.py ingest against the embedded store, the real model and the real database."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from palace.engine.runtime import Palace
from palace.operations import status as palace_status
from palace.reads import selectors
from tests.mcpserver.conftest import ROOT, migrate, server_env
from tests.palace.helpers import memory


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def run_ingest(monkeypatch: pytest.MonkeyPatch | None = None, **options: Any) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        call_command("ingest", stdout=stdout, stderr=stderr, **options)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, stdout.getvalue(), stderr.getvalue()


def test_it_ingests_a_file_in_chunks_and_reports_every_line(palace: Palace, tmp_path: Path) -> None:
    items: list[Any] = [memory(f"Ingested fact number {i} about the backup job") for i in range(300)]
    items[10:10] = ["", "# a comment line", "{not json", memory("bad vocabulary", wing="nowhere")]
    items.append(memory("Ingested fact number 7 about the backup job"))  # a duplicate within the input
    source = write_lines(tmp_path / "in.jsonl", items)

    code, out, err = run_ingest(file=str(source), json=True)

    assert code == 1  # something failed
    results = [json.loads(line) for line in out.splitlines()]
    done = results.pop()
    assert done == {
        "done": True,
        "total": 303,
        "counts": {"stored": 300, "duplicates_returned": 1, "skipped_duplicates": 0, "failed": 2},
        "redactions": {},
    }
    by_line = {result["line"]: result for result in results}
    assert by_line[13]["status"] == "failed" and "not valid JSON" in by_line[13]["error"]
    assert by_line[14]["status"] == "failed" and "wing: 'nowhere' is not allowed" in by_line[14]["error"]
    assert 11 not in by_line and 12 not in by_line  # blank and comment lines are ignored
    last = by_line[max(by_line)]
    assert last["status"] == "duplicate" and last["duplicate_of"] == by_line[8]["id"]
    assert [result["line"] for result in results] == sorted(by_line)
    assert palace_status.status()["total"] == 300
    assert "300 stored, 1 duplicates returned, 0 duplicates skipped, 2 failed" in err


def test_it_reads_standard_input_and_keeps_historical_timestamps(
    palace: Palace, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [
        json.dumps(memory("The router was replaced in spring", timestamp="2024-03-01T10:00:00+02:00")),
        json.dumps(memory("The VPN moved to WireGuard")),
    ]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(("\n".join(lines) + "\n").encode())))

    code, out, err = run_ingest()

    assert code == 0
    assert out == ""  # without --json only the summary, on stderr
    assert err.strip().startswith("ingest: 2 items: 2 stored")
    memories = {m["text"]: m for m in selectors.recent(count=5)}
    assert memories["The router was replaced in spring"]["timestamp"] == "2024-03-01T08:00:00Z"
    assert memories["The VPN moved to WireGuard"]["timestamp"] != "2024-03-01T08:00:00Z"


def test_it_returns_duplicates_when_the_same_file_runs_again(palace: Palace, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [memory(f"Re-run fact {i}") for i in range(5)])
    first = run_ingest(file=str(source), json=True)
    second = run_ingest(file=str(source), json=True, skip_duplicates=True)

    assert first[0] == 0 and second[0] == 0
    stored = [json.loads(line) for line in first[1].splitlines()][:-1]
    again = [json.loads(line) for line in second[1].splitlines()]
    assert again[-1]["counts"] == {"stored": 0, "duplicates_returned": 0, "skipped_duplicates": 5, "failed": 0}
    assert [r["duplicate_of"] for r in again[:-1]] == [r["id"] for r in stored]
    assert palace_status.status()["total"] == 5


def test_it_names_a_missing_file(palace: Palace, tmp_path: Path) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="cannot read --file"):
        call_command("ingest", file=str(tmp_path / "absent.jsonl"))


@pytest.fixture
def migrated_dir(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    return data_dir


def test_it_shows_progress_only_on_a_terminal(migrated_dir: Path, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "in.jsonl", [memory(f"Progress fact {i}") for i in range(3)])
    command = [sys.executable, "manage.py", "ingest", "--file", str(source)]

    piped = subprocess.run(command, cwd=ROOT, env=server_env(migrated_dir), capture_output=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr.decode().splitlines() == [piped.stderr.decode().strip()]  # the summary line alone
    assert b"\r" not in piped.stderr and b"item/s" not in piped.stderr

    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    try:
        on_tty = subprocess.run(
            command, cwd=ROOT, env=server_env(migrated_dir), stdout=subprocess.PIPE, stderr=secondary, timeout=120
        )
        os.close(secondary)
        seen = b""
        while True:
            try:
                block = os.read(primary, 65536)
            except OSError:
                break
            if not block:
                break
            seen += block
    finally:
        os.close(primary)
    assert on_tty.returncode == 0
    assert b"3/3" in seen and b"ingest: 3 items: 0 stored, 3 duplicates returned" in seen
