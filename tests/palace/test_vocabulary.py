"""A palace's own vocabulary: presets, recorded at creation, kept by a palace made before, changed on purpose."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given
from hypothesis import strategies as st

from mcpserver.server import build_server, instructions, with_palace_vocabulary
from palace.engine.runtime import Palace
from palace.errors import InvalidInput
from palace.schema.vocabulary import (
    DEFAULT_PRESET,
    KINDS,
    LEGACY_PRESET,
    PRESETS,
    active_vocabulary,
    checked_words,
    preset,
    vocabulary_to_record,
)
from palace.writes import services
from palazzo_site.environment import ConfigurationError, read_environment
from tests.mcpserver.conftest import ROOT, connect, migrate, server_env, stdio_parameters
from tests.palace.helpers import memory

BEFORE_VOCABULARIES = Path(__file__).resolve().parents[1] / "fixtures" / "palace-before-vocabularies"
OLD_MEMORY_IDS = (1796428912585, 1796428912586)  # in that fixture: wing nexpublica, and wing and category vibe


def run(data_dir: Path, *args: str, **extra_env: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=server_env(data_dir, **extra_env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def shown(data_dir: Path, **extra_env: str) -> dict[str, object]:
    """The palace's vocabulary as `palazzo vocabulary show --json` prints it."""
    return dict(json.loads(run(data_dir, "vocabulary", "show", "--json", **extra_env)))


def palace_before_vocabularies(data_dir: Path) -> Path:
    """A data dir made by palazzo before vocabularies were recorded (its database and journal: two memories)."""
    data_dir.mkdir(parents=True)
    with sqlite3.connect(data_dir / "palazzo.sqlite3") as database:
        database.executescript((BEFORE_VOCABULARIES / "palazzo.sql").read_text())
    (data_dir / "wal.jsonl").write_bytes((BEFORE_VOCABULARIES / "wal.jsonl").read_bytes())
    return data_dir


def test_it_offers_a_neutral_default_and_the_rust_palazzo_vocabulary() -> None:
    default, legacy = PRESETS[DEFAULT_PRESET], PRESETS[LEGACY_PRESET]
    assert "nexpublica" not in default.wings and "vibe" not in default.categories
    assert {"nexpublica", "vibe"} <= set(legacy.wings)
    # Feeding files transcripts in projects / events / project-memory by default: both presets have them.
    for vocabulary in (default, legacy):
        assert "projects" in vocabulary.wings and "events" in vocabulary.halls
        assert "project-memory" in vocabulary.categories
        assert all(checked_words(kind, getattr(vocabulary, kind)) for kind in KINDS)


