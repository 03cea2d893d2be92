"""Load on a palazzo server: N concurrent MCP sessions storing, finding and recalling for T seconds.

Runs three phases against one server on 127.0.0.1 and prints throughput, p50/p95/p99 latency per tool and
error counts for each:
  1. baseline: one session, find only (the unloaded find p50 the targets are measured against);
  2. load: N sessions doing a mix of palace_store, palace_find and palace_recall;
  3. load + bulk ingest: the same while a JSON Lines body streams into POST /ingest.
Targets: zero errors, and find p99 under load below 10x the unloaded find p50. Every phase stops by itself
(after --seconds, or --max-calls per session). By default it starts its own server on a free port with a
throwaway data dir; --url targets a running one (its palace gets the bench's memories).

    python bench/load_mcp.py --clients 4 --seconds 15

With --workers 1 2 4 it runs only the load phase, against `serve --workers N` for each N on PostgreSQL (the
server of `make services`, a fresh database each) and a loopback Qdrant stand-in (no Qdrant server binary
installs here), and prints one line per worker count: calls/s, latencies, errors, texts stored twice,
acknowledged stores missing from the palace's export ("lost").
The stand-in keeps its points in Qdrant's Rust engine (qdrant-edge) by default; `--stand-in local` uses
qdrant-client's local mode, which evaluates filters and distances in Python and limits the curve itself.

    python bench/load_mcp.py --workers 1 2 4 --clients 8 --seconds 15

With --stdio every session is a `palazzo runmcp` of its own on one throwaway embedded palace, as agent
windows on a laptop are (they all reach it through its holder), and the bulk ingest is `palazzo ingest`.

    python bench/load_mcp.py --stdio --clients 8 --seconds 15
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
from mcp import Client, StdioServerParameters
from mcp_types import Implementation

ROOT = Path(__file__).resolve().parents[1]
MEMORY = {"category": "technical", "wing": "projects", "room": "load-test", "hall": "facts"}
QUERIES = ("backup schedule", "disk layout", "deploy steps", "database tuning", "network topology", "editor setup")
TOOLS = ("palace_store", "palace_find", "palace_recall")
STDIO = "stdio:"


@dataclass
class Phase:
    """Latencies (ms) and errors of one phase, per tool."""

    name: str
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    error_samples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    setup_ms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    acknowledged: list[str] = field(default_factory=list)  # texts whose palace_store was answered with an id

    def record(self, tool: str, started: float, error: str | None) -> None:
        self.latencies[tool].append((time.perf_counter() - started) * 1000.0)
        if error is not None:
            self.errors[tool] += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(f"{tool}: {error[:200]}")


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def own_server(*, workers: int = 1, extra_env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """`manage.py serve` (that many workers) on a free port with a throwaway data dir: its URL and process group."""
    data_dir = Path(tempfile.mkdtemp(prefix="palazzo-load-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PALAZZO_", "QDRANT_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="palazzo_site.settings", PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning"
    )
    env.update(extra_env or {})
    if extra_env:  # a shared database: create its tables before the workers start
        subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    log = (data_dir / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--bind", f"127.0.0.1:{port}", "--workers", str(workers)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the server exited with {process.returncode}; see {data_dir / 'serve.log'}")
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start within 180 s")
            time.sleep(0.2)
        yield url, process.pid  # its own session: the group of serve and its workers
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        log.close()


async def _call(client: Client, phase: Phase, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    started = time.perf_counter()
    try:
        result = await client.call_tool(tool, arguments)
    except Exception as exc:
        phase.record(tool, started, f"{type(exc).__name__}: {exc}")
        return None
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    phase.record(tool, started, text if result.is_error else None)
    return None if result.is_error else json.loads(text)


class PhaseStart:
    """The phase clock starts once every session is open and has listed the tools.

    The MCP client fetches tools/list (and compiles each output-schema validator) on a session's
    first call of each tool; that set-up is timed apart, so the per-tool figures are steady-state calls.
    """

    def __init__(self, *, sessions: int, seconds: float) -> None:
        self.waiting = sessions
        self.seconds = seconds
        self.started = 0.0
        self.deadline = 0.0
        self.go = anyio.Event()

    async def ready(self) -> None:
        """Mark one session ready and wait for the others."""
        self.waiting -= 1
        if self.waiting <= 0 and not self.go.is_set():
            self.started = time.monotonic()
            self.deadline = self.started + self.seconds
            self.go.set()
        await self.go.wait()


async def _session(
    url: str, number: int, phase: Phase, start: PhaseStart, max_calls: int, mix: tuple[str, ...], ids: list[int]
) -> None:
    info = Implementation(name=f"load-{number}", version="1")
    rng = random.Random(number)
    opening = time.perf_counter()
    async with Client(mcp_target(url), mode="legacy", client_info=info, read_timeout_seconds=120) as client:
        await client.list_tools()
        phase.setup_ms.append((time.perf_counter() - opening) * 1000.0)
        await start.ready()
        for _ in range(max_calls):
            if time.monotonic() >= start.deadline:
                return
            tool = rng.choice(mix)
            if tool == "palace_store":
                text = f"load test memory from session {number}: {uuid.uuid4().hex} about {rng.choice(QUERIES)}"
                data = await _call(client, phase, tool, {"text": text, **MEMORY})
                if data is not None:
                    ids.append(data["id"])
                    phase.acknowledged.append(text)
            elif tool == "palace_find":
                await _call(client, phase, tool, {"query": rng.choice(QUERIES), "limit": 5})
            else:
                await _call(client, phase, tool, {"ids": rng.sample(ids, min(5, len(ids)))})


def mcp_target(url: str) -> str | StdioServerParameters:
    """What a session connects to: `stdio:<data dir>` is a `palazzo runmcp` of its own on that data dir."""
    if not url.startswith(STDIO):
        return url + "/mcp"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PALAZZO_")}
    env.update(PALAZZO_DATA_DIR=url[len(STDIO) :], PALAZZO_LOG_LEVEL="warning")
    return StdioServerParameters(command=sys.executable, args=["-m", "palazzo_site.cli", "runmcp"], env=env, cwd=ROOT)


async def _ingest_command(data_dir: str, body: bytes, items: int, phase: Phase) -> None:
    """The bulk ingest of a stdio run: `palazzo ingest`, which the palace's holder runs beside the sessions."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PALAZZO_")}
    env.update(PALAZZO_DATA_DIR=data_dir, PALAZZO_LOG_LEVEL="warning")
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as source:
        source.write(body)
        source.flush()
        started = time.perf_counter()
        done = await anyio.run_process(
            [sys.executable, "-m", "palazzo_site.cli", "ingest", "--file", source.name], env=env, check=False
        )
    seconds = time.perf_counter() - started
    stored = re.search(r"(\d+) stored", done.stderr.decode() + done.stdout.decode())
    if done.returncode != 0 or stored is None:
        phase.errors["ingest"] += 1
        phase.error_samples.append(f"ingest: exit {done.returncode}: {done.stderr.decode()[-200:]}")
        return
    count = int(stored.group(1))
    phase.extra["ingest"] = f"{count}/{items} items stored in {seconds:.1f} s ({count / seconds:.0f} items/s)"


