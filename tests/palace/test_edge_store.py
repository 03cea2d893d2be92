"""The embedded shard: HNSW graphs built in a background process, swapped in without losing a write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as qe

from palace.errors import StoreLocked
from palace.store import shard as shard_module
from palace.store.base import PAYLOAD_INDEXES, CollectionIdentity, IndexState, MemoryFilter, PointWrite
from palace.store.edge import EdgeStore
from palace.store.query import SearchQuery
from palace.store.shard import shard_config, shard_datatype

IDENTITY = CollectionIdentity(model_name="test-model", dimension=384)
# Enough vectors (1.5 KB each) to pass the shard's indexing threshold, so a build makes real graphs.
INDEXED = 1000


def _vectors(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, IDENTITY.dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _points(first_id: int, vectors: np.ndarray) -> list[PointWrite]:
    return [
        PointWrite(
            id=first_id + offset,
            chunk_vectors=vector[None, :],
            payload={"text": f"memory {first_id + offset}", "room": "r"},
            keyword_text=f"memory number {first_id + offset}",
        )
        for offset, vector in enumerate(vectors)
    ]


def _open(path: Path, *, index_after: int) -> EdgeStore:
    store = EdgeStore(path=path, index_after=index_after)
    store.ensure_collection(IDENTITY)
    return store


def _fill(store: EdgeStore, vectors: np.ndarray) -> None:
    for start in range(0, len(vectors), 100):
        store.upsert(_points(start + 1, vectors[start : start + 100]))


def _nearest(store: EdgeStore, vector: np.ndarray) -> int:
    hits = store.search(SearchQuery(dense_query=vector, keyword_query=None, memory_filter=MemoryFilter(), limit=1))
    return hits[0].id


def test_it_builds_the_index_in_the_background_and_keeps_every_write_made_meanwhile(tmp_path: Path) -> None:
    store = _open(tmp_path / "shard", index_after=INDEXED)
    vectors = _vectors(INDEXED, seed=1)
    _fill(store, vectors)  # the last batch starts the build
    later = _vectors(200, seed=2)
    written = 0
    while store._indexer is not None and written < len(later):
        store.upsert(_points(INDEXED + 1 + written, later[written : written + 1]))
        assert _nearest(store, vectors[written]) == written + 1  # searches go on during the build
        written += 1
        time.sleep(0.01)
    store.set_payload([1, 2], {"room": "moved"})
    store.delete([3])
    store.wait_for_index()

    [build] = store.index_builds
    # The build counts what the shard held when it copied it: a write of the loop above can take the write
    # lock before the build thread does (then it is copied, not replayed).
    assert INDEXED <= build["points"] < INDEXED + written and build["replayed"] > 0
    assert store.count(memory_filter=MemoryFilter()) == INDEXED + written - 1
    assert [point.payload["room"] for point in store.retrieve([1, 2, 4])] == ["moved", "moved", "r"]
    assert store.retrieve([3]) == []
    assert _nearest(store, later[written - 1]) == INDEXED + written
    assert store.shard.info().indexed_vectors_count >= 2 * INDEXED  # the dense graph, besides the BM25 index
    assert os.readlink(store.path) == ".shard.g2" and sorted(p.name for p in tmp_path.iterdir()) == [
        ".shard.g2",
        ".shard.lock",
        "shard",
    ]
    store.close()

    reopened = _open(tmp_path / "shard", index_after=INDEXED)
    assert reopened.count(memory_filter=MemoryFilter()) == INDEXED + written - 1
    assert reopened._indexer is None  # nothing new to index
    reopened.close()


def test_it_reports_a_running_build_and_the_writes_since_the_last_one(tmp_path: Path) -> None:
    store = _open(tmp_path / "shard", index_after=150)
    vectors = _vectors(230, seed=5)
    store.upsert(_points(1, vectors[:100]))
    assert store.index_state() == IndexState(building=False, unindexed_writes=100)
    store.upsert(_points(101, vectors[100:200]))  # 200 >= 150: a build starts
    with store._write_lock:  # held back, the build can neither swap nor finish
        assert store.index_state().building is True
    store.wait_for_index()
    store.upsert(_points(201, vectors[200:230]))
    assert store.index_state() == IndexState(building=False, unindexed_writes=30)
    store.close()


def test_it_builds_the_index_at_start_up_when_enough_is_unindexed(tmp_path: Path) -> None:
    store = _open(tmp_path / "shard", index_after=0)
    _fill(store, _vectors(INDEXED, seed=3))
    assert store.index_builds == []
    store.close()

    reopened = _open(tmp_path / "shard", index_after=INDEXED)
    reopened.wait_for_index()
    assert [build["points"] for build in reopened.index_builds] == [INDEXED]
    reopened.close()


def test_it_abandons_a_build_cleanly_when_the_store_closes(tmp_path: Path) -> None:
    store = _open(tmp_path / "shard", index_after=INDEXED)
    _fill(store, _vectors(INDEXED, seed=4))
    assert store._indexer is not None
    store.close()

    assert sorted(p.name for p in tmp_path.iterdir()) == [".shard.g1", ".shard.lock", "shard"]
    reopened = _open(tmp_path / "shard", index_after=0)
    assert reopened.count(memory_filter=MemoryFilter()) == INDEXED
    reopened.close()


def test_it_adopts_a_shard_from_before_generations_and_repairs_an_interrupted_migration(tmp_path: Path) -> None:
    legacy = tmp_path / "shard"
    shard = qe.EdgeShard.create(str(legacy), shard_config(IDENTITY))
    vector = _vectors(1, seed=5)
    shard.update(qe.UpdateOperation.upsert_points([qe.Point(7, {"dense": vector.tolist()}, {"room": "r"})]))
    shard.close()

    store = _open(legacy, index_after=0)
    assert legacy.is_symlink() and os.readlink(legacy) == ".shard.g0"
    assert _nearest(store, vector[0]) == 7
    store.close()

    legacy.unlink()  # as if killed between moving the old directory and linking it
    (tmp_path / ".shard.g3").mkdir()  # and a half-copied build left behind
    (tmp_path / "shard.swap").symlink_to(".shard.g3")
    store = _open(legacy, index_after=0)
    assert _nearest(store, vector[0]) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shard.g0", ".shard.lock", "shard"]
    store.close()


def test_it_serves_searches_from_other_threads_while_the_shard_is_swapped(tmp_path: Path) -> None:
    store = _open(tmp_path / "shard", index_after=INDEXED)
    vectors = _vectors(INDEXED, seed=6)
    failures: list[BaseException] = []
    stop = threading.Event()

    def search_forever() -> None:
        while not stop.is_set():
            try:
                store.search(
                    SearchQuery(dense_query=vectors[0], keyword_query="memory", memory_filter=MemoryFilter(), limit=5)
                )
            except BaseException as exc:  # any failure of a reader is the finding
                failures.append(exc)

    reader = threading.Thread(target=search_forever)
    reader.start()
    try:
        _fill(store, vectors)
        store.wait_for_index()
    finally:
        stop.set()
        reader.join()
    assert len(store.index_builds) == 1 and failures == []
    store.close()


def _payload_index_settings(store: EdgeStore) -> dict[str, tuple[Any, Any]]:
    schema = store.shard.info().payload_schema
    return {
        key: (info.params.memory, info.params.enable_hnsw) if info.params is not None else (None, None)
        for key, info in schema.items()
    }


def _memory_mapped_with_graphs_for_room_and_wing() -> dict[str, tuple[Any, Any]]:
    return {key: (qe.Memory.Cold, key in ("room", "wing")) for key, _kind in PAYLOAD_INDEXES}


def test_it_opens_a_shard_with_vectors_held_in_memory_with_disk_backed_vectors_and_one_search_thread(
    tmp_path: Path,
) -> None:
    # The configuration palaces were created with before dense vectors became cold (mmapped on demand),
    # before searches ran on one thread, and before BM25, payloads, payload indexes and graphs were
    # memory-mapped; its payload indexes were held in RAM with a graph for every value.
    held_in_memory = qe.EdgeConfig(
        vectors={
            "dense": qe.EdgeVectorParams(
                size=IDENTITY.dimension,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
            )
        },
        sparse_vectors={"bm25": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
    )
    old = qe.EdgeShard.create(str(tmp_path / "shard"), held_in_memory)
    for key, kind in PAYLOAD_INDEXES:
        schema = qe.PayloadSchemaType.Keyword if kind == "keyword" else qe.PayloadSchemaType.Datetime
        old.update(qe.UpdateOperation.create_field_index(key, schema))
    old.close()

    def recorded() -> dict[str, Any]:
        live = tmp_path / os.readlink(tmp_path / "shard") if (tmp_path / "shard").is_symlink() else tmp_path / "shard"
        return dict(json.loads((live / "edge_config.json").read_text()))

    assert recorded().get("max_search_threads") is None
    vectors = _vectors(INDEXED, seed=9)
    store = _open(tmp_path / "shard", index_after=INDEXED)
    config = recorded()
    assert config["vectors"]["dense"]["memory"] == "cold" and config["max_search_threads"] == 1
    assert config["sparse_vectors"]["bm25"]["memory"] == "cold" and config["hnsw_config"]["memory"] == "cold"
    assert config["payload_memory"] == config["id_tracker_memory"] == "cold"
    assert _payload_index_settings(store) == _memory_mapped_with_graphs_for_room_and_wing()
    _fill(store, vectors)
    store.wait_for_index()
    assert [build["points"] for build in store.index_builds] == [INDEXED]
    assert _nearest(store, vectors[17]) == 18
    store.close()

    config = recorded()
    assert config["vectors"]["dense"]["memory"] == "cold" and config["max_search_threads"] == 1
    # Edge refuses to load a shard with another datatype: it kept the one it was created with.
    assert config["vectors"]["dense"]["datatype"] == "float32"
    reopened = _open(tmp_path / "shard", index_after=INDEXED)
    assert _nearest(reopened, vectors[500]) == 501
    in_room = reopened.search(
        SearchQuery(dense_query=vectors[42], keyword_query=None, memory_filter=MemoryFilter(room="r"), limit=1)
    )
    assert [hit.id for hit in in_room] == [43]
    assert _payload_index_settings(reopened) == _memory_mapped_with_graphs_for_room_and_wing()
    reopened.close()


def test_it_memory_maps_a_new_palace_and_gives_graph_links_only_to_room_and_wing(tmp_path: Path) -> None:
    store = _open(tmp_path / "shard", index_after=INDEXED)
    assert _payload_index_settings(store) == _memory_mapped_with_graphs_for_room_and_wing()
    vectors = _vectors(INDEXED, seed=4)
    _fill(store, vectors)
    store.wait_for_index()
    assert [build["points"] for build in store.index_builds] == [INDEXED]
    store.close()
    reopened = _open(tmp_path / "shard", index_after=INDEXED)
    # Nothing is made again on the next open: the swapped-in copy kept the indexes as they were made.
    assert _payload_index_settings(reopened) == _memory_mapped_with_graphs_for_room_and_wing()
    in_room = reopened.search(
        SearchQuery(dense_query=vectors[7], keyword_query=None, memory_filter=MemoryFilter(room="r"), limit=1)
    )
    assert [hit.id for hit in in_room] == [8]
    reopened.close()


def _recorded_search_threads(shard: Path) -> int:
    return int(json.loads((shard.parent / os.readlink(shard) / "edge_config.json").read_text())["max_search_threads"])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: every palace searches with one thread")
def test_it_searches_a_large_palace_with_a_thread_per_cpu_and_a_small_one_with_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large palace is PARALLEL_SEARCH_POINTS memories and more; this one is large from INDEXED on.
    monkeypatch.setattr(shard_module, "PARALLEL_SEARCH_POINTS", INDEXED)
    parallel = min(os.cpu_count() or 1, shard_module.SEGMENTS)
    store = _open(tmp_path / "shard", index_after=INDEXED // 2)
    assert _recorded_search_threads(tmp_path / "shard") == 1
    vectors = _vectors(INDEXED // 2, seed=5)
    _fill(store, vectors)
    store.wait_for_index()
    assert _recorded_search_threads(tmp_path / "shard") == 1  # the build's copy is still a small palace
    more = _vectors(INDEXED // 2, seed=6)
    store.upsert(_points(INDEXED // 2 + 1, more))
    store.wait_for_index()
    assert [build["points"] for build in store.index_builds] == [INDEXED // 2, INDEXED]
    assert _recorded_search_threads(tmp_path / "shard") == parallel
    assert _nearest(store, vectors[17]) == 18 and _nearest(store, more[3]) == INDEXED // 2 + 4
    store.close()
    reopened = _open(tmp_path / "shard", index_after=INDEXED)
    assert _recorded_search_threads(tmp_path / "shard") == parallel
    assert _nearest(reopened, more[40]) == INDEXED // 2 + 41
    reopened.close()


def _vector_bytes_on_disk(shard: Path) -> int:
    files = (shard.parent / os.readlink(shard)).glob("segments/*/vector_storage-dense/**/*")
    return sum(entry.stat().st_blocks * 512 for entry in files if entry.is_file())


def test_it_stores_a_new_shards_dense_vectors_as_float16_in_half_the_space_with_the_same_ranking(
    tmp_path: Path,
) -> None:
    vectors = _vectors(INDEXED, seed=11)
    float16 = _open(tmp_path / "new", index_after=10**9)
    _fill(float16, vectors)
    qe.EdgeShard.create(str(tmp_path / "old"), shard_config(IDENTITY, dense_datatype="float32")).close()
    float32 = _open(tmp_path / "old", index_after=10**9)
    _fill(float32, vectors)

    assert shard_datatype(tmp_path / "new") == "float16" and shard_datatype(tmp_path / "old") == "float32"
    assert _vector_bytes_on_disk(tmp_path / "new") < 0.6 * _vector_bytes_on_disk(tmp_path / "old")
    for probe in (3, 400, 999):
        query = SearchQuery(dense_query=vectors[probe], keyword_query=None, memory_filter=MemoryFilter(), limit=10)
        halves, fulls = float16.search(query), float32.search(query)
        assert [hit.id for hit in halves] == [hit.id for hit in fulls]
        assert np.allclose([hit.score for hit in halves], [hit.score for hit in fulls], atol=2e-3)
    float16.close()
    float32.close()


HOLD_IN_ANOTHER_PROCESS = """
import sys
from palace.store.edge import EdgeStore
from tests.palace.test_edge_store import IDENTITY, _points, _vectors
store = EdgeStore(path=__import__("pathlib").Path(sys.argv[1]), index_after=10**9)
store.ensure_collection(IDENTITY)
store.upsert(_points(1, _vectors(32, seed=11)))
print("holding", flush=True)
sys.stdin.read()
store.upsert(_points(33, _vectors(32, seed=12)))
store.close()
print("closed", flush=True)
"""


def test_it_refuses_a_shard_another_process_holds_without_letting_qdrant_edge_load_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A load that fails on Edge's own (late) lock can write the segments it read back over the holder's
    # flush: the holder's acknowledged writes were lost that way. So a refusal must come before any load.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_IN_ANOTHER_PROCESS, str(tmp_path / "shard")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "holding"
    opened: list[str] = []
    for name in ("load", "create"):
        original = getattr(qe.EdgeShard, name)
        monkeypatch.setattr(
            qe.EdgeShard, name, lambda *args, _name=name, _original=original: opened.append(_name) or _original(*args)
        )
    contender = EdgeStore(path=tmp_path / "shard", index_after=10**9)
    for _ in range(20):
        with pytest.raises(StoreLocked, match=r"already open in process \d+"):
            contender.ensure_collection(IDENTITY)
        with pytest.raises(StoreLocked), contender.held_exclusively():
            pass
    assert opened == []
    holder.stdin.close()
    assert holder.stdout.readline().strip() == "closed" and holder.wait(timeout=60) == 0
    monkeypatch.undo()
    contender.ensure_collection(IDENTITY)
    assert contender.count(memory_filter=MemoryFilter()) == 64
    contender.close()
