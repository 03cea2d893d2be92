"""A single store is acknowledged before its dense vector, which the embedding thread adds; searches never miss it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from palace.engine import points, runtime
from palace.reads import selectors
from palace.store.base import NEEDS_EMBEDDING, MemoryFilter
from palace.store.edge import EdgeStore
from palace.writes import services, supersession
from tests.palace.helpers import memory

TAGS: dict[str, Any] = {"category": "technical", "wing": "projects", "room": "palazzo", "hall": "facts"}


def pending_ids(palace: runtime.Palace) -> list[int]:
    return [point.id for point in palace.store.scroll(memory_filter=MemoryFilter(needs_embedding=True))]


@contextmanager
def embedding_thread_held() -> Iterator[None]:
    """Keep the embedding thread from starting a pass (it waits for its turn) until the block ends."""
    with points._embedding_turn:
        yield


def test_it_acknowledges_a_single_store_before_its_dense_vector_and_finds_it_by_meaning_at_once(
    any_palace: runtime.Palace,
) -> None:
    with embedding_thread_held():
        stored = services.store(text="The zebra service moved its database to PostgreSQL 17 on Tuesday.", **TAGS)
        assert pending_ids(any_palace) == [stored["id"]]
        assert stored["duplicate"] is False
    if isinstance(any_palace.store, EdgeStore):  # (qdrant-client's local mode keeps no payload indexes)
        assert NEEDS_EMBEDDING in any_palace.store.payload_indexes()  # each pass looks pending points up by it
    # A dense-only search waits for the vector: a memory stored a moment ago is found by meaning.
    found = selectors.find(query="Which database does the zebra service use now?", limit=1, ranking="dense")
    assert [hit["id"] for hit in found["results"]] == [stored["id"]]
    points.wait_for_background_embedding()
    assert pending_ids(any_palace) == []
    exact = selectors.find(query=stored["text"], limit=1, ranking="dense")
    assert exact["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)  # the same vector as a synchronous store
    assert exact["results"][0]["score"] <= 1.0  # a cosine, though the stored vector is float16


def test_it_keeps_a_supersede_or_delete_that_lands_while_the_dense_vector_is_computed(
    any_palace: runtime.Palace, monkeypatch: pytest.MonkeyPatch
) -> None:
    computing, resume = threading.Event(), threading.Event()
    model = any_palace.embedder.documents

    def held_in_the_embedding_thread(texts: list[str]) -> Any:
        if threading.current_thread().name.startswith("palazzo-deferred-embedding"):
            computing.set()
            assert resume.wait(60)
        return model(texts)

    monkeypatch.setattr(any_palace.embedder, "documents", held_in_the_embedding_thread)
    with embedding_thread_held():
        old = services.store(text="The backup job runs at 02:00 UTC.", **TAGS)
        gone = services.store(text="The staging VPN uses port 1194.", **TAGS)
    assert computing.wait(60)  # the pass has read both pending memories and runs the model
    newer = supersession.supersede(supersedes=[old["id"]], text="The backup job runs at 03:00 UTC.", reason="moved")
    services.delete(ids=[gone["id"]], reason="obsolete", confirm=True)
    resume.set()
    points.wait_for_background_embedding()
    assert selectors.recall(ids=[gone["id"]])["missing"] == [gone["id"]]  # not brought back with its vector
    (kept,) = selectors.recall(ids=[old["id"]])["memories"]
    assert kept["superseded_by"] == newer["memory"]["id"] and kept["valid_until"]
    assert pending_ids(any_palace) == []
    best = selectors.find(query="When does the backup job run?", limit=2, ranking="dense", include_superseded=True)
    assert {hit["id"] for hit in best["results"]} == {old["id"], newer["memory"]["id"]}


def test_it_embeds_a_batch_before_answering(any_palace: runtime.Palace) -> None:
    services.store_batch(items=[memory("Bulk memory one about caches."), memory("Bulk memory two about queues.")])
    assert pending_ids(any_palace) == []


def test_it_compares_a_memory_stored_a_moment_ago_by_meaning_when_checking_for_duplicates(
    any_palace: runtime.Palace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "_embed_in_background", lambda palace: None)  # the thread never gets to it
    stored = services.store(text="Grafana dashboards live in the ops repository.", **TAGS)
    assert pending_ids(any_palace) == [stored["id"]]
    # Another wording: found by meaning, so its dense vector must have been embedded first.
    check = selectors.check_duplicate(text="The ops repository holds our Grafana dashboards.")
    assert check["duplicate"] is False and check["closest"]["id"] == stored["id"]
    assert pending_ids(any_palace) == []


def test_it_embeds_what_a_closed_palace_left_pending_when_it_opens_again(
    any_palace: runtime.Palace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "_embed_in_background", lambda palace: None)  # stopped before its thread ran
    stored = services.store(text="The office printer is on the third floor.", **TAGS)
    runtime.close_palace()
    reopened = runtime.get_palace()
    assert pending_ids(reopened) == [stored["id"]]
    found = selectors.find(query="Where is the printer?", limit=1, ranking="dense")
    assert [hit["id"] for hit in found["results"]] == [stored["id"]]
    assert pending_ids(reopened) == []


def test_it_counts_a_single_store_once_towards_the_next_index_build(palace: runtime.Palace) -> None:
    with embedding_thread_held():
        services.store(text="The build cache lives on the second NVMe disk.", **TAGS)
        assert palace.store.index_state().unindexed_writes == 0  # keywords only: nothing for a graph yet
    points.wait_for_background_embedding()
    assert palace.store.index_state().unindexed_writes == 1  # its dense vector
