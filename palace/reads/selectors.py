"""Read operations of the palace."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from palace.engine.duplicates import existing_duplicates
from palace.engine.embedding import chunk_spans
from palace.engine.points import embed_deferred
from palace.engine.runtime import Palace, get_palace
from palace.errors import InvalidInput
from palace.governance import audit, redaction, scope
from palace.models import JournalEntry
from palace.reads import passages, retrieval
from palace.schema.forms import BrowseForm, CheckDuplicateForm, FindForm, RecallForm, browse_cursor
from palace.schema.memories import public_memory
from palace.schema.timefmt import parse_rfc3339, utc_now
from palace.store.base import MemoryFilter, StoredPoint
from palace.store.query import SearchQuery, prefetch_depth

_NO_TIME = datetime.min.replace(tzinfo=UTC)
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
    max_chars: Any = None,
    all_fields: Any = None,
    ranking: str = HYBRID,
    whole: bool = False,
    actor: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Hybrid (dense + BM25) search with filters, recency and superseded hiding; passages within max_chars.

    Each result is lean (LEAN_KEYS, the filing every result shares said once in `shared`) unless
    all_fields. whole=True answers whole memories with every field and no budget (ranking benchmarks,
    the admin).
    """
    raw = {
        "query": query,
        "limit": limit,
        "max_chars": max_chars,
        "all_fields": all_fields,
        "wing": wing,
        "category": category,
        "room": room,
        "hall": hall,
        "since": since,
        "until": until,
        "recency_half_life_days": recency_half_life_days,
        "include_superseded": include_superseded,
    }
    try:
        fields = FindForm({key: value for key, value in raw.items() if value is not None}).parsed()
    except InvalidInput as exc:
        if exc.errors.get("query") == ["is required"]:  # the agent wanted a listing
            hint = ["is required; to list memories without one, use palace_browse"]
            raise InvalidInput(exc.errors | {"query": hint}) from None
        raise
    palace, plan, results, envelope = _search(fields, ranking=ranking, wings=wings)
    if whole:
        answer = envelope | {"results": results}
    else:
        budget, envelope, results = _prepared(fields, results, envelope)
        answer = passages.fit(
            query=fields["query"], hits=passage_hits(palace, plan, results), envelope=envelope, max_chars=budget
        )
    audit.record_read(
        operation="find",
        actor=actor,
        query=fields["query"],
        filters=_audited_filters(fields) | _passages_read(answer["results"]),
        result_ids=[memory["id"] for memory in answer["results"]],
        degraded=answer["degraded"],
    )
    return answer


# What each result of a find keeps (unless all_fields): enough to cite it (id, where, when), to weigh it
# and to read on (its span, added by passages). The filing every result shares is said once.
LEAN_KEYS = ("id", "text", "score", "timestamp")
SHARED_KEYS = ("wing", "room", "hall", "category", "added_by")
# Kept whenever set: a reader must not miss that a memory was corrected or expires.
HISTORY_KEYS = ("valid_from", "valid_until", "superseded_by", "superseded_reason", "supersedes", "expires_at")


