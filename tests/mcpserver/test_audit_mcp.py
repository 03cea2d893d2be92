"""The read audit over real transports: every MCP read path and GET /export, under the caller's identity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.mcpserver.conftest import CLIENT_INFO, connect, http_server, migrate, stdio_parameters
from tests.mcpserver.test_auth_http import create_token, manage, token_client
from tests.palace.helpers import memory

pytestmark = pytest.mark.slow


def audit_export(data_dir: Path, *args: str) -> list[dict[str, Any]]:
    result = manage(data_dir, "audit", "export", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_it_audits_every_read_path_with_the_caller_s_identity(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    writer, reader = create_token(data_dir, "writer", "write"), create_token(data_dir, "reader", "read")
    with http_server(data_dir) as base_url:
        with token_client(base_url + "/mcp", writer) as client:
            stored = client.ok("palace_store", memory("The router reboots every Sunday at 3am"))
        with token_client(base_url + "/mcp", reader) as client:
            found = client.ok("palace_find", {"query": "when does the router reboot", "room": "palazzo"})
            client.ok("palace_recall", {"ids": [stored["id"]]})
            client.ok("palace_check_duplicate", {"text": "The router reboots on Sundays"})
            client.portal.call(client.client.get_prompt, "wake_up")
            client.portal.call(client.client.read_resource, "palace://wake-up")
            client.ok("palace_status")  # counts only: not a read of memories
        exported = httpx.get(base_url + "/export", headers={"Authorization": f"Bearer {reader}"}, timeout=60)
        assert exported.status_code == 200
    # The server has stopped gracefully: whatever its background writer held is in the database now.
    records = audit_export(data_dir)
    by_operation = {record["operation"]: record for record in records}

    assert [record["operation"] for record in records] == [
        "find",
        "recall",
        "check_duplicate",
        "wake_up_prompt",
        "wake_up_resource",
        "http_export",
    ]
    assert {record["actor"] for record in records} == {"token:reader"}
    assert by_operation["find"]["query_sha256"] == hashlib.sha256(b"when does the router reboot").hexdigest()
    assert by_operation["find"]["query_length"] == len("when does the router reboot")
    assert by_operation["find"]["filters"]["room"] == "palazzo"
    assert by_operation["find"]["result_ids"] == [hit["id"] for hit in found["results"]]
    assert by_operation["find"]["degraded"] is False and by_operation["find"]["query_plain"] is None
    for operation in ("recall", "check_duplicate", "wake_up_prompt", "wake_up_resource", "http_export"):
        assert by_operation[operation]["result_ids"] == [stored["id"]], operation
    assert audit_export(data_dir, "--actor", "token:writer") == []

    with connect(stdio_parameters(data_dir), "stdio") as client:
        client.ok("palace_find", {"query": "router"})
    assert audit_export(data_dir)[-1]["actor"] == f"{CLIENT_INFO.name}/{CLIENT_INFO.version}"
    assert manage(data_dir, "export").returncode == 0
    assert audit_export(data_dir)[-1]["actor"].startswith("manage.py export/")
