"""ServerStore against qdrant-client's local mode, plus parity with the embedded EdgeStore."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from qdrant_client import QdrantClient, models

from palace.errors import ModelMismatch, StoreUnavailable
from palace.store.base import (
    DATETIME_INDEXES,
    DENSE,
    KEYWORD_INDEXES,
    SPARSE,
    CollectionIdentity,
    IndexState,
    MemoryFilter,
    PointWrite,
)
from palace.store.edge import EdgeStore
from palace.store.query import RRF_K, Fusion, SearchQuery
from palace.store.server import ServerStore

pytestmark = [
    # Local mode keeps no payload indexes and says so on every create_payload_index.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    # The version check of a client built for an unreachable server warns from its thread, in whichever test runs.
    pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning"),
]

DIM = 8
IDENTITY = CollectionIdentity(model_name="test/tiny-8", dimension=DIM)
NOTHING = MemoryFilter()


class RecordingClient(QdrantClient):
    """Local mode that behaves like a server where tests need it to.

    It reports created payload indexes in payload_schema, and returns retrieved records in no
    particular order (reversed), as a server is free to.
    """

    def __init__(self) -> None:
        super().__init__(location=":memory:")
        self.index_calls: list[tuple[str, Any]] = []

    def create_payload_index(self, collection_name: str, field_name: str, *args: Any, **kwargs: Any) -> Any:
        self.index_calls.append((field_name, kwargs.get("field_schema")))
        return super().create_payload_index(collection_name, field_name, *args, **kwargs)

    def retrieve(self, *args: Any, **kwargs: Any) -> list[models.Record]:
        return list(reversed(super().retrieve(*args, **kwargs)))

    def get_collection(self, collection_name: str, **kwargs: Any) -> models.CollectionInfo:
        info = super().get_collection(collection_name, **kwargs)
        schema = {
            name: models.PayloadIndexInfo(data_type=field_schema, points=0) for name, field_schema in self.index_calls
        }
        return info.model_copy(update={"payload_schema": schema})


def unit(rng: np.random.Generator, rows: int = 1) -> npt.NDArray[np.float32]:
    """Random unit vectors of shape (rows, DIM)."""
    vectors = rng.normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def point(point_id: int, vectors: npt.NDArray[np.float32], text: str = "", **payload: Any) -> PointWrite:
    """A PointWrite with the given chunk vectors, keyword text and payload."""
    return PointWrite(id=point_id, chunk_vectors=vectors, payload=payload, keyword_text=text)


def ids(points: Any) -> list[int]:
    """The ids of StoredPoints, in order."""
    return [p.id for p in points]


@pytest.fixture
def client() -> Iterator[RecordingClient]:
    recording = RecordingClient()
    yield recording
    recording.close()


@pytest.fixture
def store(client: RecordingClient) -> ServerStore:
    opened = ServerStore(collection="palace", client=client)
    opened.ensure_collection(IDENTITY)
    return opened


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def closed_port() -> int:
    """A local port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_it_creates_the_collection_with_metadata_and_payload_indexes(
    store: ServerStore, client: RecordingClient
) -> None:
    info = client.get_collection("palace")
    assert info.config.metadata == IDENTITY.as_metadata()
    vectors = info.config.params.vectors
    assert isinstance(vectors, dict)
    assert vectors[DENSE].size == DIM
    assert vectors[DENSE].distance == models.Distance.COSINE
    assert vectors[DENSE].multivector_config == models.MultiVectorConfig(
        comparator=models.MultiVectorComparator.MAX_SIM
    )
    sparse = info.config.params.sparse_vectors
    assert sparse is not None
    assert sparse[SPARSE].modifier == models.Modifier.IDF
    assert sorted(client.index_calls) == sorted(
        [(key, models.PayloadSchemaType.KEYWORD) for key in KEYWORD_INDEXES]
        + [(key, models.PayloadSchemaType.DATETIME) for key in DATETIME_INDEXES]
    )
    assert set(store.payload_indexes()) == set(KEYWORD_INDEXES) | set(DATETIME_INDEXES)


