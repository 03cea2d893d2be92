"""Property-based input tests: any JSON value in any field gives success or a clear error, never a crash.

Most examples drive the tools' exact palace calls in this process (the spec's call after the tool layer's
argument parsing, over a real palace); a smaller set goes through a real MCP client and server to prove
the tool layer maps every failure to an isError result. Invalid input must write nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from mcpserver.server import _parse_arguments
from mcpserver.tools import TOOLS, Caller, ToolSpec
from palace.engine.runtime import Palace
from palace.errors import ExpectedCountMismatch, InvalidInput
from palace.models import JournalEntry
from palace.store.base import MemoryFilter
from tests.mcpserver.conftest import Palazzo, connect, http_server
from tests.palace.helpers import memory
from tests.trust.conftest import migrate

SPECS = {spec.name: spec for spec in TOOLS}
# Errors that name what was wrong; anything else escaping a palace call is a bug.
CLEAR_ERRORS = (InvalidInput, ExpectedCountMismatch)
PROPERTY_SETTINGS = hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

# What an attacker sends: lone surrogates, NUL, digits int() refuses, numbers past every bound.
HOSTILE_PIECES = ["\ud800", "\udfff", "\x00", "²", "١٢٣", "\u202e", "\ufeff"]
hostile_strings = st.tuples(st.text(max_size=8), st.sampled_from(HOSTILE_PIECES), st.text(max_size=8)).map("".join)
huge_numbers = st.sampled_from([2**53, 2**63 - 1, 2**63, 2**64, 10**400, -(10**400), 1e308, -0.0])
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40) | hostile_strings | huge_numbers
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
timestamps = st.sampled_from(
    [
        "2026-01-01T00:00:00Z",
        "2024-02-29T23:59:59.5+01:00",
        "2026-13-01T00:00:00Z",
        "2026-01-01",
        "yesterday",
        "",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "２０２６-01-01T00:00:00Z",
    ]
)
memory_ids = st.lists(
    st.integers(min_value=999_999_990, max_value=2**63 + 5) | st.sampled_from(["1000000000", "123²", 10**400]),
    max_size=6,
)


def _plausible() -> dict[str, st.SearchStrategy[Any]]:
    """Values near the valid ones per field name, so success paths are reached as often as errors."""
    env = settings.PALAZZO
    plain: dict[str, st.SearchStrategy[Any]] = {
        "text": st.text(min_size=0, max_size=60),
        "query": st.text(min_size=0, max_size=60),
        "category": st.sampled_from([*env.categories, "gossip", " technical "]),
        "wing": st.sampled_from([*env.wings, "atlantis"]),
        "hall": st.sampled_from([*env.halls, "attic"]),
        "room": st.text(max_size=70) | hostile_strings,
        "session": st.text(max_size=70) | hostile_strings,
        "source_file": st.text(max_size=40) | hostile_strings,
        "timestamp": timestamps,
        "since": timestamps,
        "until": timestamps,
        "limit": st.integers(min_value=-3, max_value=25),
        "recency_half_life_days": st.floats() | st.integers(min_value=-5, max_value=400) | huge_numbers,
        "include_superseded": st.booleans(),
        "skip_duplicates": st.booleans() | st.sampled_from(["false", "true", 0, 1]),
        "ids": memory_ids,
        "supersedes": memory_ids,
        "reason": st.text(max_size=30) | hostile_strings,
        "confirm": st.booleans(),
        "dry_run": st.booleans(),
        "expected_count": st.integers(min_value=-2, max_value=1002),
        "cursor": st.one_of(
            st.tuples(timestamps, st.integers(min_value=-1, max_value=2**64)).map(lambda pair: f"{pair[0]}/{pair[1]}"),
            st.text(max_size=80),
        ),
    }
    shared = ("category", "wing", "room", "hall", "session", "text")
    plain["defaults"] = st.fixed_dictionaries({}, optional={key: plain[key] | json_values for key in shared})
    return plain


def _field(name: str) -> st.SearchStrategy[Any]:
    plausible = _plausible().get(name)
    return json_values if plausible is None else st.one_of(plausible, plausible, json_values)


def memory_items() -> st.SearchStrategy[Any]:
    valid = st.builds(lambda text: memory(text), st.text(min_size=1, max_size=40))
    mutated = st.fixed_dictionaries(
        {}, optional={key: _field(key) for key in ("text", "category", "wing", "room", "hall", "timestamp")}
    )
    return st.one_of(valid, mutated, json_values)


ANCHOR = "<anchor id>"  # replaced by the id of a memory that exists when the example runs
VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "palace_store": memory("a valid memory"),
    "palace_store_batch": {"items": [memory("a valid batch memory")]},
    "palace_find": {"query": "valid"},
    "palace_recall": {"ids": [ANCHOR]},
    "palace_status": {},
    "palace_browse": {"room": "palazzo"},
    "palace_check_duplicate": {"text": "valid"},
    "palace_supersede": memory("a valid correction") | {"supersedes": [ANCHOR], "reason": "corrected"},
    "palace_delete": {"ids": [ANCHOR], "reason": "operator approved", "confirm": True},
    "palace_delete_by_filter": {"wing": "projects", "reason": "operator approved", "confirm": True, "dry_run": True},
    "palace_gain": {},
}


def arguments_for(spec: ToolSpec) -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments with up to three fields replaced or dropped, or any subset of fields, or an unknown key."""
    properties = spec.input_schema(settings.PALAZZO)["properties"]
    strategies = {
        name: (st.lists(memory_items(), max_size=4) | json_values) if name == "items" else _field(name)
        for name in properties
    }
    base = VALID_ARGUMENTS[spec.name]
    if not properties:
        return st.just(base) | st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=2)
    names = sorted(properties)
    mutated = (
        st.sets(st.sampled_from(names), max_size=3)
        .flatmap(lambda chosen: st.fixed_dictionaries({name: strategies[name] for name in sorted(chosen)}))
        .map(lambda changes: base | changes)
    )
    dropped = st.sets(st.sampled_from(names), min_size=1, max_size=2).map(
        lambda drop: {key: value for key, value in base.items() if key not in drop}
    )
    anything = st.fixed_dictionaries({}, optional=strategies)
    unknown = st.dictionaries(st.sampled_from(["colour", "Text", "", "ids "]), json_values, min_size=1, max_size=1)
    return st.one_of(
        mutated, mutated, mutated, dropped, anything, st.tuples(mutated, unknown).map(lambda pair: pair[0] | pair[1])
    )


