"""What an agent reads back from real coding sessions: evidence in palace_find's answer, and its size.

Feeds the transcripts named in bench/transcript_questions.json (real pi sessions in
../shared/transcripts) into a brand-new data dir with `manage.py feed`, starts `manage.py runmcp` and
asks every question through the MCP SDK client, twice in one run: as an agent calls palace_find by
default (query only) and as find answered before passages (limit 5, whole memories: max_chars at its
ceiling). Prints, for each, the share of questions whose evidence (a verbatim snippet of the exchange
that answers) stands in the answer text, and the answer's mean and p95 size in characters. Figures
only; it never asserts.

Usage: python bench/bench_passages.py [--shared ../shared]
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = Path(__file__).resolve().parent / "transcript_questions.json"
# find before passages: its default page of whole memories (the ceiling budget leaves them whole).
WHOLE = {"limit": 5, "max_chars": 100_000}


def _environment(data_dir: Path) -> dict[str, str]:
    return os.environ | {"PALAZZO_DATA_DIR": str(data_dir), "PALAZZO_LOG_LEVEL": "warning"}


def feed(data_dir: Path, files: list[Path]) -> None:
    """The real `manage.py feed` into a new data dir."""
    manage = [sys.executable, "manage.py"]
    env = _environment(data_dir)
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "feed", *map(str, files)], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


async def ask(data_dir: Path, questions: list[dict[str, str]]) -> dict[str, list[tuple[bool, int]]]:
    """Each question through palace_find over stdio, the default way and the whole-memory way."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["manage.py", "runmcp"], cwd=ROOT, env=_environment(data_dir)
    )
    answers: dict[str, list[tuple[bool, int]]] = {"default": [], "whole@5": []}
    async with Client(params, mode="legacy", read_timeout_seconds=300) as client:
        for item in questions:
            for name, extra in (("default", {}), ("whole@5", WHOLE)):
                result = await client.call_tool("palace_find", {"query": item["question"], **extra})
                text = result.content[0].text  # type: ignore[union-attr]
                # The evidence as it stands in the JSON text (quotes and backslashes escaped).
                needle = json.dumps(item["evidence"], ensure_ascii=False)[1:-1]
                answers[name].append((needle in text, len(text)))
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the shared folder")
    options = parser.parse_args()
    spec: dict[str, Any] = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    files = [options.shared / "transcripts" / name for name in spec["transcripts"]]
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        sys.exit(f"missing transcripts: {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="palazzo-bench-passages-") as scratch:
        feed(Path(scratch), files)
        answers = asyncio.run(ask(Path(scratch), spec["questions"]))
    print(f"bench_passages: {len(spec['questions'])} questions about {len(files)} real pi sessions (fed)")
    print(f"{'answer':<10}{'evidence':>10}{'mean chars':>12}{'p95 chars':>11}")
    for name, rows in answers.items():
        sizes = sorted(size for _, size in rows)
        share = sum(held for held, _ in rows) / len(rows)
        p95 = sizes[min(len(sizes) - 1, int(0.95 * len(sizes)))]
        print(f"{name:<10}{share:>10.2f}{statistics.mean(sizes):>12.0f}{p95:>11}")
    missed = [item["question"] for item, (held, _) in zip(spec["questions"], answers["default"]) if not held]
    for question in missed:
        print(f"default missed: {question}")
    print(f"default: query only (palace_find's defaults); whole@5: {WHOLE} (whole memories, as before passages)")


if __name__ == "__main__":
    main()
