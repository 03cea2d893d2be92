"""POST /ingest and GET /export on a real `manage.py serve`, and the ingest command next to it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.mcpserver.conftest import ROOT, RunningServer, http_server, migrate, server_env

MAX_BYTES = 1_000_000
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server of this module's own (a small body limit, and its journal file is broken on purpose)."""
    data_dir = tmp_path_factory.mktemp("ingest") / "data"
    migrate(data_dir)
    with http_server(data_dir, PALAZZO_INGEST_MAX_BYTES=str(MAX_BYTES)) as base_url:
        yield RunningServer(base_url=base_url, data_dir=data_dir)


def body(prefix: str, count: int, *extra: str) -> bytes:
    lines = [
        json.dumps({"text": f"{prefix} {i}", "category": "technical", "wing": "projects", "room": "r", "hall": "facts"})
        for i in range(count)
    ]
    return ("\n".join([*lines, *extra]) + "\n").encode()


def stream_lines(server: RunningServer, content: Any, **kwargs: Any) -> list[tuple[float, dict[str, Any]]]:
    """POST /ingest and read the response line by line, noting when each line arrived."""
    arrived = []
    with httpx.stream(
        "POST", f"{server.base_url}/ingest", content=content, headers=NDJSON, timeout=120, **kwargs
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("application/x-ndjson")
        for raw in response.iter_lines():
            if raw:
                arrived.append((time.monotonic(), json.loads(raw)))
    return arrived


def test_it_streams_a_line_per_chunk_while_later_chunks_are_processed(server: RunningServer) -> None:
    arrived = stream_lines(server, body("Streamed fact", 1100, "{broken", ""))

    lines = [line for _, line in arrived]
    assert [line.get("chunk") for line in lines[:-1]] == [1, 2, 3, 4, 5]
    assert [line["items_in_chunk"] for line in lines[:-1]] == [256, 256, 256, 256, 77]
    assert lines[-1] == {
        "done": True,
        "total": 1101,
        "counts": {"stored": 1100, "duplicates_returned": 0, "skipped_duplicates": 0, "failed": 1},
        "redactions": {},
    }
    assert lines[-2]["failed"] == [{"line": 1101, "error": lines[-2]["failed"][0]["error"]}]
    assert lines[0]["running"]["stored"] == 256  # the first line came when only one chunk was done...
    first_at, done_at = arrived[0][0], arrived[-1][0]
    assert done_at - first_at > 0.2  # ...and long before the last chunk was

    again = stream_lines(server, body("Streamed fact", 3))
    assert again[-1][1]["counts"]["duplicates_returned"] == 3


@pytest.mark.parametrize(
    ("content", "headers", "reason"),
    [
        (b"this is not json\n", NDJSON, "not JSON Lines: line 1"),
        (b"\n# only a comment\n\n", NDJSON, "holds no items"),
        (body("Wrong type", 1), {"Content-Type": "application/json"}, "Content-Type must be application/x-ndjson"),
    ],
)
def test_it_refuses_an_unparseable_body_with_400_before_streaming(
    server: RunningServer, content: bytes, headers: dict[str, str], reason: str
) -> None:
    response = httpx.post(f"{server.base_url}/ingest", content=content, headers=headers, timeout=60)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert reason in response.text


def test_it_refuses_a_body_over_the_limit_with_413(server: RunningServer) -> None:
    big = body("Too big " + "x" * 1000, 1200)
    assert len(big) > MAX_BYTES
    declared = httpx.post(f"{server.base_url}/ingest", content=big, headers=NDJSON, timeout=60)
    assert declared.status_code == 413 and "PALAZZO_INGEST_MAX_BYTES" in declared.text

    def chunked() -> Iterator[bytes]:  # no Content-Length: refused while it arrives
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    try:
        streamed = httpx.post(f"{server.base_url}/ingest", content=chunked(), headers=NDJSON, timeout=60)
        assert streamed.status_code == 413
    except httpx.WriteError:
        pass  # the server may close the connection before the client has sent the rest
    assert "Too big" not in httpx.get(f"{server.base_url}/export", timeout=60).text


def test_it_ends_the_stream_with_an_error_line_when_the_journal_fails(server: RunningServer) -> None:
    wal = server.data_dir / "wal.jsonl"
    arrived = []
    try:
        with httpx.stream(
            "POST", f"{server.base_url}/ingest", content=body("Journal failure", 1500), headers=NDJSON, timeout=120
        ) as response:
            assert response.status_code == 200
            for raw in response.iter_lines():
                if not raw:
                    continue
                arrived.append(json.loads(raw))
                if len(arrived) == 1:
                    # The journal file becomes unwritable for real: a directory where the file was.
                    wal.unlink()
                    wal.mkdir()
    finally:
        if wal.is_dir():
            shutil.rmtree(wal)
    assert arrived[0]["chunk"] == 1 and arrived[0]["counts"]["stored"] == 256
    error = arrived[-1]
    assert set(error) == {"chunk", "error"} and error["chunk"] >= 2
    assert "cannot append to the journal file" in error["error"]
    assert not any(line.get("done") for line in arrived)
    stored = sum(line["counts"]["stored"] for line in arrived[:-1])
    exported = [
        line
        for line in httpx.get(f"{server.base_url}/export", timeout=60).text.splitlines()
        if "Journal failure" in line
    ]
    assert len(exported) == stored < 1500  # nothing of the failed chunk was stored


def test_it_exports_every_memory_as_json_lines(server: RunningServer) -> None:
    stream_lines(server, body("Exported fact", 2))
    response = httpx.get(f"{server.base_url}/export", timeout=60)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    memories = [json.loads(line) for line in response.text.splitlines()]
    ids = [memory["id"] for memory in memories]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {"Exported fact 0", "Exported fact 1"} <= {memory["text"] for memory in memories}
    assert all("superseded_by" in memory and "added_by" in memory for memory in memories)
    assert {memory["added_by"] for memory in memories if memory["text"].startswith("Exported")} == {"http-ingest"}


def test_it_guards_ingest_with_the_host_check_and_documents_it(server: RunningServer) -> None:
    foreign = httpx.post(
        f"{server.base_url}/ingest", content=body("Foreign", 1), headers=NDJSON | {"Host": "evil.example"}, timeout=60
    )
    assert foreign.status_code == 421
    schema = httpx.get(f"{server.base_url}/api/openapi.json", timeout=60).json()
    operation = schema["paths"]["/ingest"]["post"]
    assert "application/x-ndjson" in operation["requestBody"]["content"]
    assert {"200", "400", "413"} <= set(operation["responses"])
    assert "/export" in schema["paths"]


def test_it_ingests_through_the_running_server_or_tells_the_command_to_use_it(
    server: RunningServer, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(body("Sent by the command", 3, "not json"))
    command = [sys.executable, "manage.py", "ingest", "--file", str(source)]
    env = server_env(server.data_dir)

    # The server holds the embedded palace and serves its local channel: the command runs inside it.
    ran = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 1  # the malformed line failed; the rest went in
    assert "line 4: is not valid JSON" in ran.stderr and "3 stored" in ran.stderr, ran.stderr

    # A command that holds the palace itself (PALAZZO_HOLDER=0) is refused and told where to send the file.
    locked = subprocess.run(
        command, cwd=ROOT, env=env | {"PALAZZO_HOLDER": "0"}, capture_output=True, text=True, timeout=120
    )
    assert locked.returncode == 2
    assert "--url http://" in locked.stderr and "stop the server" in locked.stderr
    assert "Traceback" not in locked.stderr

    sent = subprocess.run(
        [*command, "--url", server.base_url], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert sent.returncode == 1  # the malformed line failed; the rest went in
    assert "line 4: is not valid JSON" in sent.stderr
    assert "ingest: 4 items: 0 stored, 3 duplicates returned, 0 duplicates skipped, 1 failed" in sent.stderr
    assert os.path.exists(server.data_dir / "wal.jsonl")


def test_it_answers_in_the_shapes_its_openapi_publishes(server: RunningServer) -> None:
    document = httpx.get(f"{server.base_url}/api/openapi.json", timeout=60).json()
    models = document["components"]["schemas"]

    def check(instance: dict[str, Any], model: str) -> None:
        schema = {"$ref": f"#/components/schemas/{model}", "components": document["components"]}
        Draft202012Validator(schema).validate(instance)
        assert set(instance) <= set(models[model]["properties"]), (model, instance)

    lines = [line for _, line in stream_lines(server, body("Shaped fact", 2, "{broken"))]
    check(lines[0], "IngestProgress")
    check(lines[-1], "IngestDone")
    exported = [json.loads(line) for line in httpx.get(f"{server.base_url}/export", timeout=60).text.splitlines()]
    assert exported
    for memory in exported:
        check(memory, "ExportedMemory")
        assert list(memory) == list(models["ExportedMemory"]["properties"])
    request = {
        "harness": "jsonl",
        "device": "laptop",
        "dry_run": True,
        "transcript": {
            "path": "/t/session.jsonl",
            "cwd": "/home/a/shaped",
            "exchanges": [
                {
                    "key": "k1",
                    "index": 0,
                    "prompt": "Which port?",
                    "reply": "6334.",
                    "started_at": "2026-11-30T09:00:00Z",
                    "complete": True,
                }
            ],
        },
    }
    check(request, "FeedRequest")
    fed = httpx.post(f"{server.base_url}/feed", json=request, timeout=60)
    assert fed.status_code == 200, fed.text
    check(fed.json(), "FeedReport")
    refused = httpx.post(f"{server.base_url}/feed", json=request | {"harness": "vim"}, timeout=60)
    assert refused.status_code == 400
    check(refused.json(), "ApiError")
    woken = httpx.get(f"{server.base_url}/wake-up", params={"room": "shaped"}, timeout=60)
    assert woken.status_code == 200
    check(woken.json(), "WakeUpContext")
