"""The BM25 sparse model and the fusion settings shared by both stores, so they rank alike."""

from __future__ import annotations

from functools import lru_cache

import qdrant_edge as qe

# Reciprocal rank fusion: each leg adds weight / (RRF_K + 0-based rank). k=2 (a Qdrant server's
# default) lets a leg's first few places count much more than its tail: on the LoCoMo development
# split it beat k=10, 30 and 60 at both turn and session granularity (README, "Search"). The edge
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


@lru_cache(maxsize=1)
def keyword_model() -> qe.Bm25:
    """Qdrant's BM25 with English stemming and stopwords."""
    return qe.Bm25(qe.Bm25Config(language="english"))
