"""The palace forms: fields shared by every instance, each instance's cleaning its own."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palace.errors import InvalidInput
from palace.schema.forms import FindForm, MemoryForm, PalaceForm, SupersedeForm

_FORMS: list[type[PalaceForm]] = [FindForm, MemoryForm, SupersedeForm]
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),  # NaN != NaN: an accepted one would make equal outcomes differ
    st.text(max_size=40),
    st.lists(st.text(max_size=5), max_size=3),
)


def _outcome(form_class: type[PalaceForm], data: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", form_class(data).parsed()
    except InvalidInput as exc:
        return "invalid", exc.errors


def test_it_hands_each_form_its_class_fields_without_copying_them() -> None:
    for form_class in _FORMS:
        first, second = form_class({}), form_class({})
        assert list(first.fields) == list(form_class.base_fields)
        assert all(first.fields[name] is second.fields[name] is form_class.base_fields[name] for name in first.fields)


@pytest.mark.django_db  # the forms read the palace's vocabulary
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_FORMS),
            st.dictionaries(st.sampled_from(["query", "text", "limit", "wing", "room", "since", "category"]), _VALUES),
        ),
        min_size=2,
        max_size=8,
    )
)
def test_it_cleans_forms_parsed_at_once_in_threads_as_each_alone(
    inputs: list[tuple[type[PalaceForm], dict[str, Any]]],
) -> None:
    alone = [_outcome(form_class, data) for form_class, data in inputs]
    together: list[tuple[str, Any] | None] = [None] * len(inputs)
    start = threading.Barrier(len(inputs))

    def parse(index: int) -> None:
        form_class, data = inputs[index]
        start.wait()
        for _ in range(20):
            together[index] = _outcome(form_class, data)

    threads = [threading.Thread(target=parse, args=(index,)) for index in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone
