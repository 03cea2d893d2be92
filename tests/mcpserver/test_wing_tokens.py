"""A token created with --wings, over real HTTP against `manage.py serve`: tools, /ingest and /export stay inside."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.mcpserver.conftest import http_server, migrate
from tests.mcpserver.test_auth_http import create_token, manage, token_client
from tests.palace.helpers import memory

pytestmark = pytest.mark.slow


def test_it_keeps_a_wing_scoped_token_inside_its_wings(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    admin = create_token(data_dir, "admin", "write")
    created = manage(data_dir, "token", "create", "ci", "--wings", "projects,infrastructure")
    assert created.returncode == 0, created.stderr
    scoped = created.stdout.strip()
    ops = manage(data_dir, "token", "create", "ops", "--wings", "infrastructure").stdout.strip()
    listing = json.loads(manage(data_dir, "token", "list", "--json").stdout)
    assert {row["name"]: row["wings"] for row in listing} == {
        "admin": [],
        "ci": ["projects", "infrastructure"],
        "ops": ["infrastructure"],
    }
    refused = manage(data_dir, "token", "create", "bad", "--wings", "attic")
    assert refused.returncode != 0 and "'attic' is not a wing" in refused.stderr

    with http_server(data_dir) as base_url:
        with token_client(base_url + "/mcp", admin) as client:
            personal = client.ok("palace_store", memory("my diary password hint is the cat", wing="personal"))
            project = client.ok("palace_store", memory("the project password rotates monthly", wing="projects"))
        with token_client(base_url + "/mcp", scoped) as client:
            error = client.error("palace_store", memory("scoped write outside", wing="personal"))
            assert "outside this token's wings (projects, infrastructure)" in error
            stored = client.ok("palace_store", memory("scoped write inside", wing="infrastructure"))
            found = client.ok("palace_find", {"query": "password", "limit": 10})["results"]
            recalled = client.ok("palace_recall", {"ids": [personal["id"], project["id"]]})
            status = client.ok("palace_status")
            browsed = client.ok("palace_browse", {"limit": 50})["memories"]
            deleted = client.ok("palace_delete", {"ids": [personal["id"]], "reason": "try", "confirm": True})
            wake_up = json.loads(client.portal.call(client.client.read_resource, "palace://wake-up").contents[0].text)
        headers = {"Authorization": f"Bearer {scoped}"}
        exported = httpx.get(base_url + "/export", headers=headers, timeout=60).text
        posted = httpx.post(
            base_url + "/ingest",
            content=json.dumps(memory("posted outside", wing="work")) + "\n",
            headers=headers | {"Content-Type": "application/x-ndjson"},
            timeout=60,
        )
        hook_context = httpx.get(base_url + "/wake-up", headers=headers, timeout=60).json()["context"]
        # Fed memories go to PALAZZO_FEED_WING (projects): a token without that wing may not feed.
        fed = httpx.post(
            base_url + "/feed",
            json={"harness": "claude-code", "device": "laptop", "transcript": {}},
            headers={"Authorization": f"Bearer {ops}"},
            timeout=60,
        )
        with token_client(base_url + "/mcp", admin) as client:
            everything = client.ok("palace_status")

    assert {hit["wing"] for hit in found} <= {"projects", "infrastructure"} and project["id"] in {
        hit["id"] for hit in found
    }
    assert recalled["missing"] == [personal["id"]] and [m["id"] for m in recalled["memories"]] == [project["id"]]
    assert status["total"] == 2 and status["wings"] == {"projects": 1, "infrastructure": 1}
    assert set(status["rooms"]) == {m["room"] for m in browsed}  # the rooms of its wings only
    assert {m["wing"] for m in browsed} == {"projects", "infrastructure"}
    assert deleted["counts"] == {"deleted": 0, "missing": 1}
    assert {m["wing"] for m in wake_up["recent"]} == {"projects", "infrastructure"}
    assert wake_up["status"]["total"] == 2
    assert sorted(json.loads(line)["id"] for line in exported.splitlines()) == sorted([project["id"], stored["id"]])
    assert "outside this token's wings" in posted.text
    assert "the project password rotates monthly" in hook_context and "diary" not in hook_context
    assert fed.status_code == 403 and "outside this token's wings (infrastructure)" in fed.json()["error"]
    assert everything["total"] == 3 and everything["wings"]["personal"] == 1  # the personal memory survived
