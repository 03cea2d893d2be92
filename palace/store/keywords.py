"""The BM25 sparse model both stores use, and the legs of a search it gives them, so they rank alike."""

from __future__ import annotations

from functools import lru_cache

import qdrant_edge as qe

from palace.store.base import DENSE, SPARSE, PointWrite
from palace.store.query import Leg, SearchQuery, SparseVector


@lru_cache(maxsize=1)
def keyword_model() -> qe.Bm25:
    """Qdrant's BM25 with English stemming and stopwords."""
    return qe.Bm25(qe.Bm25Config(language="english"))


def document_vectors(point: PointWrite) -> tuple[SparseVector, list[list[float]] | None]:
    """A point's BM25 vector, and its chunk vectors (None while its dense vector is pending)."""
    sparse = keyword_model().embed_document(point.keyword_text)
    dense = point.chunk_vectors.tolist() if point.chunk_vectors.size else None
    return SparseVector(tuple(sparse.indices), tuple(sparse.values)), dense


def search_legs(query: SearchQuery) -> list[Leg]:
    """The legs a search runs: dense when asked, BM25 when the keywords hold a term that is not a stopword."""
    legs: list[Leg] = []
    if query.dense_query is not None:
        legs.append(Leg(using=DENSE, dense=[query.dense_query.tolist()]))
    if query.keyword_query:
        sparse = keyword_model().embed_query(query.keyword_query)
        if sparse.indices:
            legs.append(Leg(using=SPARSE, sparse=SparseVector(tuple(sparse.indices), tuple(sparse.values))))
    return legs
