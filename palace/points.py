"""How memory records become store points, and the dense vectors deferred while the embedder is down."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from palace.errors import EmbedderUnavailable
from palace.handle import Palace
from palace.locks import write_lock
from palace.memories import stored_payload
from palace.store.base import NEEDS_EMBEDDING, NEEDS_EMBEDDING_PENDING, MemoryFilter, PointWrite, VectorStore
from palace.timefmt import parse_rfc3339

logger = logging.getLogger(__name__)

# Stores known to hold no memory waiting for its dense vector, so find need not look again.
_fully_embedded: weakref.WeakSet[VectorStore] = weakref.WeakSet()


def keyword_text(text: str, timestamp: str | None) -> str:
    """What BM25 indexes: the text, then the memory's date in words, so "on 3 June 2023" finds that day's memories."""
    if timestamp is None:
        return text
    try:
        moment = parse_rfc3339(timestamp)
    except ValueError:
        return text
    return f"{text}\n{moment.day} {moment:%B} {moment.year}"


def build_points(records: Sequence[dict[str, Any]], vectors: Sequence[npt.NDArray[np.float32]]) -> list[PointWrite]:
    """The store points of journaled memory records; a record without vectors waits for its dense vector."""
    points = []
    for record, vector in zip(records, vectors):
        payload = stored_payload(record)
        if not vector.size:
            payload[NEEDS_EMBEDDING] = NEEDS_EMBEDDING_PENDING
        words = keyword_text(record["text"], record.get("timestamp"))
        points.append(PointWrite(id=record["id"], chunk_vectors=vector, payload=payload, keyword_text=words))
    return points


def embed_or_defer(palace: Palace, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
    """Chunk vectors per text; empty ones (dense vector pending) when the embedder is unavailable."""
    try:
        vectors = palace.embedder.documents(texts)
    except EmbedderUnavailable as exc:
        logger.warning("storing %d memories keyword-searchable only, to embed later: %s", len(texts), exc)
        _fully_embedded.discard(palace.store)
        return [np.zeros((0, 0), dtype=np.float32) for _ in texts]
    embed_deferred(palace)
    return vectors


def embed_deferred(palace: Palace, *, batch_size: int = 64) -> int:
    """Give memories stored while the embedder was down their dense vectors; returns how many."""
    if palace.store in _fully_embedded:
        return 0
    done = 0
    with write_lock:
        pending = list(palace.store.scroll(memory_filter=MemoryFilter(needs_embedding=True)))
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            try:
                vectors = palace.embedder.documents([point.payload.get("text", "") for point in chunk])
            except EmbedderUnavailable as exc:
                logger.warning("embedding of %d deferred memories postponed: %s", len(pending) - done, exc)
                return done
            palace.store.upsert(
                [
                    PointWrite(
                        id=point.id,
                        chunk_vectors=vector,
                        payload={key: value for key, value in point.payload.items() if key != NEEDS_EMBEDDING},
                        keyword_text=keyword_text(point.payload.get("text", ""), point.payload.get("timestamp")),
                    )
                    for point, vector in zip(chunk, vectors)
                ]
            )
            done += len(chunk)
        _fully_embedded.add(palace.store)
    if done:
        logger.info("embedded %d memories stored while the embedder was down", done)
    return done
