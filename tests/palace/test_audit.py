"""The read audit: a record per read path, append-only in the database, exported and purged by command."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client

from palace.engine.runtime import Palace
from palace.governance import audit
from palace.models import AuditRecord, JournalEntry
from palace.operations import ingest
from palace.reads import selectors
from palace.writes import services
from tests.palace.helpers import memory

HOST = "localhost"


def rows() -> list[AuditRecord]:
    audit.flush_audit()
    return list(AuditRecord.objects.order_by("id"))


def stored_ids(*texts: str) -> list[int]:
    return [item["memory"]["id"] for item in services.store_batch(items=[memory(text) for text in texts])["items"]]


def test_it_records_find_with_a_hashed_query_filters_results_and_actor(palace: Palace) -> None:
    ids = stored_ids("The NAS backs up to the cloud every night", "Espresso needs 9 bar")

    found = selectors.find(query="nightly NAS backup", wing="projects", limit=3, actor="token:laptop")

    (record,) = rows()
    assert (record.actor, record.operation, record.degraded) == ("token:laptop", "find", False)
    assert record.query_sha256 == hashlib.sha256(b"nightly NAS backup").hexdigest()
    assert record.query_length == len("nightly NAS backup") and record.query_plain == ""
    assert record.filters == {"wing": "projects", "limit": 3}
    assert record.result_ids == [hit["id"] for hit in found["results"]] and set(record.result_ids) == set(ids)
    assert record.result_count == len(found["results"])


def test_it_records_an_actor_holding_nul_or_a_lone_surrogate_as_safe_text(palace: Palace) -> None:
    selectors.recall(ids=[1_000_000_000], actor="agent\x00/\ud800" + "x" * 300)

    (record,) = rows()
    assert record.actor == "agent\ufffd/\ufffd" + "x" * 192  # replaced, cut at 200 characters


def test_it_keeps_the_query_in_plain_text_only_when_asked_and_redacted(palace: Palace) -> None:
    settings.PALAZZO = dataclasses.replace(settings.PALAZZO, audit_query_plain=True)

    selectors.find(query="where is AKIAZ7Q3XK2M4PLW9RTE used", actor="cli")

    (record,) = rows()
    assert record.query_plain == "where is [REDACTED:aws_access_key] used"
    assert record.query_length == len("where is AKIAZ7Q3XK2M4PLW9RTE used")


def test_it_records_recall_check_duplicate_wake_up_and_exports(palace: Palace) -> None:
    ids = stored_ids("first audited memory", "second audited memory")

    selectors.recall(ids=[ids[0], 1_999_999_999], actor="client/1.0")
    selectors.check_duplicate(text="first audited memory", actor="client/1.0")
    selectors.recent(count=5, actor="client/1.0", operation="wake_up_prompt")
    list(ingest.export_memories(actor="http:127.0.0.1", operation="http_export"))
    call_command("export", stdout=io.StringIO(), stderr=io.StringIO())

    recorded = [(r.operation, r.actor.split("/")[0], r.result_ids) for r in rows()]
    assert recorded[:4] == [
        ("recall", "client", [ids[0]]),
        ("check_duplicate", "client", [ids[0]]),
        ("wake_up_prompt", "client", sorted(ids, reverse=True)),
        ("http_export", "http:127.0.0.1", ids),
    ]
    assert recorded[4] == ("export", "manage.py export", ids)
    assert rows()[0].filters == {"ids": [ids[0], 1_999_999_999]}
    assert rows()[1].query_sha256 == hashlib.sha256(b"first audited memory").hexdigest()


def test_it_records_an_export_stopped_early_with_what_it_sent(palace: Palace) -> None:
    ids = stored_ids("one", "two", "three")
    exported = ingest.export_memories(actor="reader")

    next(exported)
    exported.close()  # a client that hangs up after the first line

    assert rows()[-1].result_ids == ids[:1]


def test_it_records_the_admin_s_memory_views(palace: Palace, admin_client: Client) -> None:
    (memory_id,) = stored_ids("seen in the admin")

    assert admin_client.get(f"/admin/palace/journalentry/memory/{memory_id}/", HTTP_HOST=HOST).status_code == 200
    assert admin_client.get("/admin/palace/palaceoverview/", HTTP_HOST=HOST).status_code == 200
    entry = JournalEntry.objects.get()
    assert admin_client.get(f"/admin/palace/journalentry/{entry.pk}/change/", HTTP_HOST=HOST).status_code == 200
    listing = admin_client.get("/admin/palace/auditrecord/?operation__exact=admin_memory", HTTP_HOST=HOST)

    assert [(r.operation, r.actor, r.result_ids) for r in rows()] == [
        ("admin_memory", "admin:admin", [memory_id]),
        ("admin_overview", "admin:admin", [memory_id]),
        ("admin_journal", "admin:admin", [memory_id]),
    ]
    assert listing.status_code == 200 and b"admin_memory" in listing.content
    assert listing.context["cl"].result_count == 1  # the filter applies
    assert admin_client.get("/admin/palace/auditrecord/add/", HTTP_HOST=HOST).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_it_writes_off_the_request_path_and_drains_the_queue_on_stop(palace_env: Path) -> None:
    audit.start_audit_writer()
    try:
        for n in range(50):
            audit.record_read(operation="find", actor=f"reader-{n}", query="q", result_ids=[n])
    finally:
        audit.stop_audit_writer()

    assert [r.actor for r in AuditRecord.objects.order_by("id")] == [f"reader-{n}" for n in range(50)]


@pytest.mark.django_db(transaction=True)
def test_it_refuses_update_and_delete_in_the_database_itself(palace_env: Path) -> None:
    audit.record_read(operation="find", actor="someone", query="q", result_ids=[1_000_000_001])
    table = AuditRecord._meta.db_table

    for statement in (f"UPDATE {table} SET actor = 'nobody'", f"DELETE FROM {table}"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditRecord.objects.all().delete()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditRecord.objects.update(degraded=True)
    if connection.vendor == "postgresql":
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {table}")

    assert [(r.actor, r.degraded) for r in AuditRecord.objects.all()] == [("someone", False)]


@pytest.mark.django_db(transaction=True)
def test_it_purges_only_older_records_and_audits_the_purge(palace_env: Path) -> None:
    now = datetime.now(UTC)
    AuditRecord.objects.bulk_create(
        [
            AuditRecord(created_at=now - timedelta(days=400), actor="old", operation="find"),
            AuditRecord(created_at=now - timedelta(days=10), actor="recent", operation="find"),
        ]
    )
    err = io.StringIO()

    call_command("audit", "purge", "--before", (now - timedelta(days=365)).date().isoformat(), stderr=err)

    left = list(AuditRecord.objects.order_by("id"))
    assert [r.actor for r in left][:1] == ["recent"]
    purge = left[-1]
    assert purge.operation == "audit_purge" and purge.actor.startswith("manage.py audit purge/")
    assert purge.result_count == 1 and "1 records" in err.getvalue()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditRecord.objects.filter(actor="recent").delete()  # the purge's permission ended with it


def export(*args: str) -> str:
    out = io.StringIO()
    call_command("audit", "export", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_it_exports_json_lines_and_csv_filtered_by_time_and_actor(palace: Palace, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    AuditRecord.objects.bulk_create(
        [
            AuditRecord(
                created_at=now - timedelta(days=3),
                actor="token:a",
                operation="find",
                query_sha256="ab" * 32,
                query_length=5,
                filters={"wing": "projects"},
                result_ids=[1_000_000_001, 1_000_000_002],
                result_count=2,
            ),
            AuditRecord(created_at=now - timedelta(days=1), actor="token:b", operation="recall", result_ids=[]),
            AuditRecord(created_at=now, actor="token:a", operation="recall", degraded=True),
        ]
    )

    lines = [json.loads(line) for line in export("--format", "json").splitlines()]
    assert [line["actor"] for line in lines] == ["token:a", "token:b", "token:a"]
    first: dict[str, Any] = lines[0]
    assert {key: first[key] for key in ("operation", "query_sha256", "query_length", "result_ids", "result_count")} == {
        "operation": "find",
        "query_sha256": "ab" * 32,
        "query_length": 5,
        "result_ids": [1_000_000_001, 1_000_000_002],
        "result_count": 2,
    }
    assert first["time"] == (now - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ") and first["degraded"] is False
    assert [
        line["actor"] for line in map(json.loads, export("--format", "json", "--actor", "token:a").splitlines())
    ] == [
        "token:a",
        "token:a",
    ]
    window = export(
        "--format",
        "json",
        "--from",
        (now - timedelta(days=2)).isoformat(),
        "--to",
        (now - timedelta(hours=1)).isoformat(),
    )
    assert [json.loads(line)["actor"] for line in window.splitlines()] == ["token:b"]
    out = tmp_path / "audit.csv"
    export("--format", "csv", "--out", str(out))
    table = list(csv.DictReader(out.open(newline="")))
    assert [row["actor"] for row in table] == ["token:a", "token:b", "token:a"]
    assert json.loads(table[0]["result_ids"]) == [1_000_000_001, 1_000_000_002] and table[2]["degraded"] == "True"
