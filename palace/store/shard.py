"""An Edge shard on disk: how it is configured, the file that names its model, the room it needs."""

from __future__ import annotations

import qdrant_edge as qe

from palace.store.base import DENSE, SPARSE, CollectionIdentity

IDENTITY_FILE = "palazzo-collection.json"
# Qdrant Edge memory-maps sparse files (WAL segments, payload indexes) and grows them on open and on writes;
# on a full file system that kills the process with SIGBUS instead of raising, so we refuse first.
MIN_FREE_BYTES = 64 * 1024 * 1024
# Qdrant Edge builds its HNSW graphs only when optimize() runs, and optimize() holds the GIL for the
# whole build (40 s at 100k memories here), so it runs in a child process on a copy of the shard that
# then replaces the live one (see palace.store.indexer). A segment larger than this (in KB of vectors,
# about 650 memories) gets a graph; smaller ones are scanned, which costs well under a millisecond.
INDEXING_THRESHOLD_KB = 1000


def shard_config(identity: CollectionIdentity) -> qe.EdgeConfig:
    """The shard's vectors (chunk multivectors with max-sim, BM25 with IDF) and optimizer settings."""
    return qe.EdgeConfig(
        vectors={
            DENSE: qe.EdgeVectorParams(
                size=identity.dimension,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
                # Cold: mmapped and paged in as searches touch them. The default (Cached) reads the
                # whole preallocated storage files into memory, mostly empty space: ~75 MiB of RSS
                # at 10k memories. Searches were no slower (bench/bench_core.py). Existing shards
                # switch at their next index build, whose child process loads them with this config.
                memory=qe.Memory.Cold,
            )
        },
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB),
    )