def test_it_is_idempotent_on_reopen(store: ServerStore, client: RecordingClient, rng: np.random.Generator) -> None:
    store.upsert([point(1, unit(rng), wing="w")])
    calls = len(client.index_calls)
    again = ServerStore(collection="palace", client=client)
    again.ensure_collection(IDENTITY)
    assert len(client.index_calls) == calls
    assert again.count(memory_filter=NOTHING) == 1


def test_it_adds_missing_payload_indexes_to_an_existing_collection(client: RecordingClient) -> None:
    ServerStore(collection="palace", client=client).ensure_collection(IDENTITY)
    client.index_calls[:] = [call for call in client.index_calls if call[0] not in ("room", "valid_until")]
    ServerStore(collection="palace", client=client).ensure_collection(IDENTITY)
    assert client.index_calls[-2:] == [
        ("room", models.PayloadSchemaType.KEYWORD),
        ("valid_until", models.PayloadSchemaType.DATETIME),
    ]


@pytest.mark.parametrize(
    "identity", [CollectionIdentity("other/model", DIM), CollectionIdentity(IDENTITY.model_name, DIM * 2)]
)
def test_it_refuses_a_collection_built_by_another_model(
    store: ServerStore, client: RecordingClient, identity: CollectionIdentity
) -> None:
    with pytest.raises(ModelMismatch) as raised:
        ServerStore(collection="palace", client=client).ensure_collection(identity)
    message = str(raised.value)
    assert IDENTITY.model_name in message and identity.model_name in message
    assert f"({identity.dimension} dims)" in message
    assert "PALAZZO_EMBED_MODEL" in message and "palazzo rebuild" in message


def test_it_refuses_a_foreign_collection_without_metadata(client: RecordingClient) -> None:
    client.create_collection("palace", vectors_config=models.VectorParams(size=768, distance=models.Distance.COSINE))
    with pytest.raises(ModelMismatch) as raised:
        ServerStore(collection="palace", client=client).ensure_collection(IDENTITY)
    message = str(raised.value)
    assert "palazzo import qdrant --url URL" in message
    assert "unnamed 768-dim vector" in message
    assert client.index_calls == []


def test_it_upserts_and_retrieves_in_the_asked_order_skipping_unknown_ids(
    store: ServerStore, rng: np.random.Generator
) -> None:
    store.upsert([point(i, unit(rng, 2), f"text {i}", wing=f"w{i}") for i in (1, 2, 3)])
    got = store.retrieve([3, 99, 1, 2])
    assert ids(got) == [3, 1, 2]
    assert [p.payload for p in got] == [{"wing": "w3"}, {"wing": "w1"}, {"wing": "w2"}]
    assert store.retrieve([]) == []


def test_it_upsert_replaces_a_point(store: ServerStore, rng: np.random.Generator) -> None:
    store.upsert([point(1, unit(rng), wing="old", room="r")])
    store.upsert([point(1, unit(rng), wing="new")])
    assert store.retrieve([1])[0].payload == {"wing": "new"}


def test_it_set_payload_merges(store: ServerStore, rng: np.random.Generator) -> None:
    store.upsert([point(1, unit(rng), wing="w", room="r"), point(2, unit(rng), wing="x")])
    store.set_payload([1], {"room": "s", "valid_until": "2024-01-01T00:00:00Z"})
    assert store.retrieve([1])[0].payload == {"wing": "w", "room": "s", "valid_until": "2024-01-01T00:00:00Z"}
    assert store.retrieve([2])[0].payload == {"wing": "x"}


def test_it_delete_removes(store: ServerStore, rng: np.random.Generator) -> None:
    store.upsert([point(i, unit(rng)) for i in (1, 2, 3)])
    store.delete([2])
    assert ids(store.retrieve([1, 2, 3])) == [1, 3]
    assert store.count(memory_filter=NOTHING) == 2


def test_it_dense_search_ranks_the_nearest_first(store: ServerStore, rng: np.random.Generator) -> None:
    chunks = {i: unit(rng, 3) for i in range(1, 21)}
    store.upsert([point(i, vectors) for i, vectors in chunks.items()])
    query = chunks[7][1] + 0.05 * unit(rng)[0]
    query = (query / np.linalg.norm(query)).astype(np.float32)
    # MaxSim of a one-row query is the best cosine over a point's chunks.
    expected = sorted(chunks, key=lambda i: -float(np.max(chunks[i] @ query)))
    found = store.search(SearchQuery(dense_query=query, keyword_query=None, memory_filter=NOTHING, limit=5))
    assert ids(found) == expected[:5]
    assert found[0].id == 7
    assert found[0].score is not None and found[0].score > found[-1].score  # type: ignore[operator]


