"""The small port both stores implement; nothing outside palace.store imports a Qdrant library."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from palace.errors import ModelMismatch

if TYPE_CHECKING:  # query.py builds on MemoryFilter below
    from palace.store.query import SearchQuery

DENSE = "dense"
SPARSE = "bm25"
# Payload flag of a memory written keyword-searchable, its dense vector to follow (a single store, or the
# embedder down).
NEEDS_EMBEDDING = "needs_embedding"
NEEDS_EMBEDDING_PENDING = "pending"  # a string: Edge's MatchValue does not match payload booleans
# needs_embedding: every single store's embedding pass looks its points up (a 38 ms scan at 10k without it).
# import_id: `palazzo import --undo` finds an import's memories by it.
KEYWORD_INDEXES = (
    "wing",
    "category",
    "room",
    "hall",
    "session",
    "added_by",
    "text_hash",
    NEEDS_EMBEDDING,
    "import_id",
)
DATETIME_INDEXES = ("timestamp", "valid_until", "expires_at")
# Every payload index a collection gets, with its kind ("keyword" or "datetime"), in creation order.
PAYLOAD_INDEXES = tuple((key, "keyword") for key in KEYWORD_INDEXES) + tuple(
    (key, "datetime") for key in DATETIME_INDEXES
)


@dataclass(frozen=True)
class CollectionIdentity:
    """Which embedding model built a collection; vectors of two models never mix."""

    model_name: str
    dimension: int

    def as_metadata(self) -> dict[str, Any]:
        """Serialise for collection metadata."""
        return {"embedding_model": self.model_name, "embedding_dimension": self.dimension, "schema": 1}

    def refuse_other(self, recorded: Mapping[str, Any], *, where: str) -> None:
        """Raise ModelMismatch unless recorded (a collection's metadata) names this model and dimension."""
        if (recorded.get("embedding_model"), recorded.get("embedding_dimension")) != (self.model_name, self.dimension):
            raise ModelMismatch(
                f"the palace {where} was built with {recorded.get('embedding_model')} "
                f"({recorded.get('embedding_dimension')} dims) but the configured model is "
                f"{self.model_name} ({self.dimension} dims); set PALAZZO_EMBED_MODEL back, "
                "or move the palace to the new model with `palazzo rebuild`"
            )


@dataclass(frozen=True)
class MemoryFilter:
    """Payload conditions; every store applies them inside its search, never after."""

    wing: str | None = None
    category: str | None = None
    room: str | None = None
    hall: str | None = None
    session: str | None = None
    import_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    include_superseded: bool = True
    current_at: datetime | None = None
    ids: tuple[int, ...] | None = None
    text_hashes: tuple[str, ...] | None = None
    needs_embedding: bool = False  # only points stored while the embedder was down (no dense vector yet)
    wings: tuple[str, ...] | None = None  # a wing-scoped token's wings: only memories in one of them
    expired: bool | None = None  # at current_at: False hides memories whose expires_at has passed, True keeps only them

    def is_empty(self) -> bool:
        """True when no condition narrows the palace."""
        return (
            not any(
                (
                    self.wing,
                    self.category,
                    self.room,
                    self.hall,
                    self.session,
                    self.import_id,
                    self.since,
                    self.until,
                    self.ids,
                    self.text_hashes,
                    self.needs_embedding,
                    self.wings is not None,
                )
            )
            and self.include_superseded
            and self.expired is None
        )


@dataclass
class PointWrite:
    """One point to upsert: chunk vectors (multivector; zero rows = no dense vector yet), BM25 text and payload."""

    id: int
    chunk_vectors: npt.NDArray[np.float32]
    payload: dict[str, Any]
    keyword_text: str


@dataclass
class StoredPoint:
    """A point read back from the store."""

    id: int
    payload: dict[str, Any]
    score: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexState:
    """Whether the store is building its search index, and how many writes the last build did not cover."""

    building: bool
    unindexed_writes: int | None = None  # None when the store does not say (a Qdrant server)


class VectorStore(Protocol):
    """The operations the palace needs from Qdrant, embedded or served."""

    def ensure_collection(self, identity: CollectionIdentity) -> None:
        """Create the collection and indexes idempotently; refuse another model's collection."""
        ...

    def upsert(self, points: Sequence[PointWrite]) -> None:
        """Insert or replace points in one operation."""
        ...

    def set_payload(self, ids: Sequence[int], payload: dict[str, Any]) -> None:
        """Merge payload keys into existing points."""
        ...

    def delete(self, ids: Sequence[int]) -> None:
        """Remove points by id."""
        ...

    def retrieve(self, ids: Sequence[int]) -> list[StoredPoint]:
        """Fetch points by id, payload only."""
        ...

    def chunk_vectors(self, ids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The dense chunk vectors (chunks x dim) of points by id; a point without them is left out."""
        ...

    def search(self, query: SearchQuery) -> list[StoredPoint]:
        """Rank by dense, keyword, or both fused inside the store, as the query describes."""
        ...

    def scroll(self, *, memory_filter: MemoryFilter, batch_size: int = 256) -> Iterator[StoredPoint]:
        """Iterate over every matching point by ascending id."""
        ...

    def recent(self, *, memory_filter: MemoryFilter, limit: int) -> list[StoredPoint]:
        """The newest matching points by timestamp."""
        ...

    def count(self, *, memory_filter: MemoryFilter) -> int:
        """Exact number of matching points."""
        ...

    def facet(self, *, key: str, memory_filter: MemoryFilter) -> dict[str, int]:
        """Exact counts per value of a keyword field."""
        ...

    def index_state(self) -> IndexState:
        """Whether a search index build is running, and the writes since the last one."""
        ...

    def discard(self) -> str:
        """Set the current collection aside (or drop it) before a rebuild; says where it went."""
        ...

    def close(self) -> None:
        """Release the store."""
        ...


def chunk_matrices(records: Iterable[tuple[Any, Any]]) -> dict[int, npt.NDArray[np.float32]]:
    """(point id, vectors as retrieved) pairs -> id: the dense multivector as a matrix, for points that have one."""
    found = {}
    for point_id, vectors in records:
        dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
        if isinstance(dense, list) and dense and isinstance(dense[0], list):
            found[int(point_id)] = np.asarray(dense, dtype=np.float32)
    return found