async def _ingest(url: str, items: int, phase: Phase, start: PhaseStart) -> None:
    run = uuid.uuid4().hex
    body = b"".join(
        json.dumps({"text": f"bulk load item {index} of {run}", **MEMORY}).encode() + b"\n" for index in range(items)
    )
    await start.go.wait()
    if url.startswith(STDIO):
        await _ingest_command(url[len(STDIO) :], body, items, phase)
        return
    started = time.perf_counter()
    stored = 0
    try:
        async with (
            httpx.AsyncClient(timeout=600) as http,
            http.stream("POST", url + "/ingest", content=body, headers={"Content-Type": "application/x-ndjson"}) as r,
        ):
            if r.status_code != 200:
                phase.errors["ingest"] += 1
                phase.error_samples.append(f"ingest: HTTP {r.status_code}")
                return
            async for line in r.aiter_lines():
                report = json.loads(line)
                if "error" in report:
                    phase.errors["ingest"] += 1
                    phase.error_samples.append(f"ingest: {report['error'][:200]}")
                if report.get("done"):
                    stored = report["counts"]["stored"]
    except httpx.HTTPError as exc:
        phase.errors["ingest"] += 1
        phase.error_samples.append(f"ingest: {exc}")
    seconds = time.perf_counter() - started
    phase.extra["ingest"] = f"{stored}/{items} items stored in {seconds:.1f} s ({stored / seconds:.0f} items/s)"


