"""The passages of a find: the parts of each hit that answer the query, within one character budget.

A memory is stored whole (a session, an exchange of a coding session: often 2-23 KB), but an agent
needs the part that answers. A memory up to WHOLE_CHARS comes back whole; a longer one is cut into
units at its lines (a conversation's turns, a transcript's lines), an over-long line at sentence ends
and then at spaces, so a passage never splits a turn line, a sentence when it can help it, or a
character. Units are scored against the query with BM25 over the units of the whole page (so a word
common to every hit counts for little) plus a prior for the hit's rank, and the budget is filled best
unit first: more hits with short passages beat fewer whole ones. Units of one memory that touch are
merged into one passage. The budget's bounds are the find form's (palace.schema.forms).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from palace.schema.forms import MAX_MAX_CHARS

# A memory this short comes back whole: cutting it saves less than the passage offsets cost.
WHOLE_CHARS = 800
# The longest unit: a longer line is cut at sentence ends, then at spaces.
MAX_UNIT_CHARS = 600
# Between two passages of one memory's text.
ELISION = "\n[…]\n"
# How a unit is scored: its chunk's cosine to the query (the dense multivector the search already
# ranked with), its BM25 for the query's words scaled so the page's best unit scores 1, and a prior
# for its hit's rank (the first hit's units gain RANK_PRIOR, the second's half of that: 1 / rank).
# Chosen on two of the five LoCoMo development conversations and checked on the other three
# (docs/benchmarks.md); checked again with 400-character windows (2026-12-04): no grid of the keyword
# and rank weights moved the other three by more than a point. Without a dense leg (keyword ranking,
# embedder down) words and rank alone.
DENSE_WEIGHT = 1.0
KEYWORD_WEIGHT = 0.3
RANK_PRIOR = 0.2
KEYWORD_ONLY_PRIOR = 0.5
# A fed exchange (palace.feeding) starts with its prompt: any passage of it comes with the prompt's
# first unit, which says what the reply answers.
EXCHANGE_PROMPT = "User: "

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?…。])\s+")
# Words that carry no meaning of their own: they match every unit and would only add noise.
_STOP_TEXT = (
    "a an and are as at be been by did do does for from had has have he her his how i in is it its "
    "me my of on or our she that the their them they this to was we were what when where which who "
    "why with you your"
)
_STOP_WORDS = frozenset(_STOP_TEXT.split())
_K1 = 1.2
_B = 0.75


# Scores the units of a page for a query: (query, each unit's text, its hit's rank) -> one score per unit,
# higher first. The default is the find's own (chunk cosines, keywords, rank); bench_retrieval's ceiling
# study plugs in others (an oracle that knows the evidence, a vector for every line).
UnitScorer = Callable[[str, Sequence[str], Sequence[int]], Sequence[float]]


@dataclass(frozen=True)
class Unit:
    """A piece of one memory's text: [start, end) in characters (code points) of that text."""

    hit: int
    start: int
    end: int


@dataclass(frozen=True)
class Hit:
    """One search result to cut: its rank in the page (0 first), its memory as callers see it, and the
    [start, end) span and query cosine of each of its dense chunks (none when it has no dense vector)."""

    rank: int
    memory: dict[str, Any]
    chunks: tuple[tuple[int, int, float], ...] = ()

    def dense_at(self, position: int) -> float | None:
        """The cosine of the chunk that holds this character, if the hit has chunk scores."""
        for start, end, cosine in self.chunks:
            if start <= position < end or start == end == position:
                return cosine
        return None


def units_of(text: str) -> list[tuple[int, int]]:
    """The [start, end) units of a text: its non-blank lines, an over-long line cut at sentences, then spaces."""
    spans: list[tuple[int, int]] = []
    position = 0
    for line in text.split("\n"):
        start, end = position, position + len(line)
        position = end + 1
        if not line.strip():
            continue
        if len(line) <= MAX_UNIT_CHARS:
            spans.append((start, end))
            continue
        spans.extend(_cut_long(text, start, end))
    return spans


