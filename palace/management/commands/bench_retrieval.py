"""python manage.py bench_retrieval: retrieval quality of find on a LoCoMo-format directory.

Ingests corpus_<granularity>.jsonl into a throwaway palace (its own data dir and SQLite database;
the configured palace is never touched), runs every query of queries_<granularity>.jsonl through
palace.reads.selectors.find restricted to its conversation (room), and prints R@k, Hit@k and MRR overall
and per category, beside the chance level of a random ranking of the same conversation.

--answer (session granularity) measures what an agent reads instead: each query goes through find with
an agent's default arguments (query and room only), and the share of its evidence turns
(queries_turn.jsonl's gold ids, their text from corpus_turn.jsonl) that stand verbatim in the answer's
JSON text is printed overall and per category, with the answer's size, beside the same for whole
memories at the old default (limit 5, no budget) in the same run.

--ceiling (with --answer) adds what bounds that share: find's page refitted to the default budget by
scorers find does not have. "oracle@10" and "oracle@20" know the evidence turns and take them first from
a page of 10 or 20 memories (what the page itself holds within the budget); "lines@10" scores every
line of the page of 10 by its own vector (each line embedded for the study: palazzo stores a vector per
window of up to 400 characters, not per line) with find's keyword and rank weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from palace.engine import runtime
from palace.errors import PalaceError
from palace.reads import passages, selectors
from palace.schema.forms import DEFAULT_FIND_LIMIT, MAX_FIND_LIMIT, MAX_MAX_CHARS, MIN_MAX_CHARS
from palace.schema.vocabulary import active_vocabulary
from palace.writes import services

MODES = {"hybrid": "hybrid", "dense": "dense", "bm25": "keyword"}
BATCH = 256


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every JSON object of a JSON-lines file."""
    if not path.is_file():
        raise CommandError(f"{path} does not exist")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def rfc3339(timestamp: str | None) -> str | None:
    """The record's timestamp with a zone (LoCoMo's are naive; read as UTC)."""
    if not timestamp:
        return None
    return timestamp if timestamp.endswith("Z") or "+" in timestamp[10:] else timestamp + "Z"


def recall_at(ranked: Sequence[set[str]], gold: set[str], k: int) -> float:
    """Fraction of the gold ids among the first k ranked results."""
    found: set[str] = set().union(*ranked[:k]) if ranked[:k] else set()
    return len(found & gold) / len(gold)


def reciprocal_rank(ranked: Sequence[set[str]], gold: set[str]) -> float:
    """1 / (1-based rank of the first result holding a gold id), 0 if none does."""
    for rank, ids in enumerate(ranked, start=1):
        if ids & gold:
            return 1.0 / rank
    return 0.0


def chance(size: int, gold: int, k: int, depth: int) -> tuple[float, float, float]:
    """Expected R@k, Hit@k and MRR (over the first depth ranks) of a uniformly random ranking."""
    if size == 0:
        return 0.0, 0.0, 0.0
    top = min(k, size)
    hit = 1.0 - math.comb(size - gold, top) / math.comb(size, top)
    mrr = sum(math.comb(size - r, gold - 1) / math.comb(size, gold) / r for r in range(1, min(depth, size) + 1))
    return top / size, hit, mrr


