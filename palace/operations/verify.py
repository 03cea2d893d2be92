"""Compare the journal with the vector store: every journaled memory present and intact, nothing unexplained."""

from __future__ import annotations

from collections import Counter
from typing import Any

from palace.engine import journal
from palace.engine.runtime import get_palace
from palace.models import JournalEntry
from palace.schema.memories import MEMORY_FIELDS, stored_payload, text_hash
from palace.store.base import MemoryFilter

DELETE_OPERATIONS = (JournalEntry.Operation.DELETE, JournalEntry.Operation.DELETE_BY_FILTER)
# The fields whose disagreement means the store lost or garbled a write; the rest are compared too.
CHECKED_FIELDS = (*MEMORY_FIELDS, "text_hash")
REPORT_LIMIT = 100


def _expected_state(
    claimed_twice: list[dict[str, Any]],
) -> tuple[dict[int, dict[str, Any]], dict[int, int], dict[int, int], Counter[str]]:
    """Replay the journal on paper: payload per live id, deleted ids, ids of refused entries, entry counts.

    Appends to claimed_twice every id that two applied or pending entries wrote (ids are never reused,
    so a second claim means one acknowledged write overwrote another); an entry marked `rewrite` (the
    scrub of `manage.py redact`) rewrites memories an earlier entry wrote on purpose and claims nothing.
    """
    expected: dict[int, dict[str, Any]] = {}
    deleted: dict[int, int] = {}
    refused: dict[int, int] = {}
    statuses: Counter[str] = Counter()
    claimed: dict[int, int] = {}
    for entry in JournalEntry.objects.order_by("id").iterator():
        statuses[entry.status] += 1
        payload = entry.payload or {}
        if entry.status == JournalEntry.Status.FAILED:
            # The caller was told the write failed; a point from it in the store would be unexplained.
            for memory_id in entry.memory_ids or []:
                refused[int(memory_id)] = entry.pk
            continue
        if entry.operation in DELETE_OPERATIONS:
            for memory_id in payload.get("ids", []):
                expected.pop(int(memory_id), None)
                deleted[int(memory_id)] = entry.pk
            continue
        rewrite = bool(payload.get("rewrite"))
        for record in payload.get("memories", []):
            memory_id = int(record["id"])
            if rewrite and memory_id in expected:
                expected[memory_id] = stored_payload(record)
                continue
            if memory_id in claimed:
                claimed_twice.append({"id": memory_id, "entries": [claimed[memory_id], entry.pk]})
            claimed[memory_id] = entry.pk
            expected[memory_id] = stored_payload(record)
        if payload.get("supersedes"):
            new_id = int(payload["memories"][0]["id"])
            for old_id in payload["supersedes"]:
                if int(old_id) in expected:
                    expected[int(old_id)].update(
                        valid_until=payload["valid_until"],
                        superseded_by=new_id,
                        superseded_reason=payload["reason"],
                    )
    return expected, deleted, refused, statuses


def _shown(value: Any) -> Any:
    return value[:80] if isinstance(value, str) else value


def _field_differences(expected: dict[str, Any], actual: dict[str, Any]) -> dict[str, dict[str, Any]]:
    differences = {}
    for key in CHECKED_FIELDS:
        want, have = expected.get(key), actual.get(key)
        if want in ("", []):
            want = None
        if have in ("", []):
            have = None
        if want != have:
            differences[key] = {"journal": _shown(want), "store": _shown(have)}
    text = actual.get("text")
    if isinstance(text, str) and actual.get("text_hash") != text_hash(text):
        differences["text_hash_of_stored_text"] = {"journal": text_hash(text), "store": actual.get("text_hash")}
    return differences


def verify() -> dict[str, Any]:
    """Check that the store holds exactly what the journal says, and list every difference."""
    palace = get_palace()  # opening replays pending entries first, as every start-up does
    claimed_twice: list[dict[str, Any]] = []
    expected, deleted, refused, statuses = _expected_state(claimed_twice)
    actual = {point.id: point.payload for point in palace.store.scroll(memory_filter=MemoryFilter())}
    missing = sorted(set(expected) - set(actual))
    mismatched = []
    for memory_id in sorted(set(expected) & set(actual)):
        fields = _field_differences(expected[memory_id], actual[memory_id])
        if fields:
            mismatched.append({"id": memory_id, "fields": fields})
    deleted_but_present = sorted(set(deleted) & set(actual))
    unexplained = [
        {"id": memory_id, "refused_by_entry": refused.get(memory_id)}
        for memory_id in sorted(set(actual) - set(expected) - set(deleted))
    ]
    # Valid but dangling: a successor deleted, or left out of a wing-filtered export this palace restored.
    dangling = sorted(
        memory_id
        for memory_id, payload in actual.items()
        if payload.get("superseded_by") is not None and payload["superseded_by"] not in actual
    )
    current_texts = Counter(payload.get("text_hash") for payload in actual.values() if not payload.get("valid_until"))
    differences: dict[str, list[Any]] = {
        "missing": missing,
        "mismatched": mismatched,
        "deleted_but_present": deleted_but_present,
        "unexplained": unexplained,
        "claimed_twice": claimed_twice,
    }
    pending = statuses[JournalEntry.Status.PENDING]
    return {
        "ok": not any(differences.values()) and pending == 0,
        "journal_entries": sum(statuses.values()),
        "journal_pending": pending,
        "journal_applied": statuses[JournalEntry.Status.APPLIED],
        "journal_failed": statuses[JournalEntry.Status.FAILED],
        "journal_latest_failed": journal.state()["latest_failed"],
        "expected_points": len(expected),
        "store_points": len(actual),
        "duplicate_current_texts": sum(1 for count in current_texts.values() if count > 1),
        "dangling_superseded_by": {"count": len(dangling), "ids": dangling[:REPORT_LIMIT]},
        "difference_counts": {key: len(value) for key, value in differences.items()},
        "differences": {key: value[:REPORT_LIMIT] for key, value in differences.items()},
    }
