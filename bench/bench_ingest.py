"""Ingest benchmark: `manage.py ingest`, `POST /ingest`, single stores and raw embedding, same texts, one run.

Prints items/s of each path, ratios against raw embedding and against single stores measured in the
same run, and peak RSS of this process and of the server; it never asserts.
Targets: ingest within 10% of raw embedding throughput, and at least 3x the single-store path.
Usage: python bench/bench_ingest.py [--count 5000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_core import make_texts, setup_throwaway_palace  # noqa: E402


def items(texts: list[str]) -> list[dict[str, Any]]:
    """Memory items for texts."""
    return [
        {"text": text, "category": "technical", "wing": "projects", "room": f"room-{i % 8}", "hall": "facts"}
        for i, text in enumerate(texts)
    ]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a live process, in MiB (0 when unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def post_ingest(path: Path, count: int) -> tuple[float, float]:
    """Serve a fresh palace, POST the file to /ingest; returns (items/s, server peak RSS MiB)."""
    import httpx

    data_dir = Path(tempfile.mkdtemp(prefix="palazzo-bench-http-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PALAZZO_", "QDRANT_"))}
    env.update(
        PALAZZO_DATA_DIR=str(data_dir), PALAZZO_LOG_LEVEL="warning", DJANGO_SETTINGS_MODULE="palazzo_site.settings"
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (data_dir / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--bind", f"127.0.0.1:{port}"], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        warm_up = "".join(
            json.dumps(item) + "\n" for item in items([f"warm-up memory {i}" for i in range(32)])
        ).encode()
        httpx.post(f"{base}/ingest", content=warm_up, headers={"Content-Type": "application/x-ndjson"}, timeout=120)
        started = time.perf_counter()
        done = None
        with (
            path.open("rb") as source,
            httpx.stream(
                "POST",
                f"{base}/ingest",
                content=source,
                headers={"Content-Type": "application/x-ndjson"},
                timeout=httpx.Timeout(30, read=None),
            ) as response,
        ):
            for raw in response.iter_lines():
                if raw:
                    done = json.loads(raw)
        seconds = time.perf_counter() - started
        if not done or not done.get("done") or done["counts"]["stored"] != count:
            print(f"POST /ingest did not store everything: {done}")
        children = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout.split()
        rss = max([peak_rss_mib(server.pid)] + [peak_rss_mib(int(pid)) for pid in children])
        return count / seconds, rss
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=5000, help="memories per path (default 5000)")
    args = parser.parse_args()
    count = args.count

    setup_throwaway_palace()
    from django.core.management import call_command

    from palace.engine import runtime
    from palace.writes import services

    palace = runtime.get_palace()
    texts = make_texts(count, seed=11)
    palace.embedder.backend.embed_documents(texts[:32])  # warm-up

    started = time.perf_counter()
    for start in range(0, count, 256):
        palace.embedder.backend.embed_documents(texts[start : start + 256])
    raw_rate = count / (time.perf_counter() - started)
    print(f"raw embedding (256/batch):   {raw_rate:8.1f} items/s")

    source = Path(os.environ["PALAZZO_DATA_DIR"]) / "ingest.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in items(texts)))
    err = io.StringIO()
    started = time.perf_counter()
    try:
        call_command("ingest", file=str(source), stderr=err)
    except SystemExit:
        print(f"ingest reported failures: {err.getvalue().strip()}")
    ingest_rate = count / (time.perf_counter() - started)

    singles = [f"{text} (single)" for text in texts]
    started = time.perf_counter()
    for item in items(singles):
        services.store(**item)
    single_rate = count / (time.perf_counter() - started)
    runtime.close_palace()

    http_rate, server_rss = post_ingest(source, count)

    print(
        f"manage.py ingest:            {ingest_rate:8.1f} items/s = {ingest_rate / raw_rate:.2f}x raw embedding, "
        f"{ingest_rate / single_rate:.1f}x single store"
    )
    print(
        f"POST /ingest:                {http_rate:8.1f} items/s = {http_rate / raw_rate:.2f}x raw embedding, "
        f"{http_rate / single_rate:.1f}x single store"
    )
    print(f"{count} single palace_store:  {single_rate:8.1f} items/s")
    print(
        f"peak RSS: this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
        f"server {server_rss:.0f} MiB"
    )


if __name__ == "__main__":
    main()
