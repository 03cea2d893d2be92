"""Edge cases at the edges of the wire: raw bytes over /mcp and /ingest, sizes at and past each limit.

Already covered elsewhere (not repeated here):
- tests/palace/test_services.py: NUL bytes, 32 KB text accepted and 32 KB + 1 refused (ASCII and UTF-8),
  256 batch items accepted and 257 refused, bad RFC3339 and impossible dates, unknown enum values.
- tests/palace/test_selectors.py: limit 0 and 21, NaN / inf / negative half-life, `since` after `until`,
  100 recall ids accepted and 101 refused.
- tests/mcpserver/test_tools.py: over MCP, text over 32 KB, 257 batch items, 101 recall ids, limit 0 and 21,
  bad RFC3339, unknown wing/hall/category, wrong types and unknown fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from palace.schema.forms import MAX_TEXT_BYTES
from tests.mcpserver.conftest import connect, http_server
from tests.palace.helpers import memory
from tests.trust.conftest import migrate

INGEST_LIMIT = 3 * 1024 * 1024
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir: Path = tmp_path_factory.mktemp("edges") / "data"
    migrate(data_dir)
    with http_server(data_dir, PALAZZO_INGEST_MAX_BYTES=str(INGEST_LIMIT)) as url:
        yield url


class RawSession:
    """An MCP session spoken by hand, so bodies can be any bytes."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60)
        response = self.http.post(
            "/mcp",
            headers=MCP_HEADERS,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
        )
        assert response.status_code == 200, response.text
        self.headers = MCP_HEADERS | {
            "mcp-session-id": response.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }
        self.http.post("/mcp", headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body: bytes) -> httpx.Response:
        return self.http.post("/mcp", headers=self.headers, content=body)

    def call(self, name: str, arguments_json: str) -> dict[str, Any]:
        """A tools/call whose arguments are spliced in as raw JSON text."""
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": "ARGS"}}
        body = json.dumps(call).replace('"ARGS"', arguments_json)
        response = self.post(body.encode("utf-8", "surrogatepass"))
        assert response.status_code < 500, response.text
        return _message(response)

    def total(self) -> int:
        result = self.call("palace_status", "{}")["result"]
        return int(result["structuredContent"]["total"])


def _message(response: httpx.Response) -> dict[str, Any]:
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    message: dict[str, Any] = json.loads(text)
    return message


@pytest.fixture(scope="module")
def raw(base_url: str) -> RawSession:
    return RawSession(base_url)


def _tool_error(message: dict[str, Any]) -> str:
    result = message.get("result")
    assert result is not None and result.get("isError") is True, message
    text: str = result["content"][0]["text"]
    assert "unexpectedly" not in text and "Traceback" not in text
    return text


def test_it_refuses_invalid_utf8_in_a_json_rpc_body_and_keeps_serving(raw: RawSession) -> None:
    total = raw.total()
    body = (
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call",'
        b'"params":{"name":"palace_store","arguments":{"text":"\xff\xfe bad"}}}'
    )
    response = raw.post(body)
    assert 400 <= response.status_code < 500 or "error" in _message(response), response.text
    assert raw.total() == total


def test_it_refuses_a_nul_escape_and_a_lone_surrogate_in_json_text(raw: RawSession) -> None:
    total = raw.total()
    nul = json.dumps(memory("before\u0000after"))
    assert "NUL" in _tool_error(raw.call("palace_store", nul))
    surrogate = json.dumps(memory("x")).replace('"x"', '"lone \\ud800 surrogate"')
    message = raw.call("palace_store", surrogate)
    # The JSON-RPC parser refuses a lone surrogate escape itself; had it passed, the text field would refuse it.
    if "error" in message:
        assert message["error"]["code"] == -32700
    else:
        assert "UTF-8" in _tool_error(message)
    assert raw.total() == total


