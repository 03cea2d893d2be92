"""The embedded store: a Qdrant Edge shard in this process, under the data dir."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import qdrant_edge as qe

from palace.errors import ModelMismatch, ReadOnlyPalace, StoreLocked, StoreUnavailable
from palace.store.base import (
    DATETIME_INDEXES,
    DENSE,
    KEYWORD_INDEXES,
    NEEDS_EMBEDDING,
    NEEDS_EMBEDDING_PENDING,
    SPARSE,
    CollectionIdentity,
    MemoryFilter,
    PointWrite,
    StoredPoint,
)
from palace.store.keywords import DENSE_WEIGHT, KEYWORD_WEIGHT, RRF_K, keyword_model, prefetch_depth

logger = logging.getLogger(__name__)

IDENTITY_FILE = "palazzo-collection.json"
HOLDER_FILE = "holder.json"
# Qdrant Edge memory-maps sparse files (WAL segments, payload indexes) and grows them on open and on writes;
# on a full file system that kills the process with SIGBUS instead of raising, so we refuse first.
MIN_FREE_BYTES = 64 * 1024 * 1024


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def edge_filter(memory_filter: MemoryFilter) -> qe.Filter | None:
    """Translate a MemoryFilter into an Edge filter."""
    must: list[Any] = []
    for key in ("wing", "category", "room", "hall", "session"):
        value = getattr(memory_filter, key)
        if value is not None:
            must.append(qe.FieldCondition(key, match=qe.MatchValue(value)))
    if memory_filter.since or memory_filter.until:
        must.append(
            qe.FieldCondition(
                "timestamp",
                range=qe.RangeDateTime(
                    gte=_rfc3339(memory_filter.since) if memory_filter.since else None,
                    lte=_rfc3339(memory_filter.until) if memory_filter.until else None,
                ),
            )
        )
    if memory_filter.text_hashes is not None:
        must.append(qe.FieldCondition("text_hash", match=qe.MatchAny(list(memory_filter.text_hashes))))
    if memory_filter.ids is not None:
        must.append(qe.HasIdCondition(set(memory_filter.ids)))
    if memory_filter.needs_embedding:
        must.append(qe.FieldCondition(NEEDS_EMBEDDING, match=qe.MatchValue(NEEDS_EMBEDDING_PENDING)))
    if not memory_filter.include_superseded:
        now = memory_filter.current_at or datetime.now(UTC)
        must.append(
            qe.Filter(
                should=[
                    qe.IsNullCondition("valid_until"),
                    qe.IsEmptyCondition("valid_until"),
                    qe.FieldCondition("valid_until", range=qe.RangeDateTime(gt=_rfc3339(now))),
                ]
            )
        )
    return qe.Filter(must=must) if must else None


class EdgeStore:
    """VectorStore over qdrant-edge; one writer process per shard."""

    def __init__(self, *, path: Path) -> None:
        self._path = path
        self._write_lock = threading.Lock()
        self._shard: qe.EdgeShard | None = None
        self._identity: CollectionIdentity | None = None
        self._keywords = keyword_model()

    @property
    def path(self) -> Path:
        """Directory of the shard."""
        return self._path

    def _config(self, identity: CollectionIdentity) -> qe.EdgeConfig:
        return qe.EdgeConfig(
            vectors={
                DENSE: qe.EdgeVectorParams(
                    size=identity.dimension,
                    distance=qe.Distance.Cosine,
                    multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
                )
            },
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        )

    def _holder_description(self) -> str:
        try:
            holder = json.loads((self._path / HOLDER_FILE).read_text())
            return f"process {holder.get('pid')} on {holder.get('host')} ({holder.get('command')})"
        except (OSError, ValueError):
            return "another process"

    def _ensure_room(self, operation: str) -> None:
        """Refuse (clearly) what would otherwise crash the process on a nearly full disk."""
        probe = self._path if self._path.exists() else self._path.parent
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < MIN_FREE_BYTES:
            raise ReadOnlyPalace(
                f"cannot {operation} the embedded palace at {self._path}: only {free // (1024 * 1024)} MB free on "
                f"its disk and Qdrant Edge needs at least {MIN_FREE_BYTES // (1024 * 1024)} MB; free some space"
            )

    def ensure_collection(self, identity: CollectionIdentity) -> None:
        """Open or create the shard, refusing one built by another embedding model."""
        identity_file = self._path / IDENTITY_FILE
        if identity_file.is_file():
            recorded = json.loads(identity_file.read_text())
            if (recorded.get("embedding_model"), recorded.get("embedding_dimension")) != (
                identity.model_name,
                identity.dimension,
            ):
                raise ModelMismatch(
                    f"the palace at {self._path} was built with {recorded.get('embedding_model')} "
                    f"({recorded.get('embedding_dimension')} dims) but the configured model is "
                    f"{identity.model_name} ({identity.dimension} dims); set PALAZZO_EMBED_MODEL back, "
                    "or move the palace to the new model with `python manage.py rebuild`"
                )
        self._ensure_room("open")
        self._path.mkdir(parents=True, exist_ok=True)
        segments = self._path / "segments"
        try:
            if segments.is_dir() and any(segments.iterdir()):
                self._shard = qe.EdgeShard.load(str(self._path))
            else:
                self._shard = qe.EdgeShard.create(str(self._path), self._config(identity))
        except Exception as exc:  # the binding raises plain OSError/RuntimeError subclasses
            if "WouldBlock" in str(exc) or "temporarily unavailable" in str(exc).lower():
                raise StoreLocked(
                    f"the embedded palace at {self._path} is already open in {self._holder_description()}; "
                    "the embedded store allows one process: stop that process, send work to it "
                    "(e.g. `python manage.py ingest --url`), or use a Qdrant server via QDRANT_URL"
                ) from None
            raise StoreUnavailable(f"could not open the embedded palace at {self._path}: {exc}") from exc
        (self._path / HOLDER_FILE).write_text(
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv[:3])})
        )
        if not identity_file.is_file():
            identity_file.write_text(json.dumps(identity.as_metadata()))
        self._identity = identity
        existing = self._shard.info().payload_schema
        for key in KEYWORD_INDEXES:
            if key not in existing:
                self._shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))
        for key in DATETIME_INDEXES:
            if key not in existing:
                self._shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Datetime))

    @property
    def shard(self) -> qe.EdgeShard:
        """The open shard."""
        if self._shard is None:
            raise StoreUnavailable("the embedded palace is not open")
        return self._shard

    def payload_indexes(self) -> dict[str, str]:
        """Indexed payload fields and their types."""
        return {key: str(info.data_type) for key, info in self.shard.info().payload_schema.items()}

    def upsert(self, points: Sequence[PointWrite]) -> None:
        """Insert or replace points in one operation."""
        edge_points = []
        for point in points:
            vectors: dict[str, Any] = {SPARSE: self._keywords.embed_document(point.keyword_text)}
            if point.chunk_vectors.size:  # a point stored while the embedder was down has only its keywords
                vectors[DENSE] = point.chunk_vectors.tolist()
            edge_points.append(qe.Point(point.id, vectors, point.payload))
        self._ensure_room("write to")
        with self._write_lock:
            self.shard.update(qe.UpdateOperation.upsert_points(edge_points))

    def set_payload(self, ids: Sequence[int], payload: dict[str, Any]) -> None:
        """Merge payload keys into existing points."""
        self._ensure_room("write to")
        with self._write_lock:
            self.shard.update(qe.UpdateOperation.set_payload(list(ids), payload))

    def delete(self, ids: Sequence[int]) -> None:
        """Remove points by id."""
        self._ensure_room("write to")
        with self._write_lock:
            self.shard.update(qe.UpdateOperation.delete_points(list(ids)))

    def retrieve(self, ids: Sequence[int]) -> list[StoredPoint]:
        """Fetch points by id, in the order asked, skipping unknown ids."""
        records = self.shard.retrieve(list(ids), with_payload=True, with_vector=False)
        by_id = {int(record.id): record for record in records}
        return [StoredPoint(id=i, payload=dict(by_id[i].payload or {})) for i in ids if i in by_id]

    def search(
        self,
        *,
        dense_query: npt.NDArray[np.float32] | None,
        keyword_query: str | None,
        memory_filter: MemoryFilter,
        limit: int,
    ) -> list[StoredPoint]:
        """Rank by dense similarity, BM25, or both fused by RRF inside the shard."""
        flt = edge_filter(memory_filter)
        legs: list[Any] = []
        if dense_query is not None:
            legs.append(qe.Query.Nearest([dense_query.tolist()], using=DENSE))
        if keyword_query:
            sparse = self._keywords.embed_query(keyword_query)
            if sparse.indices:
                legs.append(qe.Query.Nearest(sparse, using=SPARSE))
        if not legs:
            return []
        if len(legs) == 1:
            request = qe.QueryRequest(limit=limit, query=legs[0], filter=flt, with_payload=True)
        else:
            depth = prefetch_depth(limit)
            request = qe.QueryRequest(
                limit=limit,
                prefetches=[qe.Prefetch(limit=depth, query=leg, filter=flt) for leg in legs],
                query=qe.Fusion.Rrf(  # type: ignore[arg-type]  # the stub omits Fusion's variants
                    k=RRF_K, weights=[DENSE_WEIGHT, KEYWORD_WEIGHT]
                ),
                filter=flt,
                with_payload=True,
            )
        return [
            StoredPoint(id=int(point.id), payload=dict(point.payload or {}), score=float(point.score))
            for point in self.shard.query(request)
        ]

    def scroll(self, *, memory_filter: MemoryFilter, batch_size: int = 256) -> Iterator[StoredPoint]:
        """Iterate over every matching point by ascending id."""
        flt = edge_filter(memory_filter)
        offset: int | None = None
        while True:
            records, next_offset = self.shard.scroll(
                qe.ScrollRequest(offset=offset, limit=batch_size, filter=flt, with_payload=True, with_vector=False)
            )
            for record in records:
                yield StoredPoint(id=int(record.id), payload=dict(record.payload or {}))
            if next_offset is None:
                return
            offset = int(next_offset)

    def recent(self, *, memory_filter: MemoryFilter, limit: int) -> list[StoredPoint]:
        """The newest matching points by timestamp."""
        records, _ = self.shard.scroll(
            qe.ScrollRequest(
                limit=limit,
                filter=edge_filter(memory_filter),
                with_payload=True,
                with_vector=False,
                order_by=qe.OrderBy("timestamp", direction=qe.Direction.Desc),
            )
        )
        return [StoredPoint(id=int(record.id), payload=dict(record.payload or {})) for record in records]

    def count(self, *, memory_filter: MemoryFilter) -> int:
        """Exact number of matching points."""
        return int(self.shard.count(qe.CountRequest(filter=edge_filter(memory_filter), exact=True)))

    def facet(self, *, key: str, memory_filter: MemoryFilter) -> dict[str, int]:
        """Exact counts per value of a keyword field."""
        response = self.shard.facet(qe.FacetRequest(key, limit=10_000, exact=True, filter=edge_filter(memory_filter)))
        return {str(hit.value): int(hit.count) for hit in response}

    def discard(self) -> str:
        """Move the shard aside (kept, not deleted) so a rebuild starts empty."""
        if not self._path.exists():
            return ""
        target = self._path.with_name(f"{self._path.name}.before-rebuild-{int(time.time())}")
        self._path.rename(target)
        return str(target)

    def flush(self) -> None:
        """Persist pending changes."""
        with self._write_lock:
            self.shard.flush()

    def close(self) -> None:
        """Flush and release the shard (and its lock)."""
        if self._shard is not None:
            with self._write_lock:
                self._shard.flush()
                self._shard.close()
            self._shard = None
