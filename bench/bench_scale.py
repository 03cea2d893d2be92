"""Scale: the embedded store filled to a million memories, one line of figures per size and shard configuration.

For each size it prints the fill rate, find p50/p95 (plain, and filtered to one room of eight) with the real
model embedding each query, the process's RSS after the build (all; "anon": without the pages of the
store's memory-mapped files, which the kernel can drop and read again; "trimmed": anon once glibc has
handed its freed heap back) and its peak so far (all, by getrusage; anon, sampled), the data dir's and the
shard's size on disk, and a background index build: how long it took, the builder process's peak RSS and
anon RSS, this process's peak anon RSS and the shard's disk while it ran, and find's p50/p95 while it ran
(finds must keep answering). Each line ends with the load average: other processes share the CPUs.
Figures only; it never asserts.

The vectors are SYNTHETIC: unit vectors scattered around 2,000 seeded centres (the model embeds about 100
texts a second here, so a million real ones would take hours). Everything else is palazzo's own: the texts
are memory-like sentences, the records carry the app's payload fields (wing, room, hall, category,
timestamp, session, added_by, text_hash, all indexed as the store indexes them), the points are built by
palace.engine.points.build_points and written through the store palazzo opens (palace.store.edge.EdgeStore),
and finds go through palace.reads.selectors.find. Memories are written to the store directly, not through
the journal: this measures the store, not the database. The bench starts the index builds itself
(PALAZZO_INDEX_AFTER=0): every --build-every memories during a fill and at each size, and waits for each;
the store builds every 12,000 writes, so what stays unindexed here (and held by the process until the next
build) is an upper bound of what it holds in use. A line's builder, disk and find-during-build figures
cover all the builds since the line before; "build s" is the last one's; "anon in fill" is this process's
peak anon RSS over the fill and its builds.

--config picks the shard configuration: `current` is palace.store.shard.shard_config as shipped; the others
are built here (the bench swaps them in for the shard it creates, its payload indexes and its index builder
process), so a configuration can be measured before palace.store changes: `before` is the one shipped
until 2026-12-04, `quantised` adds an int8 copy of the dense vectors.

    python bench/bench_scale.py --sizes 10000 100000 1000000 --config current
    python bench/bench_scale.py --sizes 10000 100000 1000000 --config before --build-every 1000000

--search-threads 1 2 ends the run by opening the palace again with each search thread count (Edge's
max_search_threads; the store picks it by the palace's size, palace.store.shard.search_threads) and
timing two passes of the finds: the first after opening, the second over pages already read, side by
side in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import qdrant_edge as qe

from bench.bench_core import OBJECTS, VERBS, make_texts, percentile, setup_throwaway_palace
from embeddings.heap import release_freed_memory
from palace.store import indexer as store_indexer
from palace.store import shard as store_shard
from palace.store.base import DENSE, SPARSE, CollectionIdentity
from palace.store.shard import (
    EDGE_CONFIG_FILE,
    INDEXING_THRESHOLD_KB,
    dense_params,
    shard_config,
)

ROOMS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
WINGS = ("projects", "people", "infra")
HALLS = ("facts", "decisions", "events")
CATEGORIES = ("technical", "personal", "preference")
SESSION_LENGTH = 40  # memories per session, as an agent's conversation stores them
CENTRES = 2000
SPREAD = 0.6  # noise against the unit centre: neighbours share a centre, as memories of one topic do
BATCH = 2000
EPOCH = np.datetime64("2026-01-01T00:00:00")
YEAR_SECONDS = 365 * 24 * 3600


def before_config(identity: CollectionIdentity) -> qe.EdgeConfig:
    """The configuration shipped until 2026-12-04: float16 vectors memory-mapped, BM25, payloads and graphs in RAM."""
    current = shard_config(identity)
    return qe.EdgeConfig(
        vectors=current.vectors,  # the dense vectors have not changed since
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        # The same indexing threshold, and Edge's own segment count then (one per CPU).
        optimizers=qe.EdgeOptimizersConfig(
            indexing_threshold=current.optimizers.indexing_threshold if current.optimizers else None
        ),
        max_search_threads=store_shard.SEARCH_THREADS,
    )


def before_field_index(key: str, kind: str) -> qe.PayloadSchemaType:
    """Payload indexes as the store made them until 2026-12-04: in RAM, graph links for every value of every field."""
    return qe.PayloadSchemaType.Keyword if kind == "keyword" else qe.PayloadSchemaType.Datetime


def quantised_config(identity: CollectionIdentity) -> qe.EdgeConfig:
    """The shipped configuration plus an int8 copy of the dense vectors in RAM for the graph walk, rescored."""
    current = shard_config(identity)
    int8 = qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Cached)
    return qe.EdgeConfig(
        vectors={DENSE: dense_params(identity, quantization=int8)},
        sparse_vectors=current.sparse_vectors,
        hnsw_config=current.hnsw_config,
        payload_memory=current.payload_memory,
        id_tracker_memory=current.id_tracker_memory,
        optimizers=current.optimizers,
        max_search_threads=store_shard.SEARCH_THREADS,
    )


CONFIGS: dict[str, Callable[[CollectionIdentity], qe.EdgeConfig]] = {
    "current": shard_config,
    "before": before_config,
    "quantised": quantised_config,
}
FIELD_INDEXES: dict[str, Callable[[str, str], Any]] = {"before": before_field_index}


def describe_config(name: str, config: qe.EdgeConfig) -> str:
    """The parts of a shard configuration this bench varies, in one line."""
    dense = config.vectors[DENSE]
    indexes = "in RAM, graph links for every field" if name in FIELD_INDEXES else "the store's (palace.store.shard)"
    hnsw = config.hnsw_config
    return (
        f"dense {dense.datatype} memory={dense.memory} quantisation={dense.quantization_config}; "
        f"bm25 memory={config.sparse_vectors[SPARSE].memory}; payload memory={config.payload_memory}; "
        f"id tracker memory={config.id_tracker_memory}; hnsw "
        + (f"m={hnsw.m} ef_construct={hnsw.ef_construct} memory={hnsw.memory}" if hnsw else "Edge's default")
        + f"; indexing threshold {INDEXING_THRESHOLD_KB} KB; "
        + f"segments {(config.optimizers.default_segment_number if config.optimizers else None) or 'auto'}; "
        + f"search threads {config.max_search_threads} at the start (the store's: "
        + f"{store_shard.search_threads(0)} below {store_shard.PARALLEL_SEARCH_POINTS:,} memories, "
        + f"{store_shard.search_threads(store_shard.PARALLEL_SEARCH_POINTS)} from there); "
        + f"payload indexes {indexes}"
    )


def use_config(name: str) -> None:
    """Make the store this process opens, and its index builder process, use the named configuration.

    A shard loaded with another configuration takes on that one's vector settings (Edge drops a
    quantisation the loading configuration does not name), so the builder must load the copy with the
    same configuration as the live shard: the store's builder command is pointed at this script.
    """
    if name == "current":
        return
    from palace.store import edge

    build = CONFIGS[name]
    if name in FIELD_INDEXES:  # what the store creates its payload indexes with
        vars(edge)["field_index"] = FIELD_INDEXES[name]
    vars(edge)["shard_config"] = lambda identity, **_: build(identity)
    # The store opens its shard, and loads each build's copy, with the named configuration.
    for module in (edge, store_indexer):
        vars(module)["load_shard"] = lambda path, identity, **_: qe.EdgeShard.load(str(path), build(identity))

    def builder_process(command: list[str], **options: Any) -> subprocess.Popen[bytes]:
        copy = command[command.index("--optimize") + 1]
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--optimize-copy", copy, "--config", name], **options
        )

    vars(store_indexer)["subprocess"] = SimpleNamespace(
        Popen=builder_process, DEVNULL=subprocess.DEVNULL, PIPE=subprocess.PIPE
    )


def optimize_copy(copy: Path, config_name: str) -> None:
    """Builder process: the store's own index build of a shard copy, loading it with the named configuration."""
    build = CONFIGS[config_name]
    vars(store_indexer)["load_shard"] = lambda path, identity, **_: qe.EdgeShard.load(str(path), build(identity))
    store_indexer._optimize_copy(copy)


