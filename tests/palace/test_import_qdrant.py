"""manage.py import_qdrant against collections built in qdrant-client's local mode."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from qdrant_client import QdrantClient, models

from palace.engine.runtime import Palace
from palace.operations import imports
from palace.operations import status as palace_status
from palace.reads import selectors

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

OLD = 1_745_000_000_001
NEW = 1_745_000_000_002
PLAIN = 1_745_000_000_003


def rust_palazzo_collection(path: Path) -> None:
    """The Rust palazzo's layout: one unnamed 768-dim vector, flat payload with author."""
    client = QdrantClient(path=str(path))
    client.create_collection("claude-memory", vectors_config=models.VectorParams(size=768, distance="Cosine"))
    base = {"category": "technical", "wing": "projects", "room": "nas", "hall": "facts", "author": "claude-code/2.1"}
    payloads: dict[int, dict[str, Any]] = {
        OLD: base
        | {
            "text": "The NAS has 4 TB disks",
            "timestamp": "2025-04-18T10:00:00Z",
            "valid_until": "2025-04-20T08:00:00Z",
            "superseded_by": NEW,
            "superseded_reason": "disks replaced",
        },
        NEW: base
        | {
            "text": "The NAS has 8 TB disks",
            "timestamp": "2025-04-20T08:00:00Z",
            "valid_from": "2025-04-20T08:00:00Z",
            "supersedes": [OLD],
            "session": "s-42",
            "source_file": "nas.md",
        },
        PLAIN: base | {"text": "Odd wing", "timestamp": "2025-01-01T00:00:00Z", "wing": "attic"},
    }
    rng = np.random.default_rng(1)
    client.upsert(
        "claude-memory",
        points=[
            models.PointStruct(id=point_id, vector=rng.random(768).tolist(), payload=payload)
            for point_id, payload in payloads.items()
        ],
    )
    client.close()


def mcp_server_qdrant_collection(path: Path) -> list[str]:
    """mcp-server-qdrant's layout: UUID ids, a named fastembed vector, {document, metadata}."""
    client = QdrantClient(path=str(path))
    client.create_collection(
        "notes", vectors_config={"fast-all-minilm-l6-v2": models.VectorParams(size=384, distance="Cosine")}
    )
    ids = [str(uuid.UUID(int=i + 1)) for i in range(2)]
    client.upsert(
        "notes",
        points=[
            models.PointStruct(
                id=ids[0],
                vector={"fast-all-minilm-l6-v2": [0.1] * 384},
                payload={"document": "Alice prefers green tea", "metadata": {"hall": "preferences"}},
            ),
            models.PointStruct(
                id=ids[1],
                vector={"fast-all-minilm-l6-v2": [0.2] * 384},
                payload={"document": "The VPN uses WireGuard", "metadata": None},
            ),
        ],
    )
    client.close()
    return ids


def run_import(**options: Any) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("import_qdrant", json=True, stdout=out, stderr=err, **options)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_it_imports_a_rust_palazzo_collection_keeping_ids_and_temporal_fields(palace: Palace, tmp_path: Path) -> None:
    rust_palazzo_collection(tmp_path / "qdrant")

    with pytest.raises(CommandError, match=rf"point {PLAIN}: wing: 'attic' is not allowed.*nothing stored"):
        run_import(path=str(tmp_path / "qdrant"), collection="claude-memory")
    assert selectors.recall(ids=[OLD, NEW])["missing"] == [OLD, NEW], "a collection with a bad point stores nothing"
    code, results, err = run_import(path=str(tmp_path / "qdrant"), collection="claude-memory", skip_bad=True)
    assert "1 failed" in err

    assert code == 0  # the out-of-vocabulary wing failed, knowingly
    done = results.pop()
    assert done["counts"] == {"stored": 2, "duplicates_returned": 0, "skipped_duplicates": 0, "failed": 1}
    by_source = {result["source_id"]: result for result in results}
    assert by_source[OLD]["id"] == OLD and by_source[NEW]["id"] == NEW
    assert "wing: 'attic' is not allowed" in by_source[PLAIN]["error"]
    old, new = selectors.recall(ids=[OLD, NEW])["memories"]
    assert old["superseded_by"] == NEW and old["superseded_reason"] == "disks replaced"
    assert old["valid_until"] == "2025-04-20T08:00:00Z" and old["timestamp"] == "2025-04-18T10:00:00Z"
    assert new["supersedes"] == [OLD] and new["valid_from"] == "2025-04-20T08:00:00Z"
    assert (new["session"], new["source_file"], new["added_by"]) == ("s-42", "nas.md", "claude-code/2.1")
    # Re-embedded with this palace's model: the current memory is found, the superseded one hidden.
    hits = selectors.find(query="how big are the NAS disks", limit=2)["results"]
    assert [hit["id"] for hit in hits] == [NEW]

    # A second run with a default wing imports the rest; the kept ids come back as duplicates.
    code, results, _ = run_import(path=str(tmp_path / "qdrant"), collection="claude-memory", default_wing="projects")
    assert code == 0
    assert results[-1]["counts"] == {"stored": 1, "duplicates_returned": 2, "skipped_duplicates": 0, "failed": 0}
    assert selectors.recall(ids=[PLAIN])["memories"][0]["wing"] == "projects"

    # Each import undone removes what it stored, the kept ids included.
    assert imports.undo_import(import_id=results[-1]["import_id"])["ids"] == [PLAIN]
    assert imports.undo_import(import_id=done["import_id"])["ids"] == [OLD, NEW]
    assert selectors.recall(ids=[OLD, NEW, PLAIN])["missing"] == [OLD, NEW, PLAIN]


def test_it_imports_mcp_server_qdrant_points_under_new_ids(palace: Palace, tmp_path: Path) -> None:
    uuids = mcp_server_qdrant_collection(tmp_path / "qdrant")
    filing = {
        "default_category": "person",
        "default_wing": "personal",
        "default_room": "imported",
        "default_hall": "facts",
    }

    code, planned, err = run_import(path=str(tmp_path / "qdrant"), collection="notes", dry_run=True, **filing)
    assert code == 0 and planned.pop() == {"done": True, "counts": {"would-store": 2}} and "dry run" in err
    assert [(result["source_id"], result["memory"]["room"]) for result in planned] == [
        (uuid, "imported") for uuid in uuids
    ]
    assert palace_status.status()["total"] == 0, "a dry run stores nothing"

    code, results, err = run_import(path=str(tmp_path / "qdrant"), collection="notes", **filing)

    assert code == 0, err
    results.pop()
    assert [result["source_id"] for result in results] == uuids
    assert all(result["status"] == "stored" and result["id"] >= 1_000_000_000 for result in results)
    assert "2 points got new ids" in err
    tea = selectors.recall(ids=[results[0]["id"]])["memories"][0]
    assert (tea["text"], tea["category"], tea["wing"], tea["room"], tea["hall"]) == (
        "Alice prefers green tea",
        "person",
        "personal",
        "imported",
        "preferences",
    )


def test_it_names_a_missing_collection(palace: Palace, tmp_path: Path) -> None:
    from django.core.management.base import CommandError

    QdrantClient(path=str(tmp_path / "qdrant")).close()
    with pytest.raises(CommandError, match="'absent' does not exist"):
        call_command("import_qdrant", path=str(tmp_path / "qdrant"), collection="absent")
