"""The embedder contract shared by every backend; no Django here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class EmbeddingError(Exception):
    """Base of every error an embedding backend raises."""


class ModelNotFoundError(EmbeddingError):
    """The configured model's files are not where they are expected."""


class BackendUnavailableError(EmbeddingError):
    """The backend could not be reached or did not answer in time."""


@dataclass(frozen=True)
class Prefixes:
    """Text prepended to queries and documents, per model family."""

    query: str = ""
    document: str = ""


class Embedder(Protocol):
    """Turns texts into L2-normalised dense vectors."""

    model_name: str
    dimension: int
    max_tokens: int

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed texts to be stored, one inference pass per batch."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Embed search queries (with the model's query prefix)."""
        ...


def normalise(vectors: Vectors) -> Vectors:
    """Scale every row to unit length so cosine is a dot product."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32, copy=False)
