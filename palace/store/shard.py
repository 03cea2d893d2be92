"""An Edge shard on disk: how it is configured, the file that names its model, the room it needs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import qdrant_edge as qe

from palace.store.base import DENSE, SPARSE, CollectionIdentity

IDENTITY_FILE = "palazzo-collection.json"
# Qdrant Edge memory-maps sparse files (WAL segments, payload indexes) and grows them on open and on writes;
# on a full file system that kills the process with SIGBUS instead of raising, so we refuse first.
MIN_FREE_BYTES = 64 * 1024 * 1024
# Qdrant Edge builds its HNSW graphs only when optimize() runs, and optimize() holds the GIL for the
# whole build (40 s at 100k memories here), so it runs in a child process on a copy of the shard that
# then replaces the live one (see palace.store.indexer). A segment of more than about 650 memories
# gets a graph; smaller ones are scanned, which costs well under a millisecond. Edge counts the
# threshold in KB of vectors: this is it for float32 ones, float16 ones take half.
INDEXING_THRESHOLD_KB = 1000
# Dense vectors are stored as float16: half the disk and memory of float32 (Edge maps the vector file
# twice, for appends and for scans: at 10k memories 29 -> 14 MiB of RSS), and a scan reads half as
# much. A bge-small vector rounded to float16 keeps its cosines to ~1e-4, below the gaps a ranking
# turns on (LoCoMo's recall was unchanged). Edge refuses to load a shard with another datatype than
# it was created with, so shards from before keep float32 (see shard_datatype).
DENSE_DATATYPE = "float16"
# Search threads: one for a palace of up to PARALLEL_SEARCH_POINTS memories, one per CPU (at most one per
# segment) beyond. Edge's pool hands each search to its threads and waits for them; on a 2-core VM those
# hand-offs cost more than a small palace's scan: in-process finds on the side-by-side corpus took 8.9-10.6 ms
# at 1k memories with the default pool against 6.8-7.8 ms with one thread (12.6-12.9 against 8.0-9.8 ms at
# 10k). At 100k memories one and two threads found alike (p50 4.45-4.59 against 4.66-4.81 ms); at a million,
# where a search walks eight segments' graphs, two threads took find p50 from 18.4-20.1 to 12.8 ms, and
# from 28.1-29.5 to 18.8 ms on the first pass after opening (bench/bench_scale.py --search-threads 1 2 1).
SEARCH_THREADS = 1
PARALLEL_SEARCH_POINTS = 200_000
# How many segments a build leaves. Edge's default (one per CPU: two here) merges what was written since
# the last build into a large segment and indexes it again, so each build cost as much as the palace was
# large (10k writes at a time: 14 s, then 38-59 s per build by 80k); with eight, a build indexes what was
# written since the last one, merged with the smallest segment once there are eight (14 s per build up to
# 70k, then 22 s each, flat to 120k). A search visits every segment's graph.
SEGMENTS = 8
# Qdrant's own HNSW settings, spelled out because a configuration that sets the graph's memory must name
# them all: 16 links per node, 100 candidates while building, filtered searches expected to match fewer
# than 10,000 KB of vectors scan the payload index's points instead of walking the graph.
HNSW_M = 16
HNSW_EF_CONSTRUCT = 100
HNSW_FULL_SCAN_THRESHOLD_KB = 10_000
# The payload fields finds narrow by that get graph links of their own in every build (payload graphs),
# so a search in one room walks a graph of that room. Qdrant adds such a graph for every value of every
# indexed keyword field with enough points; for the others (hall, category, added_by, session, text_hash,
# the dates) they cost a graph the size of the palace each and no find walks them: the build at 100k took
# 197 s with them all and 50 s with these two, at the same find latency and recall (bench/bench_scale.py).
GRAPH_FIELDS = frozenset({"room", "wing"})
EDGE_CONFIG_FILE = "edge_config.json"  # Edge's record of the configuration a shard was created with
_DATATYPES = {"float16": qe.VectorStorageDatatype.Float16, "float32": qe.VectorStorageDatatype.Float32}
_BYTES_PER_DIMENSION = {"float16": 2, "float32": 4}


def shard_datatype(path: Path) -> str:
    """The dense datatype of the shard at path, as Edge recorded it (float32, its default, when it did not)."""
    try:
        recorded = json.loads((path / EDGE_CONFIG_FILE).read_text())["vectors"][DENSE].get("datatype")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        recorded = None
    return recorded if recorded in _DATATYPES else "float32"


def dense_params(
    identity: CollectionIdentity,
    *,
    dense_datatype: str = DENSE_DATATYPE,
    quantization: qe.ScalarQuantizationConfig | None = None,
) -> qe.EdgeVectorParams:
    """The dense chunk multivectors (max-sim), memory-mapped; quantization is for bench/bench_scale.py's variant."""
    return qe.EdgeVectorParams(
        size=identity.dimension,
        distance=qe.Distance.Cosine,
        multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
        # Cold: mmapped and paged in as searches touch them. The default (Cached) reads the whole
        # preallocated storage files into memory, mostly empty space: ~75 MiB of RSS at 10k memories.
        # Searches were no slower (bench/bench_core.py). Existing shards switch when next opened (load_shard).
        memory=qe.Memory.Cold,
        datatype=_DATATYPES[dense_datatype],
        quantization_config=quantization,
    )


