"""What the tools promise: schemas every major client accepts, descriptions that tell the truth, and
palace_check_duplicate deciding exactly as palace_store does."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from bench import duplicate_bands
from mcpserver.tools import TOOLS
from palace.engine.runtime import Palace
from palace.errors import InvalidInput
from palace.reads import selectors
from palace.writes import services
from tests.mcpserver.conftest import Palazzo, connect, stdio_parameters

# What Gemini's function declarations take (an OpenAPI 3.0 subset), the strictest schema consumer among
# common MCP clients: a keyword outside it fails the client's whole request, not just the one tool.
GEMINI_FORBIDDEN_KEYS = frozenset(
    {"const", "$ref", "$defs", "definitions", "oneOf", "allOf", "not", "if", "then", "else", "patternProperties"}
)
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
TAGS = {"category": "technical", "wing": "projects", "room": "duplicates", "hall": "facts"}


def gemini_violations(schema: Any, path: str = "$") -> list[str]:
    """Every place in a JSON schema that Gemini's function-declaration schema refuses."""
    found: list[str] = []
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            found += gemini_violations(item, f"{path}[{index}]")
        return found
    if not isinstance(schema, dict):
        return found
    for key, value in schema.items():
        if key in GEMINI_FORBIDDEN_KEYS:
            found.append(f"{path}: {key}")
        elif key == "type" and not isinstance(value, str):
            found.append(f"{path}: type {value!r} is not one type name")
        elif key == "anyOf" and any(isinstance(item, dict) and item.get("type") == "null" for item in value):
            found.append(f"{path}: anyOf with null")
        elif key == "enum" and not all(isinstance(item, str) for item in value):
            found.append(f"{path}: enum of non-strings")
        if key in ("properties",) and isinstance(value, dict):
            for name, item in value.items():
                found += gemini_violations(item, f"{path}.{name}")
        elif key != "properties":
            found += gemini_violations(value, f"{path}.{key}")
    return found


@pytest.fixture(scope="module")
def default_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Palazzo]:
    """A runmcp server as a deployment starts it (PALAZZO_GAIN_TOOL not set)."""
    data_dir = tmp_path_factory.mktemp("defaults") / "data"
    with connect(stdio_parameters(data_dir, PALAZZO_GAIN_TOOL="0"), "stdio") as client:
        yield client


def test_it_keeps_every_input_and_output_schema_inside_what_gemini_accepts(palazzo: Palazzo) -> None:
    tools = palazzo.list_tools().tools
    assert len(tools) == len(TOOLS)  # palace_gain too (listed in the test servers)
    for tool in tools:
        assert gemini_violations(tool.input_schema, tool.name) == []
        assert gemini_violations(tool.output_schema, f"{tool.name}.output") == []


@pytest.mark.parametrize(
    ("schema", "violation"),
    [
        ({"type": "boolean", "const": True}, "$: const"),
        ({"type": ["string", "null"]}, "$: type ['string', 'null'] is not one type name"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "$: anyOf with null"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}}, "$.x: $ref"),
        ({"type": "array", "items": {"oneOf": [{"type": "string"}]}}, "$.items: oneOf"),
        ({"type": "integer", "enum": [1, 2]}, "$: enum of non-strings"),
    ],
)
def test_it_finds_each_keyword_gemini_refuses(schema: dict[str, Any], violation: str) -> None:
    assert violation in gemini_violations(schema)


def test_it_leaves_palace_gain_off_the_default_tool_list_and_serves_it_as_a_resource(
    default_client: Palazzo,
) -> None:
    names = {tool.name for tool in default_client.list_tools().tools}
    assert "palace_gain" not in names and len(names) == len(TOOLS) - 1
    default_client.ok("palace_status")
    contents = default_client.portal.call(default_client.client.read_resource, "palace://gain").contents
    gain = json.loads(contents[0].text)  # type: ignore[union-attr]
    assert gain["estimate"] == "estimate@v1" and gain["per_operation"]["status"]["calls"] >= 1


