"""The palace's view of the embedder: long texts as chunk vectors, backend errors as palace errors."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from embeddings.base import Embedder, EmbeddingError
from embeddings.heap import release_freed_memory
from palace.engine.metrics import EMBEDDING_SECONDS
from palace.errors import EmbedderUnavailable

# Windows of text well inside the model's 512-token limit. A long text is cut between lines, so a
# window holds whole lines (turns of a dialogue, paragraphs, list items) and needs no overlap; a
# single line longer than a window is cut at spaces into windows that overlap, so that a sentence
# cut by one window boundary is whole in the next. Cutting between lines instead of at any space
# lifted session R@10 on the LoCoMo development split from 0.880 to 0.890 (dense only) and from
# 0.957 to 0.961 (hybrid), with 5% fewer chunks to embed (CHANGELOG.md, the LoCoMo rankings).
# Windows of 400 characters instead of 1,400 (2026-12-04): each window's cosine now points at two or
# three lines, which is what a find's passages are chosen by. On the LoCoMo development split the
# evidence in an agent's default answer rose from 0.721 to 0.752 and session MRR from 0.790 to 0.830
# (R@10 0.961 -> 0.962, turn R@10 unchanged); on real fed coding sessions (bench/bench_passages.py,
# 41 questions) from 0.68 to 0.76-0.78. Smaller windows also embed faster (attention grows with the
# square of a window's length: 24 % less time for the same sessions); a long memory has ~3.5x
# more vectors, and a find over long memories took +1.5 ms (docs/benchmarks.md). Memories embedded
# with the older windows keep working; `manage.py rebuild` re-cuts them.
CHUNK_CHARS = 400
CHUNK_OVERLAP = 80
# Texts per turn of a document pass: bulk passes take turns piece by piece.
DOCUMENT_PIECE = 32
# A pass this small (a single store, even of a long memory) skips the turn-taking, as queries do:
# it shares the cores with a running bulk piece for a few ms instead of queueing behind it.
SMALL_PASS = 8


def chunk_text(text: str) -> list[str]:
    """Split a long text into windows of whole lines (an over-long line into word windows); short texts stay whole."""
    return [text[start:end] for start, end in chunk_spans(text)]


def chunk_spans(text: str) -> list[tuple[int, int]]:
    """Where chunk_text's windows sit in the text: [start, end) character offsets, in order."""
    if len(text) <= CHUNK_CHARS:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    window: tuple[int, int] | None = None
    position = 0
    for line in text.split("\n"):
        start, end = position, position + len(line)
        position = end + 1
        if window and (window[1] - window[0]) + 1 + len(line) > CHUNK_CHARS:
            spans.append(window)
            window = None
        if len(line) > CHUNK_CHARS:
            spans.extend((start + a, start + b) for a, b in word_window_spans(line))
            continue
        window = (window[0], end) if window else (start, end)
    if window:
        spans.append(window)
    return [(a, b) for a, b in spans if text[a:b].strip()] or [(0, CHUNK_CHARS)]


def word_windows(line: str) -> list[str]:
    """Split one long line into overlapping windows cut at spaces."""
    return [line[start:end] for start, end in word_window_spans(line)]


def word_window_spans(line: str) -> list[tuple[int, int]]:
    """Where word_windows' windows sit in the line: [start, end) offsets."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(line):
        end = min(start + CHUNK_CHARS, len(line))
        if end < len(line):
            cut = line.rfind(" ", start + CHUNK_CHARS // 2, end)
            end = cut if cut > start else end
        spans.append((start, end))
        if end >= len(line):
            break
        next_start = max(end - CHUNK_OVERLAP, start + 1)
        space = line.find(" ", next_start, end)
        start = space + 1 if space != -1 else next_start
    return spans


class PalaceEmbedder:
    """Embeds memories as one vector per chunk and queries as one vector."""

    def __init__(self, embedder: Embedder) -> None:
        self.backend = embedder
        # Bulk document passes take turns in pieces; queries and small passes skip the turn-taking
        # (sessions are thread-safe), so neither a search nor a single store waits behind an ingest.
        self._documents_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The backend's model name."""
        return self.backend.model_name

    @property
    def dimension(self) -> int:
        """Vector size."""
        return self.backend.dimension

    def documents(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """One (chunks x dim) matrix per text, embedded in one pass."""
        pieces: list[str] = []
        spans: list[tuple[int, int]] = []
        for text in texts:
            chunks = chunk_text(text)
            spans.append((len(pieces), len(pieces) + len(chunks)))
            pieces.extend(chunks)
        parts = []
        bulk = len(pieces) > SMALL_PASS
        turns = self._documents_lock if bulk else contextlib.nullcontext()
        try:
            for start in range(0, len(pieces), DOCUMENT_PIECE):
                with turns, EMBEDDING_SECONDS.labels("documents").time():
                    parts.append(self.backend.embed_documents(pieces[start : start + DOCUMENT_PIECE]))
        except EmbeddingError as exc:
            raise EmbedderUnavailable(str(exc)) from exc
        finally:
            if bulk:
                # The model's activations for a piece are tens of MB (more for long windows); glibc
                # keeps what they freed, so a server's RSS would stay at its largest import since
                # start. Measured over a 10k-memory fill: 264 MiB of heap kept, 144 MiB after trimming.
                release_freed_memory()
        vectors = np.concatenate(parts) if parts else np.zeros((0, self.dimension), dtype=np.float32)
        return [vectors[start:end] for start, end in spans]

    def query(self, text: str) -> npt.NDArray[np.float32]:
        """The query vector for a search."""
        try:
            with EMBEDDING_SECONDS.labels("query").time():
                return self.backend.embed_queries([text])[0]
        except EmbeddingError as exc:
            raise EmbedderUnavailable(str(exc)) from exc
