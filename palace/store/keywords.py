"""The BM25 sparse model shared by both stores, so keyword vectors match on either."""

from __future__ import annotations

from functools import lru_cache

import qdrant_edge as qe


@lru_cache(maxsize=1)
def keyword_model() -> qe.Bm25:
    """Qdrant's BM25 with English stemming and stopwords."""
    return qe.Bm25(qe.Bm25Config(language="english"))