def test_it_keyword_search_finds_an_exact_rare_token(store: ServerStore, rng: np.random.Generator) -> None:
    texts = {
        1: "the deploy runbook for the staging cluster",
        2: "notes on the staging cluster and its deploy",
        3: "rotate the key qx7zebra before friday",
        4: "deploy the cluster after lunch",
    }
    store.upsert([point(i, unit(rng), text) for i, text in texts.items()])
    found = store.search(SearchQuery(dense_query=None, keyword_query="qx7zebra", memory_filter=NOTHING, limit=10))
    assert ids(found) == [3]
    assert store.search(SearchQuery(dense_query=None, keyword_query="the and", memory_filter=NOTHING, limit=10)) == []


def test_it_hybrid_search_fuses_both_legs(store: ServerStore, rng: np.random.Generator) -> None:
    query = unit(rng)[0]
    near = query + 0.2 * unit(rng)[0]
    far = [-query + 0.3 * v for v in unit(rng, 6)]
    store.upsert(
        [
            point(1, query[None, :], "weather report for monday"),  # dense leg first, no keyword
            point(2, far[0][None, :], "zanzibar zanzibar zanzibar"),  # keyword leg first, dense far
            point(3, near[None, :], "zanzibar is mentioned once in this longer note about travel plans"),
            *[point(10 + i, v[None, :], f"filler note number {i}") for i, v in enumerate(far[1:])],
        ]
    )
    dense = store.search(SearchQuery(dense_query=query, keyword_query=None, memory_filter=NOTHING, limit=3))
    keyword = store.search(SearchQuery(dense_query=None, keyword_query="zanzibar", memory_filter=NOTHING, limit=3))
    fused = store.search(SearchQuery(dense_query=query, keyword_query="zanzibar", memory_filter=NOTHING, limit=3))
    assert ids(dense)[:2] == [1, 3]
    assert ids(keyword) == [2, 3]
    # Second in both legs beats first in one: only a fusion ranks 3 on top.
    assert fused[0].id == 3
    assert set(ids(fused)) == {1, 2, 3}
    # Qdrant's RRF gives weight / (k + 0-based rank), with the k both stores pass explicitly.
    assert fused[0].score == pytest.approx(2 / (RRF_K + 1))


def points_for_filters(rng: np.random.Generator) -> list[PointWrite]:
    """Six points spread over every filterable field."""
    rows: list[dict[str, Any]] = [
        {"wing": "a", "category": "fact", "room": "r1", "hall": "h1", "session": "s1", "text_hash": "t1"},
        {
            "wing": "a",
            "category": "event",
            "room": "r2",
            "hall": "h1",
            "session": "s2",
            "text_hash": "t2",
            "valid_until": "2024-03-01T00:00:00Z",
        },
        {
            "wing": "b",
            "category": "fact",
            "room": "r1",
            "hall": "h2",
            "session": "s1",
            "text_hash": "t3",
            "valid_until": "2030-01-01T00:00:00Z",
        },
        {
            "wing": "b",
            "category": "event",
            "room": "r2",
            "hall": "h2",
            "session": "s2",
            "text_hash": "t4",
            "valid_until": None,
        },
        {
            "wing": "c",
            "category": "fact",
            "room": "r3",
            "hall": "h1",
            "session": "s3",
            "text_hash": "t5",
            "valid_until": "2024-05-31T23:59:59Z",
        },
        {"wing": "c", "category": "event", "room": "r3", "hall": "h3", "session": "s3", "text_hash": "t6"},
    ]
    return [
        point(i, unit(rng, 2), "shared words here", timestamp=f"2024-01-0{i}T12:00:00Z", **row)
        for i, row in enumerate(rows, start=1)
    ]


