"""The benchmarks' Edge-backed Qdrant stand-in answers palazzo's ServerStore as the local-mode one does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import numpy as np
import pytest

from palace.store.base import MemoryFilter
from palace.store.query import SearchQuery
from palace.store.server import ServerStore
from tests.palace.test_server_store import IDENTITY, point, points_for_filters, unit
from tests.trust.fake_qdrant import FakeQdrant

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

NOW = datetime(2024, 6, 1, tzinfo=UTC)
FILTERS = [
    MemoryFilter(),
    MemoryFilter(wing="a"),
    MemoryFilter(room="r2", category="event"),
    MemoryFilter(session="s3"),
    MemoryFilter(since=datetime(2024, 1, 2, 12, tzinfo=UTC), until=datetime(2024, 1, 4, 12, tzinfo=UTC)),
    MemoryFilter(include_superseded=False, current_at=NOW),
    MemoryFilter(include_superseded=False, current_at=datetime(2024, 5, 31, 23, 59, 59, tzinfo=UTC)),
    MemoryFilter(ids=(2, 5, 77), wings=("a", "c")),
    MemoryFilter(text_hashes=("t2", "t5", "nope")),
    MemoryFilter(expired=False, current_at=NOW),
]


@pytest.fixture
def stores() -> Iterator[tuple[ServerStore, ServerStore]]:
    """The same collection on the local-mode stand-in and on the Edge one, both over HTTP."""
    fakes = [FakeQdrant().start(), FakeQdrant(engine="edge").start()]
    opened = [ServerStore(collection="palace", url=fake.url) for fake in fakes]
    for store in opened:
        store.ensure_collection(IDENTITY)
    try:
        yield opened[0], opened[1]
    finally:
        for store in opened:
            store.close()
        for fake in fakes:
            fake.stop()


def written(rng: np.random.Generator) -> list:
    """Points over every filterable field, plus keyword-bearing ones with several chunks and expiry dates."""
    extra = [
        point(
            10 + i,
            unit(rng, 1 + i % 3),
            # Each its own keyword counts and length: no two BM25 scores tie, so both engines rank alike.
            " ".join(["note", *["backup"] * (i + 1), *["zanzibar"] * (12 - i), *["schedule"] * (i % 3)]),
            wing="a" if i % 2 else "c",
            room="r2",
            category="event",
            timestamp=f"2024-02-{10 + i}T08:00:00Z",
            expires_at="2024-05-01T00:00:00Z" if i % 4 == 0 else None,
        )
        for i in range(12)
    ]
    return points_for_filters(rng) + extra


def test_it_answers_palazzos_store_calls_as_the_local_engine_does(stores: tuple[ServerStore, ServerStore]) -> None:
    local, edge = stores
    rng = np.random.default_rng(3)
    points = written(rng)
    for store in stores:
        store.upsert(points)
    query = unit(rng)[0]
    for memory_filter in FILTERS:
        answers = []
        for store in stores:
            searches = [
                {  # the same points with the same scores (their order follows), ties in either order
                    p.id: p.score
                    for p in store.search(
                        SearchQuery(dense_query=dense, keyword_query=keyword, memory_filter=memory_filter, limit=8)
                    )
                }
                for dense, keyword in ((query, None), (None, "backup zanzibar"), (query, "backup schedule"))
            ]
            answers.append(
                {
                    "scroll": [p.id for p in store.scroll(memory_filter=memory_filter, batch_size=4)],
                    "count": store.count(memory_filter=memory_filter),
                    "recent": [p.id for p in store.recent(memory_filter=memory_filter, limit=5)],
                    "facet": store.facet(key="wing", memory_filter=memory_filter),
                    "searches": searches,
                }
            )
        # The server side stores float16 vectors as the palace asks; local mode keeps float32.
        for search_edge, search_local in zip(answers[1].pop("searches"), answers[0].pop("searches"), strict=True):
            assert search_edge == pytest.approx(search_local, abs=2e-3), memory_filter
        assert answers[1] == answers[0], memory_filter
        assert answers[0]["count"] > 0 or memory_filter.ids is not None
    assert [(p.id, p.payload) for p in edge.retrieve([12, 3, 99])] == [
        (p.id, p.payload) for p in local.retrieve([12, 3, 99])
    ]
    chunks = [store.chunk_vectors([3, 11, 12]) for store in stores]
    assert sorted(chunks[1]) == sorted(chunks[0]) == [3, 11, 12]
    for point_id, matrix in chunks[0].items():
        assert chunks[1][point_id].shape == matrix.shape
        np.testing.assert_allclose(chunks[1][point_id], matrix, atol=2e-3)  # float16 storage on the server side


def test_it_applies_payload_changes_and_deletes_as_the_local_engine_does(
    stores: tuple[ServerStore, ServerStore],
) -> None:
    rng = np.random.default_rng(5)
    points = written(rng)
    for store in stores:
        store.upsert(points)
        store.set_payload([1, 11], {"valid_until": "2024-04-01T00:00:00Z", "wing": "moved"})
        store.delete([2, 12])
    current = MemoryFilter(include_superseded=False, current_at=NOW)
    answers = [
        (
            [p.id for p in store.scroll(memory_filter=current)],
            store.facet(key="wing", memory_filter=MemoryFilter()),
            [p.payload for p in store.retrieve([1, 2, 11])],
        )
        for store in stores
    ]
    assert answers[1] == answers[0]
    assert 1 not in answers[0][0] and 2 not in answers[0][0]


def test_it_refuses_what_it_does_not_serve_naming_it() -> None:
    fake = FakeQdrant(engine="edge").start()
    try:
        store = ServerStore(collection="palace", url=fake.url)
        store.ensure_collection(IDENTITY)
        answer = httpx.post(
            f"{fake.url}/collections/palace/points/query",
            json={"prefetch": [{"query": [[1.0] * 8], "using": "dense"}], "query": {"fusion": "dbsf"}},
        )
        assert answer.status_code == 400
        assert "only RRF fusion" in answer.json()["status"]["error"]
        store.close()
    finally:
        fake.stop()


def test_it_refuses_to_create_an_existing_collection_and_keeps_its_points() -> None:
    """Workers starting together may both create the collection; the loser must not empty the winner's."""
    fake = FakeQdrant(engine="edge").start()
    try:
        store = ServerStore(collection="palace", url=fake.url)
        store.ensure_collection(IDENTITY)
        store.upsert(points_for_filters(np.random.default_rng(1)))
        body = httpx.get(f"{fake.url}/collections/palace").json()["result"]["config"]["params"]
        again = httpx.put(f"{fake.url}/collections/palace", json={"vectors": body["vectors"]})
        assert again.status_code == 400 and "already exists" in again.json()["status"]["error"]
        assert fake.count("palace") == 6
        store.close()
    finally:
        fake.stop()
