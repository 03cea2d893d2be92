"""The read selectors against the embedded store and the real model."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command
from hypothesis import given
from hypothesis import strategies as st

from palace import retrieval, selectors, services
from palace.errors import InvalidInput
from palace.forms import MAX_FIND_LIMIT
from palace.runtime import Palace
from palace.store.base import MemoryFilter
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
    from palace.timefmt import parse_rfc3339, utc_now

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
    assert same["is_duplicate"] is True and same["closest"]["id"] == sample["tea"]
    other = selectors.check_duplicate(text="Kubernetes upgrade broke the ingress controller")
    assert other["is_duplicate"] is False and other["closest"] is not None


def test_it_reports_status_and_taxonomy(sample: dict[str, int]) -> None:
    status = selectors.status()
    assert status["total"] == 4
    assert status["wings"] == {"infrastructure": 2, "projects": 1, "personal": 1}
    assert status["halls"]["facts"] == 1
    taxonomy = selectors.taxonomy()
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
    from palace.gain import record_usage

    record_usage(operation="find", tool="palace_find", ok=True, exec_ms=3.0, bytes_out=400)
    record_usage(operation="store", tool="palace_store", ok=False, exec_ms=1.0, bytes_out=40)
    summary = selectors.gain()
    assert summary["totals"]["calls"] == 2 and summary["totals"]["failed"] == 1
    assert summary["per_operation"]["find"]["tokens_saved"] == 1800 - 100
    assert selectors.gain(since="2100-01-01T00:00:00Z")["totals"]["calls"] == 0
    with pytest.raises(InvalidInput):
        selectors.gain(since="last week")


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
    # Each leg hands the fusion max(4 x limit, 40) candidates (README, "find"), not 4x the fused fetch.
    assert asked.leg_depth == max(4 * limit, 40)
    if legs == "hybrid":  # session context looks at every fused candidate
        assert asked.limit == asked.leg_depth
    else:  # one leg: the limit, or up to 4x it (at most 80) to re-rank by recency
        expected = max(min(4 * limit, 80), limit) if half_life > 0 else limit
        assert asked.limit == expected
    assert asked.fusion == retrieval.FUSION