def _with_anchor(palace: Palace, arguments: dict[str, Any]) -> dict[str, Any]:
    from palace.writes import services

    if ANCHOR not in json.dumps(arguments):
        return arguments
    anchor = services.store(**memory("the anchor memory of the property tests"))["id"]
    return {
        key: [anchor if item == ANCHOR else item for item in value] if isinstance(value, list) else value
        for key, value in arguments.items()
    }


def _counts(palace: Palace) -> tuple[int, int]:
    return palace.store.count(memory_filter=MemoryFilter()), JournalEntry.objects.count()


def _call(spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the tool layer does with arguments, minus the transport: parse, make the one palace call, validate."""
    schema = spec.input_schema(settings.PALAZZO)
    data = spec.call(_parse_arguments(spec, schema, arguments), Caller(added_by="hypothesis/1"))
    spec.output_model.model_validate(data)
    return data


def _check_clear(error: Exception) -> None:
    message = str(error)
    assert message.strip(), f"{type(error).__name__} without a message"
    if isinstance(error, InvalidInput):
        assert error.errors and all(error.errors.values()), error.errors


def check_tool_property(palace: Palace, spec: ToolSpec, arguments: dict[str, Any]) -> None:
    arguments = _with_anchor(palace, arguments)
    before = _counts(palace)
    try:
        _call(spec, arguments)
    except CLEAR_ERRORS as error:
        _check_clear(error)
        event(f"refused: {type(error).__name__}")
        assert _counts(palace) == before, f"{spec.name} failed but wrote: {arguments!r}"
        return
    event("accepted")
    if spec.read_only:
        assert _counts(palace) == before, f"the read {spec.name} wrote something"


def _property_test(tool: str) -> Any:
    spec = SPECS[tool]

    @PROPERTY_SETTINGS
    @given(arguments=arguments_for(spec))
    def test(palace: Palace, arguments: dict[str, Any]) -> None:
        check_tool_property(palace, spec, arguments)

    return test


test_it_survives_any_input_to_palace_store = _property_test("palace_store")
test_it_survives_any_input_to_palace_store_batch = _property_test("palace_store_batch")
test_it_survives_any_input_to_palace_find = _property_test("palace_find")
test_it_survives_any_input_to_palace_recall = _property_test("palace_recall")
test_it_survives_any_input_to_palace_status = _property_test("palace_status")
test_it_survives_any_input_to_palace_browse = _property_test("palace_browse")
test_it_survives_any_input_to_palace_check_duplicate = _property_test("palace_check_duplicate")
test_it_survives_any_input_to_palace_supersede = _property_test("palace_supersede")
test_it_survives_any_input_to_palace_delete = _property_test("palace_delete")
test_it_survives_any_input_to_palace_delete_by_filter = _property_test("palace_delete_by_filter")
test_it_survives_any_input_to_palace_gain = _property_test("palace_gain")


def test_it_has_a_property_test_for_every_tool() -> None:
    assert {f"test_it_survives_any_input_to_{name}" for name in SPECS} <= set(globals())


@PROPERTY_SETTINGS
@given(items=st.lists(memory_items(), min_size=1, max_size=6))
def test_it_writes_only_the_valid_items_of_a_batch(palace: Palace, items: list[Any]) -> None:
    stores_before, entries_before = _counts(palace)
    result = _call(SPECS["palace_store_batch"], {"items": items})
    stored = result["counts"]["stored"]
    assert result["counts"]["failed"] == sum(1 for item in result["items"] if item["status"] == "failed")
    for outcome in result["items"]:
        if outcome["status"] == "failed":
            assert outcome["error"].strip()
    stores_after, entries_after = _counts(palace)
    assert stores_after - stores_before == stored
    assert entries_after - entries_before == (1 if stored else 0)


# Through a real server: a smaller sample, proving the MCP layer turns every failure into an isError result.


@pytest.fixture(scope="module")
def mcp_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Palazzo]:
    data_dir: Path = tmp_path_factory.mktemp("property-http") / "data"
    migrate(data_dir)
    with http_server(data_dir) as base_url, connect(base_url + "/mcp", "http") as client:
        yield client


def _non_finite_as_null(value: Any) -> Any:
    """What the MCP client can send at all: JSON has no NaN or infinity, UTF-8 no lone surrogate (null and U+FFFD
    instead), and the client's encoder stops at 64-bit integers (the in-process tests send the rest).
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value < 2**64 else None
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [_non_finite_as_null(item) for item in value]
    if isinstance(value, dict):
        return {_non_finite_as_null(key): _non_finite_as_null(item) for key, item in value.items()}
    return value


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(call=st.sampled_from(sorted(SPECS)).flatmap(lambda name: st.tuples(st.just(name), arguments_for(SPECS[name]))))
def test_it_answers_any_tool_input_over_mcp_with_a_result_or_a_clear_error(
    mcp_client: Palazzo, call: tuple[str, dict[str, Any]]
) -> None:
    name, arguments = call
    arguments = json.loads(json.dumps(arguments).replace(json.dumps(ANCHOR), "1000000000"))
    arguments = _non_finite_as_null(arguments)
    total = mcp_client.total()
    result = mcp_client.call(name, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    if result.is_error:
        assert text.strip() and "unexpectedly" not in text and "Traceback" not in text, text
        assert mcp_client.total() == total
    else:
        assert json.loads(text) == result.structured_content


# The ingest item (POST /ingest, manage.py ingest): one JSON Lines body, any value in any field, any bytes.

RESTORE_FIELDS = (
    "id",
    "valid_from",
    "valid_until",
    "superseded_by",
    "superseded_reason",
    "supersedes",
    "added_by",
    "import_id",
)


def ingest_items() -> st.SearchStrategy[Any]:
    restore = {
        "id": st.integers(min_value=999_999_999, max_value=2_000_000_000) | huge_numbers | json_values,
        "valid_from": timestamps | json_values,
        "valid_until": timestamps | json_values,
        "superseded_by": st.integers(min_value=999_999_999, max_value=2_000_000_000) | huge_numbers | json_values,
        "superseded_reason": st.text(max_size=20) | json_values,
        "supersedes": memory_ids | json_values,
        "added_by": st.text(max_size=20) | hostile_strings | json_values,
        "import_id": st.text(max_size=20) | hostile_strings | json_values,
    }
    with_restore = st.tuples(memory_items(), st.fixed_dictionaries({}, optional=restore)).map(
        lambda pair: pair[0] | pair[1] if isinstance(pair[0], dict) else pair[0]
    )
    return st.one_of(memory_items(), with_restore)


ingest_lines = st.one_of(
    ingest_items().map(lambda item: json.dumps(item).encode() + b"\n"),
    ingest_items().map(lambda item: json.dumps(item).encode() + b"\n"),
    st.binary(max_size=60).map(lambda raw: raw.replace(b"\n", b" ") + b"\n"),
    st.integers(min_value=1, max_value=50_000).map(lambda depth: b"[" * depth + b"]" * depth + b"\n"),
)


@PROPERTY_SETTINGS
@given(lines=st.lists(ingest_lines, min_size=1, max_size=6))
def test_it_survives_any_ingest_body(palace: Palace, lines: list[bytes]) -> None:
    from palace.operations.ingest import ingest

    stores_before, entries_before = _counts(palace)
    reports = list(ingest(lines=iter(lines), added_by="hypothesis/1"))
    assert all(report.error is None for report in reports), [report.error for report in reports]
    results = [result for report in reports for result in report.results]
    stored = sum(report.counts["stored"] for report in reports)
    for result in results:
        assert result["status"] in ("stored", "duplicate", "skipped", "failed"), result
        if result["status"] == "failed":
            assert result["error"].strip()
    event("stored some" if stored else "stored nothing")
    stores_after, entries_after = _counts(palace)
    assert stores_after - stores_before == stored
    if not stored:
        assert entries_after == entries_before, "an ingest that stored nothing wrote a journal entry"


# After any sequence of writes, hostile ones among them: the journal rebuilds the same store, verify is clean,
# and every acknowledged write reads back under its own id with its own text.

write_steps = st.one_of(
    st.tuples(st.just("store"), memory_items()),
    st.tuples(st.just("batch"), st.lists(memory_items(), min_size=1, max_size=3)),
    st.tuples(st.just("ingest"), st.lists(ingest_lines, min_size=1, max_size=3)),
    st.tuples(st.just("supersede"), st.text(min_size=1, max_size=30) | hostile_strings),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=5)),
)


