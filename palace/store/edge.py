"""The embedded store: a Qdrant Edge shard in this process, under the data dir."""

from __future__ import annotations

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
    IndexState,
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
# Qdrant Edge builds its HNSW graphs only when optimize() runs, and optimize() holds the GIL for the
# whole build (40 s at 100k memories here), so it runs in a child process on a copy of the shard that
# then replaces the live one (see EdgeStore._index). A segment larger than this (in KB of vectors,
# about 650 memories) gets a graph; smaller ones are scanned, which costs well under a millisecond.
INDEXING_THRESHOLD_KB = 1000
INDEX_STATE_FILE = "palazzo-index.json"
INDEXER_NICENESS = 10


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
    if memory_filter.wings is not None:
        must.append(qe.FieldCondition("wing", match=qe.MatchAny(list(memory_filter.wings))))
    if memory_filter.expired is not None:
        moment = _rfc3339(memory_filter.current_at or datetime.now(UTC))
        if memory_filter.expired:
            must.append(qe.FieldCondition("expires_at", range=qe.RangeDateTime(lte=moment)))
        else:
            must.append(
                qe.Filter(
                    should=[
                        qe.IsNullCondition("expires_at"),
                        qe.IsEmptyCondition("expires_at"),
                        qe.FieldCondition("expires_at", range=qe.RangeDateTime(gt=moment)),
                    ]
                )
            )
    return qe.Filter(must=must) if must else None


def shard_config(identity: CollectionIdentity) -> qe.EdgeConfig:
    """The shard's vectors (chunk multivectors with max-sim, BM25 with IDF) and optimizer settings."""
    return qe.EdgeConfig(
        vectors={
            DENSE: qe.EdgeVectorParams(
                size=identity.dimension,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
                # Cold: mmapped and paged in as searches touch them. The default (Cached) reads the
                # whole preallocated storage files into memory, mostly empty space: ~75 MiB of RSS
                # at 10k memories. Searches were no slower (bench/bench_core.py). Existing shards
                # switch at their next index build, whose child process loads them with this config.
                memory=qe.Memory.Cold,
            )
        },
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB),
    )


