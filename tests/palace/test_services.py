"""The write services against the embedded store, the real model and the real database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings

from palace.engine import applier, runtime
from palace.engine.locks import write_lock
from palace.engine.runtime import Palace
from palace.errors import ConfirmationRequired, ExpectedCountMismatch, InvalidInput, OutsideScope, StoreUnavailable
from palace.models import JournalEntry
from palace.operations import status as palace_status
from palace.operations import verify
from palace.reads import selectors
from palace.schema.forms import MAX_TEXT_BYTES
from palace.schema.vocabulary import active_vocabulary, save_vocabulary
from palace.writes import services
from tests.palace.helpers import memory


def total() -> int:
    return int(palace_status.status()["total"])


def test_it_stores_a_memory_with_every_schema_field(palace: Palace) -> None:
    stored = services.store(
        **memory("The NAS runs ZFS on four disks", session="s1", source_file="notes.md"), added_by="tester/1"
    )
    assert stored["id"] >= 1_000_000_000
    assert stored["duplicate"] is False
    recalled = selectors.recall(ids=[stored["id"]])["memories"][0]
    assert recalled["text"] == "The NAS runs ZFS on four disks"
    assert (recalled["category"], recalled["wing"], recalled["room"], recalled["hall"]) == (
        "technical",
        "projects",
        "palazzo",
        "facts",
    )
    assert recalled["session"] == "s1" and recalled["source_file"] == "notes.md"
    assert recalled["added_by"] == "tester/1"
    assert recalled["timestamp"].endswith("Z") and len(recalled["timestamp"]) == 20


def test_it_keeps_text_verbatim_and_trims_tags(palace: Palace) -> None:
    text = "  leading and trailing spaces stay \n"
    stored = services.store(**memory(text, room="  nas  "))
    assert stored["text"] == text
    assert stored["room"] == "nas"


def test_it_returns_the_existing_memory_for_the_same_text(palace: Palace) -> None:
    first = services.store(**memory("Deploys go through the staging cluster first"))
    second = services.store(**memory("Deploys go through the staging cluster first", wing="work"))
    assert second["duplicate"] is True
    assert second["id"] == first["id"]
    assert total() == 1


def test_it_stores_a_similar_but_different_text(palace: Palace) -> None:
    services.store(**memory("Deploys go through the staging cluster first"))
    second = services.store(**memory("Deploys go through the staging cluster first!"))
    assert second["duplicate"] is False
    assert total() == 2


def test_it_keeps_a_historical_timestamp(palace: Palace) -> None:
    stored = services.store(**memory("Old fact", timestamp="2021-03-04T05:06:07.89+02:00"))
    assert stored["timestamp"] == "2021-03-04T03:06:07Z"


@pytest.mark.parametrize(
    ("overrides", "field", "rule"),
    [
        ({"category": "bogus"}, "category", "allowed values: technical, project-memory"),
        ({"wing": "nowhere"}, "wing", "allowed values: projects, work"),
        ({"hall": "attic"}, "hall", "allowed values: facts, events"),
        ({"room": ""}, "room", "is required"),
        ({"room": "x" * 65}, "room", "at most 64 characters"),
        ({"text": ""}, "text", "is required"),
        ({"text": "   "}, "text", "non-whitespace"),
        ({"text": "x" * (MAX_TEXT_BYTES + 1)}, "text", "maximum is 32768 bytes"),
        ({"text": "é" * (MAX_TEXT_BYTES // 2 + 1)}, "text", "maximum is 32768 bytes"),
        ({"text": 42}, "text", "must be a string"),
        ({"text": "nul\x00byte"}, "text", "NUL"),
        ({"timestamp": "yesterday"}, "timestamp", "RFC3339"),
        ({"timestamp": "2026-02-30T00:00:00Z"}, "timestamp", "not a valid date"),
    ],
)
def test_it_rejects_bad_input_naming_the_field_and_writes_nothing(
    palace: Palace, overrides: dict[str, Any], field: str, rule: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.store(**(memory("valid text") | overrides))
    assert field in caught.value.errors
    assert rule in " ".join(caught.value.errors[field])
    assert total() == 0
    assert JournalEntry.objects.count() == 0


def test_it_accepts_text_of_exactly_32_kb(palace: Palace) -> None:
    stored = services.store(**memory("y" * MAX_TEXT_BYTES))
    assert len(stored["text"]) == MAX_TEXT_BYTES


def test_it_stores_a_batch_with_one_embedding_pass_and_counts(palace: Palace) -> None:
    existing = services.store(**memory("already here"))
    result = services.store_batch(
        items=[memory("alpha"), memory("beta"), memory("already here"), memory("alpha"), memory("bad", hall="x")]
    )
    statuses = [item["status"] for item in result["items"]]
    assert statuses == ["stored", "stored", "duplicate", "duplicate", "failed"]
    assert result["items"][2]["duplicate_of"] == existing["id"]
    assert result["items"][3]["duplicate_of"] == result["items"][0]["memory"]["id"]
    assert "hall" in result["items"][4]["error"]
    assert result["counts"] == {"stored": 2, "duplicates_returned": 2, "skipped_duplicates": 0, "failed": 1}
    ids = [result["items"][0]["memory"]["id"], result["items"][1]["memory"]["id"]]
    assert len(set(ids)) == 2
    assert total() == 3
    assert JournalEntry.objects.filter(operation="store").count() == 2


def test_it_counts_skipped_duplicates_when_asked(palace: Palace) -> None:
    services.store(**memory("gamma"))
    result = services.store_batch(items=[memory("gamma"), memory("delta")], skip_duplicates=True)
    assert result["counts"] == {"stored": 1, "duplicates_returned": 0, "skipped_duplicates": 1, "failed": 0}


@pytest.mark.parametrize(
    ("items", "rule"),
    [([], "is empty"), ([memory(f"m{i}") for i in range(257)], "maximum is 256"), ("nope", "must be a list")],
)
def test_it_rejects_an_empty_or_oversized_batch(palace: Palace, items: Any, rule: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.store_batch(items=items)
    assert rule in str(caught.value)
    assert total() == 0


def test_it_accepts_a_batch_of_256(palace: Palace) -> None:
    result = services.store_batch(items=[memory(f"memory number {i}") for i in range(256)])
    assert result["counts"]["stored"] == 256
    assert len({item["memory"]["id"] for item in result["items"]}) == 256


def test_it_supersedes_and_keeps_history(palace: Palace) -> None:
    old = services.store(**memory("The NAS has four disks"))
    result = services.supersede(
        supersedes=[old["id"], 1_000_000_001], reason="added two disks", **memory("The NAS has six disks")
    )
    new = result["memory"]
    assert new["supersedes"] == [old["id"]] and new["valid_from"]
    assert result["marked"] == [
        {"id": old["id"], "ok": True},
        {"id": 1_000_000_001, "ok": False, "error": "no memory with this id"},
    ]
    old_now = selectors.recall(ids=[old["id"]])["memories"][0]
    assert old_now["superseded_by"] == new["id"]
    assert old_now["superseded_reason"] == "added two disks"
    assert old_now["valid_until"]
    found = [hit["id"] for hit in selectors.find(query="how many disks in the NAS")["results"]]
    assert old["id"] not in found and new["id"] in found
    archaeology = [
        hit["id"] for hit in selectors.find(query="how many disks in the NAS", include_superseded=True)["results"]
    ]
    assert old["id"] in archaeology


def test_it_refuses_to_supersede_only_unknown_ids(palace: Palace) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.supersede(supersedes=[1_000_000_001], reason="r", **memory("new"))
    assert "supersedes" in caught.value.errors
    assert total() == 0


def test_it_refuses_more_than_50_superseded_ids(palace: Palace) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.supersede(supersedes=list(range(1_000_000_000, 1_000_000_051)), reason="r", **memory("new"))
    assert "maximum is 50" in str(caught.value)


def test_it_deletes_only_with_confirmation_and_journals_the_full_record(palace: Palace) -> None:
    stored = services.store(**memory("secret to scrub"))
    with pytest.raises(ConfirmationRequired):
        services.delete(ids=[stored["id"]], reason="PII", confirm=False)
    assert total() == 1
    result = services.delete(ids=[stored["id"], 1_000_000_002], reason="PII", confirm=True)
    assert result["counts"] == {"deleted": 1, "missing": 1}
    assert total() == 0
    entry = JournalEntry.objects.get(operation="delete")
    assert entry.payload["memories"][0]["text"] == "secret to scrub"
    assert entry.status == "applied"


def test_it_deletes_by_filter_after_a_dry_run_with_the_expected_count(palace: Palace) -> None:
    services.store_batch(items=[memory("a1", wing="work"), memory("a2", wing="work"), memory("keep")])
    dry = services.delete_by_filter(wing="work", reason="cleanup", confirm=True, dry_run=True)
    assert dry["matched_count"] == 2 and dry["deleted_count"] == 0 and len(dry["sample"]) == 2
    assert total() == 3
    with pytest.raises(InvalidInput):
        services.delete_by_filter(wing="work", reason="cleanup", confirm=True)
    with pytest.raises(ExpectedCountMismatch):
        services.delete_by_filter(wing="work", reason="cleanup", confirm=True, expected_count=3)
    assert total() == 3
    done = services.delete_by_filter(wing="work", reason="cleanup", confirm=True, expected_count=2)
    assert done["deleted_count"] == 2
    assert total() == 1


def test_it_refuses_delete_by_filter_without_a_filter(palace: Palace) -> None:
    services.store(**memory("keep me"))
    with pytest.raises(InvalidInput) as caught:
        services.delete_by_filter(reason="everything", confirm=True, dry_run=True)
    assert "filter is empty" in str(caught.value)


def test_it_journals_before_the_store_and_mirrors_to_the_wal_file(palace: Palace) -> None:
    stored = services.store(**memory("x" * 300))
    entry = JournalEntry.objects.get()
    assert entry.status == "applied" and entry.memory_ids == [stored["id"]]
    assert entry.payload["memories"][0]["text"] == "x" * 300
    lines = settings.PALAZZO.wal_path.read_text().splitlines()
    line = json.loads(lines[-1])
    assert line["operation"] == "store" and line["memory_ids"] == [stored["id"]]
    assert line["params"]["memories"][0]["text_preview"] == "x" * 120 + "…"


def test_it_replays_pending_entries_when_the_palace_opens(palace_env: Any, db: None) -> None:
    from palace.engine import journal, runtime

    runtime.get_palace()
    entry, ids = journal.record_with_new_ids(
        operation="store",
        count=1,
        build_payload=lambda ids: {
            "memories": [dict(memory("written before a crash"), id=ids[0], timestamp="2026-01-01T00:00:00Z")]
        },
    )
    runtime.close_palace()
    runtime.get_palace()
    assert selectors.recall(ids=ids)["memories"][0]["text"] == "written before a crash"
    entry.refresh_from_db()
    assert entry.status == "applied"


def test_it_never_reuses_an_id_after_a_delete(palace: Palace) -> None:
    first = services.store(**memory("one"))
    services.delete(ids=[first["id"]], reason="test", confirm=True)
    second = services.store(**memory("one"))
    assert second["id"] > first["id"]


def test_it_rebuilds_the_store_from_the_journal(palace: Palace) -> None:
    batch = services.store_batch(items=[memory("first"), memory("second"), memory("third")])
    first, second, third = (item["memory"]["id"] for item in batch["items"])
    corrected = services.supersede(supersedes=[first], reason="fix", **memory("first, corrected"))["memory"]["id"]
    services.delete(ids=[third], reason="gone", confirm=True)
    before = selectors.recall(ids=[first, second, third, corrected])
    result = services.rebuild()
    assert result["entries_replayed"] == 3
    assert "before-rebuild" in result["previous_store"]
    after = selectors.recall(ids=[first, second, third, corrected])
    assert after == before
    assert after["missing"] == [third]
    assert [hit["id"] for hit in selectors.find(query="first corrected", limit=1)["results"]] == [corrected]


def test_it_supersedes_inheriting_every_field_left_out_on_both_stores(any_palace: Palace) -> None:
    old = services.store(
        **memory(
            "The VPN runs on port 1194",
            wing="infrastructure",
            category="infrastructure",
            room="VPN",
            hall="decisions",
            session="s-42",
            source_file="notes/vpn.md",
            timestamp="2025-02-03T04:05:06Z",
        )
    )
    other = services.store(**memory("The VPN uses UDP", room="elsewhere"))
    result = services.supersede(
        supersedes=[1_000_000_001, old["id"], other["id"]], reason="port moved", text="The VPN runs on port 443"
    )
    new = result["memory"]
    for key in ("category", "wing", "room", "hall", "session", "source_file", "timestamp"):
        assert new[key] == old[key], key  # from the first superseded memory that exists
    assert (new["text"], new["supersedes"]) == ("The VPN runs on port 443", [old["id"], other["id"]])
    assert new["valid_from"] > old["timestamp"]
    recalled = selectors.recall(ids=[new["id"]])["memories"][0]
    assert recalled == new | {"expired": False}

    moved = services.supersede(supersedes=[new["id"]], reason="filed under network", room="Network ")["memory"]
    assert (moved["text"], moved["room"], moved["hall"]) == ("The VPN runs on port 443", "network", "decisions")
    assert moved["timestamp"] == old["timestamp"]
    dated = services.supersede(supersedes=[moved["id"]], reason="r", timestamp="2026-01-01T00:00:00+01:00")
    assert dated["memory"]["timestamp"] == "2025-12-31T23:00:00Z"
    assert selectors.find(query="VPN port", limit=5)["results"][0]["id"] == dated["memory"]["id"]


AWS_KEY = "AKIAZ7Q3XK2M4PLW9RTE"


def test_it_supersedes_inheriting_expiry_redacted_and_inside_the_tokens_wings(palace: Palace) -> None:
    old = services.store(**memory("The staging token rotates", wing="projects"), ttl_days=30)
    kept = services.supersede(supersedes=[old["id"]], reason="weekly now", text="The staging token rotates weekly")
    assert kept["memory"]["expires_at"] == old["expires_at"] is not None
    shorter = services.supersede(supersedes=[kept["memory"]["id"]], reason="r", ttl_days=1)["memory"]
    assert shorter["text"] == "The staging token rotates weekly" and shorter["expires_at"] < old["expires_at"]
    with pytest.raises(InvalidInput, match="ttl_days"):
        services.supersede(supersedes=[shorter["id"]], reason="r", ttl_days=1, expires_at="2099-01-01T00:00:00Z")

    secret = services.supersede(supersedes=[shorter["id"]], reason=f"leaked {AWS_KEY}", text=f"key {AWS_KEY}")
    assert secret["redactions"] == {"aws_access_key": 2}
    assert AWS_KEY not in json.dumps(secret) and "[REDACTED:aws_access_key]" in secret["memory"]["text"]
    entry = JournalEntry.objects.filter(operation=JournalEntry.Operation.SUPERSEDE).latest("id")
    assert AWS_KEY not in json.dumps(entry.payload) and AWS_KEY not in entry.reason

    personal = services.store(**memory("A personal note", wing="personal"))
    with pytest.raises(InvalidInput, match="none of the ids exist"):
        services.supersede(supersedes=[personal["id"]], reason="r", text="taken over", wings=("projects",))
    with pytest.raises(OutsideScope, match="outside this token's wings"):
        services.supersede(supersedes=[secret["memory"]["id"]], reason="r", wing="personal", wings=("projects",))
    assert selectors.recall(ids=[personal["id"], secret["memory"]["id"]])["memories"][1]["valid_until"] is None


def test_it_redacts_and_scopes_batch_items_filled_from_defaults(palace: Palace) -> None:
    defaults = {"category": "technical", "wing": "projects", "room": "keys", "hall": "facts", "session": AWS_KEY}
    batch = services.store_batch(
        items=[{"text": "first"}, {"text": "second", "wing": "personal"}], defaults=defaults, wings=("projects",)
    )
    assert [item["status"] for item in batch["items"]] == ["stored", "failed"]
    assert "outside this token's wings" in batch["items"][1]["error"]
    stored = batch["items"][0]["memory"]
    assert stored["session"] == "[REDACTED:aws_access_key]" and batch["redactions"] == {"aws_access_key": 1}


def test_it_names_an_inherited_value_the_vocabulary_no_longer_allows(palace: Palace) -> None:
    old = services.store(**memory("A work memory", wing="work"))
    save_vocabulary(active_vocabulary().replacing({"wings": ("projects", "personal")}))  # `palazzo vocabulary`
    with pytest.raises(InvalidInput) as caught:
        services.supersede(supersedes=[old["id"]], reason="r", text="corrected")
    assert "'work' is not allowed" in str(caught.value) and f"inherited from memory {old['id']}" in str(caught.value)
    moved = services.supersede(supersedes=[old["id"]], reason="r", text="corrected", wing="personal")
    assert moved["memory"]["wing"] == "personal" and total() == 2


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"reason": None, "text": "x"}, "reason"),
        ({"supersedes": None}, "supersedes"),
        ({"wing": "atlantis"}, "wing"),
        ({"timestamp": "soon"}, "timestamp"),
        ({"room": " "}, "room"),
        ({"text": " "}, "text"),
    ],
)
def test_it_refuses_a_bad_supersede_and_writes_nothing(palace: Palace, arguments: dict[str, Any], field: str) -> None:
    old = services.store(**memory("kept as it is"))
    with pytest.raises(InvalidInput) as caught:
        services.supersede(**{"supersedes": [old["id"]], "reason": "r"} | arguments)
    assert field in caught.value.errors
    assert total() == 1 and selectors.recall(ids=[old["id"]])["memories"][0]["valid_until"] is None


def test_it_fills_batch_items_from_shared_defaults_on_both_stores(any_palace: Palace) -> None:
    result = services.store_batch(
        items=[
            {"text": "first default item"},
            {"text": "second item, own hall", "hall": "events"},
            {"text": "third item, no room anywhere", "room": None},
        ],
        defaults={"wing": "projects", "category": "technical", "room": "Batch Room", "hall": "facts", "session": "s1"},
    )
    assert [item["status"] for item in result["items"]] == ["stored", "stored", "stored"]
    first, second, _third = (item["memory"] for item in result["items"])
    assert (first["wing"], first["room"], first["hall"], first["session"]) == ("projects", "batch room", "facts", "s1")
    assert second["hall"] == "events"
    partial = services.store_batch(items=[{"text": "needs a wing"}], defaults={"room": "r", "hall": "facts"})
    assert partial["items"][0]["status"] == "failed"
    assert "wing" in partial["items"][0]["error"] and "category" in partial["items"][0]["error"]


@pytest.mark.parametrize(
    ("defaults", "rule"),
    [
        ({"wing": "atlantis"}, "defaults.wing"),
        ({"text": "shared text"}, "defaults.text"),
        ({"timestamp": "2026-01-01T00:00:00Z"}, "defaults.timestamp"),
        ({"room": 7}, "defaults.room"),
        (["wing"], "defaults"),
        ("projects", "defaults"),
    ],
)
def test_it_refuses_bad_batch_defaults_and_writes_nothing(palace: Palace, defaults: Any, rule: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.store_batch(items=[memory("would be stored")], defaults=defaults)
    assert rule in caught.value.errors
    assert total() == 0


def _age_room_spelling(memory_id: int, spelling: str) -> None:
    """Make a memory look stored by a palazzo before canonical rooms: in the store and in its journal entry."""
    with write_lock:  # as every writer of the store does (the embedding thread may be adding its vector)
        runtime.get_palace().store.set_payload([memory_id], {"room": spelling})
    entry = next(entry for entry in JournalEntry.objects.all() if memory_id in entry.memory_ids)
    for record in entry.payload["memories"]:
        if record["id"] == memory_id:
            record["room"] = spelling
    entry.save(update_fields=["payload"])


def test_it_gives_an_existing_palace_canonical_rooms_when_it_opens_on_both_stores(any_palace: Palace) -> None:
    old = services.store(**memory("stored by an older palazzo", room="x"))
    other = services.store(**memory("another old one", room="y"))
    _age_room_spelling(old["id"], "My  Project")
    _age_room_spelling(other["id"], "my project ")
    assert selectors.browse(room="my project")["memories"] == []  # what older palaces suffered
    runtime.close_palace()
    palace = runtime.get_palace()
    assert {point.payload["room"] for point in palace.store.retrieve([old["id"], other["id"]])} == {"my project"}
    assert [m["id"] for m in selectors.browse(room="MY PROJECT")["memories"]] == [other["id"], old["id"]]
    assert palace_status.status()["rooms"] == {"my project": 2}
    assert applier.canonicalise_rooms(palace) == 0  # nothing left to do at the next open
    assert verify.verify()["ok"] is True


def test_it_rebuilds_old_journal_entries_with_canonical_rooms(palace: Palace) -> None:
    old = services.store(**memory("journaled before canonical rooms", room="x"))
    _age_room_spelling(old["id"], "Old\u00a0Room")
    services.rebuild()
    assert selectors.recall(ids=[old["id"]])["memories"][0]["room"] == "old room"


@pytest.mark.django_db(transaction=True)
def test_it_fails_a_write_when_another_process_holds_the_palace_past_the_lock_wait(
    any_palace: Palace, either_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several processes share PostgreSQL and a Qdrant server: a hung holder fails a write, never hangs it."""
    from django.db import connection

    from palace.engine import locks

    if either_store != "server" or connection.vendor != "postgresql":
        pytest.skip("the database write lock is taken only with PostgreSQL and a Qdrant server (make unit-postgres)")
    import psycopg

    monkeypatch.setattr(locks, "DATABASE_LOCK_WAIT", 0.5)
    params = connection.get_connection_params()
    with psycopg.connect(
        **{key: params[key] for key in ("dbname", "user", "password", "host", "port") if params.get(key)},
        autocommit=True,
    ) as other_process:
        other_process.execute("SELECT pg_advisory_lock(%s)", [locks.PALACE_WRITE_KEY])
        with pytest.raises(StoreUnavailable, match="held the palace's write lock for over 0 s; nothing was written"):
            services.store(**memory("Written while another process holds the palace"))
        assert total() == 0
        other_process.execute("SELECT pg_advisory_unlock(%s)", [locks.PALACE_WRITE_KEY])
    stored = services.store(**memory("Written while another process holds the palace"))
    assert stored["duplicate"] is False and total() == 1
    # The wait's timeout was local to its statement: the session waits for locks without one again.
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