NOW = datetime(2024, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("memory_filter", "expected"),
    [
        (MemoryFilter(wing="a"), [1, 2]),
        (MemoryFilter(category="fact"), [1, 3, 5]),
        (MemoryFilter(room="r2"), [2, 4]),
        (MemoryFilter(hall="h1"), [1, 2, 5]),
        (MemoryFilter(session="s3"), [5, 6]),
        (MemoryFilter(since=datetime(2024, 1, 2, 12, tzinfo=UTC)), [2, 3, 4, 5, 6]),
        (MemoryFilter(until=datetime(2024, 1, 4, 12, tzinfo=UTC)), [1, 2, 3, 4]),
        (
            MemoryFilter(since=datetime(2024, 1, 2, 12, tzinfo=UTC), until=datetime(2024, 1, 4, 12, tzinfo=UTC)),
            [2, 3, 4],
        ),
        (MemoryFilter(include_superseded=False, current_at=NOW), [1, 3, 4, 6]),
        (MemoryFilter(include_superseded=False, current_at=datetime(2024, 2, 1, tzinfo=UTC)), [1, 2, 3, 4, 5, 6]),
        # A memory stops being current at its valid_until second, not after it.
        (
            MemoryFilter(include_superseded=False, current_at=datetime(2024, 5, 31, 23, 59, 59, tzinfo=UTC)),
            [1, 3, 4, 6],
        ),
        (
            MemoryFilter(include_superseded=False, current_at=datetime(2024, 5, 31, 23, 59, 58, tzinfo=UTC)),
            [1, 3, 4, 5, 6],
        ),
        (MemoryFilter(wing="b", category="fact"), [3]),
        (MemoryFilter(ids=(2, 5, 77)), [2, 5]),
        (MemoryFilter(ids=(2, 5), wing="c"), [5]),
    ],
)
def test_it_applies_every_filter_key(
    store: ServerStore, rng: np.random.Generator, memory_filter: MemoryFilter, expected: list[int]
) -> None:
    store.upsert(points_for_filters(rng))
    assert ids(store.scroll(memory_filter=memory_filter)) == expected
    assert store.count(memory_filter=memory_filter) == len(expected)
    query = unit(rng)[0]
    for dense, keyword in ((query, None), (None, "shared words"), (query, "shared words")):
        found = store.search(
            SearchQuery(dense_query=dense, keyword_query=keyword, memory_filter=memory_filter, limit=10)
        )
        assert sorted(ids(found)) == expected


def test_it_filters_inside_every_fused_leg(store: ServerStore, rng: np.random.Generator) -> None:
    query = unit(rng)[0]
    # Fifty closer, better-matching points outside the filter fill both legs' depth unless the filter applies
    # inside each leg (Qdrant also pushes the outer filter down; either way the target must be found).
    noise = [point(i, (query + 0.01 * unit(rng)[0])[None, :], "zanzibar zanzibar", wing="noise") for i in range(1, 51)]
    target = point(100, unit(rng), "zanzibar and many other words in a long note", wing="target")
    store.upsert([*noise, target])
    found = store.search(
        SearchQuery(dense_query=query, keyword_query="zanzibar", memory_filter=MemoryFilter(wing="target"), limit=1)
    )
    assert ids(found) == [100]


def test_it_filters_by_text_hashes(store: ServerStore, rng: np.random.Generator) -> None:
    store.upsert(points_for_filters(rng))
    assert ids(store.scroll(memory_filter=MemoryFilter(text_hashes=("t2", "t5", "nope")))) == [2, 5]
    assert ids(store.scroll(memory_filter=MemoryFilter(text_hashes=()))) == []


def test_it_scroll_visits_everything_across_pages(store: ServerStore, rng: np.random.Generator) -> None:
    written = [31, 2, 17, 5, 40, 8, 23, 11, 3, 29, 14]
    store.upsert([point(i, unit(rng), wing="odd" if i % 2 else "even") for i in written])
    assert ids(store.scroll(memory_filter=NOTHING, batch_size=3)) == sorted(written)
    assert ids(store.scroll(memory_filter=MemoryFilter(wing="odd"), batch_size=2)) == sorted(
        i for i in written if i % 2
    )


