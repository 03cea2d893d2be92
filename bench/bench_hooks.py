"""Hook and feeding benchmark: `palazzo hook` latency and feed throughput against raw embedding, one run.

Hook latency is the wall time of the whole `palazzo hook claude-code` process (interpreter start
included), as Claude Code waits for it: SessionStart (reads the wake-up snapshot and prints it) and
SessionEnd (spools the transcript for the runmcp that holds the palace, started here). Feed
throughput is exchanges/s of feeding a transcript in this process (parse, store_batch, feed state),
against raw embedding of the same memory texts measured in the same run. Prints; never asserts.
Targets: SessionEnd within 150 ms, SessionStart within 300 ms.
Usage: python bench/bench_hooks.py [--runs 50] [--exchanges 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_core import make_texts, percentile, setup_throwaway_palace  # noqa: E402

PALAZZO = Path(sys.executable).with_name("palazzo")
SESSION = "5e1f0c3a-9b7d-4e2f-8a6c-0d1e2f3a4b5c"


def write_transcript(path: Path, count: int) -> None:
    """A Claude Code transcript of count exchanges (the line shapes of CLI 2.1.x)."""
    from tests.palace.sessions import claude_session, write_session

    texts = make_texts(count * 2)
    write_session(path, claude_session(SESSION, "/home/bench/project", list(zip(texts[::2], texts[1::2]))))


def hook_latency(event: Mapping[str, object], env: dict[str, str], runs: int) -> list[float]:
    """Wall seconds of runs `palazzo hook claude-code` processes fed this event."""
    timings = []
    payload = json.dumps(event)
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [str(PALAZZO), "hook", "claude-code"], input=payload, env=env, capture_output=True, text=True
        )
        timings.append(time.perf_counter() - started)
        if done.returncode != 0 or done.stderr:
            raise SystemExit(f"hook failed: {done.stderr}")
    return timings


def holder_running(data_dir: Path, transcript: Path, count: int) -> subprocess.Popen[bytes]:
    """A `palazzo runmcp` holding data_dir's palace, with the transcript fed and its snapshot written."""
    from palace.feeding import snapshots, spool

    env = dict(os.environ, PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning")
    subprocess.run([str(PALAZZO), "migrate", "-v0"], env=env, check=True)
    process = subprocess.Popen([str(PALAZZO), "runmcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert process.stdin is not None
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    process.stdin.write(
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}) + "\n").encode()
    )
    process.stdin.flush()
    deadline = time.monotonic() + 300
    while spool.live_holder(data_dir) is None:
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit("runmcp did not start feeding the spool")
        time.sleep(0.2)
    spool.enqueue(data_dir, spool.Job(harness="claude-code", path=str(transcript), final=True))
    while spool.pending(data_dir) or any(spool.spool_dir(data_dir).glob("*.working")):
        time.sleep(0.2)
    room = "project"
    while snapshots.read(data_dir, room) is None or snapshots.read(data_dir, room).get("room") != room:  # type: ignore[union-attr]
        time.sleep(0.2)
    print(f"runmcp fed {count} exchanges and wrote the wake-up snapshot", flush=True)
    return process


def describe(label: str, timings: list[float]) -> str:
    """p50 / max in milliseconds."""
    median, worst = statistics.median(timings) * 1000, max(timings) * 1000
    return f"{label}: p50 {median:.1f} ms, max {worst:.1f} ms ({len(timings)} runs)"


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--exchanges", type=int, default=300)
    args = parser.parse_args()

    hooks_dir = Path(tempfile.mkdtemp(prefix="palazzo-bench-hooks-"))
    transcript = hooks_dir / "projects" / f"{SESSION}.jsonl"
    write_transcript(transcript, 40)
    runmcp = holder_running(hooks_dir / "data", transcript, 40)
    env = dict(os.environ, PALAZZO_DATA_DIR=str(hooks_dir / "data"))
    base = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": "/home/bench/project"}
    try:
        start = hook_latency(base | {"hook_event_name": "SessionStart", "source": "startup"}, env, args.runs)
        end = hook_latency(base | {"hook_event_name": "SessionEnd", "reason": "other"}, env, args.runs)
        python_only = hook_latency(base | {"hook_event_name": "Notification"}, env, args.runs)
    finally:
        runmcp.terminate()
        runmcp.wait(30)
    print(describe("SessionStart hook", start))
    print(describe("SessionEnd hook", end))
    print(describe("baseline: a hook that does nothing (interpreter + imports)", python_only))

    setup_throwaway_palace()
    from palace.engine import runtime
    from palace.feeding import exchanges
    from palace.feeding.exchanges import Destination
    from palace.feeding.transcripts import exchange_texts, parse_transcript

    feed_path = Path(tempfile.mkdtemp(prefix="palazzo-bench-feed-")) / f"{SESSION}.jsonl"
    write_transcript(feed_path, args.exchanges)
    palace = runtime.get_palace()
    parsed = parse_transcript(feed_path)
    texts = [text for exchange in parsed.exchanges for text in exchange_texts(exchange)]
    palace.embedder.documents(texts[:8])  # warm the model
    started = time.perf_counter()
    for offset in range(0, len(texts), exchanges.FEED_BATCH):
        palace.embedder.documents(texts[offset : offset + exchanges.FEED_BATCH])
    raw = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    report = exchanges.feed_transcript(
        transcript=parse_transcript(feed_path),
        destination=Destination.configured(harness="claude-code", device="bench"),
        final=True,
    )
    fed = report.stored / (time.perf_counter() - started)
    started = time.perf_counter()
    again = exchanges.feed_transcript(
        transcript=parse_transcript(feed_path),
        destination=Destination.configured(harness="claude-code", device="bench"),
        final=True,
    )
    refeed = time.perf_counter() - started
    print(f"raw embedding of the same {len(texts)} texts, batches of {exchanges.FEED_BATCH}: {raw:.1f} texts/s")
    print(f"feed: {fed:.1f} exchanges/s ({fed / raw:.2f}x raw embedding; {report.stored} stored)")
    print(f"re-feed of the same transcript: {refeed * 1000:.0f} ms, {again.stored} stored, {again.unchanged} unchanged")
    end95, start95 = percentile(end, 0.95) * 1000, percentile(start, 0.95) * 1000
    print(f"p95 SessionEnd {end95:.1f} ms, p95 SessionStart {start95:.1f} ms")


if __name__ == "__main__":
    main()
