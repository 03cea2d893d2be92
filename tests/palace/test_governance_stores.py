"""Expiry and wing scoping inside the store query, on the embedded store and on the Qdrant server adapter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from palace.store.base import MemoryFilter, VectorStore
from palace.store.edge import EdgeStore
from palace.store.query import SearchQuery
from palace.store.server import ServerStore
from tests.palace.test_server_store import IDENTITY, RecordingClient, point, unit

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
# id -> (wing, expires_at)
LAYOUT = {
    1: ("projects", None),
    2: ("projects", "2026-06-01T11:59:59Z"),  # expired a second ago
    3: ("projects", "2026-06-01T12:00:00Z"),  # expires exactly now: expired
    4: ("infrastructure", "2026-06-01T12:00:01Z"),  # a second to go
    5: ("personal", None),
    6: ("personal", "2020-01-01T00:00:00Z"),
    7: ("career", "2030-01-01T00:00:00Z"),
}


@pytest.fixture(params=["edge", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    opened: VectorStore
    client = None
    if request.param == "edge":
        opened = EdgeStore(path=tmp_path / "shard")
    else:
        client = RecordingClient()
        opened = ServerStore(collection="palace", client=client)
    opened.ensure_collection(IDENTITY)
    rng = np.random.default_rng(3)
    writes = []
    for memory_id, (wing, expires_at) in LAYOUT.items():
        payload = {"wing": wing, "timestamp": f"2026-05-0{memory_id}T00:00:00Z"}
        if expires_at:
            payload["expires_at"] = expires_at
        writes.append(point(memory_id, unit(rng), f"shared words memory {memory_id}", **payload))
    opened.upsert(writes)
    try:
        yield opened
    finally:
        opened.close()
        if client is not None:
            client.close()


def ids(points: list[object]) -> list[int]:
    return sorted(p.id for p in points)  # type: ignore[attr-defined]


def every_read(store: VectorStore, memory_filter: MemoryFilter) -> dict[str, object]:
    query = unit(np.random.default_rng(9))[0]
    return {
        "dense": ids(
            store.search(SearchQuery(dense_query=query, keyword_query=None, memory_filter=memory_filter, limit=10))
        ),
        "keyword": ids(
            store.search(
                SearchQuery(dense_query=None, keyword_query="shared words", memory_filter=memory_filter, limit=10)
            )
        ),
        "fused": ids(
            store.search(SearchQuery(dense_query=query, keyword_query="shared", memory_filter=memory_filter, limit=10))
        ),
        "scroll": ids(list(store.scroll(memory_filter=memory_filter))),
        "recent": ids(store.recent(memory_filter=memory_filter, limit=10)),
        "count": store.count(memory_filter=memory_filter),
    }


def test_it_hides_expired_memories_inside_every_query(store: VectorStore) -> None:
    current = every_read(store, MemoryFilter(expired=False, current_at=NOW))
    expired = every_read(store, MemoryFilter(expired=True, current_at=NOW))

    live, gone = [1, 4, 5, 7], [2, 3, 6]
    assert current == {"dense": live, "keyword": live, "fused": live, "scroll": live, "recent": live, "count": 4}
    assert expired == {"dense": gone, "keyword": gone, "fused": gone, "scroll": gone, "recent": gone, "count": 3}
    assert store.count(memory_filter=MemoryFilter()) == 7  # without the condition everything is there


def test_it_limits_every_read_to_a_token_s_wings(store: VectorStore) -> None:
    scoped = MemoryFilter(wings=("projects", "career"))

    reads = every_read(store, scoped)

    assert reads == {
        "dense": [1, 2, 3, 7],
        "keyword": [1, 2, 3, 7],
        "fused": [1, 2, 3, 7],
        "scroll": [1, 2, 3, 7],
        "recent": [1, 2, 3, 7],
        "count": 4,
    }
    assert store.facet(key="wing", memory_filter=scoped) == {"projects": 3, "career": 1}
    assert ids(store.search(SearchQuery(dense_query=None, keyword_query="memory", memory_filter=scoped, limit=2))) != []
    both = MemoryFilter(wings=("projects",), wing="personal")  # a wing outside the scope matches nothing
    assert store.count(memory_filter=both) == 0
    assert store.count(memory_filter=MemoryFilter(wings=("projects",), expired=False, current_at=NOW)) == 1
