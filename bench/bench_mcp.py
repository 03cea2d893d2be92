"""End-to-end benchmark over MCP stdio, one client, single calls: the figures our targets are stated in.

Prints: time to first answer (initialize, and first tool result), single palace_store calls/s,
palace_find p50/p95 at the given palace sizes (once a background index build has finished), and the
server's peak RSS. The palace is filled with palace_store_batch through the same connection.
Figures only; nothing is asserted.
Usage: python bench/bench_mcp.py [--stores 300] [--sizes 10000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_core import make_texts, percentile  # noqa: E402


def server_pid_of(parent: int) -> int | None:
    """The runmcp process spawned by this one (the SDK does not expose it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"PPid:\t{parent}\n" in status and b"runmcp" in cmdline:
            return int(entry.name)
    return None


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(args: argparse.Namespace) -> None:
    """Drive one runmcp server through its phases."""
    from mcp import Client, StdioServerParameters

    data_dir = Path(tempfile.mkdtemp(prefix="palazzo-bench-mcp-"))
    env = dict(os.environ, PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    params = StdioServerParameters(command=sys.executable, args=["manage.py", "runmcp"], cwd=str(ROOT), env=env)
    texts = make_texts(args.stores + max(args.sizes) + 10)
    schema = {"category": "technical", "wing": "projects", "room": "bench", "hall": "facts"}
    started = time.perf_counter()
    async with Client(params, mode="legacy", read_timeout_seconds=300) as client:
        initialized = time.perf_counter() - started
        await client.call_tool("palace_status", {})
        first_tool = time.perf_counter() - started
        print(f"first answer: initialize {initialized:.2f} s, first tool result {first_tool:.2f} s")
        pid = server_pid_of(os.getpid())
        for text in texts[:20]:
            await client.call_tool("palace_store", {"text": "warm-up " + text, **schema})
        started = time.perf_counter()
        for text in texts[: args.stores]:
            result = await client.call_tool("palace_store", {"text": text, **schema})
            assert not result.is_error, result.content
        rate = args.stores / (time.perf_counter() - started)
        print(f"single palace_store over stdio: {rate:.1f} stores/s")
        cursor = args.stores
        queries = [f"what does {t.split(' (')[0]}" for t in texts[: args.queries]]
        for size in sorted(args.sizes):
            status = await client.call_tool("palace_status", {})
            missing = size - int(status.structured_content["total"])
            while missing > 0:
                chunk = texts[cursor : cursor + min(256, missing)]
                cursor += len(chunk)
                await client.call_tool("palace_store_batch", {"items": [{"text": t, **schema} for t in chunk]})
                missing -= len(chunk)
            waited = time.perf_counter()
            while (await client.call_tool("palace_status", {})).structured_content["search_index"]["building"]:
                await asyncio.sleep(0.5)
            print(f"waited {time.perf_counter() - waited:.1f} s for the background index build at {size} memories")
            latencies = []
            for query in queries:
                started = time.perf_counter()
                await client.call_tool("palace_find", {"query": query, "limit": 5})
                latencies.append((time.perf_counter() - started) * 1000)
            print(
                f"palace_find at {size} memories: p50 {statistics.median(latencies):.2f} ms, "
                f"p95 {percentile(latencies, 0.95):.2f} ms"
            )
        if pid is not None:
            print(f"server peak RSS: {peak_rss_mib(pid):.0f} MiB")


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--queries", type=int, default=200)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
