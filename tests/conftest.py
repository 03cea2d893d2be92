"""Shared fixtures: a fresh palace (embedded store, real model, real database) per test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
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
