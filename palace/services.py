"""Write operations of the palace; each one is journaled before the store is touched."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import transaction

from palace import journal, metrics, redaction, scope

# The journal applier and point building live in their own modules (palace.runtime replays the journal
# when it opens the palace, and find embeds deferred memories: neither may import the write API); the
# write functions below keep the names they had here.
from palace.applier import journal_and_apply as _journal_and_apply
from palace.errors import (
    ConfirmationRequired,
    ExpectedCountMismatch,
    InvalidInput,
)
from palace.forms import (
    MAX_BATCH_ITEMS,
    MAX_FILTER_DELETE,
    BatchDefaultsForm,
    DeleteByFilterForm,
    DeleteForm,
    MemoryForm,
    SupersedeForm,
    strict_boolean,
    writer_stamp,
)
from palace.ids import reserve_existing_ids
from palace.journal import preview
from palace.locks import write_lock as _write_lock
from palace.memories import BATCH_DEFAULT_KEYS, FILTER_KEYS, INHERITED_KEYS, SCHEMA_KEYS, public_memory, text_hash
from palace.models import JournalEntry
from palace.points import build_points as _points
from palace.points import embed_or_defer as _embed_or_defer
from palace.runtime import Palace, get_palace
from palace.store.base import MemoryFilter, StoredPoint
from palace.timefmt import format_rfc3339, utc_now

logger = logging.getLogger(__name__)


def _redact(fields: dict[str, Any]) -> dict[str, int]:
    """Redact a validated record's free text in place, before anything else sees it; counts per rule."""
    redactor = redaction.current()
    counts = redactor.record(fields)
    for rule, count in counts.items():
        metrics.REDACTIONS.labels(rule, redactor.mode).inc(count)
    return dict(counts)


def _memory_record(fields: dict[str, Any], *, memory_id: int, timestamp: str, added_by: str) -> dict[str, Any]:
    record = {key: fields.get(key) or None for key in SCHEMA_KEYS}
    record["text"] = fields["text"]
    record.update(id=memory_id, timestamp=timestamp, added_by=writer_stamp(added_by) or None)
    record["expires_at"] = format_rfc3339(fields["expires_at"]) if fields.get("expires_at") else None
    return record


def _existing_duplicates(palace: Palace, texts: Sequence[str], wings: scope.Wings = None) -> dict[str, dict[str, Any]]:
    """Current memories whose text equals one of texts, by hash.

    The rule is cosine >= 0.95 AND the same text; equal texts embed to equal vectors under
    one model (the collection refuses any other), so an exact-text match is the whole test.
    """
    hashes = tuple(sorted({text_hash(text) for text in texts}))
    if not hashes:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for point in palace.store.scroll(
        memory_filter=MemoryFilter(
            text_hashes=hashes, include_superseded=False, current_at=utc_now(), expired=False, wings=wings
        )
    ):
        text = point.payload.get("text", "")
        if text not in found:
            found[text] = public_memory(point.id, point.payload, score=1.0)
    return found


