"""Read another program's Qdrant collection (the Rust palazzo, mcp-server-qdrant) for import_qdrant."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from qdrant_client import QdrantClient
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ApiException

from palace.errors import StoreUnavailable

_CLIENT_ERRORS = (ApiException, QdrantException, httpx.HTTPError, RuntimeError, ValueError)


@dataclass(frozen=True)
class LegacyPoint:
    """A point of a foreign collection: its id (integer or UUID string) and payload; vectors are not read."""

    id: int | str
    payload: dict[str, Any]


def open_client(*, url: str | None = None, api_key: str | None = None, path: str | None = None) -> QdrantClient:
    """A client for a Qdrant server (url) or a local-mode directory (path)."""
    if bool(url) == bool(path):
        raise ValueError("give exactly one of url and path")
    if path and not Path(path).expanduser().is_dir():
        # qdrant-client would create the directory (and an empty database in it): a typo must not do that.
        raise StoreUnavailable(f"cannot open Qdrant at {path}: there is no such directory")
    try:
        if path:
            return QdrantClient(path=path)
        return QdrantClient(url=url, api_key=api_key or None, timeout=30)
    except _CLIENT_ERRORS as exc:
        raise StoreUnavailable(f"cannot open Qdrant at {url or path}: {type(exc).__name__}: {exc}") from exc


def count_points(client: QdrantClient, collection: str) -> int:
    """Exact number of points in a foreign collection; StoreUnavailable when it cannot be read."""
    try:
        if not client.collection_exists(collection):
            raise StoreUnavailable(f"the Qdrant collection {collection!r} does not exist")
        return int(client.count(collection, exact=True).count)
    except _CLIENT_ERRORS as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise StoreUnavailable(f"cannot read the Qdrant collection {collection!r}: {detail}") from exc


def read_points(client: QdrantClient, collection: str, *, batch_size: int = 256) -> Iterator[LegacyPoint]:
    """Every point of a foreign collection with its payload, page by page (ascending id)."""
    offset: Any = None
    while True:
        try:
            records, offset = client.scroll(
                collection, limit=batch_size, offset=offset, with_payload=True, with_vectors=False
            )
        except _CLIENT_ERRORS as exc:
            raise StoreUnavailable(
                f"reading the Qdrant collection {collection!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        for record in records:
            point_id = record.id if isinstance(record.id, int) else str(record.id)
            yield LegacyPoint(id=point_id, payload=dict(record.payload or {}))
        if offset is None:
            return