def search_threads(points: int) -> int:
    """How many threads a shard of this many points searches with (see SEARCH_THREADS)."""
    if points < PARALLEL_SEARCH_POINTS:
        return SEARCH_THREADS
    return max(SEARCH_THREADS, min(os.cpu_count() or 1, SEGMENTS))


def shard_config(
    identity: CollectionIdentity, *, dense_datatype: str = DENSE_DATATYPE, points: int = 0
) -> qe.EdgeConfig:
    """The shard's vectors (chunk multivectors, BM25 with IDF), what is memory-mapped, graphs, optimizer, threads.

    points is how many the shard holds (as far as known when it is loaded): it sets the search threads.
    """
    return qe.EdgeConfig(
        vectors={DENSE: dense_params(identity, dense_datatype=dense_datatype)},
        # The BM25 index, payloads, the id tracker and the graphs are memory-mapped too (Cold): what the
        # process holds is what searches touch, and the kernel may drop those pages and read them again.
        # Held in memory, they grew with the palace (anon RSS 209 -> 123 MiB at 100k memories, finds as fast).
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf, memory=qe.Memory.Cold)},
        hnsw_config=qe.HnswIndexConfig(
            m=HNSW_M,
            ef_construct=HNSW_EF_CONSTRUCT,
            full_scan_threshold=HNSW_FULL_SCAN_THRESHOLD_KB,
            memory=qe.Memory.Cold,
        ),
        payload_memory=qe.Memory.Cold,
        id_tracker_memory=qe.Memory.Cold,
        optimizers=qe.EdgeOptimizersConfig(
            indexing_threshold=INDEXING_THRESHOLD_KB * _BYTES_PER_DIMENSION[dense_datatype] // 4,
            default_segment_number=SEGMENTS,
        ),
        max_search_threads=search_threads(points),
    )


def field_index(key: str, kind: str) -> qe.KeywordIndexParams | qe.DatetimeIndexParams:
    """How a payload index is made: memory-mapped, with graph links of its own only for GRAPH_FIELDS."""
    if kind == "datetime":
        return qe.DatetimeIndexParams(memory=qe.Memory.Cold, enable_hnsw=False)
    return qe.KeywordIndexParams(memory=qe.Memory.Cold, enable_hnsw=key in GRAPH_FIELDS)


def load_shard(path: Path, identity: CollectionIdentity, *, points: int = 0) -> qe.EdgeShard:
    """Open an existing shard of about this many points with today's configuration, keeping its dense datatype."""
    # Edge checks the configuration against the shard's and records it: a shard from before gets today's
    # search threads and memory-mapped structures when it is opened, not at its next index build.
    return qe.EdgeShard.load(str(path), shard_config(identity, dense_datatype=shard_datatype(path), points=points))
