"""Shared fixtures: a fresh palace (embedded store, real model, real database) per test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.conf import settings

from palace import runtime


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
