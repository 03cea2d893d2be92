"""Issue 13, in one process over a real palace: each finding an attacker or a new user hit, one test each.

The subprocess findings (fresh data dir, held palace, gunicorn master death, malformed backups) are in
test_fresh_data_dir.py; the property tests over every field are in test_property_inputs.py.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from palace.engine import runtime
from palace.engine.runtime import Palace
from palace.errors import InvalidInput, PalaceError
from palace.models import IdAllocator, JournalEntry
from palace.operations import status as palace_status
from palace.operations.backup import create_backup
from palace.operations.ingest import export_line, ingest, parse_line
from palace.operations.verify import verify
from palace.reads import selectors
from palace.schema.forms import MAX_MEMORY_ID
from palace.writes import restore, services
from palazzo_site.http import host_allowed
from tests.palace.helpers import memory

LONE_SURROGATE = "r\ud800"
DEEP = "[" * 100_000 + "]" * 100_000


def ingest_lines(items: list[Any], **options: Any) -> list[dict[str, Any]]:
    """Run palace.operations.ingest over JSON lines (dicts dumped, strings sent as they are); every result."""
    lines = [item if isinstance(item, str) else json.dumps(item) for item in items]
    reports = list(ingest(lines=iter(lines), added_by=options.pop("added_by", "test/1"), **options))
    assert all(report.error is None for report in reports), [report.error for report in reports]
    return [result for report in reports for result in report.results]


def restore_line(memory_id: int, text: str, **fields: Any) -> dict[str, Any]:
    return memory(text, id=memory_id, timestamp="2025-01-01T00:00:00Z") | fields


def assert_verified() -> None:
    report = verify()
    assert report["ok"], report


# Silent overwrite: the id allocator.


def test_it_refuses_a_restore_id_near_the_top_of_int64_and_keeps_allocating_new_ids(palace: Palace) -> None:
    results = ingest_lines([restore_line(9_223_372_036_854_775_806, "sits at the top of int64")])
    assert results[0]["status"] == "failed" and "id" in results[0]["error"]

    first = services.store(**memory("the first write after the hostile line"))
    second = services.store_batch(items=[memory("the second write"), memory("the third write")])
    ids = [first["id"], *(item["memory"]["id"] for item in second["items"])]

    assert len(set(ids)) == 3 and ids == sorted(ids)
    recalled = selectors.recall(ids=ids)["memories"]
    assert [m["text"] for m in recalled] == [
        "the first write after the hostile line",
        "the second write",
        "the third write",
    ]
    assert_verified()


def test_it_refuses_id_2_to_the_63_minus_1_without_an_overflow(palace: Palace) -> None:
    results = ingest_lines([restore_line(2**63 - 1, "the largest int64")])
    assert results[0]["status"] == "failed" and str(MAX_MEMORY_ID) in results[0]["error"]


def test_it_refuses_a_restore_id_far_ahead_of_the_clock_so_the_id_space_stays_usable(palace: Palace) -> None:
    ahead = time.time_ns() // 1_000_000 + restore.RESTORE_IDS_AHEAD
    results = ingest_lines(
        [restore_line(MAX_MEMORY_ID - 1, "would leave one id"), restore_line(ahead - 1000, "close enough to now")]
    )
    assert results[0]["status"] == "failed" and "ahead" in results[0]["error"]
    assert results[1]["status"] == "stored"
    after = services.store(**memory("a new write still gets an id"))
    assert after["id"] > ahead - 1000
    assert_verified()


def test_it_refuses_to_allocate_from_a_counter_that_overflowed(palace: Palace) -> None:
    # What the old bug left behind: SQLite turned the counter into a REAL past int64.
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {IdAllocator._meta.db_table} SET next_id = 9223372036854775807.0 + 10")
    entries = JournalEntry.objects.count()
    with pytest.raises(PalaceError, match="id allocator"):
        services.store(**memory("would repeat an id"))
    assert JournalEntry.objects.count() == entries


def test_it_reports_two_journal_entries_claiming_one_id(palace: Palace) -> None:
    stored = services.store(**memory("the original memory"))
    entry = JournalEntry.objects.get()
    # The overwrite the allocator bug produced: a second entry writing the same id.
    JournalEntry.objects.create(
        operation=entry.operation,
        status=JournalEntry.Status.APPLIED,
        payload=entry.payload,
        memory_ids=[stored["id"]],
    )
    report = verify()
    assert not report["ok"]
    assert report["differences"]["claimed_twice"][0]["id"] == stored["id"]


# Journal poisoning.


@pytest.mark.parametrize("field", ["room", "session", "source_file", "added_by"])
def test_it_refuses_a_lone_surrogate_in_any_field_and_stores_the_good_lines(palace: Palace, field: str) -> None:
    bad = restore_line(1_700_000_000_001, "a poisoned line", **{field: LONE_SURROGATE})
    good = memory(f"a good line beside a poisoned {field}")
    results = ingest_lines([bad, good], keep_added_by=True)

    assert results[0]["status"] == "failed" and field in results[0]["error"] and "surrogate" in results[0]["error"]
    assert results[1]["status"] == "stored"
    assert JournalEntry.objects.filter(status=JournalEntry.Status.PENDING).count() == 0
    runtime.close_palace()
    runtime.get_palace()  # the next start-up opens
    assert_verified()


def test_it_opens_the_palace_past_a_journal_row_that_cannot_be_applied(palace: Palace) -> None:
    services.store(**memory("stored before the poisoned row"))
    poisoned = JournalEntry.objects.create(
        operation=JournalEntry.Operation.STORE, payload={"memories": [{"id": "not an id"}]}, memory_ids=[]
    )
    runtime.close_palace()

    runtime.get_palace()

    poisoned.refresh_from_db()
    assert poisoned.status == JournalEntry.Status.FAILED and "could not be applied" in poisoned.error
    status = palace_status.status()
    assert status["journal"]["failed"] == 1 and status["journal"]["latest_failed"][0]["entry"] == poisoned.pk
    report = verify()
    assert report["journal_failed"] == 1 and report["journal_latest_failed"][0]["entry"] == poisoned.pk
    from palace.operations.health import health

    assert health()["journal"] == {"status": "ok", "pending": 0, "failed": 1}
    assert services.store(**memory("stored after the poisoned row"))["duplicate"] is False


# Unhandled exceptions become errors naming the field.

OVERFLOWING = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]


@pytest.mark.parametrize("timestamp", OVERFLOWING)
def test_it_refuses_a_timestamp_that_overflows_once_its_offset_applies(palace: Palace, timestamp: str) -> None:
    with pytest.raises(InvalidInput, match="timestamp"):
        services.store(**memory("overflowing", timestamp=timestamp))
    batch = services.store_batch(items=[memory("overflowing", timestamp=timestamp), memory("its neighbour")])
    assert [item["status"] for item in batch["items"]] == ["failed", "stored"]
    for key in ("since", "until"):
        with pytest.raises(InvalidInput, match=key):
            selectors.find(query="anything", **{key: timestamp})
    results = ingest_lines([memory("overflowing in a line", timestamp=timestamp), memory("the next line")])
    assert [result["status"] for result in results] == ["failed", "stored"]


def test_it_refuses_a_half_life_of_ten_to_the_400(palace: Palace) -> None:
    with pytest.raises(InvalidInput, match="recency_half_life_days"):
        selectors.find(query="anything", recency_half_life_days=10**400)


@pytest.mark.parametrize("bad_id", ["123²", "١٢٣٤٥٦٧٨٩٠", "9" * 5000])
def test_it_refuses_a_recall_id_that_only_looks_like_digits(palace: Palace, bad_id: str) -> None:
    with pytest.raises(InvalidInput, match="ids"):
        selectors.recall(ids=[bad_id])


def test_it_refuses_a_deeply_nested_line_alone(palace: Palace) -> None:
    first = parse_line(DEEP.encode(), 1)
    assert first is not None and first.error is not None and "nested" in first.error
    results = ingest_lines([memory("before the deep line"), DEEP, memory("after the deep line")])
    assert [result["status"] for result in results] == ["stored", "failed", "stored"]


# Data that must come back.


def test_it_round_trips_the_first_second_of_year_one(palace: Palace, tmp_path: Path) -> None:
    stored = services.store(**memory("at the very beginning", timestamp="0001-01-01T00:00:00Z"))
    assert stored["timestamp"] == "0001-01-01T00:00:00Z"
    line = export_line(selectors.recall(ids=[stored["id"]])["memories"][0])
    services.delete(ids=[stored["id"]], reason="test", confirm=True)
    JournalEntry.objects.all().delete()  # a fresh palace receiving the export

    results = ingest_lines([line.strip()])

    assert results[0]["status"] == "stored", results
    assert selectors.recall(ids=[stored["id"]])["memories"][0]["timestamp"] == "0001-01-01T00:00:00Z"


# Ids are never reused.


def test_it_refuses_a_restore_line_with_the_id_of_a_deleted_memory(palace: Palace) -> None:
    gone = services.store(**memory("deleted later"))
    services.delete(ids=[gone["id"]], reason="test", confirm=True)

    results = ingest_lines([restore_line(gone["id"], "takes the deleted id")])

    assert results[0]["status"] == "failed" and "deleted" in results[0]["error"]
    assert selectors.recall(ids=[gone["id"]])["missing"] == [gone["id"]]
    assert_verified()


def test_it_refuses_supersede_cycles_and_keeps_dangling_successors(palace: Palace) -> None:
    base = 1_700_000_000_000
    results = ingest_lines(
        [
            restore_line(base + 10, "supersedes itself", superseded_by=base + 10, valid_until="2025-02-01T00:00:00Z"),
            restore_line(base + 20, "an older successor", superseded_by=base + 11, valid_until="2025-02-01T00:00:00Z"),
            restore_line(base + 30, "a successor nowhere", superseded_by=base + 31, valid_until="2025-02-01T00:00:00Z"),
            restore_line(base + 40, "newer than what it supersedes", supersedes=[base + 41]),
            restore_line(base + 50, "a real history", superseded_by=base + 60, valid_until="2025-02-01T00:00:00Z"),
            restore_line(base + 60, "its successor", supersedes=[base + 50]),
        ]
    )
    statuses = [result["status"] for result in results]
    # A successor that is nowhere is valid but dangling (deleted, or left out of a wing-filtered export):
    # kept whatever the order of the lines, and listed by verify.
    assert statuses == ["failed", "failed", "stored", "failed", "stored", "stored"], results
    assert_verified()
    assert verify()["dangling_superseded_by"] == {"count": 1, "ids": [base + 30]}


# Provenance.


def test_it_stamps_the_writer_over_a_restore_lines_added_by_unless_the_operator_ingests(palace: Palace) -> None:
    forged = restore_line(1_700_000_000_100, "claims another writer", added_by="token:admin")
    kept = restore_line(1_700_000_000_200, "the operator restores a stamp", added_by="claude-code/2")

    over_http = ingest_lines([forged], added_by="token:writer")
    by_operator = ingest_lines([kept], added_by="manage.py ingest/root", keep_added_by=True)

    recalled = selectors.recall(ids=[over_http[0]["id"], by_operator[0]["id"]])["memories"]
    assert [m["added_by"] for m in recalled] == ["token:writer", "claude-code/2"]


# Smaller findings.


def test_it_refuses_a_string_for_skip_duplicates(palace: Palace) -> None:
    services.store(**memory("already here"))
    with pytest.raises(InvalidInput, match="skip_duplicates"):
        services.store_batch(items=[memory("already here")], skip_duplicates="false")


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost:evil.example", False),
        ("localhost:６３３４", False),
        ("[::1]:evil", False),
        ("localhost:6334", True),
        ("[::1]:6334", True),
        ("127.0.0.1", True),
    ],
)
def test_it_guards_hosts_with_a_port_that_is_not_digits(host: str, allowed: bool) -> None:
    assert host_allowed(host) is allowed


def test_it_imports_from_a_missing_path_without_creating_it(palace: Palace, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    with pytest.raises(CommandError, match="no such directory"):
        call_command("import_qdrant", path=str(missing), collection="c", stdout=io.StringIO(), stderr=io.StringIO())
    assert not missing.exists()


def test_it_keeps_whatever_sits_at_the_partial_path_of_a_backup(db: None, tmp_path: Path) -> None:
    directory = tmp_path / "b1.partial"
    directory.mkdir()
    (directory / "keep.txt").write_text("the operator's file")
    (tmp_path / "b2.partial").write_text("a plain file")

    for out in (tmp_path / "b1", tmp_path / "b2"):
        with pytest.raises(InvalidInput, match="partial already exists"):
            create_backup(out=out)

    assert (directory / "keep.txt").read_text() == "the operator's file"
    assert (tmp_path / "b2.partial").read_text() == "a plain file"
    assert not (tmp_path / "b1").exists() and not (tmp_path / "b2").exists()
