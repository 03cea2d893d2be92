"""Corrections: a new memory supersedes old ones, inheriting every field it leaves out; history is kept."""

from __future__ import annotations

from typing import Any

from palace.engine import journal
from palace.engine.applier import journal_and_apply
from palace.engine.locks import write_lock
from palace.engine.points import embed_or_defer
from palace.engine.runtime import Palace, get_palace
from palace.errors import InvalidInput
from palace.governance import scope
from palace.models import JournalEntry
from palace.schema.forms import (
    MemoryForm,
    SupersedeForm,
)
from palace.schema.memories import INHERITED_KEYS, public_memory
from palace.schema.timefmt import format_rfc3339, utc_now
from palace.store.base import StoredPoint
from palace.writes.records import memory_record, redact


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
    with write_lock:
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
        redactions = redact(correction)  # the reason too
        return _supersede_validated(palace, correction, found=found, added_by=added_by) | {"redactions": redactions}


def _supersede_validated(
    palace: Palace, fields: dict[str, Any], *, found: dict[int, StoredPoint], added_by: str
) -> dict[str, Any]:
    old_ids: list[int] = fields["supersedes"]
    vectors = embed_or_defer(palace, [fields["text"]])
    now = format_rfc3339(utc_now())
    stamp = format_rfc3339(fields["timestamp"]) if fields.get("timestamp") else now
    targets = [memory_id for memory_id in old_ids if memory_id in found]

    def build(ids: list[int]) -> dict[str, Any]:
        record = memory_record(fields, memory_id=ids[0], timestamp=stamp, added_by=added_by)
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
    journal_and_apply(palace, entry, vectors)
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
