"""What an agent reads back from real coding sessions: evidence in palace_find's answer against its size.

Feeds the transcripts named by the question sets (real pi and Claude Code sessions in ../shared/transcripts)
into one brand-new data dir with `manage.py feed`, starts `manage.py runmcp` and asks every question
through the MCP SDK client: as an agent calls palace_find by default (query only), with max_chars at
each budget of the curve, and as find answered before passages (limit 5, whole memories). Prints per
set the share of questions whose evidence (a verbatim snippet of the exchange that answers) stands in
the answer text, the answer's mean size and the share of it that is not memory text (the envelope:
ids, filing, offsets, the cut note), then why the default missed each question it missed:

- not on the page: no memory of find's page (10 whole memories) holds the evidence;
- memory left out: the memory that holds it is on the page but none of its text fit;
- split: part of the evidence stands in the answer (its first or last 40 characters), not all of it;
- envelope: the page refitted with the answer's envelope characters given to text holds it;
- crowded out: the memory alone, refitted to the same budget, holds it (other hits' passages won);
- another part: even alone, the memory's chosen passages are other parts of the exchange.

The sets: bench/transcript_questions.json (pi sessions, the development set the passage scorer was
checked on), bench/transcript_questions_heldout.json and bench/transcript_questions_heldout2.json
(Claude Code sessions, written without seeing search results and never tuned on). Figures only; it
never asserts.

Usage: python bench/bench_passages.py [--shared ../shared] [--sets pi held-out ...]
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
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_core import release_holder  # noqa: E402

HERE = Path(__file__).resolve().parent
QUESTION_SETS = {
    "pi (dev)": HERE / "transcript_questions.json",
    "cc held-out": HERE / "transcript_questions_heldout.json",
    "cc held-out 2": HERE / "transcript_questions_heldout2.json",
}
BUDGETS = (2000, 4000, 6000, 9000, 12000, 18000, 24000)
# find before passages: its old default page of whole memories (the ceiling budget leaves them whole).
WHOLE = {"limit": 5, "max_chars": 100_000}
# find's page as the default answer is cut from: the default limit, whole.
PAGE = {"max_chars": 100_000}
EDGE = 40


def _environment(data_dir: Path) -> dict[str, str]:
    return os.environ | {"PALAZZO_DATA_DIR": str(data_dir), "PALAZZO_LOG_LEVEL": "warning"}


def feed(data_dir: Path, files: list[Path]) -> None:
    """The real `manage.py feed` into a new data dir."""
    manage = [sys.executable, "manage.py"]
    env = _environment(data_dir)
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "feed", *map(str, files)], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def readers() -> dict[str, dict[str, Any]]:
    """The finds asked per question: the default, each budget of the curve, whole memories, the page."""
    curve = {f"{budget // 1000}k": {"max_chars": budget} for budget in BUDGETS}
    return {"default": {}} | curve | {"whole@5": WHOLE, "page@10": PAGE}


def needle(evidence: str) -> str:
    """The evidence as it stands in an answer's JSON text (quotes and backslashes escaped)."""
    return json.dumps(evidence, ensure_ascii=False)[1:-1]


def envelope_chars(answer: dict[str, Any], size: int) -> int:
    """The characters of an answer's JSON text that are not memory text."""
    texts = sum(len(json.dumps(result.get("text", ""), ensure_ascii=False)) for result in answer.get("results", []))
    return size - texts


