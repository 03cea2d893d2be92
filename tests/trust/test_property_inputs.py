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
from palace.errors import ExpectedCountMismatch, InvalidInput
from palace.models import JournalEntry
from palace.runtime import Palace
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

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
timestamps = st.sampled_from(
    ["2026-01-01T00:00:00Z", "2024-02-29T23:59:59.5+01:00", "2026-13-01T00:00:00Z", "2026-01-01", "yesterday", ""]
)
memory_ids = st.lists(st.integers(min_value=999_999_990, max_value=2**63 + 5), max_size=6)


def _plausible() -> dict[str, st.SearchStrategy[Any]]:
    """Values near the valid ones per field name, so success paths are reached as often as errors."""
    env = settings.PALAZZO
    return {
        "text": st.text(min_size=0, max_size=60),
        "query": st.text(min_size=0, max_size=60),
        "category": st.sampled_from([*env.categories, "gossip", " technical "]),
        "wing": st.sampled_from([*env.wings, "atlantis"]),
        "hall": st.sampled_from([*env.halls, "attic"]),
        "room": st.text(max_size=70),
        "session": st.text(max_size=70),
        "source_file": st.text(max_size=40),
        "timestamp": timestamps,
        "since": timestamps,
        "until": timestamps,
        "limit": st.integers(min_value=-3, max_value=25),
        "recency_half_life_days": st.floats() | st.integers(min_value=-5, max_value=400),
        "include_superseded": st.booleans(),
        "skip_duplicates": st.booleans(),
        "ids": memory_ids,
        "supersedes": memory_ids,
        "reason": st.text(max_size=30),
        "confirm": st.booleans(),
        "dry_run": st.booleans(),
        "expected_count": st.integers(min_value=-2, max_value=1002),
    }


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
    "palace_taxonomy": {},
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
    from palace import services

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
test_it_survives_any_input_to_palace_taxonomy = _property_test("palace_taxonomy")
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
    """JSON has no NaN or infinity (the client would refuse to send them at all): null instead."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_non_finite_as_null(item) for item in value]
    if isinstance(value, dict):
        return {key: _non_finite_as_null(item) for key, item in value.items()}
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

RESTORE_FIELDS = ("id", "valid_from", "valid_until", "superseded_by", "superseded_reason", "supersedes", "added_by")


def ingest_items() -> st.SearchStrategy[Any]:
    restore = {
        "id": st.integers(min_value=999_999_999, max_value=2_000_000_000) | json_values,
        "valid_from": timestamps | json_values,
        "valid_until": timestamps | json_values,
        "superseded_by": st.integers(min_value=999_999_999, max_value=2_000_000_000) | json_values,
        "superseded_reason": st.text(max_size=20) | json_values,
        "supersedes": memory_ids | json_values,
        "added_by": st.text(max_size=20) | json_values,
    }
    with_restore = st.tuples(memory_items(), st.fixed_dictionaries({}, optional=restore)).map(
        lambda pair: pair[0] | pair[1] if isinstance(pair[0], dict) else pair[0]
    )
    return st.one_of(memory_items(), with_restore)


ingest_lines = st.one_of(
    ingest_items().map(lambda item: json.dumps(item).encode() + b"\n"),
    ingest_items().map(lambda item: json.dumps(item).encode() + b"\n"),
    st.binary(max_size=60).map(lambda raw: raw.replace(b"\n", b" ") + b"\n"),
)


@PROPERTY_SETTINGS
@given(lines=st.lists(ingest_lines, min_size=1, max_size=6))
def test_it_survives_any_ingest_body(palace: Palace, lines: list[bytes]) -> None:
    from palace.ingest import ingest

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