def synthetic_vectors(
    rng: np.random.Generator, centres: npt.NDArray[np.float32], count: int
) -> npt.NDArray[np.float32]:
    """count unit vectors, each near a random centre."""
    picked = centres[rng.integers(0, len(centres), count)]
    noise = rng.standard_normal(picked.shape).astype(np.float32) * (SPREAD / np.sqrt(picked.shape[1]))
    vectors = picked + noise
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def memory_records(first_id: int, number: int, texts: list[str], rng: np.random.Generator) -> list[dict[str, Any]]:
    """Memory records with the app's payload fields: rooms evenly spread, a year of timestamps, 40 per session."""
    seconds = np.sort(rng.integers(0, YEAR_SECONDS, len(texts)))
    records = []
    for offset, text in enumerate(texts):
        ordinal = number + offset
        records.append(
            {
                "id": first_id + ordinal,
                "text": text,
                "category": CATEGORIES[ordinal % len(CATEGORIES)],
                "wing": WINGS[(ordinal // 7) % len(WINGS)],
                "room": ROOMS[ordinal % len(ROOMS)],
                "hall": HALLS[(ordinal // 3) % len(HALLS)],
                "timestamp": f"{EPOCH + np.timedelta64(int(seconds[offset]), 's')}Z",
                "session": f"bench-session-{ordinal // SESSION_LENGTH}",
                "added_by": "bench",
            }
        )
    return records


def rss_mib(pid: int | str = "self", field: str = "VmRSS") -> float:
    """A process's VmRSS, RssAnon (without mapped files) or VmHWM (peak), in MiB; 0 when it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def disk_mib(path: Path) -> float:
    """What a directory holds on disk (allocated blocks, as du counts), in MiB."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile (an index build's old copy)
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total / 2**20


def anon_after_trim() -> float:
    """This process's anon RSS after glibc hands its freed heap back to the kernel (what a swap's old shard left)."""
    release_freed_memory()
    return rss_mib(field="RssAnon")


class AnonPeak:
    """The highest anon RSS of this process seen by a sampling thread (ru_maxrss counts mapped files too)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.peak = 0.0  # since the last reset
        self.overall = 0.0  # since the start
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-anon-peak", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stopped.wait(self._interval):
            now = rss_mib(field="RssAnon")
            self.peak, self.overall = max(self.peak, now), max(self.overall, now)

    def reset(self) -> None:
        """Start a new peak from now."""
        self.peak = rss_mib(field="RssAnon")

    def stop(self) -> None:
        """End the sampling."""
        self._stopped.set()
        self._thread.join()


def time_finds(queries: list[str], find: Any, **filters: Any) -> list[float]:
    """Milliseconds per find, one query after another."""
    latencies = []
    for query in queries:
        started = time.perf_counter()
        find(query=query, limit=5, **filters)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def shard_query(store: Any, request: qe.QueryRequest) -> list[Any]:
    """One query on the embedded store's live shard, as the store itself runs it (under its shard lock)."""
    with store._shard_lock:
        return list(store.shard.query(request))


def dense_recall(store: Any, vectors: npt.NDArray[np.float32], *, room: str | None = None, limit: int = 10) -> str:
    """Share of the exact dense top-limit that the shard's own dense search (graph, quantised copy) also returns.

    Followed by how many points each search returned in all, approximate/exact, when the approximate one
    came back short: a filtered graph walk can end early, and find's BM25 leg would hide that.
    """
    room_filter = qe.Filter(must=[qe.FieldCondition("room", match=qe.MatchValue(room))]) if room else None
    exact = qe.SearchParams(exact=True, quantization=qe.QuantizationSearchParams(ignore=True))
    found = returned = expected = 0
    for vector in vectors:
        nearest = qe.Query.Nearest([vector.tolist()], using=DENSE)
        approximate = shard_query(store, qe.QueryRequest(limit=limit, query=nearest, filter=room_filter))
        truth = shard_query(store, qe.QueryRequest(limit=limit, query=nearest, filter=room_filter, params=exact))
        found += len({point.id for point in approximate} & {point.id for point in truth})
        returned, expected = returned + len(approximate), expected + len(truth)
    figure = f"{found / max(expected, 1):.3f}"
    return figure if returned >= expected else f"{figure}({returned}/{expected})"


def leg_split(store: Any, embedder: Any, queries: list[str], find: Any) -> str:
    """Where a find's time goes at this size: the model, the dense leg (at Qdrant's beam and narrower ones), BM25.

    Each leg is one shard query of find's depth (40 candidates) with the query's real embedding or BM25
    vector, one query after another; recall is the dense leg's top 10 against an exact search.
    """
    from palace.store.keywords import keyword_model

    def query_ms(request: qe.QueryRequest) -> tuple[float, list[Any]]:
        started = time.perf_counter()
        points = shard_query(store, request)
        return (time.perf_counter() - started) * 1000, points

    model_ms, nearest = [], []
    for query in queries:
        started = time.perf_counter()
        vector = embedder.query(query)
        model_ms.append((time.perf_counter() - started) * 1000)
        nearest.append(qe.Query.Nearest([np.asarray(vector).tolist()], using=DENSE))
    figures = [f"model {statistics.median(model_ms):.2f}"]
    exact = qe.SearchParams(exact=True)
    truths = [
        {point.id for point in query_ms(qe.QueryRequest(limit=10, query=leg, params=exact))[1]} for leg in nearest
    ]
    for beam in (None, 64, 40):
        params = qe.SearchParams(hnsw_ef=beam) if beam else None
        latencies, found = [], 0
        for leg, truth in zip(nearest, truths, strict=True):
            took, points = query_ms(qe.QueryRequest(limit=40, query=leg, params=params))
            latencies.append(took)
            found += len({point.id for point in points[:10]} & truth)
        figures.append(
            f"dense{'' if beam is None else f' ef {beam}'} {statistics.median(latencies):.2f} "
            f"(recall@10 {found / max(sum(len(truth) for truth in truths), 1):.3f})"
        )
    bm25_ms = []
    for query in queries:
        sparse = keyword_model().embed_query(query)
        leg = qe.Query.Nearest(qe.SparseVector(indices=list(sparse.indices), values=list(sparse.values)), using=SPARSE)
        bm25_ms.append(query_ms(qe.QueryRequest(limit=40, query=leg))[0])
    figures.append(f"bm25 {statistics.median(bm25_ms):.2f}")
    figures.append(f"whole find {statistics.median(time_finds(queries, find)):.2f}")
    return "p50 ms: " + ", ".join(figures)


def build_index_measured(store: Any, queries: list[str], find: Any, shard_dir: Path) -> dict[str, Any]:
    """Start a background index build now and watch it: its seconds, the builder's peak RSS, disk, finds meanwhile."""
    with store._write_lock:  # the bench asks for a build at each size instead of after every N writes
        store._written_since_index = store._index_after = 1
        store._index_if_due()
        store._index_after = 0  # and none after it: the next fill is measured without builds
    started = time.perf_counter()
    builder_peak = builder_anon = disk_peak = 0.0
    during: list[float] = []
    checked = 0.0
    while store._indexer is not None:
        process = store._indexer_process
        if process is not None:
            builder_peak = max(builder_peak, rss_mib(process.pid, "VmHWM"))
            builder_anon = max(builder_anon, rss_mib(process.pid, "RssAnon"))
        if time.perf_counter() - checked > 5:  # the build's copy doubles the shard for a while
            disk_peak, checked = max(disk_peak, disk_mib(shard_dir.parent)), time.perf_counter()
        during.extend(time_finds(queries[:5], find))
        if sys.stderr.isatty() or len(during) % 500 < 5:  # a log gets a line every 100 rounds
            builder_now = rss_mib(process.pid) if process else 0.0
            print(
                f"\r  index build {time.perf_counter() - started:6.0f} s, builder {builder_now:6.0f} MiB, "
                f"{len(during)} finds meanwhile",
                end="" if sys.stderr.isatty() else "\n",
                file=sys.stderr,
                flush=True,
            )
        time.sleep(0.2)
    print(file=sys.stderr)
    return {
        "seconds": time.perf_counter() - started,
        "builder_peak": builder_peak,
        "builder_anon": builder_anon,
        "disk_peak": disk_peak,
        "during": during,
    }


def main() -> None:
    """Fill, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--recall-queries", type=int, default=20, help="synthetic vectors for dense recall@10")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="current")
    parser.add_argument(
        "--build-every",
        type=int,
        default=100_000,
        help="also build the index every N memories written during a fill (the store builds every 12,000)",
    )
    parser.add_argument(
        "--search-threads",
        type=int,
        nargs="+",
        default=[],
        help="at the end, open the palace again with each search thread count and time finds (two passes)",
    )
    parser.add_argument("--optimize-copy", type=Path, help=argparse.SUPPRESS)  # the builder process's entry
    args = parser.parse_args()
    if args.optimize_copy:
        optimize_copy(args.optimize_copy, args.config)
        return
    # The bench starts each build itself, at each size; none starts on its own during the fill.
    os.environ["PALAZZO_INDEX_AFTER"] = "0"
    setup_throwaway_palace()
    use_config(args.config)
    from django.conf import settings

    from palace.engine import runtime
    from palace.engine.points import build_points
    from palace.reads import selectors
    from palace.schema.memories import FIRST_MEMORY_ID

    anon_peak = AnonPeak()
    palace = runtime.get_palace()
    store = palace.store
    data_dir = settings.PALAZZO.data_dir
    shard_dir = Path(store.path)  # type: ignore[attr-defined]  # the embedded store's
    identity = CollectionIdentity(model_name=palace.embedder.model_name, dimension=palace.embedder.dimension)
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((CENTRES, palace.embedder.dimension)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    # Recall probes near the same centres, from their own generator so every configuration gets the same fill.
    probes = synthetic_vectors(np.random.default_rng(args.seed + 1), centres, args.recall_queries)
    queries = [f"what {VERBS[i % len(VERBS)]} {OBJECTS[(i * 7) % len(OBJECTS)]}" for i in range(args.queries)]
    print(f"config {args.config}: {describe_config(args.config, CONFIGS[args.config](identity))}", flush=True)
    print(
        f"SYNTHETIC vectors ({CENTRES} centres, {palace.embedder.dimension} dimensions); real texts, payloads, "
        f"BM25 and query embeddings; {os.cpu_count()} CPUs; load at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(
        f"{'memories':>9} {'fill/s':>7} {'find p50':>8} {'p95':>6} {'room p50':>8} {'p95':>6} {'RSS now':>7} "
        f"{'anon':>5} {'trimmed':>7} {'peak':>5} {'anon pk':>7} {'data MiB':>8} {'shard':>6} {'build s':>7} "
        f"{'builder':>7} {'b.anon':>6} {'anon in fill':>13} {'disk in build':>13} "
        f"{'find p50/p95 in build (n)':>26} {'recall@10/room':>14} {'load':>5}",
        flush=True,
    )
    written = built_at = 0
    for size in sorted(args.sizes):
        started = time.perf_counter()
        fill_seconds = 0.0
        anon_peak.reset()
        builds: list[dict[str, Any]] = []
        for start in range(0, size - written, BATCH):
            if written + start - built_at >= args.build_every:
                # A build during the fill, as the store makes them: what is written meanwhile stays unindexed.
                fill_seconds += time.perf_counter() - started
                builds.append(build_index_measured(store, queries, selectors.find, shard_dir))
                built_at, started = written + start, time.perf_counter()
            # Made batch by batch, so the bench's own texts do not weigh in the process's RSS.
            chunk = make_texts(min(BATCH, size - written - start), seed=args.seed + written + start)
            records = memory_records(FIRST_MEMORY_ID, written + start, chunk, rng)
            vectors = synthetic_vectors(rng, centres, len(chunk))
            store.upsert(build_points(records, [vector[np.newaxis, :] for vector in vectors]))
            done = written + start + len(chunk)
            if sys.stderr.isatty() or done % 50_000 < BATCH:
                end = "" if sys.stderr.isatty() else "\n"
                print(f"\r  filled {done:,} / {size:,}", end=end, file=sys.stderr, flush=True)
        fill_rate = (size - written) / (fill_seconds + time.perf_counter() - started)
        written = built_at = size
        print(file=sys.stderr)
        builds.append(build_index_measured(store, queries, selectors.find, shard_dir))
        build = {
            "seconds": builds[-1]["seconds"],
            **{key: max(each[key] for each in builds) for key in ("builder_peak", "builder_anon", "disk_peak")},
            "during": [latency for each in builds for latency in each["during"]],
        }
        anon_in_fill = anon_peak.peak  # the fill's and its builds'
        plain = time_finds(queries, selectors.find)
        room = time_finds(queries, selectors.find, room="beta")
        recall = f"{dense_recall(store, probes)}/{dense_recall(store, probes, room='beta')}"
        during = build["during"]
        during_figures = (
            f"{statistics.median(during):.2f} / {percentile(during, 0.95):.2f} ({len(during)})" if during else "-"
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{size:>9,} {fill_rate:>7.0f} {statistics.median(plain):>8.2f} {percentile(plain, 0.95):>6.2f} "
            f"{statistics.median(room):>8.2f} {percentile(room, 0.95):>6.2f} {rss_mib():>7.0f} "
            f"{rss_mib(field='RssAnon'):>5.0f} {anon_after_trim():>7.0f} {peak:>5.0f} {anon_peak.overall:>7.0f} "
            f"{disk_mib(data_dir):>8.0f} {disk_mib(shard_dir.parent):>6.0f} "
            f"{build['seconds']:>7.1f} {build['builder_peak']:>7.0f} {build['builder_anon']:>6.0f} "
            f"{anon_in_fill:>13.0f} {build['disk_peak']:>13.0f} {during_figures:>26} {recall:>14} "
            f"{os.getloadavg()[0]:>5.2f}",
            flush=True,
        )
    print(f"where a find's time goes at {written:,}: {leg_split(store, palace.embedder, queries, selectors.find)}")
    for threads in args.search_threads:
        runtime.close_palace()
        # What the store's shard_config asks when it loads the shard, whatever the palace's size.
        vars(store_shard)["search_threads"] = lambda points, threads=threads: threads
        passes = [
            (time_finds(queries, selectors.find), time_finds(queries, selectors.find, room="beta")) for _ in range(2)
        ]
        print(
            f"opened again with {threads} search thread(s): find p50/p95 ms, first pass "
            + ", second pass ".join(
                f"{statistics.median(plain):.2f}/{percentile(plain, 0.95):.2f} "
                f"(room {statistics.median(room):.2f}/{percentile(room, 0.95):.2f})"
                for plain, room in passes
            ),
            flush=True,
        )
    store = runtime.get_palace().store
    # What the live shard (the last build's copy) recorded: proof the builder kept the configuration.
    recorded = json.loads((shard_dir / EDGE_CONFIG_FILE).read_text())
    info = store.shard.info()  # type: ignore[attr-defined]  # the embedded store's
    print(
        f"live shard: {info.points_count:,} points, {info.indexed_vectors_count:,} indexed vectors, "
        f"{info.segments_count} segments; recorded dense {recorded['vectors'][DENSE]}, hnsw "
        f"{recorded.get('hnsw_config')}, payload {recorded.get('payload_memory')}, "
        f"bm25 {recorded['sparse_vectors'][SPARSE]}, search threads {recorded.get('max_search_threads')}",
        flush=True,
    )
    anon_peak.stop()
    runtime.close_palace()
    subprocess.run(["rm", "-rf", str(data_dir)], check=False)


if __name__ == "__main__":
    threading.current_thread().name = "bench-scale"
    main()