class Command(BaseCommand):
    help = "Measure find's retrieval quality on a LoCoMo-format directory (corpus_*.jsonl, queries_*.jsonl)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--data", required=True, type=Path, help="directory with corpus_/queries_ files")
        parser.add_argument("--granularity", required=True, choices=("turn", "session"))
        parser.add_argument("--k", type=int, nargs="+", default=[5, 10], help=f"cut-offs, 1..{MAX_FIND_LIMIT}")
        parser.add_argument("--out", type=Path, help='write {"qid", "ranked_ids"} JSON lines here')
        parser.add_argument("--mode", choices=tuple(MODES), default="hybrid", help="ranking to measure")
        parser.add_argument(
            "--answer", action="store_true", help="measure the evidence in find's default answer (session granularity)"
        )
        parser.add_argument(
            "--budgets", type=int, nargs="*", default=[], help="with --answer: also measure find with these max_chars"
        )
        parser.add_argument(
            "--ceiling",
            action="store_true",
            help="with --answer: also refit find's page with an evidence oracle and with a vector per line",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ks: list[int] = sorted(set(options["k"]))
        if any(k < 1 or k > MAX_FIND_LIMIT for k in ks):
            raise CommandError(f"--k values must be between 1 and {MAX_FIND_LIMIT} (find's limit)")
        data: Path = options["data"]
        granularity: str = options["granularity"]
        if options["answer"] and granularity != "session":
            raise CommandError("--answer measures passages of whole sessions: use --granularity session")
        if (options["ceiling"] or options["budgets"]) and not options["answer"]:
            raise CommandError("--ceiling and --budgets measure answers: add --answer")
        if any(not MIN_MAX_CHARS <= budget <= MAX_MAX_CHARS for budget in options["budgets"]):
            raise CommandError(
                f"--budgets values must be between {MIN_MAX_CHARS} and {MAX_MAX_CHARS} (find's max_chars)"
            )
        corpus = read_jsonl(data / f"corpus_{granularity}.jsonl")
        queries = read_jsonl(data / f"queries_{granularity}.jsonl")
        if options["answer"]:
            turns = {record["id"]: record["text"] for record in read_jsonl(data / "corpus_turn.jsonl")}
            evidence = {
                query["qid"]: [turns[turn] for turn in query.get("gold_ids") or [] if turn in turns]
                for query in read_jsonl(data / "queries_turn.jsonl")
            }
            options["evidence"] = evidence
        with tempfile.TemporaryDirectory(prefix="palazzo-bench-retrieval-") as scratch:
            original = settings.PALAZZO
            original_db = dict(connections["default"].settings_dict)
            try:
                self._open_throwaway_palace(Path(scratch))
                self._run(corpus, queries, ks, options)
            except PalaceError as exc:
                raise CommandError(str(exc)) from None
            finally:
                runtime.close_palace()
                connections["default"].close()
                connections["default"].settings_dict = original_db
                settings.PALAZZO = original

    def _open_throwaway_palace(self, scratch: Path) -> None:
        # The model loads with the configured settings; the store, journal and database are scratch ones.
        runtime.get_embedder()
        runtime.close_palace()
        settings.PALAZZO = dataclasses.replace(
            settings.PALAZZO,
            data_dir=scratch,
            wal_path=scratch / "wal.jsonl",
            usage_log=None,
            qdrant_url=None,
            read_only=False,
        )
        connection = connections["default"]
        connection.close()
        connection.settings_dict = {
            **connection.settings_dict,
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(scratch / "bench.sqlite3"),
        }
        call_command("migrate", verbosity=0)

    def _run(
        self, corpus: list[dict[str, Any]], queries: list[dict[str, Any]], ks: list[int], options: dict[str, Any]
    ) -> None:
        env = active_vocabulary()
        ranking = MODES[options["mode"]]
        started = time.perf_counter()
        runtime.get_palace()
        corpus_ids: dict[int, list[tuple[str, str]]] = defaultdict(list)
        size: dict[str, int] = defaultdict(int)
        merged = 0
        for start in range(0, len(corpus), BATCH):
            records = corpus[start : start + BATCH]
            result = services.store_batch(
                items=[
                    {
                        "text": record["text"],
                        "category": env.categories[0],
                        "wing": env.wings[0],
                        "room": record["conversation"],
                        "hall": env.halls[0],
                        "session": record.get("session"),
                        "timestamp": rfc3339(record.get("timestamp")),
                    }
                    for record in records
                ]
            )
            for record, outcome in zip(records, result["items"]):
                if outcome["status"] == "failed":
                    raise CommandError(f"corpus record {record['id']} was refused: {outcome['error']}")
                memory = outcome["memory"]
                merged += outcome["status"] != "stored"
                corpus_ids[memory["id"]].append((record["id"], record["conversation"]))
                size[memory["room"]] += outcome["status"] == "stored"
        ingest_seconds = time.perf_counter() - started
        if merged:
            self.stdout.write(
                f"note: {merged} corpus records have the text of an earlier record and were merged into its "
                "memory (store dedup); a result for that memory counts as every corpus id of the query's "
                "conversation with that text, and a record merged into another conversation's memory cannot be found"
            )

        if options["answer"]:
            self._answers(queries, options["evidence"], ingest_seconds, len(corpus), options)
            return
        depth = MAX_FIND_LIMIT
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        counts: dict[str, int] = defaultdict(int)
        skipped = 0
        out = options["out"].open("w", encoding="utf-8") if options["out"] else None
        started = time.perf_counter()
        try:
            for query in queries:
                gold = set(query.get("gold_ids") or [])
                if not gold:
                    skipped += 1
                    continue
                found = selectors.find(
                    query=query["query"], limit=depth, room=query["conversation"], ranking=ranking, whole=True
                )
                ranked = [
                    {
                        cid
                        for cid, conversation in corpus_ids.get(memory["id"], [])
                        if conversation == query["conversation"]
                    }
                    for memory in found["results"]
                ]
                if out:
                    flat = [cid for ids in ranked for cid in sorted(ids)]
                    out.write(json.dumps({"qid": query["qid"], "ranked_ids": flat}) + "\n")
                metrics = {f"R@{k}": recall_at(ranked, gold, k) for k in ks}
                metrics |= {f"Hit@{k}": float(any(ids & gold for ids in ranked[:k])) for k in ks}
                metrics["MRR"] = reciprocal_rank(ranked, gold)
                for k in ks:
                    r, h, m = chance(size[query["conversation"]], len(gold), k, depth)
                    metrics[f"chance R@{k}"], metrics[f"chance Hit@{k}"] = r, h
                metrics["chance MRR"] = m
                for group in ("all", f"{query.get('category', '?')} {query.get('category_name', '')}".strip()):
                    counts[group] += 1
                    for name, value in metrics.items():
                        sums[group][name] += value
        finally:
            if out:
                out.close()
        query_seconds = time.perf_counter() - started
        self._report(sums, counts, ks, options, ingest_seconds, query_seconds, skipped, len(corpus))

    def _answers(
        self,
        queries: list[dict[str, Any]],
        evidence: dict[str, list[str]],
        ingest_seconds: float,
        corpus_size: int,
        options: dict[str, Any],
    ) -> None:
        # Before: whole memories at the old default (limit 5, no budget); after: an agent's default find.
        readers = {
            "whole@5": lambda query: selectors.find(
                query=query["query"], room=query["conversation"], limit=5, whole=True
            ),
            "default": lambda query: selectors.find(query=query["query"], room=query["conversation"]),
        }
        for budget in options["budgets"]:
            readers[f"{budget} ch"] = partial(self._find_within, max_chars=budget)
        if options["ceiling"]:
            readers |= self._ceiling_readers(queries, evidence)
        found: dict[str, dict[str, int]] = {name: defaultdict(int) for name in readers}
        sizes: dict[str, list[int]] = {name: [] for name in readers}
        envelopes: dict[str, list[int]] = {name: [] for name in readers}
        totals: dict[str, int] = defaultdict(int)
        started = time.perf_counter()
        for query in queries:
            turns = evidence.get(query["qid"]) or []
            if not turns:
                continue
            group = f"{query.get('category', '?')} {query.get('category_name', '')}".strip()
            for key in ("all", group):
                totals[key] += len(turns)
            for name, read in readers.items():
                answer = passages.compact_answer(read(query))
                text = json.dumps(answer, ensure_ascii=False)
                sizes[name].append(len(text))
                envelopes[name].append(len(text) - sum(_text_chars(result) for result in answer["results"]))
                held = sum(1 for turn in turns if json.dumps(turn, ensure_ascii=False)[1:-1] in text)
                for key in ("all", group):
                    found[name][key] += held
        query_seconds = time.perf_counter() - started
        self.stdout.write(
            f"bench_retrieval {options['data']} answer mode model={runtime.get_embedder().model_name}: "
            f"{corpus_size} sessions, {len(sizes['default'])} queries with evidence; the share of evidence turns "
            "verbatim in the answer's JSON text"
        )
        self.stdout.write(f"{'group':<16}{'turns':>6}" + "".join(f"{name:>10}" for name in readers))
        for key in ["all", *sorted(key for key in totals if key != "all")]:
            shares = "".join(f"{found[name][key] / totals[key]:>10.3f}" for name in readers)
            self.stdout.write(f"{key:<16}{totals[key]:>6}{shares}")
        for label, pick in (("mean chars", _mean), ("p95 chars", _p95)):
            self.stdout.write(f"{label:<22}" + "".join(f"{pick(sizes[name]):>10.0f}" for name in readers))
        shares = "".join(f"{sum(envelopes[name]) / max(1, sum(sizes[name])):>10.2f}" for name in readers)
        self.stdout.write(f"{'envelope share':<22}{shares}")
        self.stdout.write(
            f"whole@5: whole memories, limit 5 (find's answer before passages); default: query and room only "
            f"(limit {DEFAULT_FIND_LIMIT}, max_chars by the page: passages.default_budget). "
            f"Ingest {ingest_seconds:.1f} s, queries {query_seconds:.1f} s"
        )
        if options["ceiling"]:
            self.stdout.write(
                "oracle@N: find's page of N whole memories refitted to the default budget by a scorer "
                "that takes the evidence turns first (what the page holds); lines@10: the page of "
                f"{DEFAULT_FIND_LIMIT} refitted with a vector for every line (study only) and find's keyword and "
                "rank weights"
            )

    @staticmethod
    def _find_within(query: dict[str, Any], *, max_chars: int) -> dict[str, Any]:
        return selectors.find(query=query["query"], room=query["conversation"], max_chars=max_chars)

    def _ceiling_readers(
        self, queries: list[dict[str, Any]], evidence: dict[str, list[str]]
    ) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """Find's page refitted to the default budget by an evidence oracle, and by a vector for every line."""
        embedder = runtime.get_embedder()
        # Each query's page of the default size, found once: its lines are embedded here, and both the
        # oracle and the line vectors refit it.
        pages = {query["qid"]: self._whole_page(query, DEFAULT_FIND_LIMIT) for query in queries}
        lines = sorted(
            {
                line
                for page in pages.values()
                for memory in page["results"]
                for line in memory["text"].split("\n")
                if line.strip()
            }
        )
        self.stderr.write(f"ceiling: embedding {len(lines)} lines of the pages, one vector each")
        vectors = {line: matrix[0] for line, matrix in zip(lines, embedder.documents(lines))}

        def oracle(query: dict[str, Any], limit: int) -> dict[str, Any]:
            wanted = set(evidence.get(query["qid"]) or [])

            def score(_: str, pieces: Sequence[str], ranks: Sequence[int]) -> list[float]:
                return [float(piece in wanted) + 0.01 / (rank + 1) for piece, rank in zip(pieces, ranks)]

            page = pages[query["qid"]] if limit == DEFAULT_FIND_LIMIT else self._whole_page(query, limit)
            return self._refit(query, page, score)

        def by_line(query: dict[str, Any]) -> dict[str, Any]:
            asked = embedder.query(query["query"])

            def score(question: str, pieces: Sequence[str], ranks: Sequence[int]) -> list[float]:
                dense = [float(vectors[piece] @ asked) if piece in vectors else 0.0 for piece in pieces]
                keyword = passages.keyword_scores(question, pieces)
                return passages.combined_scores(dense=dense, keyword=keyword, ranks=ranks)

            return self._refit(query, pages[query["qid"]], score)

        return {
            "oracle@10": partial(oracle, limit=DEFAULT_FIND_LIMIT),
            "oracle@20": partial(oracle, limit=MAX_FIND_LIMIT),
            "lines@10": by_line,
        }

    @staticmethod
    def _whole_page(query: dict[str, Any], limit: int) -> dict[str, Any]:
        """Find's page of whole memories, as the default answer is cut from."""
        return selectors.find(query=query["query"], room=query["conversation"], limit=limit, whole=True)

    @staticmethod
    def _refit(query: dict[str, Any], page: dict[str, Any], scorer: passages.UnitScorer) -> dict[str, Any]:
        """A page of whole memories cut to the default budget by another unit scorer."""
        hits = [passages.Hit(rank=rank, memory=memory) for rank, memory in enumerate(page["results"])]
        envelope = {key: page[key] for key in ("count", "degraded", "degraded_reason")}
        budget = passages.default_budget([str(memory["text"]) for memory in page["results"]])
        return passages.fit(query=query["query"], hits=hits, envelope=envelope, max_chars=budget, scorer=scorer)

    def _report(
        self,
        sums: dict[str, dict[str, float]],
        counts: dict[str, int],
        ks: list[int],
        options: dict[str, Any],
        ingest_seconds: float,
        query_seconds: float,
        skipped: int,
        corpus_size: int,
    ) -> None:
        names = [f"R@{k}" for k in ks] + [f"Hit@{k}" for k in ks] + ["MRR"]
        answered = counts.get("all", 0)
        self.stdout.write(
            f"bench_retrieval {options['data']} granularity={options['granularity']} mode={options['mode']} "
            f"model={runtime.get_embedder().model_name}: {corpus_size} records, {answered} queries"
            + (f" ({skipped} without gold skipped)" if skipped else "")
        )
        self.stdout.write(f"{'group':<16}{'n':>5}" + "".join(f"{name:>9}" for name in names))
        groups = ["all", *sorted(group for group in counts if group != "all")]
        for group in groups:
            n = counts[group]
            self.stdout.write(f"{group:<16}{n:>5}" + "".join(f"{sums[group][name] / n:>9.3f}" for name in names))
        if answered:
            self.stdout.write(
                f"{'chance (all)':<16}{answered:>5}"
                + "".join(f"{sums['all']['chance ' + name] / answered:>9.3f}" for name in names)
            )
        self.stdout.write(
            f"MRR is over the first {MAX_FIND_LIMIT} results (find's limit). Ingest {ingest_seconds:.1f} s, "
            f"queries {query_seconds:.1f} s ({1000 * query_seconds / max(answered, 1):.1f} ms per find)"
        )


def _text_chars(result: dict[str, Any]) -> int:
    """A result's memory text as its answer's JSON text holds it (the rest of the answer is its envelope)."""
    return len(json.dumps(result.get("text", ""), ensure_ascii=False))


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _p95(values: list[int]) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]) if ordered else 0.0
