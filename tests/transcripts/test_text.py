"""Memory texts of exchanges (the 32 KB split) and project names."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace.feeding.transcripts import Exchange, exchange_texts, project_name

LIMIT = 32 * 1024


def exchange(prompt: str, reply: str) -> Exchange:
    return Exchange(
        key="k", index=0, prompt=prompt, reply=reply, started_at=datetime(2026, 1, 1, tzinfo=UTC), complete=True
    )


def test_it_keeps_a_small_exchange_as_one_verbatim_text() -> None:
    assert exchange_texts(exchange("Why uv?", "Because it is fast.\n\nAnd pinned.")) == [
        "User: Why uv?\n\nAssistant: Because it is fast.\n\nAnd pinned."
    ]
    assert exchange_texts(exchange("Still running", "")) == ["User: Still running"]


def test_it_splits_a_long_exchange_at_turn_boundaries_first() -> None:
    prompt = "p" * 20_000
    reply = "r" * 20_000
    parts = exchange_texts(exchange(prompt, reply))
    assert parts == [f"User: {prompt}", f"Assistant: {reply}"]


def test_it_splits_a_long_reply_at_step_then_line_then_space_boundaries() -> None:
    steps = [f"step {n} " + "word " * 2000 for n in range(12)]  # ~10 KB each
    reply = "\n\n".join(steps)
    parts = exchange_texts(exchange("Refactor it", reply))
    assert all(len(part.encode()) <= LIMIT for part in parts)
    assert len(parts) == 4
    assert parts[0].startswith("User: Refactor it\n\nAssistant: step 0")
    assert all(part.split("\n\n")[-1].startswith("step") for part in parts)  # never cut inside a step
    one_line = "x" * 40_000 + " " + "y" * 10
    parts = exchange_texts(exchange("q", one_line))
    assert all(len(part.encode()) <= LIMIT for part in parts)
    assert parts[0] == "User: q"
    assert parts[1].startswith("Assistant: xxx")
    assert sum(part.count("x") for part in parts) == 40_000
    assert parts[-1].endswith(" " + "y" * 10) or parts[-1] == "y" * 10


def test_it_never_cuts_inside_a_multibyte_character() -> None:
    reply = "漢" * 30_000  # 90 KB of 3-byte characters, no spaces
    parts = exchange_texts(exchange("kanji", reply), max_bytes=LIMIT)
    assert all(len(part.encode("utf-8")) <= LIMIT for part in parts)
    assert sum(part.count("漢") for part in parts) == 30_000


@settings(max_examples=200, deadline=None)
@given(prompt=st.text(min_size=1), reply=st.text(), max_bytes=st.integers(min_value=64, max_value=4096))
def test_it_always_returns_bounded_non_blank_parts(prompt: str, reply: str, max_bytes: int) -> None:
    prompt = prompt if prompt.strip() else "x"
    parts = exchange_texts(exchange(prompt, reply), max_bytes=max_bytes)
    assert parts
    for part in parts:
        assert part.strip()
        assert len(part.encode("utf-8", errors="surrogatepass")) <= max_bytes


def test_it_refuses_a_limit_too_small_for_any_text() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        exchange_texts(exchange("a", "b"), max_bytes=8)


@pytest.mark.parametrize(
    ("cwd", "room"),
    [
        ("/home/dev/projects/palazzo", "palazzo"),
        ("/home/dev/projects/palazzo/", "palazzo"),
        ("C:\\Users\\dev\\my app", "my app"),
        ("/", "unknown-project"),
        ("", "unknown-project"),
        (None, "unknown-project"),
        ("C:\\", "unknown-project"),
        ("/tmp/na\x00me\ud800", "name\ufffd"),
        ("/srv/" + "x" * 100, "x" * 64),
        ("/srv/  spaced   out  ", "spaced out"),
    ],
)
def test_it_names_the_project_after_the_last_path_component(cwd: str | None, room: str) -> None:
    assert project_name(cwd) == room


@given(st.one_of(st.none(), st.text()))
def test_it_always_gives_a_valid_room(cwd: str | None) -> None:
    room = project_name(cwd)
    assert 1 <= len(room) <= 64
    assert room == room.strip()
    assert "\x00" not in room
    room.encode("utf-8")


def test_it_labels_only_the_turns_that_have_text() -> None:
    assert exchange_texts(exchange("", "An answer with no prompt text")) == ["Assistant: An answer with no prompt text"]
    assert exchange_texts(exchange(" ", "")) == ["User:"]
