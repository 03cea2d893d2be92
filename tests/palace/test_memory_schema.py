"""The one memory schema (palace.schema.memories.FIELDS): every form, tool schema, result and API model follows it."""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from palace.api import api
from palace.routes.schemas import REFERENCED_MODELS
from palace.schema.memories import FIELDS, MEMORY_FIELDS, REQUIRED_FIELDS, RESTORE_FIELDS, WRITABLE_FIELDS
from palace.writes import services
from tests.mcpserver.conftest import server_env

ROOT = Path(__file__).resolve().parents[2]

# Run inside a copy of the tree where the schema has one more field: what every surface then shows.
_PROBE = r"""
import json, os, django
django.setup()
import palace
assert palace.__file__.startswith(os.getcwd()), palace.__file__
from django.conf import settings
from mcpserver import models, schemas
from palace.schema import forms
from palace.operations import ingest
from palace.api import api
from palace.errors import InvalidInput
from palace.schema.memories import public_memory, stored_payload

env = settings.PALAZZO
components = api.get_openapi_schema(path_prefix="")["components"]["schemas"]
item = {"text": "t", "category": env.categories[0], "wing": env.wings[0], "room": "r", "hall": env.halls[0]}
try:
    forms.MemoryForm(item | {"mood": "x" * 65}).parsed()
except InvalidInput as exc:
    refused = str(exc)
try:
    forms.DeleteByFilterForm({"reason": "r", "confirm": True}).parsed()
except InvalidInput as exc:
    empty_filter = str(exc)
print(json.dumps({
    "forms": {name: "mood" in getattr(forms, name).base_fields
              for name in ("MemoryForm", "SupersedeForm", "BatchDefaultsForm", "FilterFields", "FindForm")},
    "restore_form": "mood" in ingest.RestoreForm.base_fields,
    "cleaned": forms.MemoryForm(item | {"mood": "  calm "}).parsed()["mood"],
    "refused": refused,
    "empty_filter": empty_filter,
    "store": schemas.store(env)["properties"].get("mood"),
    "batch_item": schemas.store_batch(env)["properties"]["items"]["items"]["properties"].get("mood"),
    "batch_defaults": schemas.store_batch(env)["properties"]["defaults"]["properties"].get("mood"),
    "supersede": schemas.supersede(env)["properties"].get("mood"),
    "find": schemas.find(env)["properties"].get("mood"),
    "result_model": list(models.StoreResult.model_fields)[:10],
    "payload": stored_payload(item | {"mood": "calm"}).get("mood"),
    "public": public_memory(1_000_000_001, {"mood": "calm"}).get("mood"),
    "ingest_line": components["IngestLine"]["properties"].get("mood"),
    "exported": "mood" in components["ExportedMemory"]["properties"],
}))
"""

_MOOD = """    MemoryField(
        "mood",
        Kind.TAG,
        hint="How it felt.",
        group=Group.FILING,
        batch_default=True,
        filter_position=4,
        max_length=32,
    ),
    MemoryField(
        "valid_from","""


def test_it_shows_a_field_added_to_the_schema_in_every_form_tool_model_and_openapi(tmp_path: Path) -> None:
    for package in ("palazzo_site", "mcpserver", "palace", "embeddings"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    schema = tmp_path / "palace" / "schema" / "memories.py"
    source = schema.read_text()
    anchor = '    MemoryField(\n        "valid_from",'
    assert source.count(anchor) == 1
    schema.write_text(source.replace(anchor, _MOOD))
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=tmp_path,
        env=server_env(tmp_path / "data"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["forms"] == dict.fromkeys(shown["forms"], True)
    assert shown["restore_form"] and shown["cleaned"] == "calm"
    assert shown["refused"] == "mood: must be at most 32 characters (it has 65)"
    assert "set at least one of wing, category, room, hall, mood, since, until" in shown["empty_filter"]
    tag = {"type": "string", "maxLength": 32}
    assert shown["store"] == shown["supersede"] == tag | {"description": "How it felt."}
    assert shown["batch_item"] == tag and shown["batch_defaults"] == {"type": "string"}
    assert shown["find"] == tag | {"description": "Only this mood."}
    assert "mood" in shown["result_model"]  # after session and source_file, as in every returned memory
    assert shown["payload"] == shown["public"] == "calm"
    assert shown["ingest_line"]["description"] == "How it felt." and shown["exported"]
    assert shown["ingest_line"]["anyOf"][0]["maxLength"] == 32


def test_it_takes_every_writable_field_as_a_keyword_of_the_write_api() -> None:
    writable = [field.name for field in WRITABLE_FIELDS]
    store = [name for name in inspect.signature(services.store).parameters if name not in ("added_by", "wings")]
    assert store == writable
    supersede = set(inspect.signature(services.supersede).parameters) - {"added_by", "wings", "supersedes", "reason"}
    assert supersede == set(writable)


def _openapi() -> dict[str, Any]:
    """/api/openapi.json as a client reads it (status codes as strings)."""
    document: dict[str, Any] = json.loads(json.dumps(api.get_openapi_schema(path_prefix="")))
    return document


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    assert isinstance(node, dict)
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [node["$ref"]] if "$ref" in node else [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_it_publishes_the_ingest_line_and_the_export_line_from_the_memory_schema() -> None:
    document = _openapi()
    ingest = document["paths"]["/ingest"]["post"]
    line = _resolve(document, ingest["requestBody"]["content"]["application/x-ndjson"]["x-item-schema"]["$ref"])
    assert list(line["properties"]) == [
        *(field.name for field in WRITABLE_FIELDS),
        *(field.name for field in RESTORE_FIELDS),
        "expired",
    ]
    assert line["required"] == [field.name for field in REQUIRED_FIELDS]
    assert line["properties"]["text"]["maxLength"] == FIELDS["text"].max_length
    assert line["properties"]["id"]["anyOf"][0]["minimum"] == 1_000_000_000
    streamed = ingest["responses"]["200"]["content"]["application/x-ndjson"]["x-item-schema"]["oneOf"]
    assert [_resolve(document, ref["$ref"])["title"] for ref in streamed] == [
        "IngestProgress",
        "IngestDone",
        "IngestError",
    ]
    export = document["paths"]["/export"]["get"]["responses"]["200"]["content"]["application/x-ndjson"]
    exported = _resolve(document, export["x-item-schema"]["$ref"])
    assert list(exported["properties"]) == ["id", *MEMORY_FIELDS]


def test_it_publishes_the_feed_body_and_answers_from_their_models() -> None:
    document = _openapi()
    feed = document["paths"]["/feed"]["post"]
    body = _resolve(document, feed["requestBody"]["content"]["application/json"]["schema"]["$ref"])
    assert set(body["required"]) == {"harness", "device", "transcript"}
    assert body["properties"]["harness"]["enum"] == ["claude-code", "pi", "codex", "opencode", "gemini", "jsonl"]
    report = _resolve(document, feed["responses"]["200"]["content"]["application/json"]["schema"]["$ref"])
    assert {"stored", "duplicates", "superseded", "subagents"} <= set(report["properties"])
    for status in ("400", "403", "503"):
        assert feed["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith("/ApiError")
    wake_up = document["paths"]["/wake-up"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(_resolve(document, wake_up["$ref"])["properties"]) == {"context", "room"}
    # Every reference of the document resolves, and every model the routes name by reference is published.
    for ref in _refs(document):
        _resolve(document, ref)
    assert {model.__name__ for model in REFERENCED_MODELS} <= set(document["components"]["schemas"])
