"""Read operations of the palace."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Any

from palace import audit, retrieval, scope
from palace.feedstatus import feeding_status
from palace.forms import CheckDuplicateForm, FindForm, GainForm, RecallForm
from palace.gain import gain_summary
from palace.memories import public_memory
from palace.runtime import get_palace
from palace.store.base import MemoryFilter
from palace.store.query import SearchQuery, prefetch_depth
from palace.timefmt import parse_rfc3339, utc_now

DUPLICATE_THRESHOLD = 0.95
RECENCY_FETCH_FACTOR = 4
RECENCY_FETCH_CAP = 80
HYBRID = retrieval.HYBRID


def _age_days(timestamp: Any, now: datetime) -> float:
    try:
        return max((now - parse_rfc3339(timestamp)).total_seconds() / 86400.0, 0.0)
    except (ValueError, TypeError):
        return 0.0


def find_query(plan: retrieval.SearchPlan, *, memory_filter: MemoryFilter, limit: int, half_life: float) -> SearchQuery:
    """The store search behind find: its legs, the depth each hands the fusion (once) and how many come back."""
    fetch = min(limit * RECENCY_FETCH_FACTOR, RECENCY_FETCH_CAP) if half_life > 0 else limit
    fetch = max(fetch, limit)
    # Each leg hands the fusion prefetch_depth(limit) candidates, decided here once; session context
    # needs the session-mates of the hits among them, so a fused search returns all of them.
    depth = prefetch_depth(limit)
    if plan.fused:
        fetch = max(fetch, depth)
    return SearchQuery(
        dense_query=plan.dense_query,
        keyword_query=plan.keyword_query,
        memory_filter=memory_filter,
        limit=fetch,
        depth=depth,
        fusion=retrieval.FUSION,
    )


def find(
    *,
    query: Any,
    limit: Any = None,
    wing: Any = None,
    category: Any = None,
    room: Any = None,
    hall: Any = None,
    since: Any = None,
    until: Any = None,
    recency_half_life_days: Any = None,
    include_superseded: Any = None,
    ranking: str = HYBRID,
    actor: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Hybrid (dense + BM25) search with filters, optional true half-life recency and superseded hiding."""
    raw = {
        "query": query,
        "limit": limit,
        "wing": wing,
        "category": category,
        "room": room,
        "hall": hall,
        "since": since,
        "until": until,
        "recency_half_life_days": recency_half_life_days,
        "include_superseded": include_superseded,
    }
    fields = FindForm({key: value for key, value in raw.items() if value is not None}).parsed()
    palace = get_palace()
    now = utc_now()
    memory_filter = MemoryFilter(
        wing=fields["wing"] or None,
        category=fields["category"] or None,
        room=fields["room"] or None,
        hall=fields["hall"] or None,
        since=fields["since"],
        until=fields["until"],
        include_superseded=fields["include_superseded"],
        current_at=now,
        expired=False,
        wings=wings,
    )
    limit_value: int = fields["limit"]
    half_life: float = fields["recency_half_life_days"] or 0.0
    plan = retrieval.plan_search(palace, query=fields["query"], ranking=ranking)
    hits = palace.store.search(find_query(plan, memory_filter=memory_filter, limit=limit_value, half_life=half_life))
    hits = plan.rerank(hits)
    results = []
    for hit in hits:
        score = plan.normalise(hit.score or 0.0)
        if half_life > 0:
            score *= math.pow(0.5, _age_days(hit.payload.get("timestamp"), now) / half_life)
        results.append(public_memory(hit.id, hit.payload, score=score))
    if half_life > 0:
        results.sort(key=lambda memory: memory["score"], reverse=True)
    answer: dict[str, Any] = {
        "results": results[:limit_value],
        "count": min(len(results), limit_value),
        "degraded": plan.degraded_reason is not None,
        "degraded_reason": plan.degraded_reason,
    }
    audit.record_read(
        operation="find",
        actor=actor,
        query=fields["query"],
        filters=_audited_filters(fields),
        result_ids=[memory["id"] for memory in answer["results"]],
        degraded=answer["degraded"],
    )
    return answer


def _audited_filters(fields: dict[str, Any]) -> dict[str, Any]:
    filters = {key: fields.get(key) for key in ("wing", "category", "room", "hall", "include_superseded", "limit")}
    for key in ("since", "until"):
        if fields.get(key):
            filters[key] = fields[key].isoformat()
    if fields.get("recency_half_life_days"):
        filters["recency_half_life_days"] = fields["recency_half_life_days"]
    return filters