def _cut_long(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """One over-long line as spans of at most MAX_UNIT_CHARS, cut after sentence ends where it can."""
    cuts = [start] + [match.end() for match in _SENTENCE_END.finditer(text, start, end)] + [end]
    spans: list[tuple[int, int]] = []
    piece_start = start
    for previous, cut in itertools.pairwise(cuts):
        if cut - piece_start <= MAX_UNIT_CHARS:
            continue
        if previous > piece_start:
            spans.append((piece_start, previous))
            piece_start = previous
        while cut - piece_start > MAX_UNIT_CHARS:  # one sentence longer than a unit: cut at a space
            limit = piece_start + MAX_UNIT_CHARS
            space = text.rfind(" ", piece_start + MAX_UNIT_CHARS // 2, limit)
            stop = space + 1 if space > piece_start else limit
            spans.append((piece_start, stop))
            piece_start = stop
    if piece_start < end:
        spans.append((piece_start, end))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def words(text: str) -> list[str]:
    """The meaningful words of a text, lowercased."""
    return [word for word in _WORD.findall(text.lower()) if word not in _STOP_WORDS]


def compact_answer(answer: dict[str, Any], *, key: str = "results") -> dict[str, Any]:
    """An answer as the tool's text carries it: each memory (under key) without its null fields."""
    return answer | {key: [_compact(memory) for memory in answer.get(key, [])]}


def answer_chars(answer: dict[str, Any], *, key: str = "results") -> int:
    """The length of an answer's JSON text as an MCP client reads it."""
    return len(json.dumps(compact_answer(answer, key=key), ensure_ascii=False))


def _compact(memory: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in memory.items() if value is not None}


def fit(
    *,
    query: str | None,
    hits: Sequence[Hit],
    envelope: dict[str, Any],
    max_chars: int,
    key: str = "results",
    scorer: UnitScorer | None = None,
) -> dict[str, Any]:
    """The answer (envelope plus the hits under key) with each hit whole or cut to passages, within max_chars.

    Results keep their rank order; with a query, a hit none of whose text fits is left out, and "cut"
    says what was and how to read more. Without one (a listing), every memory's opening comes before
    any memory's second unit, and only a tail of the page is ever left out (its next page holds it).
    scorer replaces the find's own unit scores (benchmarks only).
    """
    texts = [str(hit.memory.get("text") or "") for hit in hits]
    units: list[Unit] = []
    whole: set[int] = set()
    for index, text in enumerate(texts):
        if len(text) <= WHOLE_CHARS:
            whole.add(index)
            units.append(Unit(index, 0, len(text)))
        else:
            units.extend(Unit(index, start, end) for start, end in units_of(text))
    heads = {unit.hit: unit for unit in reversed(units)}  # each hit's first unit
    if query is None:  # a listing: round by round, each memory's next unit, newest memory first
        position = {unit: index for index, unit in enumerate(units)}
        scores = [-(position[unit] - position[heads[unit.hit]]) - unit.hit / (len(hits) + 1) for unit in units]
    else:
        pieces = [texts[unit.hit][unit.start : unit.end] for unit in units]
        ranks = [hits[unit.hit].rank for unit in units]
        if scorer is None:
            scores = _scores(query, pieces, ranks, [hits[unit.hit].dense_at(unit.start) for unit in units])
        else:
            scores = list(scorer(query, pieces, ranks))
    order = sorted(range(len(units)), key=lambda i: (-scores[i], units[i].hit, units[i].start))
    score_of = {unit: scores[i] for i, unit in enumerate(units)}
    chosen: dict[int, list[Unit]] = {}
    spent = answer_chars(envelope | {key: [], "cut": _cut_note(len(hits), len(hits))}, key=key)
    # What a hit costs before its first passage: its fields as JSON (computed once, not per unit considered).
    shells = [
        len(json.dumps(_compact(_shaped(hit.memory, texts[index], [], index in whole)), ensure_ascii=False)) + 2
        for index, hit in enumerate(hits)
    ]
    for i in order:
        unit = units[i]
        taking = [unit]
        head = heads[unit.hit]
        if unit.hit not in chosen and head is not unit and texts[unit.hit].startswith(EXCHANGE_PROMPT):
            taking.insert(0, head)
        taking = [piece for piece in taking if piece not in chosen.get(unit.hit, ())]
        # Each piece as JSON, the elision before it and its {"start": .., "end": ..} entry.
        cost = sum(
            len(json.dumps(texts[piece.hit][piece.start : piece.end], ensure_ascii=False)) + len(ELISION) + 32
            for piece in taking
        )
        if unit.hit not in chosen:
            cost += shells[unit.hit]
        if not taking or spent + cost > max_chars:
            continue
        spent += cost
        chosen.setdefault(unit.hit, []).extend(taking)
    while True:
        kept = [index for index in range(len(hits)) if index in chosen]
        if query is None:  # a listing keeps a prefix of its page: what follows comes on the next page
            kept = [index for position, index in enumerate(kept) if index == position]
        results = [_shaped(hits[index].memory, texts[index], chosen[index], index in whole) for index in kept]
        omitted = len(hits) - len(results)
        shortened = sum(1 for result in results if "passages" in result)
        answer = envelope | {key: results, "count": len(results)}
        answer["cut"] = _cut_note(omitted, shortened, listing=query is None) if omitted or shortened else None
        if answer_chars(answer, key=key) <= max_chars or not chosen:
            return answer
        # The estimate ran over (JSON escapes, merged passages): give back the weakest unit.
        weakest = min(
            (unit for group in chosen.values() for unit in group),
            key=lambda unit: score_of[unit],
        )
        chosen[weakest.hit].remove(weakest)
        if not chosen[weakest.hit]:
            del chosen[weakest.hit]


def _cut_note(omitted: int, shortened: int, *, listing: bool = False) -> str:
    # Short on purpose: every character of it is one the answer's passages cannot use.
    parts = []
    if shortened:
        parts.append(f"{shortened} {'memory' if shortened == 1 else 'memories'} cut to passages")
    if omitted:
        parts.append(f"{omitted} more {'on the next page' if listing else 'left out'}")
    return (
        ", ".join(parts) + " to fit max_chars; read on with palace_recall (id, start, end) or ask with a larger "
        f"max_chars (up to {MAX_MAX_CHARS}) or a smaller limit."
    )


def _shaped(memory: dict[str, Any], text: str, units: list[Unit], whole: bool) -> dict[str, Any]:
    """The memory with text cut to its units' passages (merged where they touch) and their offsets."""
    shaped = dict(memory)
    shaped["length"] = len(text)
    if whole or not units:
        if not units:
            shaped["text"] = ""
        return shaped
    spans: list[list[int]] = []
    for unit in sorted(units, key=lambda unit: unit.start):
        if spans and not text[spans[-1][1] : unit.start].strip():
            spans[-1][1] = max(spans[-1][1], unit.end)
        else:
            spans.append([unit.start, unit.end])
    if len(spans) == 1 and spans[0] == [0, len(text)]:
        return shaped
    shaped["text"] = ELISION.join(text[start:end] for start, end in spans)
    shaped["passages"] = [{"start": start, "end": end} for start, end in spans]
    return shaped


def keyword_scores(query: str, pieces: Sequence[str]) -> list[float]:
    """Each piece's BM25 for the query's words, with IDF over these pieces, scaled so the best scores 1."""
    terms = set(words(query))
    bags = [Counter(words(piece)) for piece in pieces]
    count = len(bags)
    average = sum(sum(bag.values()) for bag in bags) / count if count else 0.0
    frequency = Counter(term for bag in bags for term in terms if bag[term])
    raw = []
    for bag in bags:
        length = sum(bag.values())
        score = 0.0
        for term in terms:
            tf = bag[term]
            if tf:
                idf = math.log(1 + (count - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / (average or 1)))
        raw.append(score)
    best = max(raw, default=0.0) or 1.0
    return [score / best for score in raw]


def combined_scores(*, dense: Sequence[float], keyword: Sequence[float], ranks: Sequence[int]) -> list[float]:
    """The find's weighting of a unit's query cosine, its scaled BM25 and its hit's rank prior."""
    return [
        DENSE_WEIGHT * cosine + KEYWORD_WEIGHT * score + RANK_PRIOR / (rank + 1)
        for cosine, score, rank in zip(dense, keyword, ranks)
    ]


def _scores(query: str, pieces: Sequence[str], ranks: Sequence[int], dense: Sequence[float | None]) -> list[float]:
    """Each piece's chunk cosine, BM25 and rank prior, weighted; words and rank alone without a dense leg."""
    keyword = keyword_scores(query, pieces)
    if all(cosine is None for cosine in dense):
        return [score + KEYWORD_ONLY_PRIOR / (rank + 1) for score, rank in zip(keyword, ranks)]
    return combined_scores(dense=[cosine or 0.0 for cosine in dense], keyword=keyword, ranks=ranks)
