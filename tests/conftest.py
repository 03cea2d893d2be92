"""Shared fixtures: a fresh palace (embedded store, real model, real database) per test."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings

from palace.engine import runtime

# The palace holders the tests' subprocesses start leave soon after their last client (default 300 s).
os.environ.setdefault("PALAZZO_HOLDER_IDLE_SECONDS", "3")


def holders_under(base: Path) -> list[int]:
    """The pids of palace holders (`palazzo holder`) whose data dir lies under base."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"palazzo_site.cli" not in command or b"holder" not in command:
            continue
        data_dirs = [item.split(b"=", 1)[1] for item in environ if item.startswith(b"PALAZZO_DATA_DIR=")]
        if data_dirs and Path(os.fsdecode(data_dirs[0])).is_relative_to(base):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def no_holder_outlives_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Stop any palace holder a test's subprocess started under this run's temporary folders."""
    yield
    for pid in holders_under(tmp_path_factory.getbasetemp()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@pytest.fixture
def palace_env(tmp_path: Path) -> Iterator[Path]:
    """Point the palace at an empty data dir for one test; the model stays loaded."""
    original = settings.PALAZZO
    runtime.close_palace()
    settings.PALAZZO = dataclasses.replace(
        original, data_dir=tmp_path, wal_path=tmp_path / "wal.jsonl", usage_log=tmp_path / "usage.jsonl"
    )
    try:
        yield tmp_path
    finally:
        runtime.close_palace()
        settings.PALAZZO = original


@pytest.fixture
def palace(palace_env: Path, db: None) -> runtime.Palace:
    """An open, empty palace with database access."""
    return runtime.get_palace()


@pytest.fixture(params=["edge", "server"])
def either_store(request: pytest.FixtureRequest, palace_env: Path) -> Iterator[str]:
    """Run the test on the embedded shard and on a Qdrant server (qdrant-client's local mode behind REST)."""
    if request.param == "server":
        from tests.trust.fake_qdrant import FakeQdrant

        fake = FakeQdrant().start()
        settings.PALAZZO = dataclasses.replace(settings.PALAZZO, qdrant_url=fake.url)
        try:
            yield request.param
        finally:
            runtime.close_palace()
            fake.stop()
        return
    yield request.param


@pytest.fixture
def any_palace(either_store: str, db: None) -> runtime.Palace:
    """An open, empty palace on either store, with database access."""
    return runtime.get_palace()


@pytest.fixture(autouse=True)
def audit_rows_cleared_before_flush(request: pytest.FixtureRequest) -> Iterator[None]:
    """A transactional test ends with a flush, which the append-only audit triggers refuse; purge the rows first."""
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or bool(marker and marker.kwargs.get("transaction"))
    if not transactional:
        yield
        return
    request.getfixturevalue("_django_db_helper" if marker else "transactional_db")
    yield
    from django.db import transaction

    from palace.models import AuditPurge, AuditRecord

    with transaction.atomic():
        # The marker stays until the flush, so PostgreSQL's TRUNCATE of every table passes the guard too.
        AuditPurge.objects.create(before=datetime.now(UTC), actor="tests")
        AuditRecord.objects.all().delete()
