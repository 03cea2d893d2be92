"""Core benchmark: raw embedding, single store, store_batch and find latency, on the same texts in one run.

Prints figures only (ratios against the raw embedding rate measured in the same run); it never asserts.
Usage: python bench/bench_core.py [--sizes 10000 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SUBJECTS = [
    "the NAS",
    "the blog",
    "Alice",
    "the k8s cluster",
    "the CI pipeline",
    "the router",
    "Bob",
    "the backup job",
    "the database",
    "the mobile app",
    "the invoice service",
    "the VPN",
    "our team",
    "the laptop",
    "the API",
]
VERBS = [
    "runs on",
    "was moved to",
    "depends on",
    "prefers",
    "broke because of",
    "was upgraded to",
    "talks to",
    "is monitored by",
    "replaced",
    "is scheduled with",
    "needs",
    "was rolled back from",
]
OBJECTS = [
    "ZFS with raidz2",
    "Hugo instead of WordPress",
    "green tea",
    "PostgreSQL 16",
    "a nightly cron at 02:00",
    "WireGuard on port 51820",
    "Grafana dashboards",
    "an ARM board",
    "the staging cluster",
    "Redis streams",
    "a 4 TB disk",
    "the new TLS certificate",
    "Python 3.12",
    "a feature flag",
    "the offsite box",
]


def make_texts(count: int, seed: int = 7) -> list[str]:
    """Distinct, memory-like sentences."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
        f"(note {i}, ticket #{rng.randint(100, 99999)})"
        for i in range(count)
    ]


def setup_throwaway_palace() -> None:
    """Point Django at a fresh temporary data dir and migrate it (before any palace import)."""
    os.environ["PALAZZO_DATA_DIR"] = tempfile.mkdtemp(prefix="palazzo-bench-")
    os.environ.setdefault("PALAZZO_LOG_LEVEL", "warning")
    os.environ["DJANGO_SETTINGS_MODULE"] = "palazzo_site.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def percentile(values: list[float], fraction: float) -> float:
    """The value below which that fraction of values fall."""
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--singles", type=int, default=300)
    args = parser.parse_args()

    setup_throwaway_palace()
    from palace.engine import runtime
    from palace.operations import status as palace_status
    from palace.reads import selectors
    from palace.writes import services

    started = time.perf_counter()
    palace = runtime.get_palace()
    print(f"open palace (model load + store): {time.perf_counter() - started:.2f} s")
    texts = make_texts(max(args.sizes) + args.singles + 4000)
    cursor = 0

    def take(count: int) -> list[str]:
        nonlocal cursor
        chunk = texts[cursor : cursor + count]
        cursor += count
        return chunk

    sample = take(2048)
    started = time.perf_counter()
    for start in range(0, len(sample), 256):
        palace.embedder.backend.embed_documents(sample[start : start + 256])
    raw_rate = len(sample) / (time.perf_counter() - started)
    print(f"raw embedding (256/batch): {raw_rate:8.1f} texts/s")

    singles = take(args.singles)
    started = time.perf_counter()
    for text in singles:
        services.store(text=text, category="technical", wing="projects", room="bench", hall="facts")
    single_rate = len(singles) / (time.perf_counter() - started)
    print(f"single store:                   {single_rate:8.1f} memories/s")

    batch_texts = sample
    started = time.perf_counter()
    for start in range(0, len(batch_texts), 256):
        items = [
            {"text": text, "category": "technical", "wing": "projects", "room": "bench", "hall": "facts"}
            for text in batch_texts[start : start + 256]
        ]
        services.store_batch(items=items)
    batch_rate = len(batch_texts) / (time.perf_counter() - started)
    print(
        f"store_batch (256 per call):     {batch_rate:8.1f} memories/s = {batch_rate / raw_rate:.2f}x raw embedding, "
        f"{batch_rate / single_rate:.1f}x single store"
    )

    queries = [
        f"what {random.Random(i).choice(VERBS)} {random.Random(i + 1).choice(OBJECTS)}" for i in range(args.queries)
    ]
    rooms = ["alpha", "beta", "gamma", "delta"]
    for size in sorted(args.sizes):
        missing = size - palace_status.status()["total"]
        fill_started = time.perf_counter()
        while missing > 0:
            chunk = take(min(256, missing))
            services.store_batch(
                items=[
                    {"text": text, "category": "technical", "wing": "projects", "room": rooms[i % 4], "hall": "facts"}
                    for i, text in enumerate(chunk)
                ]
            )
            missing -= len(chunk)
        fill = time.perf_counter() - fill_started
        wait_for_index = getattr(palace.store, "wait_for_index", None)
        if wait_for_index is not None:  # the embedded shard builds its HNSW graphs in the background
            waited = time.perf_counter()
            wait_for_index()
            builds = palace.store.index_builds  # type: ignore[attr-defined]
            print(
                f"filled {size} at {size / fill:.0f} memories/s; {len(builds)} background index builds so far, "
                f"last took {builds[-1]['seconds'] if builds else 0:.1f} s; waited {time.perf_counter() - waited:.1f} s"
            )
        variants: tuple[tuple[str, dict[str, Any]], ...] = (("plain", {}), ("filtered room", {"room": "beta"}))
        for variant, extra in variants:
            latencies = []
            for query in queries:
                started = time.perf_counter()
                selectors.find(query=query, limit=5, **extra)
                latencies.append((time.perf_counter() - started) * 1000)
            print(
                f"find at {size:>7} memories ({variant:>13}): p50 {statistics.median(latencies):6.2f} ms  "
                f"p95 {percentile(latencies, 0.95):6.2f} ms  (filled in {fill:.0f} s)"
            )
    try:
        import resource

        print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    except ImportError:
        pass
    runtime.close_palace()


def release_holder(data_dir: Path, timeout: float = 60.0) -> None:
    """Ask data_dir's holder (palazzo holder, started by runmcp) to leave and wait until its lock is free,
    so this process may open the embedded palace itself (one process per shard)."""
    import fcntl

    from palace.engine.holder import ask_to_leave

    ask_to_leave(data_dir)
    lock = data_dir / "holder.lock"
    deadline = time.monotonic() + timeout
    while lock.exists() and time.monotonic() < deadline:
        with lock.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.1)
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
            return


if __name__ == "__main__":
    main()
