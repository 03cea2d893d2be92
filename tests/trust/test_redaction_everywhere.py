"""Secrets through every write path of real processes, then looked for everywhere a palace keeps bytes.

The data dir (SQLite database and its WAL, embedded shard, journal file, usage log), a dump of the
database, and every log line the server and the commands wrote at debug level. Then an old palace,
written with redaction off, is scrubbed by `manage.py redact` and searched the same way.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from tests.mcpserver.conftest import ROOT, connect, http_server, migrate, server_env
from tests.palace.helpers import memory

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")]

VERBOSE = {"PALAZZO_LOG_LEVEL": "debug", "PALAZZO_WAL_VERBATIM": "1"}


def access_key() -> str:
    """A fresh AWS-style access key id, so a hit can only come from this test."""
    return "AKIA" + "".join(secrets.choice(string.ascii_uppercase + "234567") for _ in range(16))


def manage(data_dir: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=server_env(data_dir, **VERBOSE, **extra_env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def database_dump(data_dir: Path) -> str:
    connection = sqlite3.connect(data_dir / "palazzo.sqlite3")
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


def places_holding(data_dir: Path, logs: str, secret: str) -> list[str]:
    """Every file of the data dir, the database dump and the logs that contain secret."""
    needle = secret.encode()
    found = [str(path) for path in data_dir.rglob("*") if path.is_file() and needle in path.read_bytes()]
    if secret in database_dump(data_dir):
        found.append("database dump")
    if secret in logs:
        found.append("logs")
    return found


def legacy_collection(path: Path, text: str) -> None:
    client = QdrantClient(path=str(path))
    client.create_collection("old", vectors_config=models.VectorParams(size=4, distance="Cosine"))
    client.upsert(
        "old",
        points=[models.PointStruct(id=1_600_000_000, vector=np.ones(4).tolist(), payload=memory(text))],
    )
    client.close()


def test_it_keeps_secrets_out_of_every_byte_the_palace_writes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    keys = {path: access_key() for path in ("ingest", "restore", "import", "store", "batch", "supersede", "http")}
    reason_token = "ghp_" + secrets.token_hex(18)
    source = tmp_path / "in.jsonl"
    source.write_text(
        json.dumps(memory(f"ingested {keys['ingest']}"))
        + "\n"
        + json.dumps({"id": 1_500_000_000, **memory(f"restored {keys['restore']}")})
        + "\n"
    )
    ingested = manage(data_dir, "ingest", "--file", str(source), "--json")
    assert ingested.returncode == 0, ingested.stderr
    legacy_collection(tmp_path / "legacy", f"imported {keys['import']}")
    imported = manage(data_dir, "import_qdrant", "--path", str(tmp_path / "legacy"), "--collection", "old", "--json")
    assert imported.returncode == 0, imported.stderr
    logs = ingested.stdout + ingested.stderr + imported.stdout + imported.stderr
    assert json.loads(imported.stdout.splitlines()[0])["redactions"] == {"aws_access_key": 1}

    with http_server(data_dir, **VERBOSE) as base_url, connect(base_url + "/mcp", "http") as client:
        stored = client.ok("palace_store", memory(f"stored {keys['store']}"))
        batch = client.ok("palace_store_batch", {"items": [memory(f"batched {keys['batch']}")]})
        corrected = client.ok(
            "palace_supersede",
            {"supersedes": [stored["id"]], "reason": f"rotated {reason_token}"}
            | memory(f"superseding {keys['supersede']}"),
        )
        posted = httpx.post(
            base_url + "/ingest",
            content=json.dumps(memory(f"posted {keys['http']}")) + "\n",
            headers={"Content-Type": "application/x-ndjson"},
            timeout=120,
        )
        assert stored["redactions"] == {"aws_access_key": 1}
        assert batch["redactions"] == {"aws_access_key": 1}
        assert batch["items"][0]["redactions"] == {"aws_access_key": 1}
        assert corrected["redactions"] == {"aws_access_key": 1, "github_token": 1}
        assert [json.loads(line)["redactions"] for line in posted.text.splitlines()] == [{"aws_access_key": 1}] * 2
        for secret in [*keys.values(), reason_token]:
            found = client.ok("palace_find", {"query": secret, "include_superseded": True})["results"]
            assert found and all(secret not in hit["text"] for hit in found)
        metrics = httpx.get(base_url + "/metrics", timeout=30).text
        assert 'palazzo_redactions_total{mode="enforce",rule="aws_access_key"} 4.0' in metrics
    logs += "".join(path.read_text() for path in tmp_path.glob("serve-*.log"))

    assert "DEBUG" in logs  # the logs were captured at debug level
    for secret in [*keys.values(), reason_token]:
        assert places_holding(data_dir, logs, secret) == [], secret


def test_it_scrubs_a_palace_written_before_redaction(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    kept, deleted, in_reason = access_key(), access_key(), "sk-ant-api03-" + secrets.token_hex(12)
    off = {"PALAZZO_REDACTION_MODE": "off"}
    with http_server(data_dir, **VERBOSE, **off) as base_url, connect(base_url + "/mcp", "http") as client:
        old = client.ok("palace_store", memory(f"old note {kept}"))
        client.ok("palace_supersede", {"supersedes": [old["id"]], "reason": f"key {in_reason}"} | memory("new"))
        doomed = client.ok("palace_store", memory(f"doomed {deleted}"))
        client.ok("palace_delete", {"ids": [doomed["id"]], "reason": "cleanup", "confirm": True})
    for secret in (kept, deleted, in_reason):
        assert places_holding(data_dir, "", secret), f"{secret} should be stored before the scrub"

    counted = manage(data_dir, "redact", "--dry-run")
    assert counted.returncode == 0, counted.stderr
    report: dict[str, Any] = json.loads(counted.stdout)
    assert report["dry_run"] and report["memories"] == 1 and report["journal_entries"] >= 4
    assert places_holding(data_dir, "", kept)  # a dry run changes nothing

    scrubbed = manage(data_dir, "redact")
    assert scrubbed.returncode == 0, scrubbed.stderr
    report = json.loads(scrubbed.stdout)
    assert report["memories"] == 1 and report["store_rebuilt"]
    assert report["redactions"] == {"aws_access_key": 1, "anthropic_api_key": 1}
    for secret in (kept, deleted, in_reason):
        assert places_holding(data_dir, scrubbed.stderr, secret) == [], secret
    exported = manage(data_dir, "export")
    assert "old note [REDACTED:aws_access_key]" in exported.stdout
    assert "key [REDACTED:anthropic_api_key]" in exported.stdout
    verified = manage(data_dir, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