async def run_phase(
    url: str,
    phase: Phase,
    *,
    clients: int,
    seconds: float,
    max_calls: int,
    mix: tuple[str, ...],
    ids: list[int],
    ingest_items: int = 0,
) -> Phase:
    start = PhaseStart(sessions=clients, seconds=seconds)
    async with anyio.create_task_group() as group:
        if ingest_items:
            group.start_soon(_ingest, url, ingest_items, phase, start)
        for number in range(clients):
            group.start_soon(_session, url, number, phase, start, max_calls, mix, ids)
    phase.seconds = time.monotonic() - start.started
    return phase


async def seed(url: str, count: int) -> list[int]:
    """Memories for find and recall to hit."""
    items = [
        {"text": f"seed memory {i} about {QUERIES[i % len(QUERIES)]}: {uuid.uuid4().hex}", **MEMORY}
        for i in range(count)
    ]
    async with Client(mcp_target(url), mode="legacy", read_timeout_seconds=300) as client:
        result = await client.call_tool("palace_store_batch", {"items": items})
        data = json.loads(result.content[0].text)  # type: ignore[union-attr]
        return [item["memory"]["id"] for item in data["items"]]


def tool_mix(args: argparse.Namespace) -> tuple[str, ...]:
    """The tools a loaded session picks from, each as often as its weight."""
    return ("palace_store",) * args.store + ("palace_find",) * args.find + ("palace_recall",) * args.recall


