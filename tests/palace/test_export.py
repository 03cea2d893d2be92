"""manage.py export, and export -> ingest round trips into an empty palace."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

from django.conf import settings
from django.core.management import call_command

from palace.engine import runtime
from palace.engine.ids import allocate_ids
from palace.engine.runtime import Palace
from palace.models import JournalEntry
from palace.operations import status as palace_status
from palace.reads import selectors
from palace.writes import services
from tests.palace.helpers import memory


def export_to(path: Path) -> list[dict[str, object]]:
    call_command("export", out=str(path), stderr=io.StringIO())
    return [json.loads(line) for line in path.read_text().splitlines()]


def fill(palace: Palace) -> None:
    services.store(**memory("The NAS runs ZFS", session="s1", source_file="nas.md"), added_by="agent/1")
    services.store(**memory("Old router model", timestamp="2023-05-01T09:00:00Z"), added_by="agent/2")
    old = services.store(**memory("Backups run at 02:00"))
    # A correction that keeps the same text: two distinct ids with one text must both survive.
    services.supersede(supersedes=[old["id"]], reason="moved to a new job", **memory("Backups run at 02:00"))
    first = services.store(**memory("Blog runs on WordPress", wing="personal"))
    services.supersede(
        supersedes=[first["id"]], reason="migrated", added_by="agent/3", **memory("Blog runs on Hugo", wing="personal")
    )


def empty_palace(tmp_path: Path) -> None:
    """Switch this test to a new, empty data dir and journal (the database rows of the old one gone)."""
    runtime.close_palace()
    fresh = tmp_path / "fresh"
    settings.PALAZZO = dataclasses.replace(settings.PALAZZO, data_dir=fresh, wal_path=fresh / "wal.jsonl")
    JournalEntry.objects.all().delete()
    runtime.get_palace()


def test_it_exports_every_memory_with_every_field_in_id_order(palace: Palace, tmp_path: Path) -> None:
    fill(palace)
    lines = export_to(tmp_path / "export.jsonl")

    assert len(lines) == 6 and palace_status.status()["current"] == 4
    ids = [line["id"] for line in lines]
    assert ids == sorted(ids)
    recalled = set(selectors.recall(ids=[ids[0]])["memories"][0]) - {"expired"}  # recall's flag, not a field
    assert all(set(line) == {"id", *recalled} for line in lines)
    superseded = [line for line in lines if line["superseded_by"]]
    assert {line["superseded_reason"] for line in superseded} == {"moved to a new job", "migrated"}
    assert all(line["valid_until"] for line in superseded)


def test_it_round_trips_an_export_into_an_empty_palace(palace: Palace, tmp_path: Path) -> None:
    fill(palace)
    original = export_to(tmp_path / "export.jsonl")
    empty_palace(tmp_path)

    err = io.StringIO()
    call_command("ingest", file=str(tmp_path / "export.jsonl"), stderr=err)

    assert "6 items: 6 stored" in err.getvalue()
    assert export_to(tmp_path / "again.jsonl") == original
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "export.jsonl").read_bytes()
    # Current vs superseded survives too: find hides the superseded copy of the repeated text.
    found = selectors.find(query="Backups run at 02:00", limit=5)["results"]
    assert [hit["text"] for hit in found].count("Backups run at 02:00") == 1
    # The allocator never re-issues a restored id.
    assert allocate_ids(1)[0] > max(line["id"] for line in original)  # type: ignore[type-var]


def test_it_restores_by_id_idempotently(palace: Palace, tmp_path: Path) -> None:
    fill(palace)
    original = export_to(tmp_path / "export.jsonl")

    out = io.StringIO()
    call_command("ingest", file=str(tmp_path / "export.jsonl"), json=True, stdout=out, stderr=io.StringIO())

    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert results[-1]["counts"] == {"stored": 0, "duplicates_returned": 6, "skipped_duplicates": 0, "failed": 0}
    assert [r["duplicate_of"] for r in results[:-1]] == [line["id"] for line in original]
    assert palace_status.status()["total"] == 6


def test_it_rebuilds_restored_memories_from_the_journal(palace: Palace, tmp_path: Path) -> None:
    fill(palace)
    original = export_to(tmp_path / "export.jsonl")
    empty_palace(tmp_path)
    call_command("ingest", file=str(tmp_path / "export.jsonl"), stderr=io.StringIO())

    services.rebuild()

    assert export_to(tmp_path / "rebuilt.jsonl") == original


def test_it_refuses_a_restored_line_with_a_bad_temporal_field(palace: Palace, tmp_path: Path) -> None:
    line = memory("Restored with a broken date", id=1_700_000_000_000, valid_until="yesterday")
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    out = io.StringIO()
    try:
        call_command("ingest", file=str(tmp_path / "in.jsonl"), json=True, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        assert exc.code == 1
    result = json.loads(out.getvalue().splitlines()[0])
    assert result["status"] == "failed" and result["error"].startswith("valid_until:")
    assert palace_status.status()["total"] == 0
