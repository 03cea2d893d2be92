"""The open palace a process works on: its store, its embedder and its collection's name.

Apart from palace.engine.runtime (which opens it once per process), so that what runs while it opens (the
journal replay in palace.engine.applier) can take it without importing the opener back.
"""

from __future__ import annotations

from dataclasses import dataclass

from palace.engine.embedding import PalaceEmbedder
from palace.store.base import VectorStore


@dataclass
class Palace:
    """The open palace of this process."""

    store: VectorStore
    embedder: PalaceEmbedder
    collection: str

    def close(self) -> None:
        """Release the store (and the embedded shard's lock)."""
        self.store.close()
