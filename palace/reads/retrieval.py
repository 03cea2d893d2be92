"""How find turns a query into store legs: hybrid by default, keyword-only when the embedder is down."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from palace.engine.handle import Palace
from palace.engine.points import embed_deferred
from palace.errors import EmbedderUnavailable, InvalidInput
from palace.store.base import StoredPoint
from palace.store.query import Fusion

logger = logging.getLogger(__name__)

HYBRID = "hybrid"
DENSE = "dense"
KEYWORD = "keyword"
RANKINGS = (HYBRID, DENSE, KEYWORD)
# Session context: the turns of one conversation answer a question together (a fact and the
# remark that dates or explains it), so a fused hit gains this fraction of the fused score of the
# best other candidate of its session. One weight for every palace, chosen on the LoCoMo
# development split where 0.3 to 0.7 all helped every conversation (CHANGELOG.md, the LoCoMo rankings).
SESSION_WEIGHT = 0.5
# How find fuses its legs (RRF k and weights: see palace.store.query).
FUSION = Fusion()
# The best fused score a point can get: first (0-based rank 0) in both legs, with a session-mate
# as strong.
BEST_FUSED_SCORE = (1 + SESSION_WEIGHT) * FUSION.best_score


@dataclass(frozen=True)
class SearchPlan:
    """The legs one search runs, and why a leg is missing when it is."""

    dense_query: npt.NDArray[np.float32] | None
    keyword_query: str | None
    degraded_reason: str | None = None

    @property
    def fused(self) -> bool:
        """True when both legs run and the store fuses them."""
        return self.dense_query is not None and bool(self.keyword_query)

    def normalise(self, score: float) -> float:
        """A fused RRF score as a fraction of the best possible one; a dense leg's as a cosine; BM25's as it is."""
        if self.fused:
            return score / BEST_FUSED_SCORE
        return as_cosine(score) if self.dense_query is not None else score

    def rerank(self, hits: list[StoredPoint]) -> list[StoredPoint]:
        """Fused hits with session context added (see SESSION_WEIGHT); single-leg hits as they are."""
        return with_session_context(hits) if self.fused else hits


def as_cosine(score: float) -> float:
    """A dense leg's score, at most 1: against a float16-stored vector it can come out a rounding (~1e-4) above."""
    return min(score, 1.0)


def with_session_context(hits: list[StoredPoint]) -> list[StoredPoint]:
    """Hits re-scored as own score + SESSION_WEIGHT x the best other hit's score of the same session, best first."""
    best: dict[str, list[float]] = {}
    for hit in hits:
        session = hit.payload.get("session")
        if session:
            top = best.setdefault(session, [])
            top.append(hit.score or 0.0)
            top.sort(reverse=True)
            del top[2:]
    rescored = []
    for hit in hits:
        own = hit.score or 0.0
        top = best.get(hit.payload.get("session") or "", [])
        # The best other hit: the session's first unless this hit is it, then the second.
        others = top[1:] if top and top[0] == own else top
        bonus = SESSION_WEIGHT * others[0] if others else 0.0
        rescored.append(StoredPoint(id=hit.id, payload=hit.payload, score=own + bonus, extra=hit.extra))
    # Reciprocal rank fusion gives equal scores to hits whose ranks mirror each other across the legs, and
    # the fusion hands ties back in no fixed order: the newer memory (the larger id) first makes a find
    # answer the same on every call (and the benchmarks repeat to the digit).
    return sorted(rescored, key=lambda hit: (hit.score or 0.0, hit.id), reverse=True)


def plan_search(palace: Palace, *, query: str, ranking: str = HYBRID) -> SearchPlan:
    """Embed the query for the dense leg unless the ranking skips it; fall back to keywords if embedding fails."""
    if ranking not in RANKINGS:
        raise InvalidInput.single("ranking", f"{ranking!r} is not one of {', '.join(RANKINGS)}")
    if ranking == KEYWORD:
        return SearchPlan(dense_query=None, keyword_query=query)
    try:
        vector = palace.embedder.query(query)
    except EmbedderUnavailable as exc:
        logger.warning("find answers from keywords only: %s", exc)
        return SearchPlan(
            dense_query=None,
            keyword_query=query,
            degraded_reason=f"the embedding backend is unavailable, so results come from keyword (BM25) "
            f"matching only: {exc}",
        )
    embed_deferred(palace)
    return SearchPlan(dense_query=vector, keyword_query=query if ranking == HYBRID else None)
