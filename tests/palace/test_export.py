"""manage.py export, and export -> ingest round trips into an empty palace."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from palace.engine import runtime
from palace.engine.ids import allocate_ids
from palace.engine.runtime import Palace
from palace.models import JournalEntry
from palace.operations import ingest as ingest_service
from palace.operations import status as palace_status
from palace.operations import verify as palace_verify
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


def _ingest_in_chunks(path: Path, sizes: list[int]) -> list[dict[str, object]]:
    """Ingest an export chunk by chunk, with the given chunk sizes (cycled): every result, in order."""
    lines = [
        ingest_service.Line(number, item=json.loads(raw)) for number, raw in enumerate(path.read_text().splitlines(), 1)
    ]
    results: list[dict[str, object]] = []
    start, turn = 0, 0
    while start < len(lines):
        size = sizes[turn % len(sizes)]
        results += ingest_service.ingest_chunk(lines[start : start + size], keep_added_by=True)
        start, turn = start + size, turn + 1
    return results


def test_it_restores_a_chain_whose_successor_was_deleted_whatever_comes_after(palace: Palace, tmp_path: Path) -> None:
    old = services.store(**memory("The gateway is 10.0.0.1"))
    new = services.supersede(supersedes=[old["id"]], reason="renumbered", **memory("The gateway is 10.0.0.254"))[
        "memory"
    ]
    services.delete(ids=[new["id"]], reason="wrong network", confirm=True)
    services.store(**memory("A later memory, with a larger id than the deleted successor"))
    original = export_to(tmp_path / "export.jsonl")
    assert original[0]["superseded_by"] == new["id"] and new["id"] not in [line["id"] for line in original]
    for sizes in ([256], [1]):  # one chunk holding the later memory, or the dangling line alone
        empty_palace(tmp_path / f"chunks-{sizes[0]}")
        results = _ingest_in_chunks(tmp_path / "export.jsonl", sizes)
        assert [result["status"] for result in results] == ["stored", "stored"], results
        assert export_to(tmp_path / "again.jsonl") == original
        report = palace_verify.verify()
        assert report["ok"] and report["dangling_superseded_by"] == {"count": 1, "ids": [old["id"]]}


def test_it_refuses_a_validity_that_ends_before_it_starts(palace: Palace) -> None:
    line = memory(
        "Current for minus one day",
        id=1_700_000_000_000,
        valid_from="2024-05-02T00:00:00Z",
        valid_until="2024-05-01T00:00:00Z",
    )
    [result] = ingest_service.ingest_chunk([ingest_service.Line(1, item=line)])
    assert result["status"] == "failed" and str(result["error"]).startswith("valid_until: must not be earlier")
    # Ending before its own (future) timestamp is something a palace writes: kept.
    future = memory(
        "Planned for 2031", id=1_700_000_000_001, timestamp="2031-01-01T00:00:00Z", valid_until="2026-01-01T00:00:00Z"
    )
    [kept] = ingest_service.ingest_chunk([ingest_service.Line(1, item=future)])
    assert kept["status"] == "stored", kept


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["store", "supersede", "delete", "expire", "restore"]), st.integers(min_value=0, max_value=50)
    ),
    min_size=1,
    max_size=8,
)


@hypothesis_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=3))
def test_it_gives_back_every_palace_its_export_describes_in_any_chunking(
    palace: Palace, tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, int]], sizes: list[int]
) -> None:
    scratch = tmp_path_factory.mktemp("roundtrip")
    empty_palace(scratch / "source")
    current: list[int] = []
    for number, (operation, pick) in enumerate(operations):
        text = f"Memory {number}: fact {pick} about the orrery"
        if operation == "expire":  # expires within the test: an export holds expired memories too
            services.store(**memory(text), ttl_days=1e-6)  # (not corrected later: an expired memory cannot be)
        elif operation == "restore":  # a restored line under its own (older) id, as an earlier import left it
            line = memory(text, id=1_700_000_000_000 + number, timestamp="2024-01-01T00:00:00Z")
            [restored] = ingest_service.ingest_chunk([ingest_service.Line(1, item=line)], keep_added_by=True)
            assert restored["status"] == "stored", restored
        elif operation == "store" or not current:
            current.append(services.store(**memory(text, wing=["projects", "personal"][pick % 2]))["id"])
        elif operation == "supersede":
            target = current.pop(pick % len(current))
            current.append(services.supersede(supersedes=[target], reason="corrected", **memory(text))["memory"]["id"])
        else:
            services.delete(ids=[current.pop(pick % len(current))], reason="gone", confirm=True)
    original = export_to(scratch / "export.jsonl")
    empty_palace(scratch / "copy")
    results = _ingest_in_chunks(scratch / "export.jsonl", sizes)
    assert all(result["status"] == "stored" for result in results), results
    assert export_to(scratch / "again.jsonl") == original


def test_it_restores_a_wing_filtered_export_that_cuts_a_supersede_chain(palace: Palace, tmp_path: Path) -> None:
    old = services.store(**memory("The wiki lives on the NAS", wing="personal"))
    services.supersede(supersedes=[old["id"]], reason="moved", **memory("The wiki lives on the VPS", wing="projects"))
    personal = list(ingest_service.export_memories(wings=("personal",)))  # a wing-scoped token's export
    assert [line["id"] for line in personal] == [old["id"]] and personal[0]["superseded_by"] is not None
    (tmp_path / "personal.jsonl").write_text("".join(ingest_service.export_line(line) for line in personal))
    empty_palace(tmp_path / "copy")
    [result] = _ingest_in_chunks(tmp_path / "personal.jsonl", [256])
    assert result["status"] == "stored", result
    assert export_to(tmp_path / "again.jsonl") == json.loads(json.dumps(personal))
