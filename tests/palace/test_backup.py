"""backup while the server runs, restore into an empty data dir: a real round trip through subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcpserver.conftest import ROOT, http_server, migrate, server_env
from tests.mcpserver.test_auth_http import token_client

pytestmark = pytest.mark.slow

TEXTS = ("the backup keeps every memory", "restore rebuilds the store from the journal")


def manage(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=server_env(data_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_it_round_trips_a_backup_taken_while_serving(tmp_path: Path) -> None:
    source = tmp_path / "source"
    migrate(source)
    secret = manage(source, "token", "create", "keeper").stdout.strip()
    out = tmp_path / "backup"
    with http_server(source) as base_url, token_client(f"{base_url}/mcp", secret) as client:
        ids = [
            client.ok(
                "palace_store",
                {"text": text, "wing": "projects", "room": "backup", "hall": "facts", "category": "technical"},
            )["id"]
            for text in TEXTS
        ]
        taken = manage(source, "backup", "--out", str(out))
        assert taken.returncode == 0, taken.stderr
        again = manage(source, "backup", "--out", str(out))
    assert again.returncode != 0 and "never overwrites" in again.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"] == "sqlite" and manifest["journal_entries"] == 2 and manifest["tokens"] == 1

    target = tmp_path / "target"
    restored = manage(target, "restore", str(out))
    assert restored.returncode == 0, restored.stderr
    status = json.loads(manage(target, "status", "--json").stdout)
    assert status["total"] == 2
    refused = manage(target, "restore", str(out))
    assert refused.returncode != 0 and "not empty" in refused.stderr
    with http_server(target) as base_url, token_client(f"{base_url}/mcp", secret) as client:
        recalled = client.ok("palace_recall", {"ids": ids})
        found = client.ok("palace_find", {"query": "what does restore rebuild"})
    assert sorted(memory["text"] for memory in recalled["memories"]) == sorted(TEXTS)
    assert found["results"][0]["text"] == TEXTS[1]