def test_it_takes_32_kb_of_multibyte_text_over_mcp_and_refuses_one_byte_more(base_url: str) -> None:
    exact = "é" * (MAX_TEXT_BYTES // 2)
    with connect(base_url + "/mcp", "http") as client:
        stored = client.ok("palace_store", memory(exact))
        assert stored["text"] == exact and len(stored["text"].encode()) == MAX_TEXT_BYTES
        message = client.error("palace_store", memory(exact + "a"))
        assert "32769 bytes" in message and "text" in message


def test_it_accepts_100_recall_ids_over_mcp(base_url: str) -> None:
    with connect(base_url + "/mcp", "http") as client:
        result = client.ok("palace_recall", {"ids": list(range(1_000_000_000, 1_000_000_100))})
        assert len(result["missing"]) == 100


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1"])
def test_it_refuses_non_finite_or_negative_half_life_sent_as_raw_json(raw: RawSession, literal: str) -> None:
    message = raw.call("palace_find", f'{{"query":"q","recency_half_life_days":{literal}}}')
    if "error" in message:  # the JSON-RPC layer may refuse a non-standard literal outright
        assert message["error"]["code"] < 0
        return
    assert "recency_half_life_days" in _tool_error(message)


def test_it_refuses_since_after_until_and_an_unknown_enum_over_mcp(raw: RawSession) -> None:
    message = raw.call("palace_find", '{"query":"q","since":"2026-02-01T00:00:00Z","until":"2026-01-01T00:00:00Z"}')
    assert "since" in _tool_error(message) and "after until" in _tool_error(message)
    assert "gossip" in _tool_error(raw.call("palace_find", '{"query":"q","category":"gossip"}'))


@pytest.mark.parametrize("depth", [64, 5000])
def test_it_survives_deeply_nested_json_in_an_argument(raw: RawSession, depth: int) -> None:
    total = raw.total()
    nested = "[" * depth + "]" * depth
    response = raw.post(
        (
            '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"palace_store","arguments":'
            f'{{"text":{nested},"category":"technical","wing":"projects","room":"r","hall":"facts"}}}}}}'
        ).encode()
    )
    assert response.status_code < 500, response.text
    message = _message(response) if response.status_code == 200 else {}
    if "result" in message:
        assert "must be a string" in _tool_error(message)
    assert raw.total() == total


def test_it_refuses_an_mcp_body_beyond_the_size_limit(raw: RawSession) -> None:
    from mcpserver.server import MAX_MESSAGE_BYTES

    filler = "x" * (MAX_MESSAGE_BYTES + 1024)
    body = '{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"palace_find","arguments":{"query":"%s"}}}'
    response = raw.post((body % filler).encode())
    assert response.status_code == 413, response.status_code
    assert raw.total() >= 0


# /ingest: the REST side of the same rules.


def _ingest(base_url: str, body: bytes) -> httpx.Response:
    return httpx.post(base_url + "/ingest", content=body, headers=NDJSON, timeout=120)


def _status_total(base_url: str) -> int:
    with connect(base_url + "/mcp", "http") as client:
        return client.total()


def test_it_refuses_invalid_utf8_in_an_ingest_body_naming_the_line(base_url: str) -> None:
    total = _status_total(base_url)
    bad = b'{"text":"\xff\xfe","category":"technical","wing":"projects","room":"r","hall":"facts"}\n'
    response = _ingest(base_url, bad)
    assert response.status_code == 400
    assert "line 1" in response.text and "UTF-8" in response.text
    second = json.dumps(memory("valid ingest line before a bad one")).encode() + b"\n" + b'{"text":"\xc3\x28"}\n'
    response = _ingest(base_url, second)
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[-1]["done"] is True and lines[-1]["counts"]["failed"] == 1
    assert any("UTF-8" in failure["error"] for failure in lines[0]["failed"])
    assert _status_total(base_url) == total + 1


def test_it_refuses_a_nul_byte_in_an_ingest_line(base_url: str) -> None:
    body = json.dumps(memory("ok line")).encode() + b"\n" + json.dumps(memory("nul \u0000 inside")).encode() + b"\n"
    lines = [json.loads(line) for line in _ingest(base_url, body).text.splitlines()]
    assert lines[-1]["counts"]["failed"] == 1
    assert "NUL" in lines[0]["failed"][0]["error"]


def test_it_refuses_a_very_long_single_ndjson_line_and_keeps_the_rest(base_url: str) -> None:
    from palace.operations.ingest import MAX_LINE_BYTES

    total = _status_total(base_url)
    long_line = json.dumps(memory("y" * (MAX_LINE_BYTES + 10))).encode()
    body = long_line + b"\n" + json.dumps(memory("the line after a very long one")).encode() + b"\n"
    response = _ingest(base_url, body)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert "longer than" in response.text
        assert _status_total(base_url) == total
        return
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[-1]["counts"] == {"stored": 1, "duplicates_returned": 0, "skipped_duplicates": 0, "failed": 1}
    assert _status_total(base_url) == total + 1


def test_it_refuses_an_ingest_body_beyond_the_size_limit(base_url: str) -> None:
    total = _status_total(base_url)
    line = json.dumps(memory("z" * 1000)).encode() + b"\n"
    body = line * (INGEST_LIMIT // len(line) + 2)
    assert _ingest(base_url, body).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must cut the stream itself
        for index in range(INGEST_LIMIT // 1000 + 50):
            yield json.dumps(memory(f"chunked {index} " + "z" * 900)).encode() + b"\n"

    response = httpx.post(base_url + "/ingest", content=chunks(), headers=NDJSON, timeout=120)
    assert response.status_code == 413
    assert _status_total(base_url) == total


@pytest.mark.parametrize("count", [256, 257])
def test_it_ingests_256_and_257_items_in_one_and_two_chunks(base_url: str, count: int) -> None:
    body = b"".join(json.dumps(memory(f"ingest edge {count} item {i}")).encode() + b"\n" for i in range(count))
    lines = [json.loads(line) for line in _ingest(base_url, body).text.splitlines()]
    assert [line.get("items_in_chunk") for line in lines[:-1]] == ([256] if count == 256 else [256, 1])
    assert lines[-1]["counts"]["stored"] == count