def report(phase: Phase) -> None:
    calls = sum(len(values) for values in phase.latencies.values())
    errors = sum(phase.errors.values())
    print(
        f"\n== {phase.name}: {calls} calls in {phase.seconds:.1f} s = "
        f"{calls / phase.seconds:.1f} calls/s, {errors} errors"
    )
    print(f"   {'tool':<16}{'calls':>7}{'errors':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for tool in (*TOOLS, "ingest"):
        values = phase.latencies.get(tool)
        if not values:
            continue
        print(
            f"   {tool:<16}{len(values):>7}{phase.errors.get(tool, 0):>8}{percentile(values, 0.5):>9.1f}"
            f"{percentile(values, 0.95):>9.1f}{percentile(values, 0.99):>9.1f}{max(values):>9.1f}"
        )
    if phase.setup_ms:
        print(
            f"   session set-up (initialize + tools/list, before the clock): p50 "
            f"{percentile(phase.setup_ms, 0.5):.1f} ms, max {max(phase.setup_ms):.1f} ms"
        )
    for key, value in phase.extra.items():
        print(f"   {key}: {value}")
    for sample in phase.error_samples:
        print(f"   error: {sample}")


async def main(args: argparse.Namespace, url: str) -> int:
    ids = await seed(url, args.seed)
    mix = tool_mix(args)
    baseline = await run_phase(
        url,
        Phase("baseline (1 session, find only)"),
        clients=1,
        seconds=min(args.seconds, 5),
        max_calls=50,
        mix=("palace_find",),
        ids=ids,
    )
    report(baseline)
    phases = [
        await run_phase(
            url,
            Phase(f"load ({args.clients} sessions, store:find:recall = {args.store}:{args.find}:{args.recall})"),
            clients=args.clients,
            seconds=args.seconds,
            max_calls=args.max_calls,
            mix=mix,
            ids=ids,
        )
    ]
    report(phases[-1])
    if args.ingest_items:
        phases.append(
            await run_phase(
                url,
                Phase(f"load + bulk ingest of {args.ingest_items} items over POST /ingest"),
                clients=args.clients,
                seconds=args.seconds,
                max_calls=args.max_calls,
                mix=mix,
                ids=ids,
                ingest_items=args.ingest_items,
            )
        )
        report(phases[-1])
    unloaded_p50 = statistics.median(baseline.latencies["palace_find"])
    print(f"\nunloaded find p50: {unloaded_p50:.1f} ms")
    failed = False
    for phase in phases:
        find = phase.latencies.get("palace_find") or [float("nan")]
        ratio = percentile(find, 0.99) / unloaded_p50
        errors = sum(phase.errors.values())
        ok = errors == 0 and ratio < 10
        failed |= not ok
        print(
            f"{phase.name}: find p99 = {ratio:.1f}x unloaded p50, {errors} errors "
            f"-> {'meets' if ok else 'MISSES'} target"
        )
    return 1 if failed else 0


@contextmanager
def shared_services(engine: str) -> Iterator[dict[str, str]]:
    """A fresh PostgreSQL database (the server of `make services`) and the loopback Qdrant stand-in.

    No Qdrant server binary installs here: tests/trust/fake_qdrant.py serves Qdrant's REST endpoints from
    an Edge shard or qdrant-client's local mode (engine), in its own process so the bench's clients do not
    share its interpreter.
    """
    import psycopg

    pg_url_file = ROOT / ".tools" / "pg-url"
    if not pg_url_file.is_file():
        raise SystemExit("--workers needs PostgreSQL: run `make services` first")
    base = pg_url_file.read_text().strip()
    parts = urlsplit(base)
    admin = urlunsplit(parts._replace(path="/postgres"))
    name = f"palazzo_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    port = free_port()
    stand_in = subprocess.Popen(
        [sys.executable, "-c", STAND_IN.format(port=port, engine=engine)], cwd=ROOT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/collections", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or stand_in.poll() is not None:
                    raise SystemExit("the Qdrant stand-in did not start") from None
                time.sleep(0.2)
        yield {
            "DATABASE_URL": urlunsplit(parts._replace(path=f"/{name}")),
            "QDRANT_URL": f"http://127.0.0.1:{port}",
            "STAND_IN_PID": str(stand_in.pid),
        }
    finally:
        os.killpg(stand_in.pid, signal.SIGTERM)
        stand_in.wait(timeout=30)
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# On SIGTERM it stops, which removes an Edge engine's throwaway shard directory.
STAND_IN = (
    "import signal, sys, time, tests.trust.fake_qdrant as f\n"
    "q = f.FakeQdrant(port={port}, engine={engine!r}).start()\n"
    "signal.signal(signal.SIGTERM, lambda *_: (q.stop(), sys.exit(0)))\n"
    "while True: time.sleep(3600)"
)


async def stored_texts(url: str) -> list[str]:
    """Every memory's text, from GET /export (to count texts stored twice)."""
    async with httpx.AsyncClient(timeout=600) as http:
        answer = await http.get(url + "/export")
        answer.raise_for_status()
    return [json.loads(line)["text"] for line in answer.text.splitlines() if line.strip()]


def _stat_fields(stat: Path) -> list[str]:
    """A /proc/<pid>/stat line's fields after the command name (state, ppid, pgrp, ..., utime, stime, ...)."""
    return stat.read_text().rsplit(")", 1)[1].split()


def _cpu_of(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: str) -> float:
    """User plus system CPU time a process has used so far."""
    return _cpu_of(_stat_fields(Path(f"/proc/{pid}/stat")))


def group_cpu_seconds(group: int) -> float:
    """User plus system CPU time the live processes of a process group (serve and its workers) have used."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _stat_fields(stat)
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == group:
            total += _cpu_of(fields)
    return total


def own_cpu_seconds() -> float:
    """User plus system CPU time of this process: the bench's MCP client sessions."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_seconds() -> tuple[float, float]:
    """CPU seconds the whole machine was busy, and all its CPU seconds, since boot (/proc/stat)."""
    ticks = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK"), sum(ticks) / os.sysconf("SC_CLK_TCK")


async def worker_row(args: argparse.Namespace, url: str, workers: int, stand_in_pid: str, server_group: int) -> str:
    """One worker count's line: calls/s, latencies, errors, texts stored twice or lost, where the CPU went."""
    ids = await seed(url, args.seed)
    stand_in_before = cpu_seconds(stand_in_pid)
    server_before, clients_before = group_cpu_seconds(server_group), own_cpu_seconds()
    busy_before, all_before = machine_busy_seconds()
    mix = tool_mix(args)
    phase = await run_phase(
        url,
        Phase(f"{workers} workers"),
        clients=args.clients,
        seconds=args.seconds,
        max_calls=args.max_calls,
        mix=mix,
        ids=ids,
    )
    stand_in_share = (cpu_seconds(stand_in_pid) - stand_in_before) / phase.seconds
    server_share = (group_cpu_seconds(server_group) - server_before) / phase.seconds
    clients_share = (own_cpu_seconds() - clients_before) / phase.seconds
    busy_after, all_after = machine_busy_seconds()
    machine_share = (busy_after - busy_before) / max(all_after - all_before, 1e-9)
    calls = sum(len(values) for values in phase.latencies.values())
    find = phase.latencies.get("palace_find") or [float("nan")]
    store = phase.latencies.get("palace_store") or [float("nan")]
    texts = await stored_texts(url)
    for sample in phase.error_samples[:3]:
        print(f"   error ({workers} workers): {sample}", file=sys.stderr)
    return (
        f"{workers:>7} {calls / phase.seconds:>8.1f} {percentile(find, 0.5):>9.1f} {percentile(find, 0.95):>9.1f} "
        f"{percentile(store, 0.5):>10.1f} {sum(phase.errors.values()):>6} {len(texts) - len(set(texts)):>10} "
        f"{len(set(phase.acknowledged) - set(texts)):>5} {len(texts):>8} {stand_in_share:>14.0%} "
        f"{server_share:>11.0%} {clients_share:>11.0%} {machine_share:>12.0%}"
    )


def run_worker_curve(args: argparse.Namespace) -> int:
    """`--workers 1 2 4`: the same load against serve with each worker count, on PostgreSQL and a Qdrant server.

    Where the CPU went during the phase, each as a share of one core: the Qdrant stand-in ("stand-in CPU":
    near 100 % it, not palazzo, limits the calls per second, as it serves every request from one Python
    process, one at a time), serve and its workers ("palazzo CPU"), this process's client sessions
    ("clients CPU"); and how busy the whole machine was ("machine busy", of all its cores): near 100 % no
    worker count can go faster, whatever palazzo does.
    """
    rows = []
    for workers in args.workers:
        print(f"-- {workers} workers: starting (PostgreSQL + the Qdrant stand-in)", file=sys.stderr)
        with shared_services(args.stand_in) as env:
            stand_in_pid = env.pop("STAND_IN_PID")
            with own_server(workers=workers, extra_env=env) as (url, server_group):
                rows.append(anyio.run(worker_row, args, url, workers, stand_in_pid, server_group))
    mix = f"store:find:recall = {args.store}:{args.find}:{args.recall}"
    engine = {"edge": "Qdrant Edge", "local": "qdrant-client local mode"}[args.stand_in]
    print(f"\n{args.clients} sessions, {args.seconds:.0f} s each, {mix}; the Qdrant stand-in on {engine}")
    columns = (
        "workers",
        "calls/s",
        "find p50",
        "find p95",
        "store p50",
        "errors",
        "duplicates",
        "lost",
        "memories",
        "stand-in CPU",
        "palazzo CPU",
        "clients CPU",
        "machine busy",
    )
    widths = (7, 8, 9, 9, 10, 6, 10, 5, 8, 14, 11, 11, 12)
    print(" ".join(f"{name:>{width}}" for name, width in zip(columns, widths, strict=True)))
    for row in rows:
        print(row)
    return 0


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one with a throwaway data dir)")
    parser.add_argument(
        "--stdio",
        action="store_true",
        help="each session its own `palazzo runmcp` on one throwaway embedded palace (they share its holder); "
        "the bulk ingest is `palazzo ingest`",
    )
    parser.add_argument("--clients", type=int, default=4, help="concurrent MCP sessions (default 4)")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each loaded phase (default 15)")
    parser.add_argument("--max-calls", type=int, default=2000, help="cap on calls per session and phase")
    parser.add_argument("--store", type=int, default=2, help="weight of palace_store in the mix (default 2)")
    parser.add_argument("--find", type=int, default=5, help="weight of palace_find (default 5)")
    parser.add_argument("--recall", type=int, default=3, help="weight of palace_recall (default 3)")
    parser.add_argument("--seed", type=int, default=200, help="memories stored before the phases (default 200)")
    parser.add_argument(
        "--ingest-items", type=int, default=2000, help="bulk ingest size for the third phase (0 skips it)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        help="instead of the phases: the load phase against `serve --workers N` for each N, side by side, on "
        "PostgreSQL (make services) and a loopback Qdrant stand-in",
    )
    parser.add_argument(
        "--stand-in",
        choices=("edge", "local"),
        default="edge",
        help="what the Qdrant stand-in keeps its points in: Qdrant's Rust engine (qdrant-edge, default) or "
        "qdrant-client's local mode (Python, one request at a time)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_arguments()
    if arguments.workers:
        sys.exit(run_worker_curve(arguments))
    if arguments.url:
        sys.exit(anyio.run(main, arguments, arguments.url.rstrip("/")))
    if arguments.stdio:
        with tempfile.TemporaryDirectory(prefix="palazzo-load-stdio-") as scratch:
            sys.exit(anyio.run(main, arguments, STDIO + str(Path(scratch) / "data")))
    with own_server() as (server_url, _group):
        code = anyio.run(main, arguments, server_url)
    sys.exit(code)
