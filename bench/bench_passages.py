"""What an agent reads back from real coding sessions: evidence in palace_find's answer, and its size.

Feeds the transcripts named by the question sets (real pi and Claude Code sessions in
../shared/transcripts: bench/transcript_questions.json, the set the passage scorer was checked on, and
bench/transcript_questions_heldout.json, written after it and never tuned on) into one brand-new data
dir with `manage.py feed`, starts `manage.py runmcp` and asks every question through the MCP SDK client,
twice in one run: as an agent calls palace_find by default (query only) and as find answered before
passages (limit 5, whole memories: max_chars at its ceiling). Prints, for each set and for all, the
share of questions whose evidence (a verbatim snippet of the exchange that answers) stands in the answer
text, and the answer's mean and p95 size in characters. Figures only; it never asserts.

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

ROOT = Path(__file__).resolve().parent.parent
QUESTION_SETS = {
    "pi": Path(__file__).resolve().parent / "transcript_questions.json",
    "claude-code (held out)": Path(__file__).resolve().parent / "transcript_questions_heldout.json",
}
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
    sets = {name: json.loads(path.read_text(encoding="utf-8")) for name, path in QUESTION_SETS.items()}
    files = list(
        dict.fromkeys(options.shared / "transcripts" / name for spec in sets.values() for name in spec["transcripts"])
    )
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        sys.exit(f"missing transcripts: {', '.join(missing)}")
    questions = [item | {"set": name} for name, spec in sets.items() for item in spec["questions"]]
    with tempfile.TemporaryDirectory(prefix="palazzo-bench-passages-") as scratch:
        feed(Path(scratch), files)
        answers = asyncio.run(ask(Path(scratch), questions))
    print(f"bench_passages: {len(questions)} questions about {len(files)} real sessions, fed into one palace")
    print(f"{'questions':<24}{'answer':<10}{'evidence':>10}{'mean chars':>12}{'p95 chars':>11}")
    for group in [*sets, "all"]:
        for name, rows in answers.items():
            chosen = [row for item, row in zip(questions, rows) if group in ("all", item["set"])]
            sizes = sorted(size for _, size in chosen)
            share = sum(held for held, _ in chosen) / len(chosen)
            p95 = sizes[min(len(sizes) - 1, int(0.95 * len(sizes)))]
            label = f"{group} ({len(chosen)})"
            print(f"{label:<24}{name:<10}{share:>10.2f}{statistics.mean(sizes):>12.0f}{p95:>11}")
    for item, (held, _) in zip(questions, answers["default"]):
        if not held:
            print(f"default missed ({item['set']}): {item['question']}")
    print(f"default: query only (palace_find's defaults); whole@5: {WHOLE} (whole memories, as before passages)")


if __name__ == "__main__":
    main()