def _apply_step(step: tuple[str, Any], acknowledged: dict[int, str]) -> None:
    """Make one write as an entry point would; record what the palace acknowledged."""
    from palace.operations.ingest import ingest
    from palace.writes import services

    kind, value = step
    try:
        if kind == "store":
            stored = _call(SPECS["palace_store"], value if isinstance(value, dict) else {"text": value})
            acknowledged[stored["id"]] = stored["text"]
        elif kind == "batch":
            for outcome in _call(SPECS["palace_store_batch"], {"items": value})["items"]:
                if outcome["status"] != "failed":
                    acknowledged[outcome["memory"]["id"]] = outcome["memory"]["text"]
        elif kind == "ingest":
            for report in ingest(lines=iter(value), added_by="hypothesis/1"):
                assert report.error is None, report.error
                for result in report.results:
                    if result["status"] == "stored":
                        acknowledged[result["id"]] = json.loads(value[result["line"] - 1])["text"]
        elif kind == "supersede" and acknowledged:
            target = max(acknowledged)
            corrected = services.supersede(supersedes=[target], reason="corrected", **memory(value))
            acknowledged[corrected["memory"]["id"]] = corrected["memory"]["text"]
        elif kind == "delete" and acknowledged:
            target = sorted(acknowledged)[value % len(acknowledged)]
            services.delete(ids=[target], reason="property test", confirm=True)
            del acknowledged[target]
    except CLEAR_ERRORS as error:
        _check_clear(error)


@hypothesis_settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(steps=st.lists(write_steps, min_size=1, max_size=6))
def test_it_rebuilds_every_acknowledged_write_after_any_sequence_of_writes(
    palace: Palace, steps: list[tuple[str, Any]]
) -> None:
    from palace.engine import runtime
    from palace.operations.verify import verify
    from palace.reads import selectors
    from palace.writes import services

    acknowledged: dict[int, str] = {}
    for step in steps:
        _apply_step(step, acknowledged)
    before = verify()
    assert before["ok"], before

    services.rebuild()

    after = verify()
    assert after["ok"], after
    assert after["store_points"] == before["store_points"]
    ids = sorted(acknowledged)
    for start in range(0, len(ids), 100):
        recalled = selectors.recall(ids=ids[start : start + 100])
        assert recalled["missing"] == []
        assert {m["id"]: m["text"] for m in recalled["memories"]} == {
            i: acknowledged[i] for i in ids[start : start + 100]
        }
    assert runtime.get_palace().store.count(memory_filter=MemoryFilter()) == after["store_points"]
