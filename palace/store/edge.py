"""The embedded store: a Qdrant Edge shard in this process, under the data dir.

Its generations (palace.store.generations), configuration (palace.store.shard) and background index
builds (palace.store.indexer) live beside it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import qdrant_edge as qe

from palace.errors import ReadOnlyPalace, StoreLocked, StoreUnavailable
from palace.store import query as neutral  # the store-neutral search this adapter translates
from palace.store.base import (
    DENSE,
    PAYLOAD_INDEXES,
    SPARSE,
    CollectionIdentity,
    MemoryFilter,
    PointWrite,
    StoredPoint,
    chunk_matrices,
)
from palace.store.generations import ShardGenerations
from palace.store.indexer import BackgroundIndexing
from palace.store.keywords import document_vectors, search_legs
from palace.store.shard import IDENTITY_FILE, MIN_FREE_BYTES, field_index, load_shard, shard_config

logger = logging.getLogger(__name__)

HOLDER_FILE = "holder.json"


class ShardLock:
    """An exclusive lock beside the shard, taken before Qdrant Edge sees it and held while it is open.

    Edge's own lock (on the WAL directory) is taken late in `EdgeShard.load`: a load that fails on it
    has already read the segments, and can write that stale state back over what the holder just
    flushed, losing its acknowledged writes. So no process here loads a shard another process holds.
    """

    def __init__(self, shard_path: Path) -> None:
        self.path = shard_path.with_name(f".{shard_path.name}.lock")
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._descriptor is not None

    def acquire(self) -> bool:
        """Take the lock without waiting; False when another holder has it."""
        if self._descriptor is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return False
        self._descriptor = descriptor
        return True

    def release(self) -> None:
        """Let the lock go (closing the descriptor releases it)."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def _edge_condition(condition: neutral.Condition) -> Any:
    """One node of the store-neutral filter tree as an Edge condition."""
    match condition:
        case neutral.Match(key, value):
            return qe.FieldCondition(key, match=qe.MatchValue(value))
        case neutral.MatchAny(key, values):
            return qe.FieldCondition(key, match=qe.MatchAny(list(values)))
        case neutral.HasId(ids):
            return qe.HasIdCondition(set(ids))
        case neutral.TimeRange(key, gte, lte, gt):
            bounds = {
                name: neutral.rfc3339(moment) for name, moment in (("gte", gte), ("lte", lte), ("gt", gt)) if moment
            }
            return qe.FieldCondition(key, range=qe.RangeDateTime(**bounds))
    raise TypeError(f"unknown filter condition {condition!r}")  # pragma: no cover - the union is exhaustive


def edge_filter(memory_filter: MemoryFilter) -> qe.Filter | None:
    """Translate a MemoryFilter (its meaning: store.query.filter_conditions) into an Edge filter."""
    conditions = neutral.filter_conditions(memory_filter)
    if not conditions:
        return None
    return qe.Filter(
        must=[_edge_condition(condition) for condition in conditions.must] or None,
        must_not=[_edge_condition(condition) for condition in conditions.must_not] or None,
    )


def _edge_sparse(vector: neutral.SparseVector) -> qe.SparseVector:
    return qe.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _edge_leg(leg: neutral.Leg) -> Any:
    if leg.sparse is not None:
        return qe.Query.Nearest(_edge_sparse(leg.sparse), using=leg.using)
    return qe.Query.Nearest(leg.dense or [], using=leg.using)


