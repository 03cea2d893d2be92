"""schemathesis against the live server's own OpenAPI schema (/api/openapi.json): no input earns a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.mcpserver.conftest import http_server
from tests.trust.conftest import migrate


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """Bodies for /ingest: bytes as generated, anything else as text."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def live_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir: Path = tmp_path_factory.mktemp("schemathesis") / "data"
    migrate(data_dir)
    with http_server(data_dir, PALAZZO_INGEST_MAX_BYTES=str(512 * 1024)) as url:
        yield url


# schemathesis' own pytest plugin does not run under pytest 9 (it reads Function._nodeid), so the test
# drives its hypothesis strategies directly: every operation, valid (positive) and invalid (negative) data.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["positive", "negative"])
def test_it_never_answers_a_generated_request_with_a_5xx(live_url: str, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(live_url + "/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations
    seen: dict[str, int] = {}
    for operation in operations:

        @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: Any) -> None:
            response = case.call(base_url=live_url, timeout=60)
            label = f"{case.method} {case.path}"
            seen[label] = seen.get(label, 0) + 1
            assert response.status_code < 500, (label, case.body, response.status_code, response.text[:300])

        try:
            check()
        except Unsatisfiable:
            # An operation with no parameters and no body has nothing to make invalid.
            assert mode == GenerationMode.NEGATIVE and not operation.body and not operation.query
    print(seen)
    assert "POST /ingest" in seen
    if mode == GenerationMode.POSITIVE:
        assert "GET /healthz" in seen


def test_it_publishes_the_rest_routes_in_its_openapi_schema(live_url: str) -> None:
    import httpx

    paths = set(httpx.get(live_url + "/api/openapi.json", timeout=30).json()["paths"])
    assert {"/healthz", "/ingest"} <= paths