def test_it_records_the_default_in_a_new_palace(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    assert shown(data_dir) == PRESETS[DEFAULT_PRESET].as_dict()


def test_it_records_the_vocabulary_the_environment_chooses_for_a_new_palace(tmp_path: Path) -> None:
    chosen = {"PALAZZO_VOCABULARY": "rust-palazzo", "PALAZZO_WINGS": "home,work"}
    recorded = shown(tmp_path / "data", **chosen)
    assert recorded == {"preset": "custom", "wings": ["home", "work"]} | {
        kind: list(getattr(PRESETS["rust-palazzo"], kind)) for kind in ("halls", "categories")
    }
    # Kept with the palace: the environment no longer changes it (the warning names the command).
    assert shown(tmp_path / "data") == recorded


def test_it_keeps_validating_a_palace_made_before_vocabularies(tmp_path: Path) -> None:
    data_dir = palace_before_vocabularies(tmp_path / "data")
    assert shown(data_dir) == PRESETS[LEGACY_PRESET].as_dict()
    run(data_dir, "rebuild", PALAZZO_HOLDER="off")  # the fixture carries the journal, not the vector store
    with connect(stdio_parameters(data_dir), "stdio") as palazzo:
        assert "nexpublica" in (palazzo.client.instructions or "")
        tools = {tool.name: tool for tool in palazzo.list_tools().tools}
        assert "nexpublica" in tools["palace_store"].input_schema["properties"]["wing"]["enum"]
        stored = palazzo.ok("palace_store", memory("Invoices go out on the first.", wing="nexpublica"))
        assert stored["wing"] == "nexpublica"
        # An old memory filed by the old vocabulary is corrected in place, keeping its filing.
        corrected = palazzo.ok("palace_supersede", {"supersedes": [OLD_MEMORY_IDS[1]], "reason": "r", "text": "Sat."})
        assert corrected["memory"]["wing"] == "vibe" and corrected["memory"]["category"] == "vibe"
        refused = palazzo.error("palace_store", memory("x", category="general"))
        assert "category" in refused and "project-memory" in refused


def test_it_shows_the_palace_vocabulary_in_a_new_palace_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    with connect(stdio_parameters(data_dir), "stdio") as palazzo:
        told = palazzo.client.instructions or ""
        assert "nexpublica" not in told and "procedures" in told
        refused = palazzo.error("palace_store", memory("x", wing="nexpublica"))
        assert "wing" in refused and "'nexpublica' is not allowed" in refused


@pytest.mark.django_db
def test_it_changes_the_vocabulary_only_by_the_command(palace: Palace) -> None:
    with pytest.raises(InvalidInput, match="wing"):
        services.store(**memory("a garden note", wing="garden"))
    out = io.StringIO()
    call_command("vocabulary", "add-wing", "garden", stdout=out, stderr=io.StringIO())
    assert "garden" in out.getvalue() and active_vocabulary().preset == "custom"
    assert services.store(**memory("a garden note", wing="garden"))["wing"] == "garden"
    call_command("vocabulary", "set", "rust-palazzo", stdout=io.StringIO(), stderr=io.StringIO())
    assert services.store(**memory("billing", wing="nexpublica", category="vibe"))["category"] == "vibe"
    with pytest.raises(CommandError, match="already in the palace's wings"):
        call_command("vocabulary", "add-wing", "vibe", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="presets: default, rust-palazzo"):
        call_command("vocabulary", "set", "mine", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="no comma"):
        call_command("vocabulary", "add-hall", " a,b", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.django_db
def test_it_builds_instructions_and_tool_schemas_from_the_palace_vocabulary(palace: Palace) -> None:
    call_command("vocabulary", "add-category", "recipes", stdout=io.StringIO(), stderr=io.StringIO())
    assert "recipes" in instructions(with_palace_vocabulary(settings.PALAZZO))
    listed = anyio.run(build_server(env=settings.PALAZZO).list_tools)
    store = next(tool for tool in listed if tool.name == "palace_store")
    assert "recipes" in store.input_schema["properties"]["category"]["enum"]


def test_it_refuses_an_unknown_preset_in_the_environment() -> None:
    with pytest.raises(ConfigurationError, match="PALAZZO_VOCABULARY='mine' is invalid: expected one of default"):
        read_environment({"PALAZZO_VOCABULARY": "mine"})


lists = st.lists(st.sampled_from(["a", "b", "c", "home", "work"]), min_size=1, unique=True).map(tuple)


@given(
    chosen=st.sampled_from([None, *PRESETS]),
    overrides=st.dictionaries(st.sampled_from(KINDS), lists),
    had_memories=st.booleans(),
)
def test_it_records_the_preset_with_the_lists_set_in_place_of_its_own(
    chosen: str | None, overrides: dict[str, tuple[str, ...]], had_memories: bool
) -> None:
    recorded = vocabulary_to_record(preset_name=chosen, lists=overrides, had_memories=had_memories)
    base = preset(chosen or (LEGACY_PRESET if had_memories else DEFAULT_PRESET))
    for kind in KINDS:
        assert getattr(recorded, kind) == overrides.get(kind, getattr(base, kind))
    differs = any(getattr(recorded, kind) != getattr(base, kind) for kind in KINDS)
    assert recorded.preset == ("custom" if differs else base.preset)


def test_it_carries_the_vocabulary_in_a_backup(tmp_path: Path) -> None:
    source = palace_before_vocabularies(tmp_path / "source")
    run(source, "vocabulary", "add-category", "recipes")
    run(source, "backup", "--out", str(tmp_path / "backup"), PALAZZO_HOLDER="off")
    run(tmp_path / "target", "restore", str(tmp_path / "backup"), PALAZZO_HOLDER="off", PALAZZO_VOCABULARY="default")
    restored = shown(tmp_path / "target", PALAZZO_VOCABULARY="default")
    assert restored["preset"] == "custom" and restored["categories"] == [*PRESETS[LEGACY_PRESET].categories, "recipes"]