class EdgeStore(BackgroundIndexing):
    """VectorStore over qdrant-edge; one writer process per shard, HNSW graphs built in the background."""

    def __init__(self, *, path: Path, index_after: int = 12000) -> None:
        self._path = path
        self._generations = ShardGenerations(path)
        self._lock = ShardLock(path)
        self._live: Path | None = None
        # Orders mutations; an index build holds it while copying the shard and while swapping it.
        self._write_lock = threading.Lock()
        # Held around every call on the shard, so a swap never closes a shard under a reader.
        self._shard_lock = threading.Lock()
        self._shard: qe.EdgeShard | None = None
        self._identity: CollectionIdentity | None = None
        self._index_after = index_after
        self._written_since_index = 0
        self._indexer: threading.Thread | None = None
        self._indexer_process: subprocess.Popen[bytes] | None = None
        self._replay: list[qe.UpdateOperation] | None = None
        self._closing = False
        self.index_builds: list[dict[str, float]] = []  # what each finished build did, oldest first

    @property
    def path(self) -> Path:
        """Directory of the shard (a symlink to its live generation)."""
        return self._path

    def _holder_description(self) -> str:
        try:
            holder = json.loads((self._path / HOLDER_FILE).read_text())
        except (OSError, ValueError):
            return "another process"
        if not isinstance(holder, dict) or (holder.get("pid"), holder.get("host")) == (
            os.getpid(),
            socket.gethostname(),
        ):
            # A record naming this very process is stale (its shard was released or never opened here):
            # the lock is held by some other process that has not written its own record.
            return "another process"
        return f"process {holder.get('pid')} on {holder.get('host')} ({holder.get('command')})"

    def _locked(self) -> StoreLocked:
        return StoreLocked(
            f"the embedded palace at {self._path} is already open in {self._holder_description()}; "
            "the embedded store allows one process: stop that process, send work to it "
            "(e.g. `palazzo ingest --url`), or use a Qdrant server via QDRANT_URL"
        )

    @contextmanager
    def held_exclusively(self) -> Iterator[None]:
        """Hold the shard's lock meanwhile; StoreLocked when another process has the shard open.

        rebuild and restore move the shard aside under it, so a live server's shard is never moved.
        """
        if self._lock.held:
            yield
            return
        if not self._lock.acquire():
            raise self._locked()
        try:
            yield
        finally:
            self._lock.release()

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
            identity.refuse_other(json.loads(identity_file.read_text()), where=f"at {self._path}")
        self._ensure_room("open")
        try:
            if not self._lock.acquire():
                raise self._locked()
            try:
                self._open_shard(identity, identity_file)
            except BaseException:
                if self._shard is not None:  # opened, then failed: closed before another process may open it
                    self._shard.close()
                    self._shard = None
                self._lock.release()
                raise
        except OSError as exc:
            raise StoreUnavailable(f"could not open the embedded palace at {self._path}: {exc}") from exc

    def _open_shard(self, identity: CollectionIdentity, identity_file: Path) -> None:
        live = self._generations.live()
        live.mkdir(parents=True, exist_ok=True)
        segments = live / "segments"
        indexed = self._indexed_points(live)
        try:
            if segments.is_dir() and any(segments.iterdir()):
                # The last build's count: what was written since is at most a build's worth.
                self._shard = load_shard(live, identity, points=indexed)
            else:
                self._shard = qe.EdgeShard.create(str(live), shard_config(identity))
        except Exception as exc:  # the binding raises plain OSError/RuntimeError subclasses
            if "WouldBlock" in str(exc) or "temporarily unavailable" in str(exc).lower():
                raise self._locked() from None
            raise StoreUnavailable(f"could not open the embedded palace at {self._path}: {exc}") from exc
        self._live = live
        self._generations.remove_stale(live)  # only now: the shard's lock proves no other process owns them
        (self._path / HOLDER_FILE).write_text(
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv[:3])})
        )
        if not identity_file.is_file():
            identity_file.write_text(json.dumps(identity.as_metadata()))
        self._identity = identity
        self._make_payload_indexes()
        self._written_since_index = max(0, self._shard.info().points_count - indexed)
        self._index_if_due()

    def _make_payload_indexes(self) -> None:
        """Create the missing payload indexes, and make again those made before they were memory-mapped."""
        existing = self.shard.info().payload_schema
        for key, kind in PAYLOAD_INDEXES:
            wanted = field_index(key, kind)
            if key in existing:
                made = existing[key].params
                if made is not None and (made.memory, made.enable_hnsw) == (wanted.memory, wanted.enable_hnsw):
                    continue
                # A palace from before keeps the index in RAM with a graph per value; dropped and made again
                # (once: a crash in between leaves it missing, and the next open makes it).
                logger.info("making the payload index of %r again, memory-mapped", key)
                self.shard.update(qe.UpdateOperation.delete_field_index(key))
            self.shard.update(qe.UpdateOperation.create_field_index(key, wanted))

    @property
    def shard(self) -> qe.EdgeShard:
        """The open shard."""
        if self._shard is None:
            raise StoreUnavailable("the embedded palace is not open")
        return self._shard

    def payload_indexes(self) -> dict[str, str]:
        """Indexed payload fields and their types."""
        with self._shard_lock:
            schema = self.shard.info().payload_schema
        return {key: str(info.data_type) for key, info in schema.items()}

    def upsert(self, points: Sequence[PointWrite]) -> None:
        """Insert or replace points in one operation."""
        edge_points = []
        dense_points = 0
        for point in points:
            sparse, dense = document_vectors(point)
            vectors: dict[str, Any] = {SPARSE: _edge_sparse(sparse)}
            if dense is not None:  # a single store, or one while the embedder was down: its keywords first
                vectors[DENSE] = dense
                dense_points += 1
            edge_points.append(qe.Point(point.id, vectors, point.payload))
        # A point without its dense vector yet adds nothing to a graph: its vector's write counts, once.
        self._apply(qe.UpdateOperation.upsert_points(edge_points), dense_points)

    def set_payload(self, ids: Sequence[int], payload: dict[str, Any]) -> None:
        """Merge payload keys into existing points."""
        self._apply(qe.UpdateOperation.set_payload(list(ids), payload), len(ids))

    def delete(self, ids: Sequence[int]) -> None:
        """Remove points by id."""
        self._apply(qe.UpdateOperation.delete_points(list(ids)), len(ids))

    def _apply(self, operation: qe.UpdateOperation, points: int) -> None:
        self._ensure_room("write to")
        with self._write_lock:
            with self._shard_lock:
                self.shard.update(operation)
            if self._replay is not None:  # an index build is copying or indexing: it replays this afterwards
                self._replay.append(operation)
            self._written_since_index += points
            self._index_if_due()

    def retrieve(self, ids: Sequence[int]) -> list[StoredPoint]:
        """Fetch points by id, in the order asked, skipping unknown ids."""
        with self._shard_lock:
            records = self.shard.retrieve(list(ids), with_payload=True, with_vector=False)
        by_id = {int(record.id): record for record in records}
        return [StoredPoint(id=i, payload=dict(by_id[i].payload or {})) for i in ids if i in by_id]

    def chunk_vectors(self, ids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The dense chunk vectors of points by id (a point stored without them is left out)."""
        if not ids:
            return {}
        with self._shard_lock:
            records = self.shard.retrieve(list(ids), with_payload=False, with_vector=[DENSE])
        return chunk_matrices((record.id, record.vector) for record in records)

    def search(self, query: neutral.SearchQuery) -> list[StoredPoint]:
        """Run a search: one leg alone, or both fused by RRF inside the shard."""
        flt = edge_filter(query.memory_filter)
        legs = [_edge_leg(leg) for leg in search_legs(query)]
        if not legs:
            return []
        if len(legs) == 1:
            request = qe.QueryRequest(limit=query.limit, query=legs[0], filter=flt, with_payload=True)
        else:
            request = qe.QueryRequest(
                limit=query.limit,
                prefetches=[qe.Prefetch(limit=query.leg_depth, query=leg, filter=flt) for leg in legs],
                query=qe.Fusion.Rrf(  # type: ignore[arg-type]  # the stub omits Fusion's variants
                    k=query.fusion.k, weights=list(query.fusion.weights)
                ),
                filter=flt,
                with_payload=True,
            )
        with self._shard_lock:
            points = self.shard.query(request)
        return [
            StoredPoint(id=int(point.id), payload=dict(point.payload or {}), score=float(point.score))
            for point in points
        ]

    def scroll(self, *, memory_filter: MemoryFilter, batch_size: int = 256) -> Iterator[StoredPoint]:
        """Iterate over every matching point by ascending id."""
        flt = edge_filter(memory_filter)
        offset: int | None = None
        while True:
            with self._shard_lock:
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
        request = qe.ScrollRequest(
            limit=limit,
            filter=edge_filter(memory_filter),
            with_payload=True,
            with_vector=False,
            order_by=qe.OrderBy("timestamp", direction=qe.Direction.Desc),
        )
        with self._shard_lock:
            records, _ = self.shard.scroll(request)
        return [StoredPoint(id=int(record.id), payload=dict(record.payload or {})) for record in records]

    def count(self, *, memory_filter: MemoryFilter) -> int:
        """Exact number of matching points."""
        request = qe.CountRequest(filter=edge_filter(memory_filter), exact=True)
        with self._shard_lock:
            return int(self.shard.count(request))

    def facet(self, *, key: str, memory_filter: MemoryFilter) -> dict[str, int]:
        """Exact counts per value of a keyword field."""
        request = qe.FacetRequest(key, limit=10_000, exact=True, filter=edge_filter(memory_filter))
        with self._shard_lock:
            response = self.shard.facet(request)
        # The shard's keyword index keeps a value whose points all changed or went, with count 0.
        return {str(hit.value): int(hit.count) for hit in response if hit.count}

    def discard(self) -> str:
        """Move the shard aside (kept, not deleted) so a rebuild starts empty."""
        if not self._path.exists() and not self._path.is_symlink():
            return ""
        live = self._generations.live()
        target = self._path.with_name(f"{self._path.name}.before-rebuild-{int(time.time())}")
        suffix = 1
        while target.exists():  # two rebuilds within one second keep both old shards
            target = self._path.with_name(f"{self._path.name}.before-rebuild-{int(time.time())}-{suffix}")
            suffix += 1
        live.rename(target)
        self._path.unlink()
        self._generations.remove_stale(target)
        return str(target)

    def flush(self) -> None:
        """Persist pending changes."""
        with self._write_lock, self._shard_lock:
            self.shard.flush()

    def close(self) -> None:
        """Stop an index build, flush and release the shard (and its lock)."""
        with self._write_lock:
            self._closing = True
            if self._indexer_process is not None:
                self._indexer_process.kill()
        if self._indexer is not None:
            self._indexer.join()
        if self._shard is not None:
            with self._write_lock, self._shard_lock:
                self._shard.flush()
                self._shard.close()
            self._shard = None
        self._lock.release()
