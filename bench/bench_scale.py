"""Scale: the embedded store filled to a million memories, one line of figures per size.

For each size it prints the fill rate, find p50/p95 (plain, and filtered to one room of eight) with the real
model embedding each query, the process's RSS after the build (all, and "anon": without the pages of the
store's memory-mapped files, which the kernel can drop and read again) and its peak so far (MiB), the data
dir's size on disk, and a background index
build: how long it took, the builder process's peak RSS, and find's p50 while it ran (finds must keep
answering). Figures only; it never asserts.

The vectors are synthetic: unit vectors scattered around 2,000 seeded centres (the model embeds about 100
texts a second here, so a million real ones would take hours). Everything else is palazzo's own: the texts
are memory-like sentences, the points are built by palace.engine.points.build_points (payload, BM25 text)
and written through the store palazzo opens (palace.store.edge.EdgeStore, its shard configuration), and
finds go through palace.reads.selectors.find. Memories are written to the store directly, not through the
journal: this measures the store, not the database.

    python bench/bench_scale.py --sizes 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_core import OBJECTS, VERBS, make_texts, percentile, setup_throwaway_palace

ROOMS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
CENTRES = 2000
SPREAD = 0.6  # noise against the unit centre: neighbours share a centre, as memories of one topic do
BATCH = 2000


def synthetic_vectors(rng: np.random.Generator, centres: np.ndarray, count: int) -> np.ndarray:
    """count unit vectors, each near a random centre."""
    picked = centres[rng.integers(0, len(centres), count)]
    noise = rng.standard_normal(picked.shape).astype(np.float32) * (SPREAD / np.sqrt(picked.shape[1]))
    vectors = picked + noise
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def rss_mib(pid: int | str = "self", field: str = "VmRSS") -> float:
    """A process's resident memory now, in MiB (0 when it is gone); RssAnon: its own, without mapped files."""
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


def time_finds(queries: list[str], find: Any, **filters: Any) -> list[float]:
    """Milliseconds per find, one query after another."""
    latencies = []
    for query in queries:
        started = time.perf_counter()
        find(query=query, limit=5, **filters)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def build_index_measured(store: Any, queries: list[str], find: Any) -> tuple[float, float, list[float]]:
    """Start a background index build now; its seconds, the builder's peak RSS, and finds timed while it ran."""
    with store._write_lock:  # the bench asks for a build at each size instead of after every N writes
        store._written_since_index = store._index_after = 1
        store._index_if_due()
        store._index_after = 0  # and none after it: the next fill is measured without builds
    started = time.perf_counter()
    builder_peak = 0.0
    during: list[float] = []
    while store._indexer is not None:
        process = store._indexer_process
        if process is not None:
            builder_peak = max(builder_peak, rss_mib(process.pid))
        during.extend(time_finds(queries[:5], find))
        time.sleep(0.2)
    return time.perf_counter() - started, builder_peak, during


def main() -> None:
    """Fill, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    # The bench starts each build itself, at each size; none starts on its own during the fill.
    os.environ["PALAZZO_INDEX_AFTER"] = "0"
    setup_throwaway_palace()
    from django.conf import settings

    from palace.engine import runtime
    from palace.engine.points import build_points
    from palace.reads import selectors
    from palace.schema.memories import FIRST_MEMORY_ID

    palace = runtime.get_palace()
    store = palace.store
    data_dir = settings.PALAZZO.data_dir
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((CENTRES, palace.embedder.dimension)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    queries = [f"what {VERBS[i % len(VERBS)]} {OBJECTS[(i * 7) % len(OBJECTS)]}" for i in range(args.queries)]
    print(
        f"synthetic vectors ({CENTRES} centres, {palace.embedder.dimension} dimensions), real texts, payloads, "
        f"BM25 and query embeddings; load: {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(
        f"{'memories':>9} {'fill/s':>8} {'find p50':>9} {'p95':>7} {'room p50':>9} {'p95':>7} {'RSS now':>8} "
        f"{'anon':>6} {'peak':>6} "
        f"{'disk MiB':>9} {'build s':>8} {'builder MiB':>12} {'find p50 during build':>22}",
        flush=True,
    )
    written = 0
    for size in sorted(args.sizes):
        texts = make_texts(size - written, seed=args.seed + size)
        started = time.perf_counter()
        for start in range(0, len(texts), BATCH):
            chunk = texts[start : start + BATCH]
            records = [
                {
                    "id": FIRST_MEMORY_ID + written + start + offset,
                    "text": text,
                    "category": "technical",
                    "wing": "projects",
                    "room": ROOMS[(written + start + offset) % len(ROOMS)],
                    "hall": "facts",
                    "added_by": "bench",
                    "created_at": "2026-12-04T00:00:00Z",
                }
                for offset, text in enumerate(chunk)
            ]
            vectors = synthetic_vectors(rng, centres, len(chunk))
            store.upsert(build_points(records, [vector[np.newaxis, :] for vector in vectors]))
            done = written + start + len(chunk)
            if sys.stderr.isatty() or done % 50_000 < BATCH:
                print(f"\r  filled {done:,} / {size:,}", end="", file=sys.stderr, flush=True)
        fill_rate = len(texts) / (time.perf_counter() - started)
        written = size
        print(file=sys.stderr)
        build_seconds, builder_mib, during = build_index_measured(store, queries, selectors.find)
        plain = time_finds(queries, selectors.find)
        room = time_finds(queries, selectors.find, room="beta")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{size:>9,} {fill_rate:>8.0f} {statistics.median(plain):>9.2f} {percentile(plain, 0.95):>7.2f} "
            f"{statistics.median(room):>9.2f} {percentile(room, 0.95):>7.2f} {rss_mib():>8.0f} "
            f"{rss_mib(field='RssAnon'):>6.0f} {peak:>6.0f} "
            f"{disk_mib(data_dir):>9.0f} "
            f"{build_seconds:>8.1f} {builder_mib:>12.0f} "
            f"{(statistics.median(during) if during else float('nan')):>18.2f} ({len(during)})",
            flush=True,
        )
    runtime.close_palace()
    subprocess.run(["rm", "-rf", str(data_dir)], check=False)


if __name__ == "__main__":
    threading.current_thread().name = "bench-scale"
    main()
