"""The served store: a collection on a Qdrant server, reached with qdrant-client."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import grpc
import httpx
import numpy as np
import numpy.typing as npt
from qdrant_client import QdrantClient, models
from qdrant_client.common.client_exceptions import QdrantException, ResourceExhaustedResponse
from qdrant_client.http.exceptions import ApiException, ResponseHandlingException, UnexpectedResponse

from palace.errors import ModelMismatch, StoreUnavailable
from palace.store import query as neutral  # the store-neutral search this adapter translates
from palace.store.base import (
    DENSE,
    PAYLOAD_INDEXES,
    SPARSE,
    CollectionIdentity,
    IndexState,
    MemoryFilter,
    PointWrite,
    StoredPoint,
    chunk_matrices,
)
from palace.store.keywords import document_vectors, search_legs

T = TypeVar("T")

FACET_LIMIT = 10_000
_CLIENT_ERRORS = (ApiException, QdrantException, httpx.HTTPError, grpc.RpcError)


def _server_condition(condition: neutral.Condition) -> models.Condition:
    """One node of the store-neutral filter tree as a qdrant-client condition."""
    match condition:
        case neutral.Match(key, value):
            return models.FieldCondition(key=key, match=models.MatchValue(value=value))
        case neutral.MatchAny(key, values):
            return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
        case neutral.HasId(ids):
            return models.HasIdCondition(has_id=list(ids))
        case neutral.TimeRange(key, gte, lte, gt):
            return models.FieldCondition(key=key, range=models.DatetimeRange(gte=gte, lte=lte, gt=gt))
    raise TypeError(f"unknown filter condition {condition!r}")  # pragma: no cover - the union is exhaustive


def server_filter(memory_filter: MemoryFilter) -> models.Filter | None:
    """Translate a MemoryFilter (its meaning: store.query.filter_conditions) into a qdrant-client filter."""
    conditions = neutral.filter_conditions(memory_filter)
    if not conditions:
        return None
    return models.Filter(
        must=[_server_condition(condition) for condition in conditions.must] or None,
        must_not=[_server_condition(condition) for condition in conditions.must_not] or None,
    )


def _sparse(vector: neutral.SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _server_leg(leg: neutral.Leg) -> tuple[Any, str]:
    return (_sparse(leg.sparse) if leg.sparse is not None else leg.dense), leg.using


_INDEX_TYPES = {"keyword": models.PayloadSchemaType.KEYWORD, "datetime": models.PayloadSchemaType.DATETIME}


def _describe_vectors(params: models.CollectionParams) -> str:
    vectors = params.vectors
    if isinstance(vectors, models.VectorParams):
        return f"one unnamed {vectors.size}-dim vector"
    if not vectors:
        return "no dense vectors"
    return "vectors " + ", ".join(f"{name!r} ({config.size} dims)" for name, config in vectors.items())


class ServerStore:
    """VectorStore over a Qdrant server; any number of processes may share it."""

    def __init__(
        self,
        *,
        collection: str,
        url: str | None = None,
        api_key: str | None = None,
        timeout_seconds: float = 5.0,
        client: QdrantClient | None = None,
    ) -> None:
        if client is None and not url:
            raise ValueError("ServerStore needs a url or a client")
        self._url = url
        self._collection = collection
        self._timeout_seconds = float(timeout_seconds)
        self._owns_client = client is None
        # qdrant-client takes whole seconds; rounding up never cuts a configured wait short.
        self._client = client or QdrantClient(
            url=url, api_key=api_key or None, timeout=max(1, math.ceil(timeout_seconds))
        )
        self._identity: CollectionIdentity | None = None

    @property
    def collection(self) -> str:
        """Name of the collection."""
        return self._collection

    @property
    def client(self) -> QdrantClient:
        """The qdrant-client in use."""
        return self._client

    def _where(self) -> str:
        return f"Qdrant at {self._url}" if self._url else "the Qdrant client"

    def _unavailable(self, operation: str, exc: BaseException) -> StoreUnavailable:
        where = self._where()
        cause: BaseException = exc.source if isinstance(exc, ResponseHandlingException) else exc
        if isinstance(cause, httpx.TimeoutException) or (
            isinstance(cause, grpc.RpcError)
            and getattr(cause, "code", lambda: None)() == grpc.StatusCode.DEADLINE_EXCEEDED
        ):
            return StoreUnavailable(f"{where} did not answer {operation} within {self._timeout_seconds} s")
        if isinstance(cause, ResourceExhaustedResponse):
            return StoreUnavailable(
                f"{where} is rate-limiting {operation}; retry after {cause.retry_after_s} s ({cause.message})"
            )
        if isinstance(cause, UnexpectedResponse):
            detail = cause.content[:300].decode("utf-8", "replace")
            if cause.status_code in (401, 403):
                return StoreUnavailable(
                    f"{where} refused {operation} with HTTP {cause.status_code}; check QDRANT_API_KEY ({detail})"
                )
            return StoreUnavailable(
                f"{where} failed {operation} with HTTP {cause.status_code} {cause.reason_phrase}: {detail}"
            )
        if isinstance(cause, httpx.TransportError | grpc.RpcError):
            return StoreUnavailable(f"{where} could not be reached for {operation}: {type(cause).__name__}: {cause}")
        return StoreUnavailable(f"{where} failed {operation}: {type(cause).__name__}: {cause}")

    def _call(self, operation: str, action: Callable[[], T]) -> T:
        try:
            return action()
        except _CLIENT_ERRORS as exc:
            raise self._unavailable(operation, exc) from exc

    def _check_identity(self, info: models.CollectionInfo, identity: CollectionIdentity) -> None:
        recorded = info.config.metadata or {}
        if "embedding_model" not in recorded:
            raise ModelMismatch(
                f"the collection {self._collection!r} in {self._where()} was not created by this palace: "
                f"it records no embedding model in its metadata and holds {_describe_vectors(info.config.params)} "
                f"({info.points_count} points); import it into a new collection with "
                "`palazzo import qdrant --url URL` instead of opening it directly"
            )
        identity.refuse_other(recorded, where=f"in collection {self._collection!r} in {self._where()}")

    def _create(self, identity: CollectionIdentity) -> None:
        try:
            self._client.create_collection(
                self._collection,
                vectors_config={
                    DENSE: models.VectorParams(
                        size=identity.dimension,
                        distance=models.Distance.COSINE,
                        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                        datatype=models.Datatype.FLOAT16,  # as the embedded shard (palace/store/shard.py)
                    )
                },
                sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                metadata=identity.as_metadata(),
            )
        except _CLIENT_ERRORS as exc:
            # Another process (a worker starting beside this one) may have created it between our check and
            # our create; servers answer that with 409 or 400 "already exists". Its identity is checked next.
            exists = isinstance(exc, UnexpectedResponse) and exc.status_code in (400, 409) and self._exists_now()
            if not exists:
                raise self._unavailable("ensure_collection", exc) from exc

    def _exists_now(self) -> bool:
        try:
            return bool(self._client.collection_exists(self._collection))
        except _CLIENT_ERRORS:
            return False

    def ensure_collection(self, identity: CollectionIdentity) -> None:
        """Open or create the collection, refusing one built by another embedding model."""
        if not self._call("ensure_collection", lambda: self._client.collection_exists(self._collection)):
            self._create(identity)
        info = self._call("ensure_collection", lambda: self._client.get_collection(self._collection))
        self._check_identity(info, identity)
        self._identity = identity
        existing = info.payload_schema or {}
        for key, kind in PAYLOAD_INDEXES:
            if key not in existing:
                self._call(
                    "ensure_collection",
                    partial(
                        self._client.create_payload_index,
                        self._collection,
                        field_name=key,
                        field_schema=_INDEX_TYPES[kind],
                        wait=True,
                    ),
                )

    def payload_indexes(self) -> dict[str, str]:
        """Indexed payload fields and their types."""
        info = self._call("payload_indexes", lambda: self._client.get_collection(self._collection))
        return {key: str(schema.data_type) for key, schema in (info.payload_schema or {}).items()}

    def index_state(self) -> IndexState:
        """The server optimizes on its own: yellow or grey status means it is (or will be) indexing."""
        info = self._call("index_state", lambda: self._client.get_collection(self._collection))
        return IndexState(building=info.status != models.CollectionStatus.GREEN)

    def upsert(self, points: Sequence[PointWrite]) -> None:
        """Insert or replace points in one operation."""
        if not points:
            return
        structs = []
        for point in points:
            sparse, dense = document_vectors(point)
            vector: dict[str, Any] = {SPARSE: _sparse(sparse)}
            if dense is not None:  # a point stored while the embedder was down has only its keywords
                vector[DENSE] = dense
            structs.append(models.PointStruct(id=point.id, vector=vector, payload=point.payload))
        self._call("upsert", lambda: self._client.upsert(self._collection, points=structs, wait=True))

    def set_payload(self, ids: Sequence[int], payload: dict[str, Any]) -> None:
        """Merge payload keys into existing points."""
        if not ids:
            return
        self._call(
            "set_payload",
            lambda: self._client.set_payload(self._collection, payload=payload, points=list(ids), wait=True),
        )

    def delete(self, ids: Sequence[int]) -> None:
        """Remove points by id."""
        if not ids:
            return
        self._call(
            "delete",
            lambda: self._client.delete(
                self._collection, points_selector=models.PointIdsList(points=list(ids)), wait=True
            ),
        )

    def retrieve(self, ids: Sequence[int]) -> list[StoredPoint]:
        """Fetch points by id, in the order asked, skipping unknown ids."""
        if not ids:
            return []
        records = self._call(
            "retrieve",
            lambda: self._client.retrieve(self._collection, ids=list(ids), with_payload=True, with_vectors=False),
        )
        by_id = {int(record.id): record for record in records}
        return [StoredPoint(id=i, payload=dict(by_id[i].payload or {})) for i in ids if i in by_id]

    def chunk_vectors(self, ids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The dense chunk vectors of points by id (a point stored without them is left out)."""
        if not ids:
            return {}
        records = self._call(
            "retrieve",
            lambda: self._client.retrieve(self._collection, ids=list(ids), with_payload=False, with_vectors=[DENSE]),
        )
        return chunk_matrices((record.id, record.vector) for record in records)

    def search(self, query: neutral.SearchQuery) -> list[StoredPoint]:
        """Run a search: one leg alone, or both fused by RRF inside Qdrant."""
        flt = server_filter(query.memory_filter)
        legs = [_server_leg(leg) for leg in search_legs(query)]
        if not legs:
            return []
        if len(legs) == 1:
            vector, using = legs[0]
            response = self._call(
                "search",
                lambda: self._client.query_points(
                    self._collection, query=vector, using=using, query_filter=flt, limit=query.limit, with_payload=True
                ),
            )
        else:
            depth = query.leg_depth
            prefetch = [models.Prefetch(query=vector, using=using, filter=flt, limit=depth) for vector, using in legs]
            fusion = models.RrfQuery(rrf=models.Rrf(k=query.fusion.k, weights=list(query.fusion.weights)))
            response = self._call(
                "search",
                lambda: self._client.query_points(
                    self._collection,
                    prefetch=prefetch,
                    query=fusion,
                    query_filter=flt,
                    limit=query.limit,
                    with_payload=True,
                ),
            )
        return [
            StoredPoint(id=int(point.id), payload=dict(point.payload or {}), score=float(point.score))
            for point in response.points
        ]

    def scroll(self, *, memory_filter: MemoryFilter, batch_size: int = 256) -> Iterator[StoredPoint]:
        """Iterate over every matching point by ascending id."""
        flt = server_filter(memory_filter)
        offset: models.ExtendedPointId | None = None
        while True:
            records, next_offset = self._call(
                "scroll",
                partial(
                    self._client.scroll,
                    self._collection,
                    scroll_filter=flt,
                    limit=batch_size,
                    offset=offset,
                    with_payload=True,
                    with_vectors=False,
                ),
            )
            for record in records:
                yield StoredPoint(id=int(record.id), payload=dict(record.payload or {}))
            if next_offset is None:
                return
            offset = next_offset

    def recent(self, *, memory_filter: MemoryFilter, limit: int) -> list[StoredPoint]:
        """The newest matching points by timestamp."""
        records, _ = self._call(
            "recent",
            lambda: self._client.scroll(
                self._collection,
                scroll_filter=server_filter(memory_filter),
                limit=limit,
                order_by=models.OrderBy(key="timestamp", direction=models.Direction.DESC),
                with_payload=True,
                with_vectors=False,
            ),
        )
        return [StoredPoint(id=int(record.id), payload=dict(record.payload or {})) for record in records]

    def count(self, *, memory_filter: MemoryFilter) -> int:
        """Exact number of matching points."""
        result = self._call(
            "count",
            lambda: self._client.count(self._collection, count_filter=server_filter(memory_filter), exact=True),
        )
        return int(result.count)

    def facet(self, *, key: str, memory_filter: MemoryFilter) -> dict[str, int]:
        """Exact counts per value of a keyword field."""
        response = self._call(
            "facet",
            lambda: self._client.facet(
                self._collection,
                key=key,
                facet_filter=server_filter(memory_filter),
                limit=FACET_LIMIT,
                exact=True,
            ),
        )
        return {str(hit.value): int(hit.count) for hit in response.hits}

    def flush(self) -> None:
        """Nothing to do: every write waits until Qdrant has applied it."""

    def discard(self) -> str:
        """Drop the collection so a rebuild starts empty (the journal holds every memory)."""
        if not self._call("discard", lambda: self._client.collection_exists(self._collection)):
            return ""
        self._call("discard", lambda: self._client.delete_collection(self._collection))
        return f"collection {self._collection!r} dropped"

    def close(self) -> None:
        """Release the client, unless the caller passed it in and still owns it."""
        if self._owns_client:
            self._client.close()