def test_it_recent_orders_by_timestamp(store: ServerStore, rng: np.random.Generator) -> None:
    stamps = {
        1: "2024-03-01T00:00:00Z",
        2: "2024-01-01T00:00:00Z",
        3: "2024-05-01T00:00:00Z",
        4: "2024-02-01T00:00:00Z",
        5: "2024-04-01T00:00:00Z",
    }
    store.upsert([point(i, unit(rng), timestamp=t, wing="a" if i != 3 else "b") for i, t in stamps.items()])
    assert ids(store.recent(memory_filter=NOTHING, limit=3)) == [3, 5, 1]
    assert ids(store.recent(memory_filter=MemoryFilter(wing="a"), limit=10)) == [5, 1, 4, 2]


def test_it_counts_and_facets(store: ServerStore, rng: np.random.Generator) -> None:
    store.upsert(points_for_filters(rng))
    assert store.count(memory_filter=NOTHING) == 6
    assert store.count(memory_filter=MemoryFilter(category="event")) == 3
    assert store.facet(key="wing", memory_filter=NOTHING) == {"a": 2, "b": 2, "c": 2}
    assert store.facet(key="room", memory_filter=MemoryFilter(category="fact")) == {"r1": 2, "r3": 1}


def test_it_reports_an_idle_index_when_the_collection_is_green(store: ServerStore, rng: np.random.Generator) -> None:
    store.upsert(points_for_filters(rng))
    assert store.index_state() == IndexState(building=False, unindexed_writes=None)


def test_it_flush_and_close_leave_an_injected_client_open(store: ServerStore, client: RecordingClient) -> None:
    store.flush()
    store.close()
    assert client.collection_exists("palace")


def test_it_raises_store_unavailable_quickly_when_the_server_is_unreachable() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    store = ServerStore(
        url=url,
        collection="palace",
        timeout_seconds=1,
        client=QdrantClient(url=url, timeout=1, check_compatibility=False),
    )
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as raised:
        store.ensure_collection(IDENTITY)
    assert time.monotonic() - started < 5
    assert url in str(raised.value) and "ensure_collection" in str(raised.value)
    with pytest.raises(StoreUnavailable, match="upsert"):
        store.upsert([point(1, np.ones((1, DIM), dtype=np.float32))])
    with pytest.raises(StoreUnavailable, match="search"):
        store.search(
            SearchQuery(dense_query=np.ones(DIM, dtype=np.float32), keyword_query=None, memory_filter=NOTHING, limit=1)
        )
    with pytest.raises(StoreUnavailable, match="scroll"):
        list(store.scroll(memory_filter=NOTHING))
    store.close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_it_gives_up_after_the_timeout_when_the_server_does_not_answer(silent_server: str) -> None:
    store = ServerStore(url=silent_server, collection="palace", timeout_seconds=1)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as raised:
        store.count(memory_filter=NOTHING)
    assert time.monotonic() - started < 5
    assert str(raised.value) == f"Qdrant at {silent_server} did not answer count within 1.0 s"
    store.close()


class _Failing(BaseHTTPRequestHandler):
    def _overloaded(self) -> None:
        body = b'{"status": {"error": "overloaded"}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._overloaded()

    def do_POST(self) -> None:
        self._overloaded()

    def do_PUT(self) -> None:
        self._overloaded()

    def log_message(self, *args: Any) -> None:
        pass


def test_it_maps_a_server_error_to_store_unavailable() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        store = ServerStore(url=url, collection="palace", timeout_seconds=1)
        with pytest.raises(StoreUnavailable) as raised:
            store.facet(key="wing", memory_filter=NOTHING)
        assert url in str(raised.value) and "facet" in str(raised.value)
        assert "503" in str(raised.value) and "overloaded" in str(raised.value)
        store.close()
    finally:
        server.shutdown()
        server.server_close()


