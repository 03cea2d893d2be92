"""How memory records become store points, and the dense vectors that follow them (single stores, embedder down)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from palace.engine.handle import Palace
from palace.engine.locks import write_lock
from palace.errors import EmbedderUnavailable
from palace.schema.memories import stored_payload
from palace.schema.timefmt import parse_rfc3339
from palace.store.base import NEEDS_EMBEDDING, NEEDS_EMBEDDING_PENDING, MemoryFilter, PointWrite, VectorStore

logger = logging.getLogger(__name__)

# Per store: how many deferrals this process made, and how many the last finished pass had seen when it
# started. Equal, nothing waits for its dense vector and a search need not look; a store no pass has
# looked at yet (just opened: an earlier process may have left some) has no entry in the second.
_deferrals: weakref.WeakKeyDictionary[VectorStore, int] = weakref.WeakKeyDictionary()
_embedded_through: weakref.WeakKeyDictionary[VectorStore, int] = weakref.WeakKeyDictionary()
_deferrals_lock = threading.Lock()
# One embedding pass at a time, so a search waits for the running one instead of repeating it.
_embedding_turn = threading.Lock()
_background: ThreadPoolExecutor | None = None
_scheduled: weakref.WeakSet[VectorStore] = weakref.WeakSet()  # stores with a background pass yet to start


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
        return defer_embedding(palace, texts)
    if not _all_embedded(palace.store):
        embed_in_background(palace)  # memories deferred while the embedder was down
    return vectors


def defer_embedding(palace: Palace, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
    """Empty vectors for texts whose points are written keyword-searchable, their dense vectors to follow.

    Call embed_in_background once the points are written; every search embeds what is still pending first.
    """
    with _deferrals_lock:
        _deferrals[palace.store] = _deferrals.get(palace.store, 0) + 1
    return [np.zeros((0, 0), dtype=np.float32) for _ in texts]


def _all_embedded(store: VectorStore) -> bool:
    with _deferrals_lock:
        return _embedded_through.get(store) == _deferrals.get(store, 0)


def embed_in_background(palace: Palace) -> None:
    """Give pending memories their dense vectors in this process's embedding thread, soon.

    At most one pass waits to start: it embeds everything pending when it starts, so a burst of
    stores (or an embedder that keeps timing out) queues one pass, not one per store.
    """
    global _background
    with _deferrals_lock:
        if palace.store in _scheduled:
            return
        _scheduled.add(palace.store)
        if _background is None:
            _background = ThreadPoolExecutor(1, thread_name_prefix="palazzo-deferred-embedding")
        _background.submit(_embed_quietly, palace)


def wait_for_background_embedding() -> None:
    """Block until the embedding thread has finished what it was given (before the palace closes)."""
    global _background
    with _deferrals_lock:
        background, _background = _background, None
    if background is not None:
        background.shutdown(wait=True)


def _embed_quietly(palace: Palace) -> None:
    with _deferrals_lock:
        _scheduled.discard(palace.store)  # what is deferred from now on needs the next pass
    try:
        embed_deferred(palace, in_background=True)
    except Exception:  # the next search or store tries again
        logger.exception("embedding of deferred memories failed")


def embed_deferred(palace: Palace, *, batch_size: int = 64, in_background: bool = False) -> int:
    """Give memories stored without a dense vector (deferred, or while the embedder was down) theirs; how many.

    One pass at a time: a search that finds the background pass running waits for it, so it never
    misses a memory by meaning. The model runs outside the write lock; under it, each point is
    written back only if it is still there and still pending, with the payload it has now (a
    supersede or delete that came in between stays as it is).
    """
    store = palace.store
    if _all_embedded(store):
        return 0
    done = 0
    with _embedding_turn:
        if _all_embedded(store):  # the pass this one waited for did it
            return 0
        with _deferrals_lock:
            generation = _deferrals.get(store, 0)  # read before the scroll: later deferrals need a later pass
        pending = list(store.scroll(memory_filter=MemoryFilter(needs_embedding=True)))
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            texts = [point.payload.get("text", "") for point in chunk]
            try:
                # In the background one text at a time: on one core, leaving the other to the calls.
                vectors = (
                    [palace.embedder.documents([text])[0] for text in texts]
                    if in_background
                    else palace.embedder.documents(texts)
                )
            except EmbedderUnavailable as exc:
                logger.warning("embedding of %d deferred memories postponed: %s", len(pending) - done, exc)
                return done
            with write_lock:
                now = {point.id: point.payload for point in store.retrieve([point.id for point in chunk])}
                writes = [
                    PointWrite(
                        id=point.id,
                        chunk_vectors=vector,
                        payload={key: value for key, value in now[point.id].items() if key != NEEDS_EMBEDDING},
                        keyword_text=keyword_text(now[point.id].get("text", ""), now[point.id].get("timestamp")),
                    )
                    for point, vector in zip(chunk, vectors)
                    if point.id in now
                    and now[point.id].get(NEEDS_EMBEDDING) == NEEDS_EMBEDDING_PENDING
                    and now[point.id].get("text") == point.payload.get("text")
                ]
                if writes:
                    store.upsert(writes)
            done += len(chunk)
        with _deferrals_lock:
            _embedded_through[store] = generation  # what was deferred since it looked waits for the next pass
    if done:
        logger.debug("embedded %d memories stored without their dense vectors", done)
    return done
