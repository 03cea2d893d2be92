"""The process-wide palace: one embedder and one store, opened once, with the journal replayed."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from django.conf import settings

from embeddings.base import Embedder, EmbeddingError
from palace.engine.applier import canonicalise_rooms, replay_pending
from palace.engine.embedding import PalaceEmbedder
from palace.engine.handle import Palace
from palace.engine.points import wait_for_background_embedding
from palace.errors import EmbedderUnavailable
from palace.schema.vocabulary import forget_vocabulary
from palace.store.base import CollectionIdentity, VectorStore

__all__ = ["Palace", "build_embedder", "build_store", "close_palace", "get_embedder", "get_palace"]

logger = logging.getLogger(__name__)


_lock = threading.Lock()
_palace: Palace | None = None
_embedder: PalaceEmbedder | None = None


def build_embedder() -> Embedder:
    """The configured embedding backend (loads the model)."""
    env = settings.PALAZZO
    try:
        if env.embed_backend == "ollama":
            from embeddings.ollama_backend import OllamaEmbedder

            return OllamaEmbedder(
                url=env.ollama_url, model=env.ollama_model, timeout_seconds=env.ollama_timeout_seconds
            )
        from embeddings.fastembed_backend import FastEmbedEmbedder

        model = env.embed_model
        local_dir = Path(model).expanduser() if ("/" in model and Path(model).expanduser().is_dir()) else None
        return FastEmbedEmbedder(
            model_name=local_dir.name if local_dir else model,
            models_dir=env.data_dir / "models",
            cache_dir=env.fastembed_cache_dir,
            threads=env.embed_threads,
            local_model_dir=local_dir,
        )
    except EmbeddingError as exc:
        raise EmbedderUnavailable(str(exc)) from exc


def build_store() -> VectorStore:
    """The configured store: a Qdrant server when QDRANT_URL is set, else the embedded shard."""
    env = settings.PALAZZO
    if env.qdrant_url:
        from palace.store.server import ServerStore

        return ServerStore(
            url=env.qdrant_url,
            api_key=env.qdrant_api_key,
            collection=env.collection,
            timeout_seconds=env.qdrant_timeout_seconds,
        )
    from palace.store.edge import EdgeStore

    return EdgeStore(path=env.data_dir / "shards" / env.collection, index_after=env.index_after)


def get_embedder() -> PalaceEmbedder:
    """The process's embedder, loaded on first use."""
    global _embedder
    with _lock:
        if _embedder is None:
            _embedder = PalaceEmbedder(build_embedder())
        return _embedder


def get_palace() -> Palace:
    """The process's palace, opened on first use with pending journal entries re-applied and rooms made canonical."""
    global _palace
    embedder = get_embedder()
    with _lock:
        if _palace is not None:
            return _palace
        store = build_store()
        palace = Palace(store=store, embedder=embedder, collection=settings.PALAZZO.collection)
        try:
            store.ensure_collection(CollectionIdentity(model_name=embedder.model_name, dimension=embedder.dimension))
            replayed = replay_pending(palace)
            canonicalise_rooms(palace)
        except BaseException:
            # Release the shard: a failed opening must not leave this process holding its lock, or
            # every later attempt here would be refused as "already open" by this very process.
            store.close()
            raise
        if replayed:
            logger.info("re-applied %d pending journal entries", replayed)
        _palace = palace
        return palace


def close_palace() -> None:
    """Close the palace of this process (tests, shutdown)."""
    global _palace
    wait_for_background_embedding()  # its last pass writes to the store about to close
    forget_vocabulary()  # the next palace (a test's, a restored one) may record another
    with _lock:
        if _palace is not None:
            _palace.close()
            _palace = None
