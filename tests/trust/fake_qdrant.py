"""A stand-in Qdrant server for fault tests: Qdrant's REST API over qdrant-client's local mode, switchable off.

There is no Qdrant server binary here, so this serves the handful of REST endpoints palazzo's ServerStore
uses, parsing bodies with qdrant-client's own REST models and answering from a local-mode client. Its
`mode` makes it misbehave the ways a real server does: "up", "silent" (accepts, never answers),
"silent_writes" (answers reads, holds writes unanswered and unapplied), "late_writes" (applies writes
but answers only after the client gave up) and "down" (closes every connection at once).

With engine="edge" the points live in Qdrant's Rust engine instead (tests/trust/edge_engine.py): the
benchmarks' stand-in, cheap enough per call that a load measures palazzo rather than the stand-in.
"""

from __future__ import annotations

import json
import re
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, TypeAdapter
from qdrant_client import QdrantClient, models

from tests.trust.edge_engine import EdgeEngine

WRITE_PATHS = re.compile(r"/points(/payload|/delete)?$")


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value


class FakeQdrant:
    """The server, its local-mode backing store and its current mode."""

    def __init__(self, port: int = 0, *, engine: str = "local") -> None:
        self.mode = "up"
        self.hold_seconds = 30.0
        self.local = QdrantClient(":memory:")
        self.edge = EdgeEngine() if engine == "edge" else None
        self.lock = threading.Lock()
        self.requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                path = self.path.split("?", 1)[0]
                fake.requests.append(f"{self.command} {path}")
                mode = fake.mode
                is_write = self.command in ("PUT", "POST") and bool(WRITE_PATHS.search(path))
                if mode == "down":
                    self.close_connection = True
                    return
                if mode == "silent" or (mode == "silent_writes" and is_write):
                    deadline = time.monotonic() + fake.hold_seconds
                    while fake.mode == mode and time.monotonic() < deadline:
                        time.sleep(0.05)
                    self.close_connection = True
                    return
                try:
                    with fake.lock:
                        result = _jsonable(fake.dispatch(self.command, path, body))
                    status, payload = 200, {"result": result, "status": "ok", "time": 0.0}
                    if path == "/":  # the root answers unwrapped
                        payload = result
                except KeyError:
                    status, payload = 404, {"status": {"error": f"no fake endpoint {self.command} {path}"}}
                except Exception as exc:
                    status, payload = 400, {"status": {"error": f"{type(exc).__name__}: {exc}"}}
                if mode == "late_writes" and is_write:
                    time.sleep(fake.hold_seconds)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve()

            def do_PUT(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def do_DELETE(self) -> None:
                self._serve()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeQdrant:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.mode = "down"
        self.server.shutdown()
        self.server.server_close()
        if self.edge is not None:
            with self.lock:
                self.edge.close()

    def count(self, collection: str) -> int:
        with self.lock:
            if self.edge is not None:
                return int(self.edge.points(collection, "POST", "/points/count", {})["count"])
            return int(self.local.count(collection, exact=True).count)

    def dispatch(self, method: str, path: str, body: Any) -> Any:
        """Answer one REST call from the local-mode client."""
        if path == "/":
            return {"title": "fake qdrant", "version": "1.16.0"}
        match = re.fullmatch(r"/collections/([^/]+)(/.*)?", path)
        if not match:
            raise KeyError(path)
        name, rest = match.group(1), match.group(2) or ""
        local = self.local
        route = (method, rest)
        if route == ("GET", "/exists"):
            return {"exists": local.collection_exists(name)}
        if route == ("GET", ""):
            return local.get_collection(name).model_dump(mode="json")
        if route == ("PUT", ""):
            create = models.CreateCollection.model_validate(body)
            created = local.create_collection(  # refuses an existing collection before the engine replaces it
                name,
                vectors_config=create.vectors,
                sparse_vectors_config=create.sparse_vectors,
                metadata=create.metadata,
            )
            if self.edge is not None:
                self.edge.create(name, body)
            return created
        if route == ("DELETE", ""):
            if self.edge is not None:
                self.edge.drop(name)
            return local.delete_collection(name)
        if route == ("PUT", "/index"):
            index = models.CreateFieldIndex.model_validate(body)
            if self.edge is not None:
                self.edge.index(name, body)
            with warnings.catch_warnings():  # local mode ignores payload indexes, and says so
                warnings.simplefilter("ignore", UserWarning)
                return local.create_payload_index(name, field_name=index.field_name, field_schema=index.field_schema)
        if self.edge is not None and rest.startswith(("/points", "/facet")):
            if not local.collection_exists(name):
                raise KeyError(path)
            return self.edge.points(name, method, rest, body)
        if route == ("PUT", "/points"):
            points = TypeAdapter(models.PointInsertOperations).validate_python(body)
            assert isinstance(points, models.PointsList)
            return local.upsert(name, points=points.points).model_dump(mode="json")
        if route == ("POST", "/points"):
            request = models.PointRequest.model_validate(body)
            records = local.retrieve(
                name, ids=request.ids, with_payload=request.with_payload, with_vectors=request.with_vector or False
            )
            return [record.model_dump(mode="json") for record in records]
        if route == ("POST", "/points/scroll"):
            scroll = models.ScrollRequest.model_validate(body)
            records, offset = local.scroll(
                name,
                scroll_filter=scroll.filter,
                limit=scroll.limit or 10,
                offset=scroll.offset,
                with_payload=scroll.with_payload if scroll.with_payload is not None else True,
                with_vectors=False,
                order_by=scroll.order_by,
            )
            return {"points": [record.model_dump(mode="json") for record in records], "next_page_offset": offset}
        if route == ("POST", "/points/count"):
            count = models.CountRequest.model_validate(body)
            return local.count(name, count_filter=count.filter, exact=True).model_dump(mode="json")
        if route == ("POST", "/points/query"):
            query = models.QueryRequest.model_validate(body)
            return local.query_points(
                name,
                query=query.query,
                using=query.using,
                prefetch=query.prefetch,
                query_filter=query.filter,
                limit=query.limit or 10,
                with_payload=True,
            ).model_dump(mode="json")
        if route == ("POST", "/points/payload"):
            update = models.SetPayload.model_validate(body)
            return local.set_payload(name, payload=update.payload, points=update.points or []).model_dump(mode="json")
        if route == ("POST", "/points/delete"):
            selector = TypeAdapter(models.PointsSelector).validate_python(body)
            return local.delete(name, points_selector=selector).model_dump(mode="json")
        if route == ("POST", "/facet"):
            facet = models.FacetRequest.model_validate(body)
            return local.facet(
                name, key=facet.key, facet_filter=facet.filter, limit=facet.limit or 10, exact=True
            ).model_dump(mode="json")
        raise KeyError(path)
