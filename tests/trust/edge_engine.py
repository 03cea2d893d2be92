"""The stand-in Qdrant server's points on Qdrant's own Rust engine (qdrant-edge), for benchmarks.

qdrant-client's local mode (the stand-in's default engine) evaluates every filter and distance in Python
over every point, one request at a time: under load it costs more CPU per call than palazzo itself, so a
worker curve measured through it shows the stand-in, not the workers. A Qdrant server runs the segment
engine that Qdrant Edge packages; this engine answers the same REST bodies from an Edge shard per
collection, translating the JSON that qdrant-client sends straight into Edge's types. It covers what
palazzo's ServerStore sends (tests/trust/test_edge_engine.py holds it to the local engine's answers) and
answers anything else with an error, never a guess. Collection metadata stays with the local engine.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import qdrant_edge as qe

_DISTANCES = {"Cosine": qe.Distance.Cosine, "Dot": qe.Distance.Dot, "Euclid": qe.Distance.Euclid}
_DATATYPES = {"float16": qe.VectorStorageDatatype.Float16, "float32": qe.VectorStorageDatatype.Float32}
_INDEX_TYPES = {"keyword": qe.PayloadSchemaType.Keyword, "datetime": qe.PayloadSchemaType.Datetime}


def _vector_params(name: str, params: dict[str, Any]) -> qe.EdgeVectorParams:
    multi = params.get("multivector_config")
    if multi is not None and multi.get("comparator") != "max_sim":
        raise ValueError(f"vector {name!r}: only the max_sim multivector comparator is served")
    return qe.EdgeVectorParams(
        size=int(params["size"]),
        distance=_DISTANCES[params["distance"]],
        multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim) if multi is not None else None,
        datatype=_DATATYPES[params.get("datatype") or "float32"],
    )


def _sparse_params(params: dict[str, Any] | None) -> qe.EdgeSparseVectorParams:
    modifier = (params or {}).get("modifier")
    if modifier not in (None, "none", "idf"):
        raise ValueError(f"sparse modifier {modifier!r} is not served")
    return qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf if modifier == "idf" else None)


def _condition(node: dict[str, Any]) -> Any:
    if "has_id" in node:
        return qe.HasIdCondition({int(i) for i in node["has_id"]})
    if any(key in node for key in ("must", "must_not", "should")):
        return edge_filter(node)
    key = node["key"]
    if node.get("match") is not None:
        match = node["match"]
        if "value" in match:
            return qe.FieldCondition(key, match=qe.MatchValue(match["value"]))
        if "any" in match:
            return qe.FieldCondition(key, match=qe.MatchAny(list(match["any"])))
    if node.get("range") is not None:
        bounds = {name: value for name, value in node["range"].items() if value is not None}
        if any(not isinstance(value, str) for value in bounds.values()):
            raise ValueError(f"range on {key!r}: only datetime ranges are served")
        return qe.FieldCondition(key, range=qe.RangeDateTime(**bounds))
    raise ValueError(f"filter condition {node!r} is not served")


def edge_filter(body: dict[str, Any] | None) -> qe.Filter | None:
    """A REST filter as an Edge filter (None stays None)."""
    if not body:
        return None
    unknown = set(body) - {"must", "must_not", "should"}
    if unknown:
        raise ValueError(f"filter keys {sorted(unknown)} are not served")

    def clause(name: str) -> list[Any] | None:
        nodes = body.get(name)
        if nodes is None:
            return None
        return [_condition(node) for node in (nodes if isinstance(nodes, list) else [nodes])]

    return qe.Filter(must=clause("must"), should=clause("should"), must_not=clause("must_not"))


def _vectors(vector: Any) -> dict[str, Any]:
    if not isinstance(vector, dict):
        raise ValueError("only named vectors are served")
    return {
        name: qe.SparseVector(indices=value["indices"], values=value["values"]) if isinstance(value, dict) else value
        for name, value in vector.items()
    }


def _nearest(query: Any, using: str | None) -> Any:
    if isinstance(query, dict) and "nearest" in query:
        query = query["nearest"]
    if isinstance(query, dict):
        query = qe.SparseVector(indices=query["indices"], values=query["values"])
    return qe.Query.Nearest(query, using=using)


def _vector_json(vector: Any) -> Any:
    if vector is None:
        return None
    return {
        name: {"indices": list(value.indices), "values": list(value.values)}
        if isinstance(value, qe.SparseVector)
        else value
        for name, value in vector.items()
    }


def _record(record: Any, *, score: bool = False) -> dict[str, Any]:
    answer = {"id": int(record.id), "payload": record.payload, "vector": _vector_json(record.vector)}
    if score:
        answer.update(version=0, score=float(record.score))
    return answer


def _with_vector(value: Any) -> Any:
    return value if isinstance(value, list) else bool(value)


class EdgeEngine:
    """One Edge shard per collection in a throwaway directory; callers serialize calls (the stand-in's lock)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="edge-stand-in-"))
        self.shards: dict[str, qe.EdgeShard] = {}

    def create(self, name: str, body: dict[str, Any]) -> None:
        """Make the collection's shard from a REST create-collection body."""
        self.drop(name)
        vectors = body.get("vectors") or {}
        if "size" in vectors:
            raise ValueError("only named vectors are served")
        config = qe.EdgeConfig(
            vectors={vector: _vector_params(vector, params) for vector, params in vectors.items()},
            sparse_vectors={
                vector: _sparse_params(params) for vector, params in (body.get("sparse_vectors") or {}).items()
            },
        )
        self.shards[name] = qe.EdgeShard.create(str(self.root / name), config)

    def drop(self, name: str) -> None:
        """Close and delete the collection's shard, if any."""
        shard = self.shards.pop(name, None)
        if shard is not None:
            shard.close()
        shutil.rmtree(self.root / name, ignore_errors=True)

    def close(self) -> None:
        """Drop every shard and the directory."""
        for name in list(self.shards):
            self.drop(name)
        shutil.rmtree(self.root, ignore_errors=True)

    def index(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Make a payload index (keyword or datetime)."""
        schema = body["field_schema"]
        kind = schema if isinstance(schema, str) else schema["type"]
        self.shards[name].update(qe.UpdateOperation.create_field_index(body["field_name"], _INDEX_TYPES[kind]))
        return {"operation_id": 0, "status": "completed"}

    def points(self, name: str, method: str, rest: str, body: Any) -> Any:
        """Answer one points (or facet) route of the collection."""
        shard = self.shards[name]
        route = (method, rest)
        if route == ("PUT", "/points"):
            points = [qe.Point(int(p["id"]), _vectors(p.get("vector") or {}), p.get("payload")) for p in body["points"]]
            shard.update(qe.UpdateOperation.upsert_points(points))
            return {"operation_id": 0, "status": "completed"}
        if route == ("POST", "/points/payload"):
            shard.update(qe.UpdateOperation.set_payload([int(i) for i in body["points"]], body["payload"]))
            return {"operation_id": 0, "status": "completed"}
        if route == ("POST", "/points/delete"):
            shard.update(qe.UpdateOperation.delete_points([int(i) for i in body["points"]]))
            return {"operation_id": 0, "status": "completed"}
        if route == ("POST", "/points"):
            records = shard.retrieve(
                [int(i) for i in body["ids"]],
                with_payload=bool(body.get("with_payload", True)),
                with_vector=_with_vector(body.get("with_vector", False)),
            )
            return [_record(record) for record in records]
        if route == ("POST", "/points/scroll"):
            order = body.get("order_by")
            if isinstance(order, str):
                order = {"key": order}
            request = qe.ScrollRequest(
                offset=body.get("offset"),
                limit=body.get("limit") or 10,
                filter=edge_filter(body.get("filter")),
                with_payload=body.get("with_payload", True),
                with_vector=_with_vector(body.get("with_vector", False)),
                order_by=qe.OrderBy(
                    order["key"], direction=qe.Direction.Desc if order.get("direction") == "desc" else qe.Direction.Asc
                )
                if order
                else None,
            )
            records, offset = shard.scroll(request)
            return {
                "points": [_record(record) for record in records],
                "next_page_offset": None if offset is None else int(offset),
            }
        if route == ("POST", "/points/count"):
            return {"count": int(shard.count(qe.CountRequest(filter=edge_filter(body.get("filter")), exact=True)))}
        if route == ("POST", "/points/query"):
            return {"points": [_record(point, score=True) for point in shard.query(self._query(body))]}
        if route == ("POST", "/facet"):
            request = qe.FacetRequest(
                body["key"], limit=body.get("limit") or 10, exact=True, filter=edge_filter(body.get("filter"))
            )
            return {
                "hits": [{"value": hit.value, "count": int(hit.count)} for hit in shard.facet(request) if hit.count]
            }
        raise KeyError(rest)

    @staticmethod
    def _query(body: dict[str, Any]) -> qe.QueryRequest:
        flt = edge_filter(body.get("filter"))
        limit = body.get("limit") or 10
        prefetch = body.get("prefetch")
        if not prefetch:
            return qe.QueryRequest(
                limit=limit, query=_nearest(body["query"], body.get("using")), filter=flt, with_payload=True
            )
        rrf = body["query"].get("rrf") if isinstance(body["query"], dict) else None
        if rrf is None:
            raise ValueError("only RRF fusion of prefetches is served")
        return qe.QueryRequest(
            limit=limit,
            prefetches=[
                qe.Prefetch(
                    limit=leg.get("limit") or 10,
                    query=_nearest(leg["query"], leg.get("using")),
                    filter=edge_filter(leg.get("filter")),
                )
                for leg in prefetch
            ],
            query=qe.Fusion.Rrf(k=rrf.get("k") or 2, weights=rrf.get("weights")),  # type: ignore[arg-type]
            filter=flt,
            with_payload=True,
        )