async def ask(data_dir: Path, questions: list[dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """Each question through palace_find over stdio, once per reader: the answer, its size and envelope."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["manage.py", "runmcp"], cwd=ROOT, env=_environment(data_dir)
    )
    rows: list[dict[str, dict[str, Any]]] = []
    async with Client(params, mode="legacy", read_timeout_seconds=300) as client:
        for item in questions:
            row = {}
            for name, extra in readers().items():
                result = await client.call_tool("palace_find", {"query": item["question"], **extra})
                text = result.content[0].text  # type: ignore[union-attr]
                answer = json.loads(text)
                row[name] = {
                    "held": needle(item["evidence"]) in text,
                    "size": len(text),
                    "envelope": envelope_chars(answer, len(text)),
                    "answer": answer,
                }
            rows.append(row)
    return rows


def exchange_part(text: str, position: int) -> str:
    """Where in a fed exchange a character stands: prompt, tool-call, tool-output, reasoning or conclusion."""
    from palace.reads.passages import EXCHANGE_REPLY, TOOL_STEP, conclusion_start

    reply = text.find(EXCHANGE_REPLY)
    if reply < 0 or position < reply:
        return "prompt"
    start = text.rfind("\n\n", 0, position + 1)
    start = 0 if start < 0 else start + 2
    end = text.find("\n\n", position)
    block = text[start : len(text) if end < 0 else end]
    if block.startswith(TOOL_STEP[2:]):
        arrow = block.find("] -> ")
        return "tool-output" if 0 <= arrow < position - start else "tool-call"
    concludes = conclusion_start(text)
    return "conclusion" if concludes is not None and position >= concludes else "reasoning"


def diagnose(data_dir: Path, questions: list[dict[str, Any]], rows: list[dict[str, dict[str, Any]]]) -> list[str]:
    """Why the default missed each question it missed (see the module docstring), in question order."""
    release_holder(data_dir)
    os.environ.update(_environment(data_dir))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "palazzo_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from palace.reads import passages, selectors

    causes = []
    for item, row in zip(questions, rows):
        default = row["default"]
        if default["held"]:
            causes.append("")
            continue
        wanted = needle(item["evidence"])
        budget, envelope, hits = selectors.find_page(query=item["question"])
        holder = next((hit for hit in hits if item["evidence"] in str(hit.memory.get("text") or "")), None)
        if holder is None:
            causes.append("not on the page")
            continue
        text = str(holder.memory["text"])
        part = exchange_part(text, text.index(item["evidence"]))
        shown = next((result for result in default["answer"]["results"] if result["id"] == holder.memory["id"]), None)
        if shown is None:
            cause = "memory left out"
        elif any(needle(edge) in json.dumps(shown["text"], ensure_ascii=False) for edge in _edges(item["evidence"])):
            cause = "split"
        elif _holds(passages, item, hits, envelope, budget + default["envelope"], wanted):
            cause = "envelope"
        elif _holds(passages, item, [holder], envelope, budget, wanted):
            cause = "crowded out"
        else:
            cause = "another part"
        causes.append(f"{cause} ({part}, rank {holder.rank + 1})")
    return causes


def _edges(evidence: str) -> tuple[str, str]:
    return evidence[:EDGE], evidence[-EDGE:]


def _holds(
    passages: Any, item: dict[str, Any], hits: list[Any], envelope: dict[str, Any], budget: int, wanted: str
) -> bool:
    answer = passages.fit(query=item["question"], hits=hits, envelope=envelope, max_chars=budget)
    return wanted in passages.as_json(passages.compact_answer(answer))


def report(
    questions: list[dict[str, Any]], rows: list[dict[str, dict[str, Any]]], causes: list[str], sets: list[str]
) -> None:
    """The curves per set, the envelope's share, and the default's misses by cause."""
    names = [name for name in readers() if name != "page@10"]
    print(f"{'evidence / mean chars':<22}" + "".join(f"{name:>14}" for name in names))
    for group in [*sets, "all"]:
        chosen = [row for item, row in zip(questions, rows) if group in ("all", item["set"])]
        if not chosen:
            continue
        shares = [sum(row[name]["held"] for row in chosen) / len(chosen) for name in names]
        sizes = [statistics.mean(row[name]["size"] for row in chosen) for name in names]
        label = f"{group} ({len(chosen)})"
        print(f"{label:<22}" + "".join(f"{share:>7.2f} {size:>6.0f}" for share, size in zip(shares, sizes)))
    envelope = [
        sum(row[name]["envelope"] for row in rows) / max(1, sum(row[name]["size"] for row in rows)) for name in names
    ]
    print(f"{'envelope share (all)':<22}" + "".join(f"{share:>14.2f}" for share in envelope))
    print(f"{'default misses by cause':<22}")
    for group in [*sets, "all"]:
        counted = Counter(
            cause.split(" (")[0] for item, cause in zip(questions, causes) if cause and group in ("all", item["set"])
        )
        if counted:
            print(f"  {group}: " + ", ".join(f"{cause} {count}" for cause, count in counted.most_common()))
    for item, cause in zip(questions, causes):
        if cause:
            print(f"  missed [{item['set']}] {cause}: {item['question']}")
    print(
        f"default: query only (palace_find's defaults); Nk: max_chars N,000; whole@5: {WHOLE} (whole memories, "
        "as before passages). Envelope: the answer's characters that are not memory text."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the shared folder")
    parser.add_argument("--sets", nargs="*", choices=list(QUESTION_SETS), help="the question sets (default: all)")
    options = parser.parse_args()
    chosen = {name: path for name, path in QUESTION_SETS.items() if path.is_file()}
    if options.sets:
        chosen = {name: chosen[name] for name in options.sets if name in chosen}
    sets = {name: json.loads(path.read_text(encoding="utf-8")) for name, path in chosen.items()}
    files = list(
        dict.fromkeys(options.shared / "transcripts" / name for spec in sets.values() for name in spec["transcripts"])
    )
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        sys.exit(f"missing transcripts: {', '.join(missing)}")
    questions = [item | {"set": name} for name, spec in sets.items() for item in spec["questions"]]
    with tempfile.TemporaryDirectory(prefix="palazzo-bench-passages-") as scratch:
        feed(Path(scratch), files)
        rows = asyncio.run(ask(Path(scratch), questions))
        causes = diagnose(Path(scratch), questions, rows)
    print(f"bench_passages: {len(questions)} questions about {len(files)} real sessions, fed into one palace")
    report(questions, rows, causes, list(sets))


if __name__ == "__main__":
    main()