def store(
    *,
    text: Any,
    category: Any,
    wing: Any,
    room: Any,
    hall: Any,
    session: Any = None,
    source_file: Any = None,
    timestamp: Any = None,
    expires_at: Any = None,
    ttl_days: Any = None,
    added_by: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Store one memory, or return the existing current memory with the same text."""
    result = store_batch(
        items=[
            {
                "text": text,
                "category": category,
                "wing": wing,
                "room": room,
                "hall": hall,
                "session": session,
                "source_file": source_file,
                "timestamp": timestamp,
                "expires_at": expires_at,
                "ttl_days": ttl_days,
            }
        ],
        added_by=added_by,
        wings=wings,
        _single=True,
    )
    item = result["items"][0]
    return item["memory"] | {"duplicate": item["status"] != "stored", "redactions": item["redactions"]}


def store_batch(
    *,
    items: Any,
    defaults: Any = None,
    skip_duplicates: bool = False,
    added_by: str = "",
    wings: scope.Wings = None,
    _single: bool = False,
) -> dict[str, Any]:
    """Store 1-256 memories with one embedding pass and one upsert; per-item outcomes and counts.

    defaults gives category, wing, room, hall, session or source_file to every item that leaves it out.
    """
    skip_duplicates = strict_boolean("skip_duplicates", skip_duplicates)
    shared = _batch_defaults(defaults)
    if not isinstance(items, list):
        raise InvalidInput.single("items", "must be a list of memory objects")
    if not items:
        raise InvalidInput.single("items", "is empty: send 1 to 256 memories")
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidInput.single("items", f"has {len(items)} memories; the maximum is {MAX_BATCH_ITEMS} per call")
    cleaned: list[dict[str, Any] | None] = []
    outcomes: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        try:
            fields = MemoryForm(
                shared | {k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item
            ).parsed()
            scope.refuse_outside(fields["wing"], wings)
        except InvalidInput as exc:
            if _single:
                raise
            cleaned.append(None)
            error = redaction.scrub_message(str(exc))
            outcomes.append({"index": index, "status": "failed", "error": error, "redactions": {}})
            continue
        found = _redact(fields)
        cleaned.append(fields)
        outcomes.append({"index": index, "redactions": found})
    palace = get_palace()
    # Embed before taking the write lock so concurrent writers and searches do not queue behind a
    # whole embedding pass; the duplicate check is repeated under the lock, where it decides.
    candidates = _fresh_texts(palace, cleaned, wings)
    prepared = dict(zip(candidates, _embed_or_defer(palace, candidates))) if candidates else {}
    with _write_lock:
        return _store_validated(
            palace,
            cleaned,
            outcomes,
            prepared=prepared,
            skip_duplicates=skip_duplicates,
            added_by=added_by,
            wings=wings,
        )


def _batch_defaults(defaults: Any) -> dict[str, Any]:
    """The validated shared values of a batch (raw, so each item's form reports them the same way)."""
    if defaults is None:
        return {}
    if not isinstance(defaults, dict):
        raise InvalidInput.single("defaults", f"must be an object of {', '.join(BATCH_DEFAULT_KEYS)}")
    try:
        BatchDefaultsForm(defaults).parsed()
    except InvalidInput as exc:
        raise InvalidInput({f"defaults.{key}": messages for key, messages in exc.errors.items()}) from None
    return {key: value for key, value in defaults.items() if value is not None}


def _fresh_texts(palace: Palace, cleaned: list[dict[str, Any] | None], wings: scope.Wings) -> list[str]:
    """Distinct valid texts that no current memory (in the caller's wings) holds yet, in input order."""
    texts = list(dict.fromkeys(fields["text"] for fields in cleaned if fields is not None))
    existing = _existing_duplicates(palace, texts, wings)
    return [text for text in texts if text not in existing]


def _store_validated(
    palace: Palace,
    cleaned: list[dict[str, Any] | None],
    outcomes: list[dict[str, Any]],
    *,
    prepared: dict[str, npt.NDArray[np.float32]],
    skip_duplicates: bool,
    added_by: str,
    wings: scope.Wings = None,
) -> dict[str, Any]:
    valid_texts = [fields["text"] for fields in cleaned if fields is not None]
    existing = _existing_duplicates(palace, valid_texts, wings)
    now = format_rfc3339(utc_now())
    fresh: list[int] = []
    first_in_batch: dict[str, int] = {}
    for index, fields in enumerate(cleaned):
        if fields is None:
            continue
        text = fields["text"]
        if text in existing:
            outcomes[index].update(status="duplicate", memory=existing[text], duplicate_of=existing[text]["id"])
        elif text in first_in_batch:
            outcomes[index].update(status="duplicate", duplicate_of_index=first_in_batch[text])
        else:
            first_in_batch[text] = index
            fresh.append(index)
    if fresh:
        fresh_texts = [cleaned[index]["text"] for index in fresh]  # type: ignore[index]
        # A text can become fresh between the check and the lock only if its memory was deleted meanwhile.
        late = [text for text in fresh_texts if text not in prepared]
        if late:
            prepared = prepared | dict(zip(late, _embed_or_defer(palace, late)))
        vectors = [prepared[text] for text in fresh_texts]

        def build(ids: list[int]) -> dict[str, Any]:
            records = []
            for memory_id, index in zip(ids, fresh):
                fields = cleaned[index]
                assert fields is not None
                stamp = format_rfc3339(fields["timestamp"]) if fields.get("timestamp") else now
                records.append(_memory_record(fields, memory_id=memory_id, timestamp=stamp, added_by=added_by))
            return {"memories": records}

        by_wing = Counter(cleaned[index]["wing"] for index in fresh)  # type: ignore[index]
        entry, _ids = journal.record_with_new_ids(
            operation=JournalEntry.Operation.STORE,
            count=len(fresh),
            build_payload=build,
            added_by=added_by,
            wing=by_wing.most_common(1)[0][0],
        )
        _journal_and_apply(palace, entry, vectors)
        for record, index in zip(entry.payload["memories"], fresh):
            outcomes[index].update(status="stored", memory=public_memory(record["id"], record))
    for outcome in outcomes:
        if "duplicate_of_index" in outcome:
            source = outcomes[outcome.pop("duplicate_of_index")]
            outcome.update(memory=source["memory"], duplicate_of=source["memory"]["id"])
        if outcome["status"] == "duplicate" and skip_duplicates:
            outcome["status"] = "skipped"
    statuses = Counter(outcome["status"] for outcome in outcomes)
    counts = {
        "stored": statuses["stored"],
        "duplicates_returned": statuses["duplicate"],
        "skipped_duplicates": statuses["skipped"],
        "failed": statuses["failed"],
    }
    return {"items": outcomes, "counts": counts, "redactions": _total(outcomes)}


def _total(outcomes: Sequence[dict[str, Any]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for outcome in outcomes:
        total.update(outcome.get("redactions") or {})
    return dict(total)


# How far ahead of the current Unix milliseconds a restored id may be: ids start at the clock and a palace
# allocates one per memory, so an export can run ahead of its clock by its memory count, never by 10**10.
RESTORE_IDS_AHEAD = 10**10


def restore_records(
    *, records: list[dict[str, Any]], skip_duplicates: bool = False, added_by: str = "", wings: scope.Wings = None
) -> list[dict[str, Any]]:
    """Store validated memory records under their own ids and temporal fields (imports, restores).

    A record whose id the palace already holds (or that repeats an earlier record's id) is a duplicate
    of that id; texts are not compared, so a superseded memory and its successor with equal text both
    come back. Journaled as a STORE entry carrying the full records, so rebuild restores them too.
    """
    palace = get_palace()
    for record in records:
        scope.refuse_outside(record["wing"], wings)
    records = [dict(record) for record in records]
    found = [_redact(record) for record in records]
    with _write_lock:
        wanted = {record["id"] for record in records} | {
            record["superseded_by"] for record in records if record.get("superseded_by") is not None
        }
        existing = {point.id: point for point in palace.store.retrieve(sorted(wanted))}
        deleted = _deleted_ids()
        outcomes: list[dict[str, Any]] = []
        fresh: dict[int, dict[str, Any]] = {}
        for index, record in enumerate(records):
            memory_id = record["id"]
            if memory_id in existing and wings is not None and existing[memory_id].payload.get("wing") not in wings:
                # A scoped caller must neither overwrite nor read a memory of another wing.
                error = f"id {memory_id} belongs to a wing outside this token's wings; nothing was written"
                outcomes.append({"index": index, "status": "failed", "error": error, "redactions": {}})
                continue
            problem = _restore_problem(record, records=records, held=existing, deleted=deleted)
            if problem is not None:
                outcomes.append({"index": index, "status": "failed", "error": problem, "redactions": {}})
                continue
            if memory_id in existing:
                memory = public_memory(memory_id, existing[memory_id].payload)
            elif memory_id in fresh:
                memory = public_memory(memory_id, fresh[memory_id])
            else:
                fresh[memory_id] = record
                outcomes.append(
                    {
                        "index": index,
                        "status": "stored",
                        "memory": public_memory(memory_id, record),
                        "redactions": found[index],
                    }
                )
                continue
            status = "skipped" if skip_duplicates else "duplicate"
            outcomes.append(
                {
                    "index": index,
                    "status": status,
                    "memory": memory,
                    "duplicate_of": memory_id,
                    "redactions": found[index],
                }
            )
        if fresh:
            ordered = list(fresh.values())
            vectors = _embed_or_defer(palace, [record["text"] for record in ordered])
            with transaction.atomic():
                reserve_existing_ids(list(fresh))
                entry = journal.record(
                    operation=JournalEntry.Operation.STORE,
                    payload={"memories": ordered},
                    memory_ids=list(fresh),
                    added_by=added_by,
                    reason="restored with explicit ids",
                    wing=Counter(record["wing"] for record in ordered).most_common(1)[0][0],
                )
            _journal_and_apply(palace, entry, vectors)
    return outcomes


def _deleted_ids() -> set[int]:
    """Ids of memories the journal deleted: never given to another memory, so a restore may not take them."""
    rows = (
        JournalEntry.objects.filter(
            operation__in=(JournalEntry.Operation.DELETE, JournalEntry.Operation.DELETE_BY_FILTER)
        )
        .exclude(status=JournalEntry.Status.FAILED)
        .values_list("memory_ids", flat=True)
    )
    return {int(memory_id) for ids in rows for memory_id in ids or ()}


def _restore_problem(
    record: dict[str, Any], *, records: list[dict[str, Any]], held: dict[int, Any], deleted: set[int]
) -> str | None:
    """Why a restore record cannot be stored (id of a deleted memory, a supersede link that cannot hold), or None.

    A successor is always newer, so its id is larger: superseded_by must be above the record's id and
    supersedes below it, which rules out cycles. superseded_by must name a memory the palace holds, one
    of the same chunk, or one past every id of the chunk (a later chunk of an id-ordered export).
    """
    memory_id = record["id"]
    if memory_id in deleted and memory_id not in held:
        return f"id: {memory_id} belonged to a memory that was deleted; ids are never reused"
    newest_possible = time.time_ns() // 1_000_000 + RESTORE_IDS_AHEAD
    if memory_id > newest_possible and memory_id not in held:
        # A restored id moves the allocator past it: one far ahead of the clock would use up the id space.
        return (
            f"id: {memory_id} is ahead of every id a palace can have allocated by now (at most {newest_possible}: "
            "new ids start at the current Unix milliseconds)"
        )
    successor = record.get("superseded_by")
    if successor is not None:
        chunk_ids = {other["id"] for other in records}
        if successor <= memory_id:
            return f"superseded_by: {successor} must be newer (larger) than the memory's own id {memory_id}"
        if successor in deleted and successor not in held:
            return f"superseded_by: {successor} names a deleted memory"
        if successor not in held and successor not in chunk_ids and successor < max(chunk_ids):
            return f"superseded_by: {successor} names no memory of the palace or of this input"
    for older in record.get("supersedes") or ():
        if older >= memory_id:
            return f"supersedes: {older} must be older (smaller) than the memory's own id {memory_id}"
    return None


def supersede(
    *,
    supersedes: Any,
    reason: Any,
    text: Any = None,
    category: Any = None,
    wing: Any = None,
    room: Any = None,
    hall: Any = None,
    session: Any = None,
    source_file: Any = None,
    expires_at: Any = None,
    ttl_days: Any = None,
    timestamp: Any = None,
    added_by: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Store a corrected memory and mark each old one superseded (valid_until=now), keeping history.

    Every memory field left out (text included) is inherited from the first superseded memory that exists.
    """
    given = {
        "text": text,
        "category": category,
        "wing": wing,
        "room": room,
        "hall": hall,
        "session": session,
        "source_file": source_file,
        "timestamp": timestamp,
    }
    raw = {"supersedes": supersedes, "reason": reason, "expires_at": expires_at, "ttl_days": ttl_days} | given
    fields = SupersedeForm({key: value for key, value in raw.items() if value is not None}).parsed()
    if fields.get("expires_at") is not None:
        given["expires_at"] = format_rfc3339(fields["expires_at"])
    palace = get_palace()
    with _write_lock:
        found = {point.id: point for point in scope.retrieve(palace.store, fields["supersedes"], wings)}
        if not found:
            raise InvalidInput.single(
                "supersedes",
                f"none of the ids exist: {fields['supersedes']}; look the ids up with palace_find or palace_browse",
            )
        first = next(found[memory_id] for memory_id in fields["supersedes"] if memory_id in found)
        # expires_at is inherited like the rest unless the correction gives expires_at or ttl_days.
        inherited = {key: first.payload.get(key) for key in INHERITED_KEYS}
        merged = inherited | {key: value for key, value in given.items() if value is not None}
        try:
            memory = MemoryForm({key: value for key, value in merged.items() if value is not None}).parsed()
        except InvalidInput as exc:  # an inherited value the vocabulary (or the clock) no longer allows
            raise InvalidInput(
                {
                    key: [*messages, f"(inherited from memory {first.id}; give {key} explicitly)"]
                    if key not in given or given[key] is None
                    else messages
                    for key, messages in exc.errors.items()
                }
            ) from None
        scope.refuse_outside(memory["wing"], wings)
        correction = fields | memory
        redactions = _redact(correction)  # the reason too
        return _supersede_validated(palace, correction, found=found, added_by=added_by) | {"redactions": redactions}


def _supersede_validated(
    palace: Palace, fields: dict[str, Any], *, found: dict[int, StoredPoint], added_by: str
) -> dict[str, Any]:
    old_ids: list[int] = fields["supersedes"]
    vectors = _embed_or_defer(palace, [fields["text"]])
    now = format_rfc3339(utc_now())
    stamp = format_rfc3339(fields["timestamp"]) if fields.get("timestamp") else now
    targets = [memory_id for memory_id in old_ids if memory_id in found]

    def build(ids: list[int]) -> dict[str, Any]:
        record = _memory_record(fields, memory_id=ids[0], timestamp=stamp, added_by=added_by)
        record.update(valid_from=now, supersedes=targets)
        return {"memories": [record], "supersedes": targets, "reason": fields["reason"], "valid_until": now}

    entry, _ids = journal.record_with_new_ids(
        operation=JournalEntry.Operation.SUPERSEDE,
        count=1,
        build_payload=build,
        added_by=added_by,
        reason=fields["reason"],
        wing=fields["wing"],
    )
    _journal_and_apply(palace, entry, vectors)
    marked = []
    for memory_id in old_ids:
        if memory_id not in found:
            marked.append({"id": memory_id, "ok": False, "error": "no memory with this id"})
            continue
        previous = found[memory_id].payload.get("superseded_by")
        mark: dict[str, Any] = {"id": memory_id, "ok": True}
        if previous:
            mark["previously_superseded_by"] = previous
        marked.append(mark)
    record = entry.payload["memories"][0]
    return {"memory": public_memory(record["id"], record), "reason": fields["reason"], "marked": marked}


def delete(*, ids: Any, reason: Any, confirm: Any, added_by: str = "", wings: scope.Wings = None) -> dict[str, Any]:
    """Hard-delete memories by id after journaling their full records."""
    fields = DeleteForm({"ids": ids, "reason": reason, "confirm": confirm}).parsed()
    if not fields["confirm"]:
        raise ConfirmationRequired.single(
            "confirm", "must be true: deleting is permanent and needs the operator's approval"
        )
    palace = get_palace()
    points = scope.retrieve(palace.store, fields["ids"], wings)
    found = {point.id for point in points}
    if points:
        entry = journal.record(
            operation=JournalEntry.Operation.DELETE,
            payload={"ids": sorted(found), "memories": [public_memory(p.id, p.payload) for p in points]},
            memory_ids=sorted(found),
            added_by=added_by,
            reason=fields["reason"],
            wing=points[0].payload.get("wing", ""),
        )
        _journal_and_apply(palace, entry)
    outcomes = [
        {"id": memory_id, "deleted": memory_id in found, "missing": memory_id not in found}
        for memory_id in fields["ids"]
    ]
    return {
        "deleted": outcomes,
        "counts": {"deleted": len(found), "missing": len(fields["ids"]) - len(found)},
        "reason": fields["reason"],
    }


def delete_by_filter(
    *,
    reason: Any,
    confirm: Any,
    dry_run: Any = False,
    expected_count: Any = None,
    wing: Any = None,
    category: Any = None,
    room: Any = None,
    hall: Any = None,
    since: Any = None,
    until: Any = None,
    include_superseded: Any = False,
    added_by: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    """Hard-delete every memory a filter matches (max 1000), guarded by dry_run and expected_count."""
    raw = {
        "reason": reason,
        "confirm": confirm,
        "dry_run": dry_run,
        "expected_count": expected_count,
        "wing": wing,
        "category": category,
        "room": room,
        "hall": hall,
        "since": since,
        "until": until,
        "include_superseded": include_superseded,
    }
    fields = DeleteByFilterForm({key: value for key, value in raw.items() if value is not None}).parsed()
    if not fields["confirm"]:
        raise ConfirmationRequired.single(
            "confirm", "must be true: deleting is permanent and needs the operator's approval"
        )
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
        wings=wings,
    )
    matched = []
    for point in palace.store.scroll(memory_filter=memory_filter):
        matched.append(point)
        if len(matched) > MAX_FILTER_DELETE:
            raise InvalidInput.single(
                "filter", f"matches more than {MAX_FILTER_DELETE} memories; narrow it and delete in several calls"
            )
    summary: dict[str, Any] = {
        "dry_run": fields["dry_run"],
        "matched_count": len(matched),
        "deleted_count": 0,
        "breakdown_by_wing": dict(Counter(p.payload.get("wing", "") for p in matched)),
        "breakdown_by_hall": dict(Counter(p.payload.get("hall", "") for p in matched)),
        "sample": [
            {
                "id": p.id,
                "wing": p.payload.get("wing"),
                "room": p.payload.get("room"),
                "hall": p.payload.get("hall"),
                "text_preview": preview(p.payload.get("text", "")),
            }
            for p in matched[:10]
        ],
        "reason": fields["reason"],
    }
    if fields["dry_run"]:
        return summary
    if fields["expected_count"] is None:
        raise InvalidInput.single(
            "expected_count", "is required to delete: run with dry_run=true first and pass its matched_count"
        )
    if fields["expected_count"] != len(matched):
        raise ExpectedCountMismatch(
            f"the filter matches {len(matched)} memories but expected_count is {fields['expected_count']}; "
            "nothing was deleted: re-run with dry_run=true to recount"
        )
    if matched:
        ids = [p.id for p in matched]
        entry = journal.record(
            operation=JournalEntry.Operation.DELETE_BY_FILTER,
            payload={
                "ids": ids,
                "memories": [public_memory(p.id, p.payload) for p in matched],
                "filter": {key: raw[key] for key in (*FILTER_KEYS, "since", "until") if raw[key]},
            },
            memory_ids=ids,
            added_by=added_by,
            reason=fields["reason"],
            wing=fields["wing"] or "",
        )
        _journal_and_apply(palace, entry)
    summary["deleted_count"] = len(matched)
    return summary


def rebuild(*, batch_size: int = 256) -> dict[str, Any]:
    """Recreate the vector store from the journal, re-embedding with the configured model."""
    from palace import runtime

    runtime.close_palace()
    store = runtime.build_store()
    # The embedded shard is moved aside only while no server holds it (its writes would vanish).
    held_exclusively = getattr(store, "held_exclusively", None)
    with held_exclusively() if held_exclusively is not None else contextlib.nullcontext():
        moved_to = store.discard()
    palace = runtime.get_palace()
    entries = JournalEntry.objects.exclude(status=JournalEntry.Status.FAILED).order_by("id")
    replayed = 0
    queued: list[JournalEntry] = []

    def flush_stores() -> None:
        records = [record for entry in queued for record in entry.payload["memories"]]
        for start in range(0, len(records), batch_size):
            chunk = records[start : start + batch_size]
            vectors = palace.embedder.documents([record["text"] for record in chunk])
            palace.store.upsert(_points(chunk, vectors))
        for entry in queued:
            if entry.status == JournalEntry.Status.PENDING:
                journal.mark_applied(entry)
        queued.clear()

    for entry in entries.iterator():
        replayed += 1
        if entry.operation == JournalEntry.Operation.STORE:
            queued.append(entry)
            continue
        flush_stores()
        _journal_and_apply(palace, entry)
    flush_stores()
    return {"entries_replayed": replayed, "previous_store": moved_to, "embedding_model": palace.embedder.model_name}


def expire(*, dry_run: bool = False, added_by: str = "") -> dict[str, Any]:
    """Hard-delete every memory whose expires_at has passed, journaled with the full records (in chunks)."""
    palace = get_palace()
    now = utc_now()
    with _write_lock:
        expired = list(palace.store.scroll(memory_filter=MemoryFilter(expired=True, current_at=now)))
        summary: dict[str, Any] = {
            "dry_run": dry_run,
            "expired_count": len(expired),
            "deleted_count": 0,
            "breakdown_by_wing": dict(Counter(p.payload.get("wing", "") for p in expired)),
            "ids": [p.id for p in expired],
        }
        if dry_run:
            return summary
        for start in range(0, len(expired), MAX_FILTER_DELETE):
            chunk = expired[start : start + MAX_FILTER_DELETE]
            ids = [p.id for p in chunk]
            entry = journal.record(
                operation=JournalEntry.Operation.DELETE,
                payload={"ids": ids, "memories": [public_memory(p.id, p.payload) for p in chunk]},
                memory_ids=ids,
                added_by=added_by,
                reason=f"expired (expires_at before {format_rfc3339(now)})",
                wing=chunk[0].payload.get("wing", ""),
            )
            _journal_and_apply(palace, entry)
            summary["deleted_count"] += len(chunk)
    return summary
