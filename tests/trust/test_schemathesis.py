"""schemathesis against the live server's own OpenAPI schema (/api/openapi.json): no input earns a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance  # noqa: F401

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


@pytest.fixture(scope="module")
def api_schema(live_url: str) -> Any:
    return schemathesis.openapi.from_url(live_url + "/api/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_it_never_answers_a_generated_request_with_a_5xx(case: Any, live_url: str) -> None:
    from schemathesis.checks import not_a_server_error

    response = case.call(base_url=live_url, timeout=60)
    case.validate_response(response, checks=[not_a_server_error])


def test_it_publishes_the_rest_routes_in_its_openapi_schema(live_url: str) -> None:
    import httpx

    paths = set(httpx.get(live_url + "/api/openapi.json", timeout=30).json()["paths"])
    assert {"/healthz", "/ingest"} <= paths
