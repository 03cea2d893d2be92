"""MCP over stdio through three clients, and the server-side split: where a find's and a store's time goes.

Clients, each in its own process against its own `runmcp` process: `raw` (JSON-RPC lines on the pipe,
no SDK: what the server costs), `sdk2` (this venv's MCP SDK 2.x `Client`) and `sdk1` (an MCP SDK 1.x
`ClientSession`, run with --sdk1-python, e.g. the side-by-side benchmark's client venv; it validates
every structured result against the tool's outputSchema). Per client: spawn -> initialize, -> first
store on a brand-new data dir (runmcp prepares it), single stores per second, and find p50/p95 at each
palace size (the palace filled once, with palace_store_batch, its background index build finished).
The split, in-process on the same palace: model inference (alone, back to back, and as it runs inside
finds that come a client's round trip apart, which is slower: its weights leave the CPU caches), the
rest of the palace call (store), and protocol = raw client over stdio - in-process (SDK, transport,
thread hop, usage recording).
Figures only; nothing is asserted.
Usage: python bench/bench_mcp.py [--stores 200] [--sizes 1000 10000] [--queries 100] [--sdk1-python PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_core import make_texts, percentile, release_holder  # noqa: E402  (stdlib only: runs under any client venv)

SCHEMA: dict[str, Any] = {"category": "technical", "wing": "projects", "room": "bench", "hall": "facts"}
CLIENTS = ("raw", "sdk2", "sdk1")
DEFAULT_SDK1_PYTHON = "/tmp/sbs/client_venv/bin/python"
PAUSE_SECONDS = 0.004  # between in-process finds: about a find's round trip outside the server


def queries(count: int, size: int) -> list[str]:
    """Distinct questions about the first `size` memories."""
    return [f"what about {text.split(' (')[0]}, note {i * 7 % size}" for i, text in enumerate(make_texts(count))]


def server_command(server_python: str, data_dir: Path) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return [server_python, str(ROOT / "manage.py"), "runmcp"], env


def process_tree_hwm_mib(pid: int) -> tuple[float, float]:
    """VmHWM of a process and the sum over it and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    hwm = {p: _status_kb(p, "VmHWM") for p in tree}
    return hwm.get(pid, 0) / 1024, sum(hwm.values()) / 1024


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RawClient:
    """JSON-RPC over the server's stdin/stdout, one call in flight."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.pid = self.process.pid
        self._next_id = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params or {}}
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"server closed the pipe during {method}")
            answer: dict[str, Any] = json.loads(line)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer["result"]
                return result

    def open(self) -> None:
        self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench-raw", "version": "1"}},
        )
        assert self.process.stdin is not None
        self.process.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{name}: {result['content'][0]['text'][:300]}")
        structured: dict[str, Any] = result.get("structuredContent") or {}
        return structured

    async def list_tools(self) -> None:
        self.request("tools/list")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


async def with_client(kind: str, command: list[str], env: dict[str, str], body: Callable[..., Any]) -> Any:
    """Open a client of that kind on a new server process and run body(call, list_tools, pid)."""
    if kind == "raw":
        raw = RawClient(command, env)
        try:
            raw.open()
            return await body(raw.call, raw.list_tools, raw.pid)
        finally:
            raw.close()
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(ROOT))
    if kind == "sdk2":
        from mcp import Client

        async with Client(params, mode="legacy", read_timeout_seconds=300) as client:

            async def call2(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                result = await client.call_tool(name, arguments)
                if result.is_error:
                    raise RuntimeError(f"{name}: {result.content}")
                return dict(result.structured_content or {})

            return await body(call2, client.list_tools, None)
    from datetime import timedelta

    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        session_call: Any = session.call_tool

        async def call1(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            # 1.x signature (timedelta); this venv's stubs are 2.x.
            result: Any = await session_call(name, arguments, read_timeout_seconds=timedelta(seconds=300))
            if result.isError:
                raise RuntimeError(f"{name}: {result.content}")
            return dict(result.structuredContent or {})

        return await body(call1, session.list_tools, None)


async def worker_cold(kind: str, server_python: str, stores: int) -> dict[str, Any]:
    """Spawn on a brand-new data dir: initialize, first store, then single stores."""
    data_dir = Path(tempfile.mkdtemp(prefix="palazzo-bench-mcp-cold-"))
    command, env = server_command(server_python, data_dir)
    texts = make_texts(stores + 21, seed=11)
    started = time.perf_counter()
    figures: dict[str, Any] = {}

    async def body(call: Any, list_tools: Any, _pid: int | None) -> dict[str, Any]:
        await list_tools()
        figures["tools_list_s"] = time.perf_counter() - started
        await call("palace_store", {"text": texts[0], **SCHEMA})
        figures["first_store_s"] = time.perf_counter() - started
        for text in texts[1:21]:
            await call("palace_store", {"text": "warm-up " + text, **SCHEMA})
        latencies = []
        for text in texts[21:]:
            begun = time.perf_counter()
            await call("palace_store", {"text": text, **SCHEMA})
            latencies.append((time.perf_counter() - begun) * 1000)
        figures["store_per_s"] = len(latencies) / (sum(latencies) / 1000)
        figures["store_p50_ms"] = statistics.median(latencies)
        return figures

    return dict(await with_client(kind, command, env, body))


async def worker_fill(server_python: str, data_dir: Path, size: int) -> dict[str, Any]:
    """Top the palace up to size memories with palace_store_batch; wait for the index build; peak RSS."""
    command, env = server_command(server_python, data_dir)
    texts = make_texts(size, seed=7)
    peaks = {"server": 0.0, "tree": 0.0}

    async def body(call: Any, _list_tools: Any, pid: int | None) -> dict[str, Any]:
        assert pid is not None
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.25):
                server, tree = process_tree_hwm_mib(pid)
                peaks["server"], peaks["tree"] = max(peaks["server"], server), max(peaks["tree"], tree)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        total = int((await call("palace_status", {}))["total"])
        started = time.perf_counter()
        while total < size:
            chunk = texts[total : min(size, total + 256)]
            await call("palace_store_batch", {"items": [{"text": text, **SCHEMA} for text in chunk]})
            total = int((await call("palace_status", {}))["total"])
        filled = time.perf_counter() - started
        while (await call("palace_status", {})).get("search_index", {}).get("building"):
            await asyncio.sleep(0.5)
        done.set()
        sampler.join()
        return {"fill_s": filled, "peak_server_mib": peaks["server"], "peak_tree_mib": peaks["tree"]}

    return dict(await with_client("raw", command, env, body))


async def worker_find(kind: str, server_python: str, data_dir: Path, size: int, count: int) -> dict[str, Any]:
    """Finds (limit 10) on a filled palace, after one warm-up find."""
    command, env = server_command(server_python, data_dir)

    async def body(call: Any, list_tools: Any, _pid: int | None) -> dict[str, Any]:
        await list_tools()
        await call("palace_find", {"query": "warm-up", "limit": 10})
        latencies = []
        for query in queries(count, size):
            begun = time.perf_counter()
            await call("palace_find", {"query": query, "limit": 10})
            latencies.append((time.perf_counter() - begun) * 1000)
        stores = []
        for text in make_texts(count // 2, seed=17):
            begun = time.perf_counter()
            await call("palace_store", {"text": f"{kind} at {size}: {text}", **SCHEMA})
            stores.append((time.perf_counter() - begun) * 1000)
        return {
            "find_p50_ms": statistics.median(latencies),
            "find_p95_ms": percentile(latencies, 0.95),
            "store_p50_ms": statistics.median(stores),
        }

    return dict(await with_client(kind, command, env, body))


def worker_split(data_dir: Path, size: int, count: int) -> dict[str, Any]:
    """In-process on the same palace: model inference vs the whole palace call, for a find and a store."""
    os.environ.update(PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning")
    os.environ["DJANGO_SETTINGS_MODULE"] = "palazzo_site.settings"
    import django

    django.setup()
    from palace.engine import runtime
    from palace.governance import audit
    from palace.operations import gain
    from palace.reads import selectors
    from palace.writes import services

    release_holder(data_dir)  # the clients' runmcp started a holder on this data dir: it must leave first
    palace = runtime.get_palace()
    # As in the server: audit records and usage events go to their background writers.
    audit.start_audit_writer()
    gain.start_usage_writer()
    texts = queries(count, size)

    def median_ms(function: Callable[[str], Any], inputs: list[str]) -> float:
        function("warm-up")
        latencies = []
        for value in inputs:
            begun = time.perf_counter()
            function(value)
            latencies.append((time.perf_counter() - begun) * 1000)
        return statistics.median(latencies)

    stored = [f"split store {size}: {text}" for text in make_texts(count, seed=13)]
    hot_model_ms = median_ms(palace.embedder.query, texts)
    # Each find alone, after a pause as long as a client's round trip, as the server sees them: the
    # model's weights leave the CPU caches meanwhile, and its run inside the find is timed there.
    in_find: list[float] = []
    query = palace.embedder.query

    def timed_query(text: str) -> Any:
        begun = time.perf_counter()
        try:
            return query(text)
        finally:
            in_find.append((time.perf_counter() - begun) * 1000)

    palace.embedder.query = timed_query  # type: ignore[method-assign]

    def paused_find(text: str) -> None:
        time.sleep(PAUSE_SECONDS)
        selectors.find(query=text, limit=10)

    find_ms = median_ms(paused_find, texts) - PAUSE_SECONDS * 1000
    palace.embedder.query = query  # type: ignore[method-assign]
    figures = {
        "hot_model_ms": hot_model_ms,
        "find_model_ms": statistics.median(in_find[1:]),
        "find_palace_ms": find_ms,
        "store_model_ms": median_ms(lambda text: palace.embedder.documents([text + " (model only)"]), stored),
        "store_palace_ms": median_ms(lambda text: services.store(text=text, **SCHEMA, added_by="bench"), stored),
    }
    audit.stop_audit_writer()
    gain.stop_usage_writer()
    runtime.close_palace()
    return figures


def run_worker(python: str, *arguments: str) -> dict[str, Any]:
    """Run this file as a worker under that interpreter; its last stdout line is the JSON result."""
    done = subprocess.run([python, __file__, "--worker", *arguments], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"worker {arguments} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Parse arguments; run the workers and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--sdk1-python", default=DEFAULT_SDK1_PYTHON, help="a python with mcp 1.x installed")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        job, *rest = args.worker
        if job == "cold":
            result = asyncio.run(worker_cold(rest[0], rest[1], int(rest[2])))
        elif job == "fill":
            result = asyncio.run(worker_fill(rest[0], Path(rest[1]), int(rest[2])))
        elif job == "find":
            result = asyncio.run(worker_find(rest[0], rest[1], Path(rest[2]), int(rest[3]), int(rest[4])))
        else:
            result = worker_split(Path(rest[0]), int(rest[1]), int(rest[2]))
        print(json.dumps(result))
        return
    server = sys.executable
    pythons = {"raw": server, "sdk2": server, "sdk1": args.sdk1_python}
    clients = [kind for kind in CLIENTS if kind != "sdk1" or Path(args.sdk1_python).is_file()]
    if "sdk1" not in clients:
        print(f"(no SDK 1.x client: {args.sdk1_python} missing; run ../shared/bench/sbs/setup_msq.sh)")
    versions = {
        kind: subprocess.run(
            [pythons[kind], "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        for kind in clients
        if kind != "raw"
    }
    print(f"clients: raw JSON-RPC, {', '.join(f'{kind} (mcp {version})' for kind, version in versions.items())}")
    print("\n| client | tools/list after spawn | first store after spawn | single stores | store p50 |")
    print("|---|---|---|---|---|")
    cold = {kind: run_worker(pythons[kind], "cold", kind, server, str(args.stores)) for kind in clients}
    for kind, figures in cold.items():
        print(
            f"| {kind} | {figures['tools_list_s']:.2f} s | {figures['first_store_s']:.2f} s | "
            f"{figures['store_per_s']:.1f} /s | {figures['store_p50_ms']:.2f} ms |"
        )
    data_dir = Path(tempfile.mkdtemp(prefix="palazzo-bench-mcp-"))
    finds: dict[int, dict[str, dict[str, Any]]] = {}
    splits: dict[int, dict[str, Any]] = {}
    print(
        "\n| size | fill (batch) | server peak RSS | process tree peak RSS |"
        + "".join(f" {k}: find p50/p95, store p50 |" for k in clients)
    )
    print("|---|---|---|---|" + "---|" * len(clients))
    for size in sorted(args.sizes):
        filled = run_worker(server, "fill", server, str(data_dir), str(size))
        finds[size] = {
            kind: run_worker(pythons[kind], "find", kind, server, str(data_dir), str(size), str(args.queries))
            for kind in clients
        }
        splits[size] = run_worker(server, "split", str(data_dir), str(size), str(args.queries))
        row = "".join(
            f" {found['find_p50_ms']:.2f} / {found['find_p95_ms']:.2f}, {found['store_p50_ms']:.2f} ms |"
            for found in finds[size].values()
        )
        memory = f"{filled['peak_server_mib']:.0f} MiB | {filled['peak_tree_mib']:.0f} MiB"
        print(f"| {size} | {filled['fill_s']:.1f} s | {memory} |{row}")
    print("\nServer-side split (p50, ms): model = inference alone; store = the rest of the palace call in-process;")
    print("protocol = raw client over stdio - in-process; client = each SDK client - raw client. A single store")
    print("answers before its model run (the embedding thread adds the dense vector): its store column is the")
    print("whole palace call, and its model column what the thread then spends.")
    print("model alone: the query's inference back to back, its weights in the CPU caches; a find's model")
    print("run (timed inside finds paused as a client's round trip) is the one its split counts.")
    print(
        "\n| call | size | model alone | model | store | protocol | server total | over the model "
        "| client sdk2 | client sdk1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in sorted(args.sizes):
        split = splits[size]
        raw_find = finds[size]["raw"]["find_p50_ms"]
        rows = [
            (
                "find",
                split["hot_model_ms"],
                split["find_model_ms"],
                split["find_palace_ms"] - split["find_model_ms"],
                split["find_palace_ms"],
                raw_find,
                {k: finds[size][k]["find_p50_ms"] for k in clients},
            ),
            (
                "store",
                split["store_model_ms"],
                split["store_model_ms"],
                split["store_palace_ms"],
                split["store_palace_ms"],
                finds[size]["raw"]["store_p50_ms"],
                {k: finds[size][k]["store_p50_ms"] for k in clients},
            ),
        ]
        for call, alone, model, rest, palace_call, over_stdio, by_client in rows:
            extra = [f"{by_client[k] - over_stdio:+.2f}" if k in by_client else "-" for k in ("sdk2", "sdk1")]
            print(
                f"| {call} | {size} | {alone:.2f} | {model:.2f} | "
                f"{rest:.2f} | {over_stdio - palace_call:.2f} | {over_stdio:.2f} | "
                f"{over_stdio - model:+.2f} | {extra[0]} | {extra[1]} |"
            )


if __name__ == "__main__":
    main()