def _generation_number(directory: Path) -> int:
    suffix = directory.name.rsplit(".g", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


class ShardGenerations:
    """The shard's directories: `<name>` is a symlink to the live generation `.<name>.g<N>` beside it.

    A background index build fills the next generation and swaps the link atomically, so after a
    crash the link names either the old complete generation or the new complete one.
    """

    def __init__(self, link: Path) -> None:
        self.link = link

    def all(self) -> list[Path]:
        """Every generation directory on disk, oldest first."""
        return sorted(self.link.parent.glob(f".{self.link.name}.g*"), key=_generation_number)

    def live(self) -> Path:
        """The live generation, migrating a plain shard directory and repairing an interrupted migration."""
        if self.link.is_symlink():
            return self.link.parent / os.readlink(self.link)
        first = self.link.parent / f".{self.link.name}.g0"
        if self.link.is_dir():  # a shard from before generations becomes generation 0
            shutil.rmtree(first, ignore_errors=True)
            self.link.rename(first)
        elif not first.is_dir():  # a new shard
            first = self.link.parent / f".{self.link.name}.g1"
            shutil.rmtree(first, ignore_errors=True)
        self.point_at(first)
        return first

    def next(self) -> Path:
        """A fresh directory name for the next generation."""
        numbers = [_generation_number(directory) for directory in self.all()] or [0]
        return self.link.parent / f".{self.link.name}.g{max(numbers) + 1}"

    def point_at(self, generation: Path) -> None:
        """Make generation the live one, atomically and durably."""
        self.link.parent.mkdir(parents=True, exist_ok=True)
        staged = self.link.with_name(f"{self.link.name}.swap")
        staged.unlink(missing_ok=True)
        staged.symlink_to(generation.name)
        os.replace(staged, self.link)
        descriptor = os.open(self.link.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def remove_stale(self, live: Path) -> None:
        """Delete generations a crash or a failed build left behind."""
        for directory in self.all():
            if directory != live:
                shutil.rmtree(directory, ignore_errors=True)
        self.link.with_name(f"{self.link.name}.swap").unlink(missing_ok=True)


def _directory_bytes(directory: Path) -> int:
    return sum(entry.stat().st_size for entry in directory.rglob("*") if entry.is_file())


class EdgeStore:
    """VectorStore over qdrant-edge; one writer process per shard, HNSW graphs built in the background."""

    def __init__(self, *, path: Path, index_after: int = 5000) -> None:
        self._path = path
        self._generations = ShardGenerations(path)
        self._live: Path | None = None
        # Orders mutations; an index build holds it while copying the shard and while swapping it.
        self._write_lock = threading.Lock()
        # Held around every call on the shard, so a swap never closes a shard under a reader.
        self._shard_lock = threading.Lock()
        self._shard: qe.EdgeShard | None = None
        self._identity: CollectionIdentity | None = None
        self._keywords = keyword_model()
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
        try:
            live = self._generations.live()
            live.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"could not open the embedded palace at {self._path}: {exc}") from exc
        segments = live / "segments"
        try:
            if segments.is_dir() and any(segments.iterdir()):
                self._shard = qe.EdgeShard.load(str(live))
            else:
                self._shard = qe.EdgeShard.create(str(live), shard_config(identity))
        except Exception as exc:  # the binding raises plain OSError/RuntimeError subclasses
            if "WouldBlock" in str(exc) or "temporarily unavailable" in str(exc).lower():
                raise StoreLocked(
                    f"the embedded palace at {self._path} is already open in {self._holder_description()}; "
                    "the embedded store allows one process: stop that process, send work to it "
                    "(e.g. `python manage.py ingest --url`), or use a Qdrant server via QDRANT_URL"
                ) from None
            raise StoreUnavailable(f"could not open the embedded palace at {self._path}: {exc}") from exc
        self._live = live
        self._generations.remove_stale(live)  # only now: the shard's lock proves no other process owns them
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
        self._written_since_index = max(0, self._shard.info().points_count - self._indexed_points(live))
        self._index_if_due()

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
        for point in points:
            vectors: dict[str, Any] = {SPARSE: self._keywords.embed_document(point.keyword_text)}
            if point.chunk_vectors.size:  # a point stored while the embedder was down has only its keywords
                vectors[DENSE] = point.chunk_vectors.tolist()
            edge_points.append(qe.Point(point.id, vectors, point.payload))
        self._apply(qe.UpdateOperation.upsert_points(edge_points), len(edge_points))

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
        return {str(hit.value): int(hit.count) for hit in response}

    def discard(self) -> str:
        """Move the shard aside (kept, not deleted) so a rebuild starts empty."""
        if not self._path.exists() and not self._path.is_symlink():
            return ""
        live = self._generations.live()
        target = self._path.with_name(f"{self._path.name}.before-rebuild-{int(time.time())}")
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

    # Background HNSW builds -------------------------------------------------------------------------

    @staticmethod
    def _indexed_points(generation: Path) -> int:
        try:
            return int(json.loads((generation / INDEX_STATE_FILE).read_text())["points"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def _index_if_due(self) -> None:
        """Start a background index build when enough was written since the last one (caller holds the write lock)."""
        if (
            self._index_after
            and self._written_since_index >= self._index_after
            and self._indexer is None
            and not self._closing
        ):
            self._indexer = threading.Thread(target=self._index, name="palazzo-shard-indexer", daemon=True)
            self._indexer.start()

    def index_state(self) -> IndexState:
        """A build is running while its thread lives; writes since the last build started are unindexed."""
        return IndexState(building=self._indexer is not None, unindexed_writes=self._written_since_index)

    def wait_for_index(self) -> None:
        """Block until a running index build has finished (benchmarks and tests)."""
        while (indexer := self._indexer) is not None:
            indexer.join()

    def _index(self) -> None:
        """Build HNSW graphs on a copy in a child process, catch the copy up, and swap it in."""
        target = self._generations.next()
        try:
            with self._write_lock:
                if self._closing or self._live is None:
                    return
                with self._shard_lock:
                    self.shard.flush()
                    points = self.shard.info().points_count
                needed = _directory_bytes(self._live) + MIN_FREE_BYTES
                if shutil.disk_usage(self._live.parent).free < needed:
                    logger.warning("skipping the search index build: %d MB needed on disk", needed // 2**20)
                    self._written_since_index = 0
                    return
                started = time.monotonic()
                shutil.copytree(self._live, target)
                self._replay = []
                self._written_since_index = 0
                process = self._indexer_process = subprocess.Popen(
                    [sys.executable, "-m", "palace.store.edge", "--optimize", str(target)],
                    cwd=Path(__file__).resolve().parents[2],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            _, errors = process.communicate()
            if process.returncode != 0:
                raise StoreUnavailable(errors.decode(errors="replace").strip()[-500:] or "killed")
            copy = qe.EdgeShard.load(str(target))
            try:
                replayed = self._catch_up_and_swap(copy, target=target, points=points)
            except BaseException:
                copy.close()
                raise
            seconds = time.monotonic() - started
            self.index_builds.append({"points": points, "replayed": replayed, "seconds": seconds})
            logger.info("search index built for %d memories in %.1f s (%d writes replayed)", points, seconds, replayed)
        except Exception as exc:  # the live shard is untouched: searches stay correct, only slower
            if not self._closing:
                logger.warning("search index build failed, will retry after more writes: %s", exc)
            with self._write_lock:
                self._replay = None
            shutil.rmtree(target, ignore_errors=True)
        finally:
            with self._write_lock:
                self._indexer_process = None
                self._indexer = None
                self._index_if_due()  # what was written during this build may call for the next

    def _catch_up_and_swap(self, copy: qe.EdgeShard, *, target: Path, points: int) -> int:
        """Apply to the copy what was written during the build, then make the copy live."""
        replayed = 0
        while True:
            with self._write_lock:
                if self._closing or self._replay is None or self._live is None:
                    raise StoreUnavailable("the store closed during the build")
                pending = self._replay[replayed:]
                if len(pending) <= 16:  # few enough to finish while writers wait
                    for operation in pending:
                        copy.update(operation)
                    copy.flush()
                    (target / INDEX_STATE_FILE).write_text(json.dumps({"points": points}))
                    self._generations.point_at(target)
                    with self._shard_lock:
                        previous, self._shard = self._shard, copy
                    retired, self._live = self._live, target
                    self._replay = None
                    break
            for operation in pending:  # the bulk of the catching up runs while writers go on
                copy.update(operation)
            replayed += len(pending)
        if previous is not None:
            previous.close()
        shutil.rmtree(retired, ignore_errors=True)
        return replayed + len(pending)


def _optimize_copy(path: Path) -> None:
    """Child process: build the HNSW graphs of a shard copy, at low priority."""
    os.nice(INDEXER_NICENESS)
    recorded = json.loads((path / IDENTITY_FILE).read_text())
    identity = CollectionIdentity(
        model_name=str(recorded["embedding_model"]), dimension=int(recorded["embedding_dimension"])
    )
    shard = qe.EdgeShard.load(str(path), shard_config(identity))
    shard.optimize()
    shard.flush()
    shard.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--optimize":
        sys.exit("usage: python -m palace.store.edge --optimize SHARD_COPY_DIR")
    _optimize_copy(Path(sys.argv[2]))
