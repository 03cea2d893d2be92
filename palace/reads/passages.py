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

import bisect
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
ELISION_CHARS = len(json.dumps(ELISION, ensure_ascii=False)) - 2
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
EXCHANGE_REPLY = "\n\nAssistant: "
TOOL_STEP = "\n\n[tool "
# An exchange's conclusion (the reply's text after its last tool step) says what was found or done:
# its lines gain this much over lines of the steps that led there. Chosen on the pi development
# questions (bench/bench_passages.py) and checked on the held-out Claude Code ones.
CONCLUSION_PRIOR = 0.1
# find's default budget (no max_chars given): BUDGET_SHARE of the JSON text of its first BUDGET_HITS
# memories whole (the page find answered before passages), at least MIN_DEFAULT_CHARS (a page of short
# memories stays whole) and at most MAX_DEFAULT_CHARS. Chosen by the evidence-against-budget curves of
# bench_retrieval --answer and bench/bench_passages.py (docs/benchmarks.md).
BUDGET_HITS = 5
BUDGET_SHARE = 0.5
MIN_DEFAULT_CHARS = 6000
MAX_DEFAULT_CHARS = 20000

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
    """An answer as the tool's text carries it: without null fields, its memories' (under key) included."""
    return _compact(answer) | {key: [_compact(memory) for memory in answer.get(key, [])]}


def answer_chars(answer: dict[str, Any], *, key: str = "results") -> int:
    """The length of an answer's JSON text as an MCP client reads it (compact, null fields left out)."""
    return len(as_json(compact_answer(answer, key=key)))


