"""Query and document prefixes per model family; fastembed never adds them itself."""

from __future__ import annotations

from embeddings.base import Prefixes

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "

# Each family is named by the substrings a model name must all contain; the first match wins.
# BGE v1.5 (and bge-m3) retrieves as well without the instruction, which adds 8 tokens to a 13-token
# query (a third of its inference: 7.1 ms instead of 5.3). Measured on LoCoMo with the bundled model:
# session R@10 0.960 with and without, MRR 0.790 with and 0.795 without; turn R@10 0.775 and 0.777.
# The first BGE models were trained to need it.
_BY_FAMILY: tuple[tuple[tuple[str, ...], Prefixes], ...] = (
    (("bge-", "v1.5"), Prefixes()),
    (("bge-m3",), Prefixes()),
    (("nomic-embed-text",), Prefixes(query="search_query: ", document="search_document: ")),
    (("bge-",), Prefixes(query=BGE_QUERY_INSTRUCTION)),
    (("e5-",), Prefixes(query="query: ", document="passage: ")),
)


def prefixes_for(model_name: str) -> Prefixes:
    """Return the prefixes a model was trained with (none when unknown)."""
    lowered = model_name.lower()
    for family, prefixes in _BY_FAMILY:
        if all(part in lowered for part in family):
            return prefixes
    return Prefixes()