def test_it_agrees_with_the_edge_store(tmp_path: Path, client: RecordingClient) -> None:
    rng = np.random.default_rng(11)
    filler = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "mike"]

    def text(i: int) -> str:
        # Distinct (term counts, length) per point: stores may order equal BM25 scores either way.
        return " ".join(["kilo"] * (1 + i % 3) + ["lima"] * (i % 4 == 0) + [filler[j % 11] for j in range(i)])

    writes = [
        point(
            i,
            unit(rng, int(rng.integers(1, 4))),
            text(i),
            wing=["a", "b", "c"][i % 3],
            timestamp=f"2024-01-{i:02d}T00:00:00Z",
        )
        for i in range(1, 29)
    ]
    edge = EdgeStore(path=tmp_path / "shard")
    server = ServerStore(collection="palace", client=client)
    try:
        for store in (edge, server):
            store.ensure_collection(IDENTITY)
            store.upsert(writes)
        query = unit(rng)[0]
        wing_b = MemoryFilter(wing="b", since=datetime(2024, 1, 5, tzinfo=UTC))

        def both(**kwargs: Any) -> tuple[list[int], list[int]]:
            return ids(edge.search(SearchQuery(**kwargs))), ids(server.search(SearchQuery(**kwargs)))

        dense_edge, dense_server = both(dense_query=query, keyword_query=None, memory_filter=NOTHING, limit=10)
        assert dense_server == dense_edge and len(dense_edge) == 10
        keyword_edge, keyword_server = both(dense_query=None, keyword_query="kilo lima", memory_filter=NOTHING, limit=8)
        assert keyword_server == keyword_edge and len(keyword_edge) == 8
        filtered_edge, filtered_server = both(dense_query=query, keyword_query=None, memory_filter=wing_b, limit=5)
        assert filtered_server == filtered_edge
        assert server.count(memory_filter=wing_b) == edge.count(memory_filter=wing_b) == 8
        fused = {
            name: {
                p.id: p.score
                for p in store.search(
                    SearchQuery(dense_query=query, keyword_query="kilo lima", memory_filter=NOTHING, limit=28)
                )
            }
            for name, store in (("edge", edge), ("server", server))
        }
        assert len(fused["edge"]) == 28
        assert fused["server"] == pytest.approx(fused["edge"])
        assert server.facet(key="wing", memory_filter=NOTHING) == edge.facet(key="wing", memory_filter=NOTHING)
        assert ids(server.recent(memory_filter=wing_b, limit=3)) == ids(edge.recent(memory_filter=wing_b, limit=3))
    finally:
        edge.close()


def _parity_writes(rng: np.random.Generator) -> list[PointWrite]:
    """The filter rows with distinct texts (no equal BM25 scores), plus one point still waiting for its dense vector."""
    filler = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    writes = []
    for written in points_for_filters(rng):
        i = written.id
        words = " ".join(["kilo"] * i + ["lima"] * (i % 2) + filler[:i])
        writes.append(point(i, written.chunk_vectors, words, **written.payload))
    pending = {"wing": "a", "category": "fact", "room": "r9", "hall": "h1", "timestamp": "2024-01-07T12:00:00Z"}
    writes.append(point(7, np.zeros((0, DIM), dtype=np.float32), "kilo pending", needs_embedding="pending", **pending))
    return writes


@pytest.fixture(scope="module")
def both_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EdgeStore, ServerStore]]:
    """The embedded and the served store holding the same points."""
    writes = _parity_writes(np.random.default_rng(5))
    edge = EdgeStore(path=tmp_path_factory.mktemp("parity") / "shard")
    client = RecordingClient()
    server = ServerStore(collection="palace", client=client)
    for store in (edge, server):
        store.ensure_collection(IDENTITY)
        store.upsert(writes)
    yield edge, server
    edge.close()
    client.close()


def _ranked(hits: list[Any], limit: int) -> tuple[list[float], list[frozenset[int]]]:
    """The scores, and the ids per score best first: stores may order equal scores either way, and
    when the limit cuts through a tie, keep either; so the last group of a full page is left out."""
    groups: dict[float, set[int]] = {}
    for hit in hits:
        groups.setdefault(round(hit.score, 5), set()).add(hit.id)
    ranked = [frozenset(group) for _, group in sorted(groups.items(), reverse=True)]
    return [hit.score for hit in hits], ranked[:-1] if len(hits) == limit else ranked


def _assert_ranked_alike(from_server: list[Any], from_edge: list[Any], limit: int) -> None:
    server_scores, server_groups = _ranked(from_server, limit)
    edge_scores, edge_groups = _ranked(from_edge, limit)
    assert server_groups == edge_groups
    # The embedded shard stores float16 vectors and qdrant-client's local mode float32: cosines differ by ~1e-4.
    assert len(server_scores) == len(edge_scores) and np.allclose(server_scores, edge_scores, rtol=0, atol=1e-3)