def as_json(value: Any) -> str:
    """JSON text as the tools answer it: UTF-8 characters as they are, no spaces after separators."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _compact(memory: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in memory.items() if value is not None}


def default_budget(texts: Sequence[str]) -> int:
    """find's max_chars when the caller gives none: a share of its first memories' whole text, within bounds."""
    whole = sum(len(as_json(text)) for text in texts[:BUDGET_HITS])
    return min(MAX_DEFAULT_CHARS, max(MIN_DEFAULT_CHARS, round(BUDGET_SHARE * whole)))


def conclusion_start(text: str) -> int | None:
    """Where a fed exchange's conclusion starts (its reply's text after the last tool step); None otherwise."""
    if not text.startswith(EXCHANGE_PROMPT):
        return None
    reply = text.find(EXCHANGE_REPLY)
    if reply < 0:
        return None
    last_step = text.rfind(TOOL_STEP, reply)
    if last_step < 0 and text.startswith(TOOL_STEP[2:], reply + len(EXCHANGE_REPLY)):  # the reply opens with a step
        last_step = reply + len(EXCHANGE_REPLY) - 2
    if last_step < 0:
        return reply + 2  # no tools: the whole reply concludes
    after = text.find("\n\n", last_step + len(TOOL_STEP))
    return None if after < 0 else after + 2


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
    # The page fits whole (short memories, or a budget as large as the page): nothing to choose. Its text
    # alone is a lower bound of its JSON, so a page that cannot fit is never serialised whole to find out.
    if sum(map(len, texts)) <= max_chars:
        page = [_shaped(hit.memory, text, [], whole=True) for hit, text in zip(hits, texts)]
        answer = envelope | {key: page, "count": len(page), "cut": None}
        if answer_chars(answer, key=key) <= max_chars:
            return answer
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
            conclusions = [conclusion_start(text) for text in texts]
            for i, unit in enumerate(units):
                begins = conclusions[unit.hit]
                if begins is not None and unit.start >= begins and unit.hit not in whole:
                    scores[i] += CONCLUSION_PRIOR
        else:
            scores = list(scorer(query, pieces, ranks))
    order = sorted(range(len(units)), key=lambda i: (-scores[i], units[i].hit, units[i].start))
    score_of = {unit: scores[i] for i, unit in enumerate(units)}
    chosen: dict[int, list[Unit]] = {}
    every_id = [hit.memory.get("id") for hit in hits]
    spent = answer_chars(envelope | {key: [], "cut": _cut_note(every_id, len(hits), max_chars)}, key=key)
    # What a hit costs before its first passage: its fields as JSON (computed once, not per unit considered).
    shells = [
        len(as_json(_compact(_shaped(hit.memory, texts[index], [], whole=False)))) + 1 for index, hit in enumerate(hits)
    ]
    spans: dict[int, list[list[int]]] = {}  # each hit's passages so far, merged as _shaped merges them
    for i in order:
        unit = units[i]
        taking = [unit]
        head = heads[unit.hit]
        if unit.hit not in chosen and head is not unit and texts[unit.hit].startswith(EXCHANGE_PROMPT):
            taking.insert(0, head)
        taking = [piece for piece in taking if piece not in chosen.get(unit.hit, ())]
        if not taking:
            continue
        cost = 0 if unit.hit in chosen else shells[unit.hit]
        merged = [list(span) for span in spans.get(unit.hit, [])]
        for piece in taking:
            if unit.hit in whole:
                cost += len(as_json(texts[unit.hit])) - 2
            else:
                cost += _added_chars(texts[unit.hit], merged, piece)
        if spent + cost > max_chars:
            continue
        spent += cost
        spans[unit.hit] = merged
        chosen.setdefault(unit.hit, []).extend(taking)
    while True:
        kept = [index for index in range(len(hits)) if index in chosen]
        if query is None:  # a listing keeps a prefix of its page: what follows comes on the next page
            kept = [index for position, index in enumerate(kept) if index == position]
        results = [_shaped(hits[index].memory, texts[index], chosen[index], index in whole) for index in kept]
        left_out = [hit.memory.get("id") for index, hit in enumerate(hits) if index not in kept]
        shortened = sum(1 for result in results if "passages" in result)
        answer = envelope | {key: results, "count": len(results)}
        note = left_out or shortened
        answer["cut"] = _cut_note(left_out, shortened, max_chars, listing=query is None) if note else None
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


def _added_chars(text: str, spans: list[list[int]], piece: Unit) -> int:
    """What adding piece to a memory's passages (spans, merged in place) adds to its JSON: its text, and the
    elision and [start,end] entry of a new passage, or the text between it and the passages it joins."""
    at = bisect.bisect_left([start for start, _ in spans], piece.start)
    left = spans[at - 1] if at > 0 else None
    right = spans[at] if at < len(spans) else None
    joins_left = left is not None and not text[left[1] : piece.start].strip()
    joins_right = right is not None and not text[piece.end : right[0]].strip()
    start = left[1] if joins_left and left is not None else piece.start
    end = right[0] if joins_right and right is not None else piece.end
    cost = len(as_json(text[start:end])) - 2
    if joins_left and left is not None and joins_right and right is not None:
        left[1] = right[1]
        del spans[at]
        return cost - ELISION_CHARS - len(as_json(right)) - 1
    if joins_left and left is not None:
        left[1] = piece.end
        return cost
    if joins_right and right is not None:
        right[0] = piece.start
        return cost
    spans.insert(at, [piece.start, piece.end])
    # the first passage adds the passages key; each later one an elision in text and a comma in the list
    extra = len('"passages":[],') if len(spans) == 1 else ELISION_CHARS + 1
    return cost + len(as_json([piece.start, piece.end])) + extra


def _cut_note(left_out: Sequence[Any], shortened: int, max_chars: int, *, listing: bool = False) -> str:
    # Short on purpose: every character of it is one the answer's passages cannot use. It says exactly
    # how to read what is not here: around a passage, a whole memory, the ids left out, a larger budget.
    parts = []
    if shortened:
        parts.append(
            f"{shortened} cut to passages (palace_recall with id, start, end reads around one; the id alone all)"
        )
    if left_out:
        ids = ",".join(str(memory_id) for memory_id in left_out)
        parts.append(f"{len(left_out)} more on the next page" if listing else f"{len(left_out)} left out: ids [{ids}]")
    return f"max_chars {max_chars}: " + "; ".join(parts) + f"; up to {MAX_MAX_CHARS} reads more in one call."


def _shaped(memory: dict[str, Any], text: str, units: list[Unit], whole: bool) -> dict[str, Any]:
    """The memory with text cut to its units' passages (merged where they touch) and their [start, end)."""
    shaped = dict(memory)
    shaped["length"] = len(text)
    if whole or not units:
        if not units and not whole:
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
    shaped["passages"] = spans
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
