"""What a search asks of a store, in no store's terms: the filter tree, the legs, the fusion, depth and limit.

The domain builds a SearchQuery; each store only translates it (and the filter tree) into its client's
types and runs it. Everything both stores must agree on is decided here once: what a MemoryFilter means,
the whole-second time rule, how the legs are fused and how deep each one looks. No Qdrant import.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from palace.store.base import NEEDS_EMBEDDING, NEEDS_EMBEDDING_PENDING, MemoryFilter

# Reciprocal rank fusion: each leg adds weight / (RRF_K + 0-based rank). k=2 (a Qdrant server's
# default) lets a leg's first few places count much more than its tail: on the LoCoMo development
# split it beat k=10, 30 and 60 at both turn and session granularity (CHANGELOG.md, the LoCoMo rankings). The edge
# store's default is 60, so both stores pass it explicitly. Equal weights: neither leg won on both.
RRF_K = 2
DENSE_WEIGHT = 1.0
KEYWORD_WEIGHT = 1.0
# Each leg hands the fusion this many candidates per result asked, at least PREFETCH_MIN: a memory
# ranked low by one leg but high by the other must still reach the fusion.
PREFETCH_FACTOR = 4
PREFETCH_MIN = 40


def prefetch_depth(limit: int) -> int:
    """Candidates each leg passes to the fusion for a search of limit results."""
    return max(limit * PREFETCH_FACTOR, PREFETCH_MIN)


# The filter tree ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """A keyword field equals value."""

    key: str
    value: str


@dataclass(frozen=True)
class MatchAny:
    """A keyword field equals one of values."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class HasId:
    """The point's id is one of ids."""

    ids: tuple[int, ...]


@dataclass(frozen=True)
class TimeRange:
    """A datetime field within bounds (inclusive gte/lte, exclusive gt), all at whole UTC seconds."""

    key: str
    gte: datetime | None = None
    lte: datetime | None = None
    gt: datetime | None = None


Condition = Match | MatchAny | HasId | TimeRange


@dataclass(frozen=True)
class Conditions:
    """A filter: conditions that must all hold, and ones none of which may (a point without the field passes).

    Both stores put must_not at the filter's top level: nested as must=[Filter(must_not=...)] it cost an
    Edge scan as much as the absent-null-or-later disjunction it replaced.
    """

    must: tuple[Condition, ...] = ()
    must_not: tuple[Condition, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.must or self.must_not)


KEYWORD_FILTERS = ("wing", "category", "room", "hall", "session", "import_id")


def whole_second(moment: datetime) -> datetime:
    """A moment as stored timestamps compare: UTC, the fraction of a second dropped.

    Timestamps are stored as RFC3339 strings at whole seconds, and the embedded store compares the
    RFC3339 strings it is given, so both stores compare at whole UTC seconds.
    """
    return moment.astimezone(UTC).replace(microsecond=0)


def rfc3339(moment: datetime) -> str:
    """A whole-second moment as the RFC3339 string the stored timestamps use."""
    return whole_second(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def filter_conditions(memory_filter: MemoryFilter) -> Conditions:
    """What a MemoryFilter means (none = every point)."""
    must: list[Condition] = []
    must_not: list[Condition] = []
    for key in KEYWORD_FILTERS:
        value = getattr(memory_filter, key)
        if value is not None:
            must.append(Match(key, value))
    if memory_filter.since or memory_filter.until:
        must.append(
            TimeRange(
                "timestamp",
                gte=whole_second(memory_filter.since) if memory_filter.since else None,
                lte=whole_second(memory_filter.until) if memory_filter.until else None,
            )
        )
    if memory_filter.text_hashes is not None:
        must.append(MatchAny("text_hash", tuple(memory_filter.text_hashes)))
    if memory_filter.ids is not None:
        must.append(HasId(tuple(memory_filter.ids)))
    if memory_filter.needs_embedding:
        must.append(Match(NEEDS_EMBEDDING, NEEDS_EMBEDDING_PENDING))
    if not memory_filter.include_superseded:
        now = memory_filter.current_at or datetime.now(UTC)
        # "not ended by now" rather than "absent, null or after now": one check of the datetime index per
        # point, where the three conditions cost a 10k-memory scan ~1 ms of CPU more.
        must_not.append(TimeRange("valid_until", lte=whole_second(now)))
    if memory_filter.wings is not None:
        must.append(MatchAny("wing", tuple(memory_filter.wings)))
    if memory_filter.expired is not None:
        moment = whole_second(memory_filter.current_at or datetime.now(UTC))
        if memory_filter.expired:
            must.append(TimeRange("expires_at", lte=moment))
        else:
            must_not.append(TimeRange("expires_at", lte=moment))
    return Conditions(must=tuple(must), must_not=tuple(must_not))


# The search -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fusion:
    """Reciprocal rank fusion of the legs: weight / (k + 0-based rank) per leg, dense weight first."""

    k: int = RRF_K
    weights: tuple[float, float] = (DENSE_WEIGHT, KEYWORD_WEIGHT)

    @property
    def best_score(self) -> float:
        """The fused score of a point first in every leg."""
        return sum(self.weights) / self.k


@dataclass(frozen=True)
class SearchQuery:
    """One search: a dense leg, a BM25 leg or both (fused inside the store), filtered inside every leg.

    depth is how many candidates each leg hands the fusion (None: prefetch_depth(limit)); limit is how
    many points come back, fused or from the single leg.
    """

    memory_filter: MemoryFilter
    limit: int
    dense_query: npt.NDArray[np.float32] | None = None
    keyword_query: str | None = None
    depth: int | None = None
    fusion: Fusion = Fusion()

    @property
    def leg_depth(self) -> int:
        """Candidates per leg when the legs are fused."""
        return self.depth if self.depth is not None else prefetch_depth(self.limit)


@dataclass(frozen=True)
class SparseVector:
    """A BM25 vector: term indices and their weights."""

    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Leg:
    """One ranked leg as a store runs it: the named vector it searches and the query vector."""

    using: str
    dense: list[list[float]] | None = None
    sparse: SparseVector | None = None
