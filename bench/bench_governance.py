"""Governance overhead: single-store and find latency with redaction + read audit on versus off, in one run.

"off" is PALAZZO_REDACTION_MODE=off and no audit record (the audit call replaced by a no-op); "on" is the
default secrets pack enforced (plus pii, as the strictest configuration) and audit records queued to the
background writer, as a server runs. Rounds alternate off/on so drift hits both alike. Prints medians
and on/off ratios; it never asserts.
Usage: python bench/bench_governance.py [--memories 2000] [--rounds 6] [--per-round 50]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_core import make_texts, percentile, setup_throwaway_palace

SECRET_EVERY = 10  # one stored text in ten carries a credential, as pasted transcripts do


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=2000, help="palace size before measuring")
    parser.add_argument("--rounds", type=int, default=6, help="alternating off/on rounds")
    parser.add_argument("--per-round", type=int, default=50, help="stores and finds per round")
    args = parser.parse_args()

    setup_throwaway_palace()
    from django.conf import settings

    from palace.engine import runtime
    from palace.governance import audit, redaction
    from palace.reads import selectors
    from palace.writes import services

    runtime.get_palace()
    texts = make_texts(args.memories + 2 * args.rounds * args.per_round + 10, seed=11)
    for start in range(0, args.memories, 256):
        chunk = texts[start : min(start + 256, args.memories)]
        services.store_batch(items=[_item(text) for text in chunk])
    pending = iter(texts[args.memories :])
    queries = [text.split(" (note")[0] for text in texts[: args.rounds * args.per_round]]
    real_record = audit.record_read
    base = settings.PALAZZO
    audit.start_audit_writer()

    def configure(on: bool) -> None:
        settings.PALAZZO = dataclasses.replace(
            base, redaction_mode="enforce" if on else "off", redaction_packs=("secrets", "pii")
        )
        audit.record_read = real_record if on else _no_audit

    timings: dict[tuple[str, bool], list[float]] = {
        (kind, on): [] for kind in ("store", "find") for on in (False, True)
    }
    for round_number in range(args.rounds):
        for on in (False, True) if round_number % 2 == 0 else (True, False):
            configure(on)
            for n in range(args.per_round):
                text = next(pending)
                if n % SECRET_EVERY == 0:
                    text += f" password=hunter{n}x and key AKIA{'Q' * 12}{n:04d}"
                started = time.perf_counter()
                services.store(**_item(text))
                timings[("store", on)].append((time.perf_counter() - started) * 1000)
            for query in queries[round_number * args.per_round : (round_number + 1) * args.per_round]:
                started = time.perf_counter()
                selectors.find(query=query, limit=5, actor="bench")
                timings[("find", on)].append((time.perf_counter() - started) * 1000)
    audit.record_read = real_record
    started = time.perf_counter()
    for n in range(1000):
        audit.record_read(operation="find", actor="bench", query=f"query {n}", result_ids=list(range(5)))
    record_us = (time.perf_counter() - started) / 1000 * 1e6
    audit.stop_audit_writer()

    redactor = redaction.build_redactor("enforce", ["secrets", "pii"])
    sample = texts[:1000]
    started = time.perf_counter()
    for text in sample:
        redactor.scan(text)
    scan_us = (time.perf_counter() - started) / len(sample) * 1e6

    print(f"palace: {args.memories} memories; {args.rounds} alternating rounds of {args.per_round} stores + finds")
    for kind in ("store", "find"):
        disabled, enabled = timings[(kind, False)], timings[(kind, True)]
        ratio = statistics.median(enabled) / statistics.median(disabled)
        tail = percentile(enabled, 0.95) / percentile(disabled, 0.95)
        print(
            f"{kind:<5} off: p50 {statistics.median(disabled):6.2f} ms p95 {percentile(disabled, 0.95):6.2f} ms | "
            f"on: p50 {statistics.median(enabled):6.2f} ms p95 {percentile(enabled, 0.95):6.2f} ms | "
            f"on/off p50 {ratio:.3f} (p95 {tail:.3f})"
        )
    print(f"redaction scan alone (secrets + pii, memory-sized text): {scan_us:.1f} us per text")
    print(f"audit record of a read, queued to the background writer: {record_us:.1f} us per read")


def _item(text: str) -> dict[str, Any]:
    return {"text": text, "category": "technical", "wing": "projects", "room": "bench", "hall": "facts"}


def _no_audit(**_kwargs: Any) -> None:
    return None


if __name__ == "__main__":
    main()
