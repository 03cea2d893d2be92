"""What a call through the palace's holder costs: find and store p50/p95 via `runmcp`, against a direct one.

Every `runmcp` on an embedded palace is a pipe to the one process that holds it (docs/architecture.md). This
runs the same calls, in one run on one machine, four ways, each on a fresh data dir seeded with --seed
memories:

  direct     1 session, `runmcp` serving the palace itself (PALAZZO_HOLDER=off: one process per palace)
  holder     1 session through the holder
  holder     N sessions at once through one holder
  http       N sessions at once to `serve` over Streamable HTTP (the other way to share one palace)

and prints p50/p95 per tool with the ratios holder/direct (the hop's cost) and holder/http.

    python bench/bench_holder.py --sessions 8 --calls 100
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import Implementation

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.load_mcp import MEMORY, QUERIES, own_server, percentile

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("palace_find", "palace_store")


def stdio_target(data_dir: Path, *, holder: bool) -> StdioServerParameters:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PALAZZO_")}
    env.update(PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning", PALAZZO_HOLDER_IDLE_SECONDS="2")
    if not holder:
        env["PALAZZO_HOLDER"] = "off"
    return StdioServerParameters(command=sys.executable, args=["-m", "palazzo_site.cli", "runmcp"], env=env, cwd=ROOT)


async def _session(target: Any, number: int, calls: int, latencies: dict[str, list[float]], go: anyio.Event) -> None:
    info = Implementation(name=f"bench-{number}", version="1")
    async with Client(target, mode="legacy", client_info=info, read_timeout_seconds=120) as client:
        await client.call_tool("palace_find", {"query": "warm up", "limit": 5})  # the palace is open, schemas fetched
        await go.wait()
        for index in range(calls):
            tool = TOOLS[index % 2]
            if tool == "palace_find":
                arguments: dict[str, Any] = {"query": QUERIES[index % len(QUERIES)], "limit": 5}
            else:
                arguments = {"text": f"bench {number}/{index} {uuid.uuid4().hex} {QUERIES[index % 6]}", **MEMORY}
            started = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            latencies[tool].append((time.perf_counter() - started) * 1000.0)
            assert not result.is_error, result.content


async def _seed(target: Any, count: int) -> None:
    items = [
        {"text": f"seed {i} about {QUERIES[i % len(QUERIES)]}: {uuid.uuid4().hex}", **MEMORY} for i in range(count)
    ]
    async with Client(target, mode="legacy", read_timeout_seconds=300) as client:
        for start in range(0, count, 256):
            result = await client.call_tool("palace_store_batch", {"items": items[start : start + 256]})
            assert not result.is_error, result.content


async def measure(target: Any, *, sessions: int, calls: int, seed: int) -> dict[str, list[float]]:
    """Seed the palace, open the sessions, then time every session's calls together."""
    await _seed(target, seed)
    latencies: dict[str, list[float]] = defaultdict(list)
    go = anyio.Event()
    async with anyio.create_task_group() as group:
        for number in range(sessions):
            group.start_soon(_session, target, number, calls, latencies, go)
        await anyio.sleep(3.0 + sessions * 0.5)  # every session open and warm before the clock
        go.set()
    return latencies


def _wait_for_no_holder(data_dir: Path) -> None:
    from palace.engine import holder

    deadline = time.monotonic() + 30
    while holder.holder_running(data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="sessions at once in the shared rows (default 8)")
    parser.add_argument("--calls", type=int, default=100, help="calls per session, find and store alternately")
    parser.add_argument("--seed", type=int, default=1000, help="memories in each palace before the clock")
    args = parser.parse_args()
    rows: list[tuple[str, dict[str, list[float]]]] = []
    with tempfile.TemporaryDirectory(prefix="palazzo-bench-holder-") as scratch:
        for label, holder_on, sessions in (
            ("direct, 1 session", False, 1),
            ("holder, 1 session", True, 1),
            (f"holder, {args.sessions} sessions", True, args.sessions),
        ):
            data_dir = Path(scratch) / label.replace(" ", "").replace(",", "-")
            target = stdio_target(data_dir, holder=holder_on)
            run = functools.partial(measure, target, sessions=sessions, calls=args.calls, seed=args.seed)
            rows.append((label, anyio.run(run)))
            _wait_for_no_holder(data_dir)
            print(f"measured {label}", file=sys.stderr)
        with own_server() as (url, _group):
            target_url = url + "/mcp"
            label = f"http serve, {args.sessions} sessions"
            rows.append(
                (
                    label,
                    anyio.run(lambda: measure(target_url, sessions=args.sessions, calls=args.calls, seed=args.seed)),
                )
            )
    print(f"\n{'configuration':<28}" + "".join(f"{tool + ' p50':>18}{tool + ' p95':>18}" for tool in TOOLS))
    for label, latencies in rows:
        cells = "".join(
            f"{percentile(latencies[tool], 0.5):>15.2f} ms{percentile(latencies[tool], 0.95):>15.2f} ms"
            for tool in TOOLS
        )
        print(f"{label:<28}{cells}")
    table = dict(rows)

    def ratio(top: str, bottom: str, tool: str, fraction: float) -> float:
        return percentile(table[top][tool], fraction) / percentile(table[bottom][tool], fraction)

    print()
    for top, bottom in (
        ("holder, 1 session", "direct, 1 session"),
        (f"holder, {args.sessions} sessions", f"http serve, {args.sessions} sessions"),
    ):
        figures = ", ".join(
            f"{tool} p50 {ratio(top, bottom, tool, 0.5):.2f} p95 {ratio(top, bottom, tool, 0.95):.2f}" for tool in TOOLS
        )
        print(f"{top} / {bottom}: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