def test_it_tells_the_model_what_the_redaction_mode_in_force_does_to_the_text(default_client: Palazzo) -> None:
    tools = {tool.name: tool.description or "" for tool in default_client.list_tools().tools}
    assert "[REDACTED:<rule>]" in tools["palace_store"] and "verbatim" not in tools["palace_store"]
    store = next(spec for spec in TOOLS if spec.name == "palace_store")
    for mode, words in (("off", "stored exactly as sent"), ("dry-run", "only counted")):
        env = dataclasses.replace(settings.PALAZZO, redaction_mode=mode)
        assert words in store.describe(env)
    stored = default_client.ok("palace_store", {"text": f"CI pushes with {GITHUB_TOKEN}", **TAGS})
    assert stored["text"] == "CI pushes with [REDACTED:github_token]"
    assert stored["redactions"] == {"github_token": 1}


def test_it_quotes_the_similarity_bands_its_measuring_script_prints(db: None) -> None:
    description = next(spec.description for spec in TOOLS if spec.name == "palace_check_duplicate")
    bands = duplicate_bands.measure()
    assert bands.pop("model") == "BAAI/bge-small-en-v1.5"
    for kind, label in (
        ("paraphrase", "paraphrases"),
        ("corrected fact", "corrected facts"),
        ("unrelated", "unrelated"),
    ):
        figures = bands[kind]
        assert isinstance(figures, dict)
        quoted = re.search(rf"{label} (\d\.\d\d)-(\d\.\d\d)", description)
        assert quoted is not None, f"the description quotes no band for {label}"
        assert quoted.groups() == (f"{figures['min']:.2f}", f"{figures['max']:.2f}"), kind


def test_it_says_a_secret_holding_text_is_a_duplicate_exactly_when_store_returns_one(palace: Palace) -> None:
    text = f"The release bot pushes with {GITHUB_TOKEN} from the CI runner."
    before = selectors.check_duplicate(text=text)
    assert before["duplicate"] is False and before["redactions"] == {"github_token": 1}
    stored = services.store(text=text, **TAGS)
    after = selectors.check_duplicate(text=text)
    assert after["duplicate"] is True and after["closest"]["id"] == stored["id"]
    assert GITHUB_TOKEN not in json.dumps(after)
    assert services.store(text=text, **TAGS)["duplicate"] is True


SECRETS = st.sampled_from(["", GITHUB_TOKEN, "AKIAIOSFODNN7EXAMPLE", "password=hunter2-but-longer"])
TEXTS = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["Deploys go out on Tuesdays.", "deploys go out on tuesdays.", " Deploys go out on Tuesdays. "]),
    st.integers(),
    st.none(),
)


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, secret=SECRETS, store_first=st.booleans())
def test_it_decides_every_input_exactly_as_palace_store_would(
    palace: Palace, text: Any, secret: str, store_first: bool
) -> None:
    candidate = f"{text} {secret}" if isinstance(text, str) and secret else text
    if store_first and isinstance(candidate, str):
        with contextlib.suppress(InvalidInput):
            services.store(text=candidate, **TAGS)
    try:
        check = selectors.check_duplicate(text=candidate)
    except InvalidInput as refused:
        with pytest.raises(InvalidInput) as also_refused:
            services.store(text=candidate, **TAGS)
        assert set(also_refused.value.errors) == set(refused.errors) == {"text"}
        return
    stored = services.store(text=candidate, **TAGS)
    assert stored["duplicate"] is check["duplicate"]
    assert stored["redactions"] == check["redactions"]
    if check["duplicate"]:
        assert stored["id"] == check["closest"]["id"]


def test_it_measures_the_bands_in_a_script_that_prints_them(tmp_path: Path) -> None:
    import subprocess
    import sys

    output = subprocess.run(
        [sys.executable, "bench/duplicate_bands.py", "--json"],
        cwd=Path(__file__).resolve().parents[2],
        env={"PALAZZO_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    bands = json.loads(output)
    assert set(bands) == {"model", "paraphrase", "corrected fact", "unrelated"}
    assert bands["unrelated"]["max"] < bands["paraphrase"]["min"]


def test_it_covers_effect_use_alternative_and_limits_in_every_description(palazzo: Palazzo) -> None:
    from bench.tools_list_size import coverage

    for tool in palazzo.list_tools().tools:
        covered = coverage(tool.model_dump(by_alias=True))
        assert all(covered.values()), f"{tool.name}: {covered}"
    assert coverage({"name": "bare", "description": "Does things.", "inputSchema": {}}) == {
        "effect": False,
        "when": False,
        "alternative": False,
        "limits": False,
        "params": True,
    }