def lean(results: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The filing all results share (said once) and each result with LEAN_KEYS, its own filing and history."""
    shared = {
        key: results[0][key]
        for key in SHARED_KEYS
        if len(results) > 1 and results[0].get(key) is not None and all(m.get(key) == results[0][key] for m in results)
    }
    kept = (*LEAN_KEYS, *(key for key in SHARED_KEYS if key not in shared), *HISTORY_KEYS)
    return shared, [{key: memory.get(key) for key in kept} for memory in results]


def _search(
    fields: dict[str, Any], *, ranking: str, wings: scope.Wings
) -> tuple[Palace, retrieval.SearchPlan, list[dict[str, Any]], dict[str, Any]]:
    """The page of whole memories a find answers from, best first, and the answer's envelope."""
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
    scored = []
    for hit in plan.rerank(hits):
        score = plan.normalise(hit.score or 0.0)
        if half_life > 0:
            score *= math.pow(0.5, _age_days(hit.payload.get("timestamp"), now) / half_life)
        scored.append((score, hit))
    if half_life > 0:
        scored.sort(key=lambda pair: (pair[0], pair[1].id), reverse=True)  # ties: newer first, as with_session_context
    # The search returns more hits than asked for (session context and recency rank among them):
    # only the page is shaped for the answer.
    results = [public_memory(hit.id, hit.payload, score=score) for score, hit in scored[:limit_value]]
    envelope: dict[str, Any] = {
        "count": len(results),
        "degraded": plan.degraded_reason is not None,
        "degraded_reason": plan.degraded_reason,
    }
    return palace, plan, results, envelope


def _prepared(
    fields: dict[str, Any], results: list[dict[str, Any]], envelope: dict[str, Any]
) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The budget of a find's answer, its envelope and its results as they are cut: lean unless all_fields."""
    budget = fields["max_chars"] or passages.default_budget([str(memory["text"] or "") for memory in results])
    if fields["all_fields"]:
        return budget, envelope, results
    shared, results = lean(results)
    return budget, envelope | {"shared": shared or None}, results


def find_page(
    *, query: Any, room: Any = None, limit: Any = None, max_chars: Any = None, ranking: str = HYBRID
) -> tuple[int, dict[str, Any], list[passages.Hit]]:
    """Find's budget, envelope and page as hits to cut, before they are cut (benchmarks refit them)."""
    raw = {"query": query, "room": room, "limit": limit, "max_chars": max_chars}
    fields = FindForm({key: value for key, value in raw.items() if value is not None}).parsed()
    palace, plan, results, envelope = _search(fields, ranking=ranking, wings=None)
    budget, envelope, results = _prepared(fields, results, envelope)
    return budget, envelope, passage_hits(palace, plan, results)


def passage_hits(palace: Palace, plan: retrieval.SearchPlan, results: list[dict[str, Any]]) -> list[passages.Hit]:
    """The page's memories with the query cosine of each of their dense chunks, where they have them."""
    query = plan.dense_query
    # Short memories need no cutting, but they compete with long ones' passages for the budget, on one scale.
    cut = any(len(memory.get("text") or "") > passages.WHOLE_CHARS for memory in results)
    vectors = palace.store.chunk_vectors([memory["id"] for memory in results]) if query is not None and cut else {}
    hits = []
    for rank, memory in enumerate(results):
        chunks: tuple[tuple[int, int, float], ...] = ()
        matrix = vectors.get(memory["id"])
        if matrix is not None and query is not None:
            spans = chunk_spans(memory.get("text") or "")
            if len(spans) == len(matrix):  # chunked as this version chunks (else words and rank alone)
                cosines = matrix @ query
                chunks = tuple((start, end, float(cosine)) for (start, end), cosine in zip(spans, cosines))
        hits.append(passages.Hit(rank=rank, memory=memory, chunks=chunks))
    return hits


def _passages_read(results: list[dict[str, Any]]) -> dict[str, Any]:
    """For the audit: which [start, end) ranges of each shortened memory the answer held."""
    read = {
        str(memory["id"]): [list(span) for span in memory["passages"]] for memory in results if memory.get("passages")
    }
    return {"passages": read} if read else {}


def _stamp(point: StoredPoint) -> datetime:
    try:
        return parse_rfc3339(point.payload.get("timestamp", ""))
    except (ValueError, TypeError):
        return _NO_TIME


def _newest_first(points: list[StoredPoint]) -> list[StoredPoint]:
    return sorted(points, key=lambda point: (_stamp(point), point.id), reverse=True)


def _same_second(palace: Palace, memory_filter: MemoryFilter, moment: datetime) -> list[StoredPoint]:
    """Every matching memory stamped in this second (a batch shares one), newest id first."""
    if (memory_filter.since and moment < memory_filter.since) or (memory_filter.until and moment > memory_filter.until):
        return []
    second = dataclasses.replace(memory_filter, since=moment, until=moment)
    return sorted(palace.store.scroll(memory_filter=second), key=lambda point: point.id, reverse=True)


def browse(
    *,
    limit: Any = None,
    cursor: Any = None,
    wing: Any = None,
    category: Any = None,
    room: Any = None,
    hall: Any = None,
    since: Any = None,
    until: Any = None,
    include_superseded: Any = None,
    max_chars: Any = None,
    actor: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Memories newest first (timestamp, then id) without a query, a page at a time; next_cursor continues."""
    raw = {
        "limit": limit,
        "cursor": cursor,
        "wing": wing,
        "category": category,
        "room": room,
        "hall": hall,
        "since": since,
        "until": until,
        "include_superseded": include_superseded,
        "max_chars": max_chars,
    }
    fields = BrowseForm({key: value for key, value in raw.items() if value is not None}).parsed()
    palace = get_palace()
    memory_filter = MemoryFilter(
        wing=fields["wing"] or None,
        category=fields["category"] or None,
        room=fields["room"] or None,
        hall=fields["hall"] or None,
        since=fields["since"],
        until=fields["until"],
        include_superseded=fields["include_superseded"],
        current_at=utc_now(),
        expired=False,
        wings=wings,
    )
    limit_value: int = fields["limit"]
    page: list[StoredPoint] = []
    more = False
    if fields["cursor"] is not None:
        # Resume inside the cursor's second (ids below the last one shown), then strictly before it.
        moment, last_id = fields["cursor"]
        rest = [point for point in _same_second(palace, memory_filter, moment) if point.id < last_id]
        page, more = rest[:limit_value], len(rest) > limit_value
        before = moment - timedelta(seconds=1)
        if memory_filter.until is None or before < memory_filter.until:
            memory_filter = dataclasses.replace(memory_filter, until=before)
    need = limit_value - len(page)
    if not more:
        older = _newest_first(palace.store.recent(memory_filter=memory_filter, limit=need + 1))
        if len(older) > need:
            more = True
            if need:
                # order_by cuts a run of equal timestamps anywhere; take that second whole, by id.
                boundary = _stamp(older[need - 1])
                newer = [point for point in older if _stamp(point) > boundary]
                older = newer + _same_second(palace, memory_filter, boundary)
        page += older[:need]
    listed = passages.fit(
        query=None,
        hits=[
            passages.Hit(rank=rank, memory=public_memory(point.id, point.payload)) for rank, point in enumerate(page)
        ],
        envelope={"next_cursor": None},
        max_chars=fields["max_chars"],
        key="memories",
    )
    memories = listed.pop("memories")
    audit.record_read(
        operation="browse",
        actor=actor,
        filters=_audited_filters(fields) | _passages_read(memories),
        result_ids=[m["id"] for m in memories],
    )
    more = more or len(memories) < len(page)  # the budget moved the page's tail to the next page
    last = page[len(memories) - 1] if memories else None
    listed["next_cursor"] = browse_cursor(_stamp(last), last.id) if more and last is not None else None
    return {"memories": memories} | listed


def _audited_filters(fields: dict[str, Any]) -> dict[str, Any]:
    filters = {key: fields.get(key) for key in ("wing", "category", "room", "hall", "include_superseded", "limit")}
    for key in ("since", "until"):
        if fields.get(key):
            filters[key] = fields[key].isoformat()
    if fields.get("recency_half_life_days"):
        filters["recency_half_life_days"] = fields["recency_half_life_days"]
    return filters


def recall(
    *,
    ids: Any,
    start: Any = None,
    end: Any = None,
    actor: str = "",
    operation: str = "recall",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Memories by id (superseded ones included, with their temporal fields); unknown ids listed as missing.

    With start and/or end (one id only), the memory's text is exactly its [start, end) range, in characters.
    """
    raw = {"ids": ids, "start": start, "end": end}
    fields = RecallForm({key: value for key, value in raw.items() if value is not None}).parsed()
    palace = get_palace()
    points = scope.retrieve(palace.store, fields["ids"], wings)
    found = {point.id for point in points}
    memories = []
    now = utc_now()
    for point in points:
        memory = public_memory(point.id, point.payload) | {"expired": _expired(point.payload, now)}
        if fields["ranged"]:
            memory |= _range_of(memory["text"] or "", fields["start"], fields["end"])
        memories.append(memory)
    filters: dict[str, Any] = {"ids": fields["ids"]}
    if fields["ranged"] and memories:
        filters["passages"] = {str(memory["id"]): [list(span) for span in memory["passages"]] for memory in memories}
    audit.record_read(operation=operation, actor=actor, filters=filters, result_ids=[point.id for point in points])
    return {"memories": memories, "missing": [memory_id for memory_id in fields["ids"] if memory_id not in found]}


def _range_of(text: str, start: int | None, end: int | None) -> dict[str, Any]:
    """The memory's text cut to [start, end) (end defaults to its length), with the range and the length."""
    length = len(text)
    first = start or 0
    last = length if end is None else end
    if first > length:
        raise InvalidInput.single("start", f"must be at most the memory's length ({length})")
    if last > length:
        raise InvalidInput.single("end", f"must be at most the memory's length ({length})")
    if last <= first:
        raise InvalidInput.single("end", f"must be greater than start ({first})")
    return {"text": text[first:last], "length": length, "passages": [[first, last]]}


def _expired(payload: dict[str, Any], now: datetime) -> bool:
    try:
        return bool(payload.get("expires_at")) and parse_rfc3339(payload["expires_at"]) <= now
    except ValueError:
        return False


def check_duplicate(*, text: Any, actor: str = "", wings: scope.Wings = None) -> dict[str, Any]:
    """What palace_store would do with a text: the current memory it would return, else the closest one.

    The text is redacted first, as a store redacts it, so the answer is the store's own: duplicate is
    true exactly when a current memory (in the caller's wings) holds the redacted text.
    """
    fields = CheckDuplicateForm({"text": text}).parsed()
    stored_text, redactions = redaction.current().scan(fields["text"])
    palace = get_palace()
    same = existing_duplicates(palace, [stored_text], wings).get(stored_text)
    if same is not None:
        closest: dict[str, Any] | None = same
        result_ids = [same["id"]]
    else:
        vector = palace.embedder.documents([stored_text])[0][0]
        embed_deferred(palace)  # a memory stored a moment ago is compared by meaning too
        hits = palace.store.search(
            SearchQuery(
                dense_query=vector,
                memory_filter=MemoryFilter(include_superseded=False, current_at=utc_now(), expired=False, wings=wings),
                limit=1,
            )
        )
        closest = (
            public_memory(hits[0].id, hits[0].payload, score=retrieval.as_cosine(hits[0].score or 0.0))
            if hits
            else None
        )
        result_ids = [hit.id for hit in hits]
    audit.record_read(operation="check_duplicate", actor=actor, query=stored_text, result_ids=result_ids)
    return {"duplicate": same is not None, "closest": closest, "redactions": dict(redactions)}


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


def import_memory_ids(*, import_id: str) -> list[int]:
    """Ids of every memory (superseded ones included) an import stored, ascending."""
    memory_filter = MemoryFilter(import_id=import_id, include_superseded=True)
    return [point.id for point in get_palace().store.scroll(memory_filter=memory_filter)]


def import_was_journaled(*, import_id: str) -> bool:
    """Whether an import of that id stored memories in this palace (its journal says so, undone or not)."""
    return JournalEntry.objects.filter(reason__in=(f"import {import_id}", f"undo import {import_id}")).exists()


def held_texts(*, texts: list[str]) -> dict[str, int]:
    """The texts a store would find already held (redacted first, as a store redacts), with that memory's id."""
    redactor = redaction.current()
    stored = {text: redactor.scan(text)[0] for text in texts}
    found = existing_duplicates(get_palace(), list(dict.fromkeys(stored.values())))
    return {text: found[held]["id"] for text, held in stored.items() if held in found}
