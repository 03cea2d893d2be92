"""The embedded shard's background HNSW builder: a child process indexes a copy, which then replaces the live shard.

Qdrant Edge builds its graphs only in optimize(), which holds the GIL for the whole build, so the build
runs in another process on a copy; the writes made meanwhile are replayed onto the copy before the swap.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import qdrant_edge as qe

from embeddings.heap import release_freed_memory
from palace.errors import StoreUnavailable
from palace.store.base import CollectionIdentity, IndexState
from palace.store.generations import ShardGenerations
from palace.store.shard import IDENTITY_FILE, MIN_FREE_BYTES, load_shard

logger = logging.getLogger(__name__)

INDEX_STATE_FILE = "palazzo-index.json"
INDEXER_NICENESS = 10


def _directory_bytes(directory: Path) -> int:
    return sum(entry.stat().st_size for entry in directory.rglob("*") if entry.is_file())


class BackgroundIndexing:
    """The HNSW builds of EdgeStore, which mixes this in: it uses the store's locks, shard and generations."""

    _live: Path | None
    _identity: CollectionIdentity | None  # the model the open shard was made for
    _generations: ShardGenerations
    _write_lock: threading.Lock  # orders mutations; a build holds it while copying and while swapping
    _shard_lock: threading.Lock  # held around every call on the shard
    _shard: qe.EdgeShard | None
    _index_after: int
    _written_since_index: int
    _indexer: threading.Thread | None
    _indexer_process: subprocess.Popen[bytes] | None
    _replay: list[qe.UpdateOperation] | None
    _closing: bool
    index_builds: list[dict[str, float]]

    @property
    def shard(self) -> qe.EdgeShard:
        """The open shard (EdgeStore's)."""
        raise NotImplementedError

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
                if self._closing or self._live is None or self._identity is None:
                    return
                identity = self._identity
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
                    [sys.executable, "-m", "palace.store.indexer", "--optimize", str(target)],
                    cwd=Path(__file__).resolve().parents[2],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            _, errors = process.communicate()
            if process.returncode != 0:
                raise StoreUnavailable(errors.decode(errors="replace").strip()[-500:] or "killed")
            # Loaded with the search threads its size calls for (the builder loaded it as a small one).
            copy = load_shard(target, identity, points=points)
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
        # The old shard's in-memory structures (BM25, payload indexes, id tracker) went back to glibc's heap,
        # which keeps them: at a million memories 1.6-2.1 GiB of the process's RSS after the swap, 131 MiB
        # once trimmed (bench/bench_scale.py).
        release_freed_memory()
        shutil.rmtree(retired, ignore_errors=True)
        return replayed + len(pending)


def _optimize_copy(path: Path) -> None:
    """Child process: build the HNSW graphs of a shard copy, at low priority."""
    os.nice(INDEXER_NICENESS)
    recorded = json.loads((path / IDENTITY_FILE).read_text())
    identity = CollectionIdentity(
        model_name=str(recorded["embedding_model"]), dimension=int(recorded["embedding_dimension"])
    )
    shard = load_shard(path, identity)
    shard.optimize()
    shard.flush()
    shard.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--optimize":
        sys.exit("usage: python -m palace.store.indexer --optimize SHARD_COPY_DIR")
    _optimize_copy(Path(sys.argv[2]))
