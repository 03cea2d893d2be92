"""Tokens scoped to wings: creation, and every read, write, export and delete of the domain kept inside them."""

from __future__ import annotations

import json

import pytest

from palace.engine.runtime import Palace
from palace.errors import InvalidInput, OutsideScope
from palace.governance import tokens
from palace.models import JournalEntry
from palace.operations import ingest
from palace.operations import status as palace_status
from palace.reads import selectors
from palace.writes import services
from tests.palace.helpers import memory

SCOPE = ("projects", "infrastructure")


@pytest.fixture
def palace_of_wings(palace: Palace) -> dict[str, int]:
    """One memory per wing, all about the same thing, ids by wing."""
    batch = services.store_batch(
        items=[
            memory("the deploy key lives in the projects vault", wing="projects"),
            memory("the deploy key of the router lives in the infra vault", wing="infrastructure"),
            memory("the deploy key of my diary lives in the personal vault", wing="personal"),
        ]
    )
    return {item["memory"]["wing"]: item["memory"]["id"] for item in batch["items"]}


@pytest.mark.django_db
def test_it_records_the_wings_of_a_token_and_authenticates_with_them() -> None:
    created = tokens.create_token(name="ci", wings=["projects", " infrastructure", "projects"])
    everything = tokens.create_token(name="laptop")

    assert created["wings"] == ["projects", "infrastructure"]
    identity = tokens.authenticate(created["secret"])
    assert identity is not None and identity.wings == SCOPE
    unrestricted = tokens.authenticate(everything["secret"])
    assert unrestricted is not None and unrestricted.wings is None
    with pytest.raises(InvalidInput, match="'attic' is not a wing; allowed: projects"):
        tokens.create_token(name="bad", wings=["projects", "attic"])
    with pytest.raises(InvalidInput, match="wings: nothing is not a wing"):
        tokens.create_token(name="empty", wings=[" ", ""])


def test_it_reads_only_inside_the_wings(palace_of_wings: dict[str, int]) -> None:
    personal = palace_of_wings["personal"]

    found = selectors.find(query="deploy key vault", limit=10, wings=SCOPE)["results"]
    recalled = selectors.recall(ids=list(palace_of_wings.values()), wings=SCOPE)
    closest = selectors.check_duplicate(text="the deploy key of my diary lives in the personal vault", wings=SCOPE)
    recent = selectors.recent(count=10, wings=SCOPE)
    status = palace_status.status(wings=SCOPE)
    taxonomy = palace_status.taxonomy(wings=SCOPE)
    exported = list(ingest.export_memories(wings=SCOPE))

    assert {hit["wing"] for hit in found} == set(SCOPE)
    assert recalled["missing"] == [personal]  # another wing's memory looks like no memory at all
    assert closest["closest"]["id"] != personal and not closest["duplicate"]
    assert {item["wing"] for item in recent} == set(SCOPE)
    assert (status["total"], status["wings"]) == (2, {"projects": 1, "infrastructure": 1})
    assert set(taxonomy["wings"]) == set(SCOPE)
    assert {m["wing"] for m in exported} == set(SCOPE)
    assert palace_status.status()["total"] == 3  # no scope: everything


def test_it_refuses_writes_outside_the_wings(palace_of_wings: dict[str, int]) -> None:
    before = JournalEntry.objects.count()

    with pytest.raises(OutsideScope, match="wing: 'personal' is outside this token's wings"):
        services.store(**memory("a personal note", wing="personal"), wings=SCOPE)
    batch = services.store_batch(items=[memory("ok", wing="projects"), memory("no", wing="work")], wings=SCOPE)
    with pytest.raises(OutsideScope):
        services.supersede(
            supersedes=[palace_of_wings["projects"]], reason="move", wings=SCOPE, **memory("moved", wing="personal")
        )

    assert [item["status"] for item in batch["items"]] == ["stored", "failed"]
    assert "outside this token's wings" in batch["items"][1]["error"]
    assert JournalEntry.objects.count() == before + 1  # only the in-scope batch item was written


def test_it_supersedes_and_deletes_only_inside_the_wings(palace_of_wings: dict[str, int]) -> None:
    with pytest.raises(InvalidInput, match="none of the ids exist"):
        services.supersede(supersedes=[palace_of_wings["personal"]], reason="x", wings=SCOPE, **memory("mine"))
    deleted = services.delete(ids=list(palace_of_wings.values()), reason="cleanup", confirm=True, wings=SCOPE)
    dry = services.delete_by_filter(reason="r", confirm=True, dry_run=True, hall="facts", wings=("personal",))

    assert deleted["counts"] == {"deleted": 2, "missing": 1}
    assert dry["matched_count"] == 1 and dry["breakdown_by_wing"] == {"personal": 1}
    assert selectors.recall(ids=[palace_of_wings["personal"]])["missing"] == []


def test_it_keeps_ingest_lines_inside_the_wings(palace_of_wings: dict[str, int]) -> None:
    lines = [
        json.dumps(memory("ingested in scope", wing="projects")),
        json.dumps(memory("ingested outside", wing="personal")),
        json.dumps({"id": 1_700_000_000, **memory("restored outside", wing="work")}),
        json.dumps({"id": palace_of_wings["personal"], **memory("overwrite another wing's id", wing="projects")}),
        json.dumps({"id": 1_700_000_001, **memory("restored in scope", wing="infrastructure")}),
    ]

    (report,) = list(ingest.ingest(lines=lines, wings=SCOPE))

    assert [result["status"] for result in report.results] == ["stored", "failed", "failed", "failed", "stored"]
    assert "outside this token's wings" in report.results[1]["error"]
    assert "belongs to a wing outside" in report.results[3]["error"]
    kept = selectors.recall(ids=[palace_of_wings["personal"]])["memories"][0]
    assert kept["text"] == "the deploy key of my diary lives in the personal vault"
