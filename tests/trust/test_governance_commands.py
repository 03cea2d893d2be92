"""The governance commands follow every command's rules: a never-migrated data dir, a palace held by a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mcpserver.conftest import connect, stdio_parameters
from tests.palace.helpers import memory
from tests.trust.conftest import manage

pytestmark = pytest.mark.slow


def test_it_runs_expire_redact_and_audit_on_a_never_migrated_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-migrated"

    expired = manage(data_dir, "expire", "--dry-run")
    scrubbed = manage(data_dir, "redact", "--dry-run")
    exported = manage(data_dir, "audit", "export", "--format", "json")
    purged = manage(data_dir, "audit", "purge", "--before", "2020-01-01")

    for result in (expired, scrubbed, exported, purged):
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert json.loads(expired.stdout)["expired_count"] == 0
    assert json.loads(scrubbed.stdout)["memories"] == 0
    assert exported.stdout == ""


def test_it_runs_expire_and_redact_in_the_holder_of_a_live_session(tmp_path: Path) -> None:
    data_dir = tmp_path / "held"
    with connect(stdio_parameters(data_dir), "stdio") as client:
        stored = client.ok("palace_store", memory("acknowledged while expire and redact run beside it"))

        ran = [manage(data_dir, "expire"), manage(data_dir, "redact")]

        recalled = client.ok("palace_recall", {"ids": [stored["id"]]})

    for result in ran:
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert json.loads(ran[0].stdout)["expired_count"] == 0
    assert json.loads(ran[1].stdout)["memories"] == 0  # nothing in it matches a redaction rule
    assert [m["id"] for m in recalled["memories"]] == [stored["id"]]


def test_it_refuses_expire_and_redact_under_a_runmcp_that_holds_the_palace_itself(tmp_path: Path) -> None:
    data_dir = tmp_path / "held"
    with connect(stdio_parameters(data_dir, PALAZZO_HOLDER="0"), "stdio") as client:
        stored = client.ok("palace_store", memory("acknowledged while expire and redact are refused"))

        refused = [manage(data_dir, "expire", PALAZZO_HOLDER="0"), manage(data_dir, "redact", PALAZZO_HOLDER="0")]

        recalled = client.ok("palace_recall", {"ids": [stored["id"]]})

    for result in refused:
        assert result.returncode == 2, result.stderr
        assert "held by a running server" in result.stderr and "Traceback" not in result.stderr
    assert [m["id"] for m in recalled["memories"]] == [stored["id"]]
