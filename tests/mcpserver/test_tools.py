"""The palace tools end to end through the MCP SDK client, over stdio and over HTTP."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client

from palazzo_site.environment import DEFAULT_CATEGORIES, DEFAULT_HALLS, DEFAULT_WINGS
from tests.mcpserver.conftest import CLIENT_INFO, Palazzo, migrate, stdio_parameters

ALL_TOOLS = {
    "palace_store",
    "palace_store_batch",
    "palace_find",
    "palace_recall",
    "palace_status",
    "palace_browse",
    "palace_check_duplicate",
    "palace_supersede",
    "palace_delete",
    "palace_delete_by_filter",
    "palace_gain",
}
READ_TOOLS = {
    "palace_find",
    "palace_recall",
    "palace_status",
    "palace_browse",
    "palace_check_duplicate",
    "palace_gain",
}


def memory(text: str, **overrides: Any) -> dict[str, Any]:
    fields = {"text": text, "category": "technical", "wing": "projects", "room": "palazzo", "hall": "facts"}
    return fields | overrides


def unique(label: str) -> str:
    return f"{label} {uuid.uuid4().hex}"


def test_it_lists_the_eleven_tools_with_schemas_and_annotations(palazzo: Palazzo) -> None:
    tools = {tool.name: tool for tool in palazzo.list_tools().tools}
    assert set(tools) == ALL_TOOLS
    for tool in tools.values():
        assert tool.title and len(tool.description or "") > 150
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        annotations = tool.annotations
        assert annotations is not None and annotations.title is None  # the tool's own title, not repeated
        assert annotations.read_only_hint is (tool.name in READ_TOOLS)
        assert annotations.open_world_hint is False
        if tool.name not in READ_TOOLS:  # the hints mean nothing for a read-only tool
            assert annotations.idempotent_hint is not None and annotations.destructive_hint is not None
        for name, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    assert tools["palace_delete"].annotations.destructive_hint is True  # type: ignore[union-attr]
    assert tools["palace_store"].annotations.destructive_hint is False  # type: ignore[union-attr]
    store = tools["palace_store"].input_schema
    assert store["required"] == ["text", "category", "wing", "room", "hall"]
    assert store["properties"]["category"]["enum"] == list(DEFAULT_CATEGORIES)
    assert store["properties"]["wing"]["enum"] == list(DEFAULT_WINGS)
    assert store["properties"]["hall"]["enum"] == list(DEFAULT_HALLS)
    assert store["properties"]["text"]["maxLength"] == 32 * 1024
    assert "added_by" not in store["properties"]
    limit = tools["palace_find"].input_schema["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 20, 10)
    budget = tools["palace_find"].input_schema["properties"]["max_chars"]
    assert (budget["minimum"], budget["maximum"]) == (2000, 100_000) and "default" not in budget
    assert "50% of the first 5 results' whole text, 6000-20000" in budget["description"]
    recall = tools["palace_recall"].input_schema["properties"]
    assert recall["start"]["minimum"] == 0 and recall["end"]["minimum"] == 0
    items = tools["palace_store_batch"].input_schema["properties"]["items"]
    assert (items["minItems"], items["maxItems"]) == (1, 256)
    assert tools["palace_recall"].input_schema["properties"]["ids"]["maxItems"] == 100
    assert tools["palace_supersede"].input_schema["properties"]["supersedes"]["maxItems"] == 50
    assert tools["palace_supersede"].input_schema["required"] == ["supersedes", "reason"]
    browse = tools["palace_browse"].input_schema["properties"]
    assert (browse["limit"]["maximum"], browse["limit"]["default"]) == (100, 20) and "cursor" in browse
    assert "defaults" in tools["palace_store_batch"].input_schema["properties"]


def test_it_keeps_tools_list_within_4000_tokens_with_output_schemas_of_one_subschema(palazzo: Palazzo) -> None:
    listed = palazzo.list_tools()
    tools = [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed.tools]
    size = len(json.dumps({"tools": tools}, separators=(",", ":"), ensure_ascii=False))
    assert size <= 4000 * 4, f"tools/list is {size} characters"
    for tool in listed.tools:  # clients check each subschema against the metaschema on every call
        assert tool.output_schema is not None and set(tool.output_schema) == {"type", "required"}, tool.name
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
    find = next(tool for tool in listed.tools if tool.name == "palace_find").output_schema
    assert find is not None and find["required"] == ["results", "count", "degraded"]
    answer = palazzo.call("palace_find", {"query": "anything at all", "limit": 3})
    assert not answer.is_error and answer.structured_content is not None
    jsonschema.validate(answer.structured_content, find)  # every key a result carries is named
    # A lean answer cut to passages, with the filing its results share said once and a cut note, validates too.
    room = unique("lean-room")
    palazzo.ok(
        "palace_store_batch",
        {
            "items": [
                memory("\n".join(f"Line {k}: the lighthouse keeper logged {k} ships." for k in range(300)), room=room),
                memory("The lighthouse keeper also kept a ledger of storms.", room=room),
            ]
        },
    )
    cut = palazzo.call("palace_find", {"query": "lighthouse ships", "room": room, "max_chars": 2000})
    content = cut.structured_content
    assert not cut.is_error and content is not None
    assert content["shared"]["room"] == room and content["cut"] and any("passages" in r for r in content["results"])
    jsonschema.validate(content, find)
    for missing in find["required"]:
        without = {key: value for key, value in answer.structured_content.items() if key != missing}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(without, find)


def test_it_stores_finds_recalls_counts_and_checks_a_memory(palazzo: Palazzo) -> None:
    text = unique("The staging database runs PostgreSQL 16 on host db-stage-2")
    stored = palazzo.ok("palace_store", memory(text))
    assert stored["id"] >= 1_000_000_000
    assert stored["duplicate"] is False and "duplicate_of" not in stored
    found = palazzo.ok("palace_find", {"query": text, "limit": 3})
    assert stored["id"] in [hit["id"] for hit in found["results"]]
    assert found["count"] == len(found["results"]) <= 3
    recalled = palazzo.ok("palace_recall", {"ids": [stored["id"]]})
    assert [item["text"] for item in recalled["memories"]] == [text]
    assert recalled["missing"] == []
    status = palazzo.ok("palace_status")
    assert status["total"] >= 1
    assert status["search_index"]["building"] is False  # builds start at PALAZZO_INDEX_AFTER writes
    check = palazzo.ok("palace_check_duplicate", {"text": text})
    assert check["duplicate"] is True and check["redactions"] == {}
    assert check["closest"]["id"] == stored["id"] and check["closest"]["score"] == 1.0


def test_it_leaves_a_memorys_unset_fields_out_of_every_result_and_keeps_the_set_ones(palazzo: Palazzo) -> None:
    old = palazzo.ok("palace_store", memory(unique("The cache TTL is 60 s")))
    new = palazzo.ok("palace_supersede", {"supersedes": [old["id"]], "reason": "tuned", "text": unique("TTL 90 s")})
    schemas = {tool.name: tool.output_schema for tool in palazzo.list_tools().tools}
    jsonschema.validate(old, schemas["palace_store"])  # the keys a store's result always carries are named
    unset = {"session", "source_file", "valid_from", "valid_until", "superseded_by", "superseded_reason", "expires_at"}
    assert not unset & set(old) and None not in old.values()
    recalled = palazzo.ok("palace_recall", {"ids": [old["id"], new["memory"]["id"]]})["memories"]
    by_id = {item["id"]: item for item in recalled}
    assert by_id[old["id"]]["superseded_by"] == new["memory"]["id"] and by_id[old["id"]]["valid_until"]
    assert by_id[new["memory"]["id"]]["supersedes"] == [old["id"]]
    assert "superseded_by" not in by_id[new["memory"]["id"]]
    found = palazzo.ok("palace_find", {"query": "cache TTL", "limit": 5})
    assert found["results"] and all(None not in hit.values() for hit in found["results"])
    assert "degraded_reason" not in found  # the answer leaves its null fields out too


def test_it_answers_lean_results_and_every_field_on_request(palazzo: Palazzo) -> None:
    room = unique("provenance").replace(" ", "-")[:40]
    texts = [unique(f"The build cache lives on volume {k}") for k in range(2)]
    extra = {"session": "sess-1", "source_file": "/home/dev/notes/build.md"}
    stored = [palazzo.ok("palace_store", memory(text, room=room, **extra)) for text in texts]
    lean = palazzo.ok("palace_find", {"query": "build cache volume", "room": room})
    assert lean["shared"] == {"wing": "projects", "room": room, "hall": "facts", "category": "technical"} | {
        "added_by": stored[0]["added_by"]
    }
    for result in lean["results"]:
        assert set(result) == {"id", "text", "score", "timestamp", "length"}, "id, what, how close, when, size"
    full = palazzo.ok("palace_find", {"query": "build cache volume", "room": room, "all_fields": True})
    assert "shared" not in full
    assert {result["source_file"] for result in full["results"]} == {"/home/dev/notes/build.md"}
    assert {result["session"] for result in full["results"]} == {"sess-1"}
    assert "must be true or false" in palazzo.error("palace_find", {"query": "x", "all_fields": "yes"})


def test_it_returns_the_existing_memory_when_the_same_text_is_stored_again(palazzo: Palazzo) -> None:
    text = unique("Deploys go out on Tuesdays")
    first = palazzo.ok("palace_store", memory(text))
    total = palazzo.total()
    again = palazzo.ok("palace_store", memory(text, hall="decisions"))
    assert again["id"] == first["id"]
    assert again["duplicate"] is True and again["duplicate_of"] == first["id"]
    assert palazzo.total() == total


def test_it_filters_find_by_wing_room_and_hall(palazzo: Palazzo) -> None:
    room = unique("room").replace(" ", "-")[:40]
    text = unique("The VPN gateway certificate expires in March")
    stored = palazzo.ok("palace_store", memory(text, wing="infrastructure", room=room, hall="events"))
    hits = palazzo.ok("palace_find", {"query": text, "wing": "infrastructure", "room": room, "hall": "events"})
    assert [hit["id"] for hit in hits["results"]] == [stored["id"]]
    other = palazzo.ok("palace_find", {"query": text, "wing": "infrastructure", "room": room, "hall": "facts"})
    assert other["results"] == []


def test_it_filters_find_by_since_and_until(palazzo: Palazzo) -> None:
    text = unique("Backups are verified every night at 02:00")
    stored = palazzo.ok("palace_store", memory(text))
    future = palazzo.ok("palace_find", {"query": text, "since": "2100-01-01T00:00:00Z"})
    assert future == {"results": [], "count": 0, "degraded": False}
    window = palazzo.ok(
        "palace_find", {"query": text, "since": "2020-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z"}
    )
    assert stored["id"] in [hit["id"] for hit in window["results"]]
    past = palazzo.ok("palace_find", {"query": text, "until": "2020-01-01T00:00:00Z"})
    assert stored["id"] not in [hit["id"] for hit in past["results"]]


def test_it_still_finds_a_fresh_memory_with_recency_ranking(palazzo: Palazzo) -> None:
    text = unique("The on-call rotation changes every Monday")
    stored = palazzo.ok("palace_store", memory(text))
    hits = palazzo.ok("palace_find", {"query": text, "recency_half_life_days": 1})
    assert hits["results"][0]["id"] == stored["id"]


def test_it_rejects_a_time_that_is_not_rfc3339(palazzo: Palazzo) -> None:
    message = palazzo.error("palace_find", {"query": "anything", "since": "not-a-date"})
    assert "since" in message and "RFC3339" in message


def test_it_supersedes_and_hides_the_old_memory_unless_asked(palazzo: Palazzo) -> None:
    old_text = unique("The API runs on port 8080")
    old = palazzo.ok("palace_store", memory(old_text))
    new_text = unique("The API runs on port 9090 since the migration")
    result = palazzo.ok(
        "palace_supersede", memory(new_text, supersedes=[old["id"]], reason="port changed in the migration")
    )
    new_id = result["memory"]["id"]
    assert new_id != old["id"]
    assert result["memory"]["supersedes"] == [old["id"]]
    assert result["marked"][0]["id"] == old["id"] and result["marked"][0]["ok"] is True
    default = [hit["id"] for hit in palazzo.ok("palace_find", {"query": old_text, "limit": 20})["results"]]
    assert new_id in default and old["id"] not in default
    archaeology = palazzo.ok("palace_find", {"query": old_text, "limit": 20, "include_superseded": True})
    assert old["id"] in [hit["id"] for hit in archaeology["results"]]
    recalled = palazzo.ok("palace_recall", {"ids": [old["id"]]})["memories"][0]
    assert recalled["valid_until"] is not None
    assert recalled["superseded_by"] == new_id
    assert recalled["superseded_reason"] == "port changed in the migration"

    alpha, beta = unique("alpha fact"), unique("beta fact")
    batch = palazzo.ok("palace_store_batch", {"items": [memory(alpha), memory(beta), memory(new_text, hall="events")]})
    items = batch["items"]
    assert [item["status"] for item in items] == ["stored", "stored", "duplicate"]
    assert items[0]["duplicate_of"] is None and items[1]["duplicate_of"] is None
    assert "superseded_by" not in items[0]["memory"]
    assert items[2]["duplicate_of"] == new_id and items[2]["memory"]["id"] == new_id
    assert batch["counts"] == {"stored": 2, "duplicates_returned": 1, "skipped_duplicates": 0, "failed": 0}
    recalled_alpha = palazzo.ok("palace_recall", {"ids": [items[0]["memory"]["id"]]})
    assert recalled_alpha["memories"][0]["text"] == alpha


def test_it_reports_each_failed_batch_item_and_stores_the_rest(palazzo: Palazzo) -> None:
    good = unique("gamma fact")
    batch = palazzo.ok(
        "palace_store_batch", {"items": [memory(good), memory("", wing="nowhere")], "skip_duplicates": True}
    )
    assert [item["status"] for item in batch["items"]] == ["stored", "failed"]
    assert "wing" in batch["items"][1]["error"] and "text" in batch["items"][1]["error"]
    assert batch["counts"]["failed"] == 1


def test_it_stamps_added_by_from_the_client_info(palazzo: Palazzo) -> None:
    stored = palazzo.ok("palace_store", memory(unique("Client stamping works")))
    assert stored["added_by"] == "palazzo-tests/1.2.3"
    recalled = palazzo.ok("palace_recall", {"ids": [stored["id"]]})["memories"][0]
    assert recalled["added_by"] == "palazzo-tests/1.2.3"
    message = palazzo.error("palace_store", memory(unique("forged"), added_by="someone-else/9"))
    assert "added_by" in message


def test_it_round_trips_status_rooms_deletes_and_gain(palazzo: Palazzo) -> None:
    room = unique("trash").replace(" ", "-")[:40]
    kept = palazzo.ok("palace_store", memory(unique("keep me"), room=room))
    doomed = palazzo.ok("palace_store", memory(unique("delete me"), room=room.upper()))
    status = palazzo.ok("palace_status")
    assert status["rooms"][room] == 2 and status["room_count"] >= 1
    assert {"wings", "rooms", "halls", "categories"} <= set(status)

    deleted = palazzo.ok("palace_delete", {"ids": [doomed["id"]], "reason": "operator approved: test", "confirm": True})
    assert deleted["counts"] == {"deleted": 1, "missing": 0}
    assert palazzo.ok("palace_recall", {"ids": [doomed["id"]]})["missing"] == [doomed["id"]]
    again = palazzo.ok("palace_delete", {"ids": [doomed["id"]], "reason": "operator approved: test", "confirm": True})
    assert again["counts"] == {"deleted": 0, "missing": 1}

    dry = palazzo.ok(
        "palace_delete_by_filter", {"room": room, "reason": "operator approved: test", "confirm": True, "dry_run": True}
    )
    assert (dry["matched_count"], dry["deleted_count"]) == (1, 0)
    assert dry["sample"][0]["id"] == kept["id"]
    mismatch = palazzo.error(
        "palace_delete_by_filter",
        {"room": room, "reason": "operator approved: test", "confirm": True, "expected_count": 5},
    )
    assert "expected_count" in mismatch
    done = palazzo.ok(
        "palace_delete_by_filter",
        {"room": room, "reason": "operator approved: test", "confirm": True, "expected_count": 1},
    )
    assert done["deleted_count"] == 1
    assert palazzo.ok("palace_recall", {"ids": [kept["id"]]})["missing"] == [kept["id"]]

    gain = palazzo.ok("palace_gain")
    assert gain["estimate"] == "estimate@v1"
    assert {"store", "delete", "delete_by_filter", "status"} <= set(gain["per_operation"])
    assert palazzo.ok("palace_gain", {"since": "2100-01-01T00:00:00Z"})["totals"]["calls"] == 0


def test_it_records_usage_for_every_call_including_failures(palazzo: Palazzo) -> None:
    before = palazzo.ok("palace_gain")["per_operation"].get("recall", {"calls": 0, "failed": 0})
    palazzo.ok("palace_recall", {"ids": [1_000_000_000]})
    palazzo.error("palace_recall", {"ids": []})
    after = palazzo.ok("palace_gain")["per_operation"]["recall"]
    assert after["calls"] == before["calls"] + 2
    assert after["failed"] == before["failed"] + 1


INVALID_CALLS: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    ("text-over-32kb", "palace_store", memory("x" * (32 * 1024 + 1)), ("text", "32768")),
    ("batch-257-items", "palace_store_batch", {"items": [memory(f"item {i}") for i in range(257)]}, ("items", "256")),
    ("batch-empty", "palace_store_batch", {"items": []}, ("items", "empty")),
    ("recall-101-ids", "palace_recall", {"ids": list(range(1_000_000_000, 1_000_000_101))}, ("ids", "100")),
    (
        "supersede-51-ids",
        "palace_supersede",
        memory("corrected", supersedes=list(range(1_000_000_000, 1_000_000_051)), reason="r"),
        ("supersedes", "50"),
    ),
    ("find-without-query", "palace_find", {"room": "palazzo"}, ("query: is required", "palace_browse")),
    ("browse-limit-101", "palace_browse", {"limit": 101}, ("limit", "between 1 and 100")),
    (
        "batch-bad-default",
        "palace_store_batch",
        {"items": [{"text": "t"}], "defaults": {"wing": "x"}},
        ("defaults.wing",),
    ),
    ("supersede-no-reason", "palace_supersede", {"supersedes": [1_000_000_000], "text": "t"}, ("reason",)),
    ("find-limit-0", "palace_find", {"query": "q", "limit": 0}, ("limit", "between 1 and 20")),
    ("find-limit-21", "palace_find", {"query": "q", "limit": 21}, ("limit", "between 1 and 20")),
    ("find-bad-rfc3339", "palace_find", {"query": "q", "until": "2026-13-45"}, ("until", "RFC3339")),
    ("store-unknown-wing", "palace_store", memory("w", wing="atlantis"), ("wing", "atlantis", "projects")),
    ("store-unknown-hall", "palace_store", memory("h", hall="attic"), ("hall", "attic")),
    ("find-unknown-category", "palace_find", {"query": "q", "category": "gossip"}, ("category", "gossip")),
    ("store-missing-room", "palace_store", {k: v for k, v in memory("r").items() if k != "room"}, ("room", "required")),
    ("store-wrong-type", "palace_store", memory(42), ("text", "string")),
    ("store-unknown-field", "palace_store", memory("u", colour="blue"), ("colour", "not a known field")),
    ("delete-without-confirm", "palace_delete", {"ids": [1_000_000_000], "reason": "cleanup"}, ("confirm", "true")),
    (
        "delete-confirm-false",
        "palace_delete",
        {"ids": [1_000_000_000], "reason": "cleanup", "confirm": False},
        ("confirm", "true"),
    ),
    (
        "delete-by-filter-without-confirm",
        "palace_delete_by_filter",
        {"wing": "projects", "reason": "cleanup", "dry_run": False},
        ("confirm",),
    ),
    (
        "delete-by-filter-empty-filter",
        "palace_delete_by_filter",
        {"reason": "cleanup", "confirm": True, "dry_run": True},
        ("filter is empty",),
    ),
    ("gain-bad-since", "palace_gain", {"since": "yesterday"}, ("since", "RFC3339")),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [case[1:] for case in INVALID_CALLS],
    ids=[case[0] for case in INVALID_CALLS],
)
def test_it_refuses_invalid_input_with_an_error_result_and_writes_nothing(
    palazzo: Palazzo, tool: str, arguments: dict[str, Any], expected: tuple[str, ...]
) -> None:
    anchor = palazzo.ok("palace_store", memory("anchor memory that invalid calls must not touch"))
    total = palazzo.total()
    if tool == "palace_delete":
        arguments = arguments | {"ids": [anchor["id"]]}
    message = palazzo.error(tool, arguments)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert message.startswith(("[invalid_input] ", "[confirmation_required] ")), message
    assert "Traceback" not in message and "manage.py" not in message
    assert palazzo.total() == total
    assert palazzo.ok("palace_recall", {"ids": [anchor["id"]]})["missing"] == []


def test_it_keeps_serving_after_an_unknown_tool(palazzo: Palazzo) -> None:
    message = palazzo.error("palace_teleport", {})
    assert "palace_teleport" in message
    assert palazzo.total() >= 0


def test_it_offers_the_wake_up_prompt_and_resource(palazzo: Palazzo) -> None:
    text = unique("Wake-up memories show the newest first")
    palazzo.ok("palace_store", memory(text))
    prompts = palazzo.portal.call(palazzo.client.list_prompts).prompts
    assert "wake_up" in [prompt.name for prompt in prompts]
    prompt = palazzo.portal.call(palazzo.client.get_prompt, "wake_up")
    assert text in prompt.messages[0].content.text  # type: ignore[union-attr]
    resources = palazzo.portal.call(palazzo.client.list_resources).resources
    assert "palace://wake-up" in [str(resource.uri) for resource in resources]
    read = palazzo.portal.call(palazzo.client.read_resource, "palace://wake-up")
    context = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    assert context["status"]["total"] >= 1
    assert context["recent"][0]["text"] == text
    assert palazzo.client.instructions and "palace_find" in palazzo.client.instructions


def test_it_browses_a_room_newest_first_with_a_cursor(palazzo: Palazzo) -> None:
    room = unique("Browse Room")[:40]
    dated = [
        palazzo.ok("palace_store", memory(unique(f"browsed {n}"), room=room, timestamp=f"2026-0{n}-01T00:00:00Z"))
        for n in range(1, 4)
    ]
    batch = palazzo.ok(
        "palace_store_batch",
        {
            "items": [{"text": unique(f"batch {n}")} for n in range(3)],
            "defaults": {"category": "technical", "wing": "projects", "room": room.lower(), "hall": "facts"},
        },
    )
    assert batch["counts"]["stored"] == 3
    newest = sorted((item["memory"]["id"] for item in batch["items"]), reverse=True)
    expected = newest + [stored["id"] for stored in reversed(dated)]
    seen, cursor = [], None
    while True:
        page = palazzo.ok("palace_browse", {"room": room.upper(), "limit": 4} | ({"cursor": cursor} if cursor else {}))
        seen += [item["id"] for item in page["memories"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == expected
    message = palazzo.error("palace_browse", {"cursor": "not-a-cursor"})
    assert message.startswith("[invalid_input] cursor:") and "next_cursor" in message


def test_it_supersedes_with_only_the_new_text_and_keeps_the_rest(palazzo: Palazzo) -> None:
    old = palazzo.ok(
        "palace_store",
        memory(unique("The cache TTL is 60 s"), room="Cache", hall="decisions", timestamp="2025-05-05T05:05:05Z"),
    )
    new_text = unique("The cache TTL is 300 s")
    result = palazzo.ok("palace_supersede", {"supersedes": [old["id"]], "text": new_text, "reason": "raised"})
    new = result["memory"]
    assert new["text"] == new_text and new["supersedes"] == [old["id"]]
    for key in ("category", "wing", "room", "hall", "timestamp"):
        assert new[key] == old[key], key
    message = palazzo.error("palace_supersede", {"supersedes": [old["id"]], "text": "no reason"})
    assert message.startswith("[invalid_input] reason:")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_it_answers_a_cut_lean_find_that_validates_in_each_client_mode(tmp_path: Path, mode: str) -> None:
    # The SDK client validates structured content against the outputSchema in both of its modes (the
    # per-request envelope era and the initialize one): a find with passages, shared filing and a cut note.
    data_dir = tmp_path / "data"
    migrate(data_dir)

    async def run() -> tuple[Any, Any]:
        async with Client(
            stdio_parameters(data_dir), mode=mode, client_info=CLIENT_INFO, read_timeout_seconds=120
        ) as client:
            long = "\n".join(f"Line {k}: the harbour pilot boarded {k} ships at dawn." for k in range(400))
            items = [memory(long, room="harbour"), memory("The harbour pilot keeps a tide table.", room="harbour")]
            stored = await client.call_tool("palace_store_batch", {"items": items})
            assert not stored.is_error
            listed = await client.list_tools()
            schema = next(tool.output_schema for tool in listed.tools if tool.name == "palace_find")
            return schema, await client.call_tool("palace_find", {"query": "pilot boarded ships", "room": "harbour"})

    schema, found = anyio.run(run)
    assert not found.is_error and found.structured_content is not None
    content = found.structured_content
    jsonschema.validate(content, schema)
    budget = int(content["cut"].split(":")[0].removeprefix("max_chars "))
    assert content["shared"]["room"] == "harbour" and 6000 <= budget <= 20000, "the default follows the page"
    assert len(found.content[0].text) <= budget  # type: ignore[union-attr]
    assert any(result.get("passages") for result in content["results"])
    assert json.loads(found.content[0].text) == content
