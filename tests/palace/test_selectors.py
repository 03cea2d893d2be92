"""The read selectors against the embedded store and the real model."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from hypothesis import given
from hypothesis import strategies as st

from palace.engine.runtime import Palace
from palace.errors import InvalidInput
from palace.operations import gain
from palace.operations import status as palace_status
from palace.reads import retrieval, selectors
from palace.schema.forms import MAX_FIND_LIMIT
from palace.store.base import MemoryFilter
from palace.writes import services
from tests.palace.helpers import memory


@pytest.fixture
def sample(palace: Palace) -> dict[str, int]:
    items = [
        memory(
            "The NAS runs ZFS with four disks in raidz2",
            wing="infrastructure",
            category="infrastructure",
            room="nas",
            hall="facts",
            timestamp="2024-01-01T00:00:00Z",
        ),
        memory(
            "We decided to move the blog from WordPress to Hugo",
            wing="projects",
            room="blog",
            hall="decisions",
            timestamp="2025-06-01T00:00:00Z",
        ),
        memory(
            "Alice prefers tea over coffee in the morning",
            wing="personal",
            category="person",
            room="alice",
            hall="preferences",
            timestamp="2026-11-01T00:00:00Z",
        ),
        memory(
            "The NAS backup runs nightly to the offsite box",
            wing="infrastructure",
            category="infrastructure",
            room="nas",
            hall="events",
            timestamp="2026-11-20T00:00:00Z",
        ),
    ]
    result = services.store_batch(items=items)
    names = ("zfs", "blog", "tea", "backup")
    return {name: item["memory"]["id"] for name, item in zip(names, result["items"])}


def ids(result: dict[str, Any]) -> list[int]:
    return [hit["id"] for hit in result["results"]]


def test_it_finds_by_meaning(sample: dict[str, int]) -> None:
    result = selectors.find(query="which file system does the storage server use", limit=1)
    assert ids(result) == [sample["zfs"]]
    assert 0 < result["results"][0]["score"] <= 1


def test_it_applies_every_filter_and_they_compose(sample: dict[str, int]) -> None:
    assert set(ids(selectors.find(query="nas", wing="infrastructure", limit=10))) == {sample["zfs"], sample["backup"]}
    assert ids(selectors.find(query="nas", wing="infrastructure", hall="events", limit=10)) == [sample["backup"]]
    assert ids(selectors.find(query="drinks", category="person", limit=10)) == [sample["tea"]]
    assert ids(selectors.find(query="anything", room="blog", limit=10)) == [sample["blog"]]


def test_it_filters_by_time_inclusively(sample: dict[str, int]) -> None:
    within = selectors.find(query="nas", since="2024-01-01T00:00:00Z", until="2025-06-01T00:00:00Z", limit=10)
    assert set(ids(within)) == {sample["zfs"], sample["blog"]}
    assert ids(selectors.find(query="nas", since="2100-01-01T00:00:00Z")) == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"since": "not-a-date"}, "since"),
        ({"until": "2026-01-01"}, "until"),
        ({"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": 21}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"wing": "attic"}, "wing"),
        ({"recency_half_life_days": -1}, "recency_half_life_days"),
        ({"recency_half_life_days": float("nan")}, "recency_half_life_days"),
        ({"recency_half_life_days": float("inf")}, "recency_half_life_days"),
        ({"include_superseded": "yes"}, "include_superseded"),
    ],
)
def test_it_rejects_bad_find_arguments(sample: dict[str, int], arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        selectors.find(query="nas", **arguments)
    assert field in caught.value.errors


def test_it_reranks_by_a_true_half_life(sample: dict[str, int]) -> None:
    plain = selectors.find(query="NAS ZFS disks raidz2", wing="infrastructure", limit=2)
    assert ids(plain)[0] == sample["zfs"]
    recent = selectors.find(query="NAS ZFS disks raidz2", wing="infrastructure", limit=2, recency_half_life_days=30)
    assert ids(recent)[0] == sample["backup"]
    old = next(hit for hit in recent["results"] if hit["id"] == sample["zfs"])
    raw = next(hit for hit in plain["results"] if hit["id"] == sample["zfs"])
    from palace.schema.timefmt import parse_rfc3339, utc_now

    age_days = (utc_now() - parse_rfc3339(old["timestamp"])).total_seconds() / 86400
    assert old["score"] == pytest.approx(raw["score"] * 0.5 ** (age_days / 30), rel=1e-3, abs=1e-6)


def test_it_recalls_by_id_and_reports_missing_ones(sample: dict[str, int]) -> None:
    result = selectors.recall(ids=[sample["zfs"], 1_999_999_999])
    assert [m["id"] for m in result["memories"]] == [sample["zfs"]]
    assert result["missing"] == [1_999_999_999]
    assert {"valid_from", "valid_until", "superseded_by", "superseded_reason", "supersedes"} <= set(
        result["memories"][0]
    )


@pytest.mark.parametrize(
    ("ids_value", "rule"),
    [
        (list(range(1_000_000_000, 1_000_000_101)), "maximum is 100"),
        ([], "at least one"),
        ([5], "not a memory id"),
        ("x", "list"),
    ],
)
def test_it_rejects_bad_recall_ids(sample: dict[str, int], ids_value: Any, rule: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        selectors.recall(ids=ids_value)
    assert rule in str(caught.value)


def test_it_accepts_100_recall_ids(sample: dict[str, int]) -> None:
    result = selectors.recall(ids=list(range(1_000_000_000, 1_000_000_100)))
    assert len(result["missing"]) == 100


def test_it_checks_for_duplicates(sample: dict[str, int]) -> None:
    same = selectors.check_duplicate(text="Alice prefers tea over coffee in the morning")
    assert same["duplicate"] is True and same["closest"]["id"] == sample["tea"]
    assert same["closest"]["score"] == pytest.approx(1.0, abs=1e-3) and same["closest"]["score"] <= 1.0
    other = selectors.check_duplicate(text="Kubernetes upgrade broke the ingress controller")
    assert other["duplicate"] is False and other["closest"] is not None
    assert 0.0 < other["closest"]["score"] < 1.0


def test_it_reports_status_and_taxonomy(sample: dict[str, int]) -> None:
    status = palace_status.status()
    assert status["total"] == 4
    assert status["wings"] == {"infrastructure": 2, "projects": 1, "personal": 1}
    assert status["halls"]["facts"] == 1
    assert status["rooms"] == {"nas": 2, "alice": 1, "blog": 1} and status["room_count"] == 3
    assert list(status["rooms"]) == ["nas", "alice", "blog"]  # largest first, then by name
    assert list(palace_status.status(room_limit=1)["rooms"]) == ["nas"]
    assert palace_status.status(room_limit=1)["room_count"] == 3
    taxonomy = palace_status.taxonomy()
    assert taxonomy["rooms"] == {"nas": 2, "blog": 1, "alice": 1}
    assert taxonomy["categories"] == {"infrastructure": 2, "technical": 1, "person": 1}


def test_it_prints_the_status_with_the_search_index_state(sample: dict[str, int]) -> None:
    out = io.StringIO()
    call_command("status", stdout=out)
    text = out.getvalue()
    assert "total: 4" in text and "  infrastructure" in text
    assert "search_index:\n  building: False\n  unindexed_writes: 4" in text


def test_it_lists_the_most_recent_memories_first(sample: dict[str, int]) -> None:
    recent = selectors.recent(count=2)
    assert [m["id"] for m in recent] == [sample["backup"], sample["tea"]]


def test_it_summarises_gain_since_a_moment(palace: Palace) -> None:
    from palace.operations.gain import record_usage

    record_usage(operation="find", tool="palace_find", ok=True, exec_ms=3.0, bytes_out=400)
    record_usage(operation="store", tool="palace_store", ok=False, exec_ms=1.0, bytes_out=40)
    summary = gain.gain()
    assert summary["totals"]["calls"] == 2 and summary["totals"]["failed"] == 1
    assert summary["per_operation"]["find"]["tokens_saved"] == 1800 - 100
    assert gain.gain(since="2100-01-01T00:00:00Z")["totals"]["calls"] == 0
    with pytest.raises(InvalidInput):
        gain.gain(since="last week")


def _fill_for_browsing() -> list[int]:
    """Eleven memories in room "palazzo" (five share one second, as a batch does) and two elsewhere."""
    single = [
        services.store(**memory(f"palazzo note {n}", timestamp=f"2026-0{n}-01T00:00:00Z"))["id"] for n in range(1, 7)
    ]
    batch = services.store_batch(
        items=[{"text": f"palazzo batch note {n}", "room": "Palazzo"} for n in range(5)],
        defaults={"hall": "events", "wing": "projects", "category": "technical", "room": "ignored"},
    )
    services.store(**memory("another room", room="blog"))
    services.store(**memory("another wing", wing="work", room="moods", timestamp="2026-03-15T00:00:00Z"))
    shared_second = sorted((item["memory"]["id"] for item in batch["items"]), reverse=True)
    return shared_second + single[::-1]  # the batch is stamped now, after the dated ones


def _browse_all(limit: int, **filters: Any) -> list[int]:
    seen: list[int] = []
    cursor = None
    for _page in range(100):
        page = selectors.browse(limit=limit, cursor=cursor, **filters)
        assert page["count"] == len(page["memories"]) <= limit
        seen += [item["id"] for item in page["memories"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
        assert page["count"] == limit  # only a full page has a next one
    raise AssertionError("browse never ended")


def test_it_browses_a_room_newest_first_page_by_page_on_both_stores(any_palace: Palace) -> None:
    expected = _fill_for_browsing()
    for limit in (1, 2, 3, 4, 5, 6, 10, 11, 12, 100):
        assert _browse_all(limit, room="palazzo") == expected, f"limit {limit}"
    first = selectors.browse(room="PALAZZO ", limit=2)
    assert [item["id"] for item in first["memories"]] == expected[:2]
    assert first["memories"][0]["room"] == "palazzo" and "score" not in first["memories"][0]


def test_it_browses_with_every_filter_and_hides_superseded_unless_asked(any_palace: Palace) -> None:
    expected = _fill_for_browsing()
    assert _browse_all(4, room="palazzo", hall="events") == expected[:5]
    assert _browse_all(3, wing="work") == [selectors.browse(wing="work")["memories"][0]["id"]]
    spring = _browse_all(2, room="palazzo", since="2026-03-01T00:00:00Z", until="2026-05-01T00:00:00Z")
    assert spring == expected[6:9]  # May, April, March: both bounds inclusive
    old = expected[-1]
    services.supersede(supersedes=[old], reason="corrected", text="palazzo note 1, corrected")
    current = _browse_all(50, room="palazzo")
    assert old not in current and len(current) == len(expected)
    assert old in _browse_all(50, room="palazzo", include_superseded=True)
    assert len(_browse_all(7)) == 13  # everything current, across rooms


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "garbage",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00Z/12",
        "2026-13-01T00:00:00Z/1000000000",
        "2026-01-01T00:00:00Z/１０００００００００",
        1_000_000_000,
        ["x"],
        "x" * 100,
    ],
)
def test_it_refuses_a_cursor_it_did_not_issue(palace: Palace, cursor: Any) -> None:
    if cursor == "":
        assert selectors.browse(cursor=cursor)["next_cursor"] is None  # empty = from the start
        return
    with pytest.raises(InvalidInput) as caught:
        selectors.browse(cursor=cursor)
    assert "next_cursor" in caught.value.errors["cursor"][0]


def test_it_refuses_a_browse_limit_beyond_100(palace: Palace) -> None:
    with pytest.raises(InvalidInput) as caught:
        selectors.browse(limit=101)
    assert "between 1 and 100" in str(caught.value)
    assert selectors.browse(limit=100)["memories"] == []


def test_it_matches_rooms_whatever_their_case_and_spacing_on_both_stores(any_palace: Palace) -> None:
    first = services.store(**memory("The palazzo repo lives on the NAS", room="Palazzo"))
    second = services.store(**memory("palazzo uses Django", room="  palazzo\t"))
    third = services.store(**memory("Palazzo dev notes", room="PALAZZO   Dev"))
    assert (first["room"], second["room"], third["room"]) == ("palazzo", "palazzo", "palazzo dev")
    assert palace_status.status()["rooms"] == {"palazzo": 2, "palazzo dev": 1}
    hits = selectors.find(query="palazzo", room="PaLaZzO", limit=10)["results"]
    assert sorted(hit["id"] for hit in hits) == sorted([first["id"], second["id"]])
    assert [m["id"] for m in selectors.browse(room=" palazzo  DEV ")["memories"]] == [third["id"]]


def test_it_bounds_the_wake_up_context_to_2000_tokens(palace: Palace) -> None:
    rooms = [f"a rather long room name number {n:03d} for the wake-up budget" for n in range(120)]
    services.store_batch(items=[memory(f"short memory in {room}", room=room) for room in rooms])
    long_texts = [f"{n} " + "verbatim words of a long memory " * 200 for n in range(12)]
    stored = [
        services.store(**memory(text, timestamp=f"2030-01-{n + 1:02d}T00:00:00Z")) for n, text in enumerate(long_texts)
    ]
    context = palace_status.wake_up(count=10)
    size = len(json.dumps(context, ensure_ascii=False))
    assert size <= palace_status.WAKE_UP_MAX_CHARS, size
    assert context["status"]["room_count"] == 121 and 0 < len(context["status"]["rooms"]) <= 30
    recent = context["recent"]
    assert recent and [item["id"] for item in recent] == [item["id"] for item in stored[::-1][: len(recent)]]
    assert all(item["truncated"] and len(item["text"]) == 400 for item in recent)
    assert recent[0]["text"] == long_texts[-1][:400] and recent[0]["room"] == "palazzo"
    small = palace_status.wake_up(count=2, max_chars=100_000)
    assert len(small["recent"]) == 2


@given(
    limit=st.integers(min_value=1, max_value=MAX_FIND_LIMIT),
    half_life=st.sampled_from([0.0, 0.5, 30.0]),
    legs=st.sampled_from(["hybrid", "dense", "keyword"]),
)
def test_it_applies_the_prefetch_depth_once(limit: int, half_life: float, legs: str) -> None:
    vector = np.ones(4, dtype=np.float32)
    plan = retrieval.SearchPlan(
        dense_query=None if legs == "keyword" else vector, keyword_query=None if legs == "dense" else "query"
    )
    asked = selectors.find_query(plan, memory_filter=MemoryFilter(), limit=limit, half_life=half_life)
    # Each leg hands the fusion max(4 x limit, 40) candidates (docs/architecture.md), not 4x the fused fetch.
    assert asked.leg_depth == max(4 * limit, 40)
    if legs == "hybrid":  # session context looks at every fused candidate
        assert asked.limit == asked.leg_depth
    else:  # one leg: the limit, or up to 4x it (at most 80) to re-rank by recency
        expected = max(min(4 * limit, 80), limit) if half_life > 0 else limit
        assert asked.limit == expected
    assert asked.fusion == retrieval.FUSION