PARITY_FILTERS = [
    NOTHING,
    MemoryFilter(wing="a"),
    MemoryFilter(category="fact"),
    MemoryFilter(room="r2"),
    MemoryFilter(hall="h1"),
    MemoryFilter(session="s3"),
    MemoryFilter(since=datetime(2024, 1, 2, 12, tzinfo=UTC)),
    MemoryFilter(until=datetime(2024, 1, 4, 12, tzinfo=UTC)),
    # The whole-second rule: a fraction of a second is dropped, so the memory at 12:00:00 is inside.
    MemoryFilter(since=datetime(2024, 1, 2, 12, 0, 0, 900_000, tzinfo=UTC)),
    MemoryFilter(until=datetime(2024, 1, 4, 12, 0, 0, 900_000, tzinfo=UTC)),
    MemoryFilter(include_superseded=False, current_at=NOW),
    MemoryFilter(include_superseded=False, current_at=datetime(2024, 5, 31, 23, 59, 59, 500_000, tzinfo=UTC)),
    MemoryFilter(include_superseded=False, current_at=datetime(2024, 5, 31, 23, 59, 58, tzinfo=UTC)),
    MemoryFilter(ids=(2, 5, 7, 77)),
    MemoryFilter(text_hashes=("t2", "t5", "nope")),
    MemoryFilter(text_hashes=()),
    MemoryFilter(needs_embedding=True),
    MemoryFilter(wing="c", hall="h1", session="s3", include_superseded=False, current_at=NOW),
]


@pytest.mark.parametrize("memory_filter", PARITY_FILTERS)
def test_it_filters_alike_in_both_stores(
    both_stores: tuple[EdgeStore, ServerStore], memory_filter: MemoryFilter
) -> None:
    edge, server = both_stores
    assert ids(server.scroll(memory_filter=memory_filter)) == ids(edge.scroll(memory_filter=memory_filter))
    assert server.count(memory_filter=memory_filter) == edge.count(memory_filter=memory_filter)
    assert server.facet(key="room", memory_filter=memory_filter) == edge.facet(key="room", memory_filter=memory_filter)
    assert ids(server.recent(memory_filter=memory_filter, limit=3)) == ids(
        edge.recent(memory_filter=memory_filter, limit=3)
    )
    query = unit(np.random.default_rng(3))[0]
    for dense, keyword in ((query, None), (None, "kilo lima"), (query, "kilo lima")):
        asked = SearchQuery(dense_query=dense, keyword_query=keyword, memory_filter=memory_filter, limit=10)
        _assert_ranked_alike(server.search(asked), edge.search(asked), 10)


@pytest.mark.parametrize(
    "ranking",
    [
        {"keyword_query": None},
        {"dense": None},
        {},
        {"limit": 1},
        {"limit": 3, "depth": 1},
        {"limit": 3, "depth": 2},
        {"depth": 100},
        {"fusion": Fusion(k=60)},
        {"fusion": Fusion(k=1, weights=(2.0, 0.5))},
        {"fusion": Fusion(weights=(0.25, 3.0)), "memory_filter": MemoryFilter(hall="h1")},
        {"keyword_query": "the and of"},  # only stopwords: the keyword leg drops out, dense ranks alone
        {"dense": None, "keyword_query": "the and"},
    ],
    ids=lambda ranking: ",".join(f"{key}={value}" for key, value in ranking.items()) or "fused-defaults",
)
def test_it_ranks_alike_in_both_stores(both_stores: tuple[EdgeStore, ServerStore], ranking: dict[str, Any]) -> None:
    edge, server = both_stores
    options = {"dense_query": unit(np.random.default_rng(3))[0], "keyword_query": "kilo lima"} | ranking
    if "dense" in options:
        options["dense_query"] = options.pop("dense")
    asked = SearchQuery(**{"memory_filter": NOTHING, "limit": 10, **options})
    from_edge, from_server = edge.search(asked), server.search(asked)
    _assert_ranked_alike(from_server, from_edge, asked.limit)
    assert len(from_edge) <= asked.limit
    if asked.dense_query is not None and asked.keyword_query == "kilo lima":  # fused: depth bounds what reaches it
        assert len(from_edge) <= 2 * asked.leg_depth
