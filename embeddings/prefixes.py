"""Query and document prefixes per model family; fastembed never adds them itself."""

from __future__ import annotations

from embeddings.base import Prefixes

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "

_BY_FAMILY: tuple[tuple[str, Prefixes], ...] = (
    ("nomic-embed-text", Prefixes(query="search_query: ", document="search_document: ")),
    ("bge-", Prefixes(query=BGE_QUERY_INSTRUCTION)),
    ("e5-", Prefixes(query="query: ", document="passage: ")),
)


def prefixes_for(model_name: str) -> Prefixes:
    """Return the prefixes a model was trained with (none when unknown)."""
    lowered = model_name.lower()
    for family, prefixes in _BY_FAMILY:
        if family in lowered:
            return prefixes
    return Prefixes()
