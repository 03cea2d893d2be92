"""Write operations of the palace; each one is journaled before the store is touched.

The write API entry points call: store, store_batch, delete and delete_by_filter live here; supersede,
restore_records, expire and rebuild in the module named for each job (palace.writes.supersession, palace.writes.restore,
palace.writes.expiry, palace.writes.rebuild), re-exported here under the names they always had.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from palace.engine import journal

# The journal applier and point building live in their own modules (palace.engine.runtime replays the journal
# when it opens the palace, and find embeds deferred memories: neither may import the write API).
from palace.engine.applier import journal_and_apply as _journal_and_apply
from palace.engine.duplicates import existing_duplicates, fresh_texts
from palace.engine.journal import preview
from palace.engine.locks import write_lock as _write_lock
from palace.engine.points import defer_embedding as _defer_embedding
from palace.engine.points import embed_in_background as _embed_in_background
from palace.engine.points import embed_or_defer as _embed_or_defer
from palace.engine.runtime import Palace, get_palace
from palace.errors import (
    ConfirmationRequired,
    ExpectedCountMismatch,
    InvalidInput,
)
from palace.governance import redaction, scope
from palace.models import JournalEntry
from palace.schema.forms import (
    MAX_BATCH_ITEMS,
    MAX_FILTER_DELETE,
    BatchDefaultsForm,
    DeleteByFilterForm,
    DeleteForm,
    MemoryForm,
    strict_boolean,
)
from palace.schema.memories import BATCH_DEFAULT_KEYS, FILTER_KEYS, public_memory
from palace.schema.timefmt import format_rfc3339, utc_now
from palace.store.base import MemoryFilter
from palace.writes.expiry import expire
from palace.writes.rebuild import rebuild
from palace.writes.records import memory_record, redact
from palace.writes.restore import restore_records
from palace.writes.supersession import supersede

__all__ = [
    "delete",
    "delete_by_filter",
    "expire",
    "rebuild",
    "restore_records",
    "store",
    "store_batch",
    "supersede",
]

logger = logging.getLogger(__name__)


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
    import_id: str = "",
    wings: scope.Wings = None,
    _single: bool = False,
) -> dict[str, Any]:
    """Store 1-256 memories with one embedding pass and one upsert; per-item outcomes and counts.

    defaults gives category, wing, room, hall, session or source_file to every item that leaves it out;
    import_id (set by `palazzo import` only) is stamped on every memory stored, so the import can be undone.
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
        found = redact(fields)
        cleaned.append(fields)
        outcomes.append({"index": index, "redactions": found})
    palace = get_palace()
    # Embed before taking the write lock so concurrent writers and searches do not queue behind a
    # whole embedding pass; the duplicate check is repeated under the lock, where it decides. A single
    # memory is written keyword-searchable and acknowledged, and its dense vector follows from the
    # embedding thread: the model was most of a store's time, and every search embeds what is still
    # pending before it ranks, so none misses it. Batches embed at once (bulk imports keep their pace).
    candidates = fresh_texts(palace, cleaned, wings)
    embed = _defer_embedding if _single else _embed_or_defer
    prepared = dict(zip(candidates, embed(palace, candidates))) if candidates else {}
    with _write_lock:
        result = _store_validated(
            palace,
            cleaned,
            outcomes,
            prepared=prepared,
            skip_duplicates=skip_duplicates,
            added_by=added_by,
            import_id=import_id,
            wings=wings,
        )
    if _single and result["counts"]["stored"]:
        _embed_in_background(palace)
    return result


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


def _store_validated(
    palace: Palace,
    cleaned: list[dict[str, Any] | None],
    outcomes: list[dict[str, Any]],
    *,
    prepared: dict[str, npt.NDArray[np.float32]],
    skip_duplicates: bool,
    added_by: str,
    import_id: str = "",
    wings: scope.Wings = None,
) -> dict[str, Any]:
    valid_texts = [fields["text"] for fields in cleaned if fields is not None]
    existing = existing_duplicates(palace, valid_texts, wings)
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
                records.append(
                    memory_record(fields, memory_id=memory_id, timestamp=stamp, added_by=added_by, import_id=import_id)
                )
            return {"memories": records}

        by_wing = Counter(cleaned[index]["wing"] for index in fresh)  # type: ignore[index]
        entry, _ids = journal.record_with_new_ids(
            operation=JournalEntry.Operation.STORE,
            count=len(fresh),
            build_payload=build,
            added_by=added_by,
            reason=f"import {import_id}" if import_id else "",
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