def recall(*, ids: Any, actor: str = "", operation: str = "recall", wings: scope.Wings = None) -> dict[str, Any]:
    """Memories by id (superseded ones included, with their temporal fields); unknown ids listed as missing."""
    fields = RecallForm({"ids": ids}).parsed()
    palace = get_palace()
    points = scope.retrieve(palace.store, fields["ids"], wings)
    found = {point.id for point in points}
    audit.record_read(
        operation=operation, actor=actor, filters={"ids": fields["ids"]}, result_ids=[point.id for point in points]
    )
    now = utc_now()
    return {
        "memories": [
            public_memory(point.id, point.payload) | {"expired": _expired(point.payload, now)} for point in points
        ],
        "missing": [memory_id for memory_id in fields["ids"] if memory_id not in found],
    }


def _expired(payload: dict[str, Any], now: datetime) -> bool:
    try:
        return bool(payload.get("expires_at")) and parse_rfc3339(payload["expires_at"]) <= now
    except ValueError:
        return False


def check_duplicate(*, text: Any, actor: str = "", wings: scope.Wings = None) -> dict[str, Any]:
    """The closest current memory and whether its cosine similarity is at or above 0.95."""
    fields = CheckDuplicateForm({"text": text}).parsed()
    palace = get_palace()
    vector = palace.embedder.documents([fields["text"]])[0][0]
    hits = palace.store.search(
        SearchQuery(
            dense_query=vector,
            memory_filter=MemoryFilter(include_superseded=False, current_at=utc_now(), expired=False, wings=wings),
            limit=1,
        )
    )
    closest = public_memory(hits[0].id, hits[0].payload, score=hits[0].score) if hits else None
    score = hits[0].score if hits else None
    audit.record_read(
        operation="check_duplicate", actor=actor, query=fields["text"], result_ids=[hit.id for hit in hits]
    )
    return {
        "is_duplicate": bool(score is not None and score >= DUPLICATE_THRESHOLD),
        "same_text": bool(closest and closest["text"] == fields["text"]),
        "threshold": DUPLICATE_THRESHOLD,
        "closest": closest,
    }


def status(*, wings: scope.Wings = None) -> dict[str, Any]:
    """Totals, counts by wing, hall and category (of a scoped caller's wings only), and the search index state."""
    palace = get_palace()
    everything = MemoryFilter(wings=wings)
    current = MemoryFilter(include_superseded=False, current_at=utc_now(), wings=wings)
    return {
        "collection": palace.collection,
        "embedding_model": palace.embedder.model_name,
        "total": palace.store.count(memory_filter=everything),
        "current": palace.store.count(memory_filter=current),
        "wings": palace.store.facet(key="wing", memory_filter=everything),
        "halls": palace.store.facet(key="hall", memory_filter=everything),
        "categories": palace.store.facet(key="category", memory_filter=everything),
        "search_index": dataclasses.asdict(palace.store.index_state()),
        "journal": journal_state(),
        "feeding": feeding_status(),
    }


def journal_state() -> dict[str, Any]:
    """Pending and failed journal entries, with the newest failures' reasons."""
    from palace import journal

    return journal.state()


def taxonomy(*, wings: scope.Wings = None) -> dict[str, Any]:
    """Counts by wing, room, hall and category (of a scoped caller's wings only)."""
    palace = get_palace()
    everything = MemoryFilter(wings=wings)
    return {
        plural: palace.store.facet(key=key, memory_filter=everything)
        for key, plural in (("wing", "wings"), ("room", "rooms"), ("hall", "halls"), ("category", "categories"))
    }


def recent(
    *, count: int, actor: str = "", operation: str = "recent", wings: scope.Wings = None
) -> list[dict[str, Any]]:
    """The newest current memories, newest first (the wake-up context and the admin overview; audited)."""
    palace = get_palace()
    points = palace.store.recent(
        memory_filter=MemoryFilter(include_superseded=False, current_at=utc_now(), expired=False, wings=wings),
        limit=count,
    )
    audit.record_read(
        operation=operation, actor=actor, filters={"count": count}, result_ids=[point.id for point in points]
    )
    return [public_memory(point.id, point.payload) for point in points]


def gain(*, since: Any = None) -> dict[str, Any]:
    """Token savings, optionally since a moment."""
    fields = GainForm({"since": since} if since is not None else {}).parsed()
    return gain_summary(since=fields["since"])
