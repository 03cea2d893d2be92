"""POST /feed input: whatever JSON a client sends, a clear error naming the field, or a transcript to feed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace.errors import InvalidInput
from palace.routes.feed import transcript_from_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
exchange = st.fixed_dictionaries(
    {},
    optional={
        "key": json_values | st.text(max_size=300),
        "index": json_values | st.integers(min_value=-(2**70), max_value=2**70),
        "prompt": json_values,
        "reply": json_values,
        "started_at": json_values | st.sampled_from(["2026-11-30T09:00:00Z", "2026-13-40T99:00:00Z", "9999999-01-01"]),
        "complete": json_values,
    },
)
VALID_EXCHANGE = {
    "key": "k",
    "index": 0,
    "prompt": "p",
    "reply": "r",
    "started_at": "2026-11-30T09:00:00Z",
    "complete": True,
}
transcripts = st.fixed_dictionaries(
    {},
    optional={
        "path": json_values | st.just("/p/s.jsonl"),
        "session_id": json_values,
        "cwd": json_values,
        "parent_path": json_values,
        "exchanges": json_values | st.lists(exchange, max_size=3),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, transcripts))
def test_it_refuses_any_malformed_transcript_with_the_field_named(data: Any) -> None:
    try:
        transcript, _parent = transcript_from_json("claude-code", data)
    except InvalidInput as exc:
        assert exc.errors and all(key.startswith("transcript") for key in exc.errors)
        return
    assert transcript.path.as_posix() and all(exchange.started_at.tzinfo for exchange in transcript.exchanges)


def test_it_accepts_what_the_client_sends() -> None:
    transcript, parent = transcript_from_json(
        "pi",
        {
            "path": "/home/a/.pi/s.jsonl",
            "session_id": "s:agent-1",
            "parent_session_id": "s",
            "agent_id": "1",
            "cwd": None,
            "parent_path": "/home/a/.pi/s.jsonl",
            "parent_cwd": "/src/orrery",
            "exchanges": [VALID_EXCHANGE],
        },
    )
    assert transcript.exchanges[0].prompt == "p" and parent is not None and parent.cwd == "/src/orrery"


def test_it_refuses_two_exchanges_with_one_key_naming_the_second() -> None:
    repeated = [VALID_EXCHANGE, VALID_EXCHANGE | {"index": 1}]
    with pytest.raises(InvalidInput) as refused:  # its feed-state row would collide with the first's
        transcript_from_json("pi", {"path": "/p/s.jsonl", "exchanges": repeated})
    assert list(refused.value.errors) == ["transcript.exchanges[1].key"]
    assert "repeats exchanges[0].key" in str(refused.value)
