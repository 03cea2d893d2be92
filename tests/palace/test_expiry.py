"""Expiry: expires_at or ttl_days on every write path, hidden from find and wake-up, flagged by recall, expire."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.engine.runtime import Palace
from palace.errors import InvalidInput
from palace.models import JournalEntry
from palace.operations import ingest, status
from palace.reads import selectors
from palace.schema.timefmt import format_rfc3339, parse_rfc3339, utc_now
from palace.writes import services
from tests.palace.helpers import memory
from tests.palace.test_export import empty_palace

PAST = "2020-01-01T00:00:00Z"


def restored(text: str, memory_id: int, expires_at: str) -> dict[str, Any]:
    """An exported line of an already expired memory (restores may carry a past expiry)."""
    lines = [json.dumps({"id": memory_id, "expires_at": expires_at, **memory(text)})]
    (report,) = list(ingest.ingest(lines=lines))
    assert report.results[0]["status"] == "stored", report.results
    return report.results[0]


def test_it_stores_expires_at_or_ttl_days_and_refuses_both_or_the_past(palace: Palace) -> None:
    later = format_rfc3339(utc_now() + timedelta(days=3))

    at = services.store(**memory("expires at a moment"), expires_at=later)
    ttl = services.store(**memory("expires after a ttl"), ttl_days=0.5)

    assert at["expires_at"] == later
    expected = utc_now() + timedelta(hours=12)
    assert abs((parse_rfc3339(ttl["expires_at"]) - expected).total_seconds()) <= 2
    with pytest.raises(InvalidInput, match="ttl_days: give expires_at or ttl_days, not both"):
        services.store(**memory("both"), expires_at=later, ttl_days=1)
    with pytest.raises(InvalidInput, match="expires_at: must be in the future"):
        services.store(**memory("already gone"), expires_at=PAST)
    with pytest.raises(InvalidInput, match=r"expires_at.*RFC3339"):
        services.store(**memory("bad"), expires_at="next tuesday")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ttl=st.one_of(
        st.just(0),
        st.just(-1),
        st.just(2**64),
        st.just(10**400),
        st.just(float("inf")),
        st.just(float("nan")),
        st.booleans(),
        st.text(max_size=5),
        st.lists(st.integers(), max_size=2),
        st.floats(max_value=0, allow_nan=False),
        st.floats(min_value=36_500.001, allow_infinity=False, allow_nan=False),
    )
)
def test_it_refuses_every_unusable_ttl_naming_the_field(palace: Palace, ttl: Any) -> None:
    with pytest.raises(InvalidInput, match="ttl_days: must be a number of days"):
        services.store(**memory("hostile ttl"), ttl_days=ttl)


def test_it_hides_expired_memories_from_find_wake_up_and_dedup_but_recall_flags_them(palace: Palace) -> None:
    kept = services.store(**memory("the VPN endpoint is vpn.example.org"), ttl_days=30)
    gone = restored("the old VPN endpoint was vpn-old.example.org", 1_800_000_000, PAST)

    found = selectors.find(query="VPN endpoint", limit=10)["results"]
    recent = selectors.recent(count=10)
    recalled = selectors.recall(ids=[kept["id"], gone["id"]])["memories"]

    assert [hit["id"] for hit in found] == [kept["id"]]
    assert [item["id"] for item in recent] == [kept["id"]]
    assert [(m["id"], m["expired"]) for m in recalled] == [(kept["id"], False), (gone["id"], True)]
    assert recalled[1]["expires_at"] == PAST
    again = services.store(**memory("the old VPN endpoint was vpn-old.example.org"))
    assert not again["duplicate"]  # an expired memory does not block storing the text again


def test_it_expires_after_a_short_ttl(palace: Palace) -> None:
    # Five seconds, so the first find answers before the memory expires on a loaded machine (one second
    # was not always enough: the deferred embedding and the query run first); then wait for the moment.
    short = services.store(**memory("a note for the next second"), ttl_days=5 / 86400)
    assert selectors.find(query="note for the next second")["results"][0]["id"] == short["id"]

    time.sleep(max(0.0, (parse_rfc3339(short["expires_at"]) - utc_now()).total_seconds()) + 0.2)

    assert all(hit["id"] != short["id"] for hit in selectors.find(query="note for the next second")["results"])


def test_it_takes_expiry_on_batches_ingest_and_supersede(palace: Palace) -> None:
    batch = services.store_batch(items=[memory("batched with ttl", ttl_days=7), memory("batched bad", ttl_days=-3)])
    assert batch["items"][0]["memory"]["expires_at"] is not None
    assert batch["items"][1]["status"] == "failed" and "ttl_days" in batch["items"][1]["error"]
    (report,) = list(ingest.ingest(lines=[json.dumps(memory("ingested with ttl", ttl_days=1))]))
    assert report.results[0]["status"] == "stored"
    ingested = selectors.recall(ids=[report.results[0]["id"]])["memories"][0]
    assert ingested["expires_at"] is not None
    corrected = services.supersede(
        supersedes=[batch["items"][0]["memory"]["id"]], reason="shorter", ttl_days=1, **memory("corrected ttl")
    )
    assert corrected["memory"]["expires_at"] is not None


def test_it_deletes_expired_memories_with_expire_journaling_full_records(palace: Palace) -> None:
    services.store(**memory("still valid"), ttl_days=10)
    gone = [restored(f"expired number {n}", 1_800_000_010 + n, PAST) for n in range(3)]

    out = io.StringIO()
    call_command("expire", "--dry-run", stdout=out)
    dry = json.loads(out.getvalue())
    assert dry["expired_count"] == 3 and dry["deleted_count"] == 0
    assert len(selectors.recall(ids=[g["id"] for g in gone])["memories"]) == 3
    out = io.StringIO()
    call_command("expire", stdout=out)
    done = json.loads(out.getvalue())

    assert done["deleted_count"] == 3
    assert selectors.recall(ids=[g["id"] for g in gone])["missing"] == [g["id"] for g in gone]
    entry = JournalEntry.objects.filter(operation=JournalEntry.Operation.DELETE).get()
    assert entry.added_by.startswith("manage.py expire/") and entry.reason.startswith("expired")
    assert sorted(m["text"] for m in entry.payload["memories"]) == [f"expired number {n}" for n in range(3)]
    assert all(m["expires_at"] == PAST for m in entry.payload["memories"])
    assert status.status()["total"] == 1


def test_it_keeps_expiry_through_export_and_restore(palace: Palace, tmp_path: Path) -> None:
    stored = services.store(**memory("exported with expiry"), ttl_days=5)
    lines = [ingest.export_line(m) for m in ingest.export_memories()]
    assert json.loads(lines[0])["expires_at"] == stored["expires_at"]
    empty_palace(tmp_path)  # a deleted id is never restored, so the round trip goes into a new palace

    (report,) = list(ingest.ingest(lines=lines))

    assert report.results[0]["status"] == "stored"
    assert selectors.recall(ids=[stored["id"]])["memories"][0]["expires_at"] == stored["expires_at"]


def test_it_restores_a_recalled_memory_dropping_its_expired_flag_but_refuses_a_non_boolean(
    palace: Palace, tmp_path: Path
) -> None:
    stored = services.store(**memory("recalled then restored"), ttl_days=5)
    recalled = selectors.recall(ids=[stored["id"]])["memories"][0]
    assert recalled["expired"] is False
    empty_palace(tmp_path)

    (report,) = list(ingest.ingest(lines=[json.dumps(recalled | {"expired": "no"}), json.dumps(recalled)]))

    assert report.results[0]["status"] == "failed" and report.results[0]["error"].startswith("expired:")
    assert report.results[1]["status"] == "stored"
    assert selectors.recall(ids=[stored["id"]])["memories"][0]["expires_at"] == stored["expires_at"]


def test_it_leaves_expired_memories_out_of_the_hook_wake_up_context_and_audits_its_http_read(palace: Palace) -> None:
    from palace.feeding import wakeup
    from palace.governance import audit
    from palace.models import AuditRecord

    gone = restored("the retired deploy key lives in vault-old", 1_800_000_100, PAST)
    kept = services.store(**memory("the deploy key lives in vault-new", room="deploy"))

    for room in (None, "deploy"):
        shown = wakeup.context(room, actor="token:laptop")["context"]
        assert "vault-new" in shown and "vault-old" not in shown
        assert "1 current memories" in shown.splitlines()[0]
    audit.flush_audit()
    records = list(AuditRecord.objects.filter(operation="wake_up_http").order_by("id"))
    assert [(r.actor, r.filters, r.result_ids) for r in records] == [
        ("token:laptop", {}, [kept["id"]]),
        ("token:laptop", {"room": "deploy"}, [kept["id"]]),
    ]
    wakeup.context(None)  # the snapshot writer's read: not a caller's, not audited
    assert AuditRecord.objects.filter(operation="wake_up_http").count() == 2
    assert gone["id"] not in records[0].result_ids
