"""The canonical room form: properties over any text, and the forms that apply it."""

from __future__ import annotations

import string
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace.errors import InvalidInput
from palace.schema.forms import FilterFields, MemoryForm
from palace.schema.memories import canonical_room, stored_payload
from tests.palace.helpers import memory

rooms = st.text(st.characters(exclude_categories=("Cs",)), max_size=80)


@given(rooms)
def test_it_makes_the_canonical_room_idempotent_and_tidy(room: str) -> None:
    canonical = canonical_room(room)
    assert canonical_room(canonical) == canonical
    assert canonical == canonical.strip() and "  " not in canonical
    assert not any(character.isspace() and character != " " for character in canonical)


@given(
    st.text(string.ascii_letters + string.digits + " -_.", max_size=60),
    st.sampled_from([str.upper, str.lower, str.title, str.swapcase]),
    st.sampled_from([" ", "\t", "\u00a0", "\u3000"]),
)
def test_it_gives_case_and_spacing_variants_one_room(room: str, change_case: Callable[[str], str], space: str) -> None:
    variant = f"{space}{change_case(room).replace(' ', space * 2)}{space}"
    assert canonical_room(variant) == canonical_room(room)


@pytest.mark.parametrize(
    ("given_room", "stored"),
    [("Palazzo", "palazzo"), ("  PALAZZO\t", "palazzo"), ("My  Project", "my project"), ("Straße", "strasse")],
)
def test_it_stores_and_filters_rooms_in_canonical_form(db: None, given_room: str, stored: str) -> None:
    assert MemoryForm(memory("t", room=given_room)).parsed()["room"] == stored
    assert FilterFields({"room": given_room}).parsed()["room"] == stored
    assert stored_payload({"text": "t", "room": given_room})["room"] == stored


def test_it_measures_the_room_limit_on_the_canonical_form(db: None) -> None:
    assert MemoryForm(memory("t", room="A" * 64)).parsed()["room"] == "a" * 64
    with pytest.raises(InvalidInput) as caught:
        MemoryForm(memory("t", room="ß" * 33)).parsed()  # casefolds to 66 characters
    assert "at most 64" in str(caught.value.errors["room"])
