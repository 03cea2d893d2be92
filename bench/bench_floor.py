"""Find at 1k behind the MCP SDK 1.x client: palazzo against mcp-server-qdrant and against the floor both share.

The floor is the least a find can cost through the same SDK and model: an mcp `MCPServer` whose one tool
embeds the query with palazzo's model (in a worker thread, as palazzo does) and answers a fixed text the
size of palazzo's answer, with no search, no structured content and no output schema. Three servers,
each on its own palace of the side-by-side corpus (../shared/bench/sbs), answer the same queries through
one `ClientSession` each, interleaved in rounds so that the machine's drift falls on all three alike.
Prints each server's find p50 per round and the medians as ratios to mcp-server-qdrant's.
Needs ../shared/bench/sbs/setup_msq.sh (its client and mcp-server-qdrant venvs). Figures only.
Usage: python bench/bench_floor.py [--rounds 4] [--queries 150] [--size 1000]
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
import time
import types
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SBS = ROOT.parent / "shared" / "bench" / "sbs"
SBS_ROOT = Path(os.environ.get("SBS_ROOT", "/tmp/sbs"))
SEED = 20240611
WARM_UP_FINDS = 20
MSQ_ENV = {
    "HF_HUB_OFFLINE": "1",
    "FASTEMBED_CACHE_PATH": str(SBS_ROOT / "fastembed_cache"),
    "EMBEDDING_MODEL": "BAAI/bge-small-en-v1.5",
    "COLLECTION_NAME": "bench",
    "QDRANT_SEARCH_LIMIT": "10",
}


def sbs_corpus() -> Any:
    """The side-by-side benchmark's seeded corpus (its Corpus class, loaded from ../shared)."""
    module = types.ModuleType("mcp_memory_bench")
    sys.modules[module.__name__] = module
    exec(compile((SBS / "mcp_memory_bench.py").read_text(), str(SBS / "mcp_memory_bench.py"), "exec"), module.__dict__)
    return module.Corpus(SEED)


def serve_floor(data_dir: Path, answer_file: Path) -> None:
    """Run the floor server over stdio: embed the query, answer the fixed text."""
    import anyio
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer

    sys.path.insert(0, str(ROOT))
    from embeddings.fastembed_backend import FastEmbedEmbedder

    embedder = FastEmbedEmbedder(models_dir=data_dir / "models")  # the default model, loaded as palazzo loads it
    answer = answer_file.read_text()
    server = MCPServer(name="floor")

    @server.tool(structured_output=False)
    async def palace_find(query: str, limit: int = 10) -> str:
        await anyio.to_thread.run_sync(embedder.embed_queries, [query])
        return answer

    anyio.run(server.run_stdio_async)


async def run_client(args: argparse.Namespace, palazzo_python: str) -> dict[str, list[float]]:
    """Fill the palaces, then time interleaved finds (runs under the 1.x client's python)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    corpus = sbs_corpus()
    docs = [corpus.doc(i) for i in range(args.size)]
    queries = [doc.query for doc in corpus.queries(args.size, args.queries + WARM_UP_FINDS)]
    scratch = Path(tempfile.mkdtemp(prefix="palazzo-bench-floor-"))
    palace_env = {"PALAZZO_DATA_DIR": str(scratch / "palazzo"), "PALAZZO_LOG_LEVEL": "warning"}
    floor_env = {"PALAZZO_DATA_DIR": str(scratch / "floor"), "PALAZZO_LOG_LEVEL": "warning"}
    servers = {
        "mcp-server-qdrant": (
            [str(SBS_ROOT / "msq_venv/bin/mcp-server-qdrant")],
            MSQ_ENV | {"QDRANT_LOCAL_PATH": str(scratch / "msq")},
        ),
        "palazzo": ([palazzo_python, str(ROOT / "manage.py"), "runmcp"], palace_env),
        "floor": (
            [palazzo_python, __file__, "--floor", str(scratch / "floor"), str(scratch / "answer.txt")],
            floor_env,
        ),
    }
    latencies: dict[str, list[float]] = {name: [] for name in servers}
    async with AsyncExitStack() as stack:
        sessions: dict[str, tuple[Any, str, Any]] = {}  # 1.x ClientSession; this venv's stubs are 2.x
        for name, (command, env) in servers.items():
            params = StdioServerParameters(
                command=command[0], args=command[1:], env=dict(os.environ) | env, cwd=str(ROOT)
            )
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 (closed with the stack)
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            session: Any = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            await session.list_tools()
            if name == "mcp-server-qdrant":
                for doc in docs:
                    metadata = {"category": doc.category, "wing": doc.wing, "room": doc.room, "hall": doc.hall}
                    await session.call_tool("qdrant-store", {"information": doc.text, "metadata": metadata})
                sessions[name] = (session, "qdrant-find", lambda query: {"query": query})
            else:
                if name == "palazzo":
                    for start in range(0, len(docs), 256):
                        items = [doc.values() for doc in docs[start : start + 256]]
                        await session.call_tool("palace_store_batch", {"items": items})
                    found = await session.call_tool("palace_find", {"query": queries[0], "limit": 10})
                    (scratch / "answer.txt").write_text(found.content[0].text)
                sessions[name] = (session, "palace_find", lambda query: {"query": query, "limit": 10})
        for session, tool, arguments in sessions.values():
            for query in queries[:WARM_UP_FINDS]:
                await session.call_tool(tool, arguments(query))
        for _ in range(args.rounds):
            for name, (session, tool, arguments) in sessions.items():
                times = []
                for query in queries[WARM_UP_FINDS:]:
                    started = time.perf_counter()
                    await session.call_tool(tool, arguments(query))
                    times.append(time.perf_counter() - started)
                latencies[name].append(statistics.median(times) * 1000)
    return latencies


def main() -> None:
    """Parse arguments; run the client worker under the 1.x python and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--sdk1-python", default=str(SBS_ROOT / "client_venv/bin/python"))
    parser.add_argument("--floor", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        serve_floor(Path(args.floor[0]), Path(args.floor[1]))
        return
    if args.client:
        print(json.dumps(asyncio.run(run_client(args, args.client))))
        return
    missing = [
        path
        for path in (SBS / "mcp_memory_bench.py", Path(args.sdk1_python), SBS_ROOT / "msq_venv")
        if not path.exists()
    ]
    if missing:
        sys.exit(f"missing {', '.join(map(str, missing))}: run ../shared/bench/sbs/setup_msq.sh first")
    command = [args.sdk1_python, __file__, "--client", sys.executable, "--rounds", str(args.rounds)]
    command += ["--queries", str(args.queries), "--size", str(args.size)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"client worker failed:\n{done.stderr[-3000:]}")
    latencies: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    anchor = statistics.median(latencies["mcp-server-qdrant"])
    print(f"find p50 at {args.size} memories, MCP SDK 1.x ClientSession over stdio, {args.rounds} interleaved rounds")
    print("| server | p50 per round (ms) | median | / mcp-server-qdrant |")
    print("|---|---|---|---|")
    for name, rounds in latencies.items():
        median = statistics.median(rounds)
        per_round = " ".join(f"{value:.2f}" for value in rounds)
        print(f"| {name} | {per_round} | {median:.2f} | {median / anchor:.2f} |")


if __name__ == "__main__":
    main()
