"""Ollama backend: embeds through a running Ollama server's /api/embed endpoint."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from embeddings.base import (
    BackendUnavailableError,
    EmbeddingError,
    ModelNotFoundError,
    Vectors,
    normalise,
)
from embeddings.prefixes import prefixes_for

_PROBE_TEXT = "dimension probe"
_EXCERPT_CHARS = 200


class OllamaEmbedder:
    """Embeds with a model served by Ollama over HTTP."""

    def __init__(
        self,
        *,
        url: str,
        model: str,
        timeout_seconds: float = 10.0,
        batch_size: int = 64,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.url = url.rstrip("/")
        self.model_name = model
        self.max_tokens = 512
        self._timeout_seconds = timeout_seconds
        self._batch_size = batch_size
        self._prefixes = prefixes_for(model)
        self._client = httpx.Client(timeout=timeout_seconds)
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        """Vector length, learnt from one probe request the first time it is needed."""
        if self._dimension is None:
            self.embed_documents([_PROBE_TEXT])
        assert self._dimension is not None
        return self._dimension

    @dimension.setter
    def dimension(self, value: int) -> None:
        # Lets a caller that already knows the dimension (e.g. from stored vectors) skip the probe.
        self._dimension = value

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed stored texts with the model's document prefix."""
        return self._embed(self._prefixed(self._prefixes.document, texts))

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        """Embed queries with the model's query prefix."""
        return self._embed(self._prefixed(self._prefixes.query, texts))

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    @staticmethod
    def _prefixed(prefix: str, texts: Sequence[str]) -> list[str]:
        return [prefix + text for text in texts] if prefix else list(texts)

    def _embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        batches = [
            self._embed_batch(texts[start : start + self._batch_size])
            for start in range(0, len(texts), self._batch_size)
        ]
        vectors = np.vstack(batches)
        width = int(vectors.shape[1])
        if self._dimension is None:
            self._dimension = width
        elif width != self._dimension:
            raise EmbeddingError(
                f"Ollama at {self.url} returned {width}-dimensional vectors for model {self.model_name!r}, "
                f"expected {self._dimension}"
            )
        return normalise(vectors)

    def _embed_batch(self, texts: list[str]) -> Vectors:
        response = self._post({"model": self.model_name, "input": texts, "truncate": True})
        self._raise_for_status(response)
        return self._parse(response, expected=len(texts))

    def _post(self, body: dict[str, Any]) -> httpx.Response:
        try:
            return self._client.post(f"{self.url}/api/embed", json=body)
        except httpx.TimeoutException as exc:
            raise self._unavailable(f"no answer within {self._timeout_seconds:g} s") from exc
        except httpx.TransportError as exc:
            raise self._unavailable(str(exc) or type(exc).__name__) from exc

    def _unavailable(self, reason: str) -> BackendUnavailableError:
        return BackendUnavailableError(
            f"Ollama at {self.url} is not reachable ({reason}) for model {self.model_name!r}; "
            "start it with `ollama serve` or set OLLAMA_URL"
        )

    def _raise_for_status(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        excerpt = _error_excerpt(response)
        if response.status_code == 404 or "not found" in excerpt.lower():
            raise ModelNotFoundError(
                f"Ollama at {self.url} has no model {self.model_name!r} ({excerpt}); "
                f"pull it with `ollama pull {self.model_name}`"
            )
        raise EmbeddingError(
            f"Ollama at {self.url} answered HTTP {response.status_code} for model {self.model_name!r}: {excerpt}"
        )

    def _parse(self, response: httpx.Response, *, expected: int) -> Vectors:
        try:
            payload = response.json()
        except ValueError as exc:
            raise self._malformed(f"the body is not JSON: {_excerpt(response.text)}") from exc
        rows = payload.get("embeddings") if isinstance(payload, dict) else None
        if not isinstance(rows, list):
            raise self._malformed(f"no 'embeddings' list in {_excerpt(response.text)}")
        if len(rows) != expected:
            raise self._malformed(f"{len(rows)} embeddings for {expected} inputs")
        if not all(isinstance(row, list) and row for row in rows):
            raise self._malformed("an embedding is empty or not a list")
        widths = {len(row) for row in rows}
        if len(widths) != 1:
            raise self._malformed(f"embeddings of inconsistent dimensions {sorted(widths)}")
        if not all(
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            for row in rows
            for value in row
        ):
            raise self._malformed("an embedding holds a value that is not a finite number")
        return np.asarray(rows, dtype=np.float32)

    def _malformed(self, detail: str) -> EmbeddingError:
        return EmbeddingError(f"Ollama at {self.url} sent a malformed answer for model {self.model_name!r}: {detail}")


def _error_excerpt(response: httpx.Response) -> str:
    # Ollama puts its reason in {"error": "..."}; anything else is shown raw so proxies' pages stay diagnosable.
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return _excerpt(payload["error"])
    return _excerpt(response.text)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _EXCERPT_CHARS:
        flat = flat[:_EXCERPT_CHARS] + "..."
    return flat or "(empty body)"
