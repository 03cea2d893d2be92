"""Bulk ingest, export and migration: JSON Lines in and out of the palace, a chunk at a time.

Ingest rule: a line without an `id` is a memory to store and follows the store_batch path (dedup by
text against the palace and within the input). A line with an `id` (as `export` writes them) is
restored as-is with its id, timestamp, temporal fields and added_by: it is idempotent by id (an id the
palace already holds comes back as a duplicate of itself) and is never merged with another id by text,
so a superseded memory and its successor with the same text both survive a round trip.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from palace.engine.runtime import get_palace
from palace.errors import InvalidInput, PalaceError
from palace.governance import audit, redaction
from palace.governance.scope import Wings, refuse_outside
from palace.schema.forms import (
    FIRST_MEMORY_ID,
    MAX_BATCH_ITEMS,
    MAX_MEMORY_ID,
    MemoryForm,
    form_field,
    form_fields,
    strict_boolean,
    writer_stamp,
)
from palace.schema.memories import FIELDS, MEMORY_FIELDS, RESTORE_FIELDS, STORED_FIELDS, Kind, public_memory
from palace.schema.timefmt import format_rfc3339, utc_now
from palace.schema.vocabulary import active_vocabulary
from palace.store.base import MemoryFilter
from palace.writes import services

CHUNK_SIZE = MAX_BATCH_ITEMS
# A memory is at most 32 KB of text; even fully \u-escaped it stays well under this.
MAX_LINE_BYTES = 1024 * 1024
COUNT_KEYS = ("stored", "duplicates_returned", "skipped_duplicates", "failed")
TIMESTAMP_KEYS = tuple(field.name for field in STORED_FIELDS if field.kind is Kind.TIMESTAMP)
_STATUS_COUNT = {"stored": "stored", "duplicate": "duplicates_returned", "skipped": "skipped_duplicates"}


class BodyTooLarge(PalaceError):
    """An ingest body grew past PALAZZO_INGEST_MAX_BYTES."""

    code = "too_large"


class RestoreForm(MemoryForm):
    """One exported memory to restore under its own id, with its temporal fields."""

    locals().update(form_fields(RESTORE_FIELDS, optional=True) | {"id": form_field(FIELDS["id"], required=True)})
    allow_past_expiry = True  # an export may hold memories that expired and were not yet deleted

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("valid_from"), cleaned.get("valid_until")
        if start and end and end < start:
            # A memory stops being current after it became current, never before: no palace writes this.
            # (valid_until may precede `timestamp`: a memory dated in the future can be corrected today.)
            self.add_error("valid_until", f"must not be earlier than valid_from ({format_rfc3339(start)})")
        return cleaned


@dataclass
class Line:
    """One meaningful input line: its number and parsed object, or why it could not be parsed."""

    number: int
    item: Any = None
    error: str | None = None


@dataclass
class ChunkReport:
    """What one chunk did (or the error that stopped the run)."""

    chunk: int
    results: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    running_redactions: dict[str, int] = field(default_factory=dict)

    @property
    def redactions(self) -> dict[str, int]:
        """Redaction rule -> matches in this chunk's items (never the text)."""
        total: Counter[str] = Counter()
        for result in self.results:
            total.update(result.get("redactions") or {})
        return dict(total)

    def as_line(self) -> dict[str, Any]:
        """The NDJSON line POST /ingest streams for this chunk (failed items named by line)."""
        if self.error is not None:
            return {"chunk": self.chunk, "error": self.error}
        return {
            "chunk": self.chunk,
            "items_in_chunk": len(self.results),
            "counts": self.counts,
            "running": self.running,
            "redactions": self.redactions,
            "failed": [
                {"line": result["line"], "error": result["error"]}
                for result in self.results
                if result["status"] == "failed"
            ],
        }


def empty_counts() -> dict[str, int]:
    """Counts with every key at zero."""
    return dict.fromkeys(COUNT_KEYS, 0)


def done_line(running: dict[str, int], redactions: dict[str, int] | None = None) -> dict[str, Any]:
    """The closing summary of a run."""
    return {"done": True, "total": sum(running.values()), "counts": dict(running), "redactions": redactions or {}}


def parse_line(raw: bytes | str, number: int) -> Line | None:
    """Parse one raw line; None for blank lines and # comments."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_LINE_BYTES:
            return Line(number, error=f"line is longer than {MAX_LINE_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Line(number, error=f"is not valid UTF-8 (byte {exc.start})")
    else:
        text = raw
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        item = json.loads(stripped)
    except ValueError as exc:
        return Line(number, error=f"is not valid JSON: {exc}")
    except RecursionError:
        return Line(number, error="is nested too deeply to be a memory")
    if not isinstance(item, dict):
        return Line(number, error="must be a JSON object (one memory per line)")
    return Line(number, item=item)


def read_lines(readline: Callable[[int], bytes]) -> Iterator[bytes]:
    """Lines of a binary stream, each cut at MAX_LINE_BYTES + 1 (the rest of a longer line is skipped)."""
    while True:
        raw = readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while True:
                rest = readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        yield raw


def limited(lines: Iterable[bytes], *, max_bytes: int) -> Iterator[bytes]:
    """Pass lines through, raising BodyTooLarge once more than max_bytes went by."""
    seen = 0
    for raw in lines:
        seen += len(raw)
        if seen > max_bytes:
            raise BodyTooLarge(f"the request body is larger than {max_bytes} bytes (PALAZZO_INGEST_MAX_BYTES)")
        yield raw


def first_item(lines: Iterable[bytes | str]) -> tuple[Line | None, Iterator[Line]]:
    """The first meaningful line and an iterator over all of them (that line included)."""
    numbered = (parse_line(raw, number) for number, raw in enumerate(lines, start=1))
    parsed = (line for line in numbered if line is not None)
    first = next(parsed, None)
    if first is None:
        return None, iter(())

    def again() -> Iterator[Line]:
        yield first
        yield from parsed

    return first, again()


def _result(line: int, outcome: dict[str, Any]) -> dict[str, Any]:
    memory = outcome.get("memory") or {}
    return {
        "line": line,
        "status": outcome["status"],
        "id": memory.get("id"),
        "duplicate_of": outcome.get("duplicate_of"),
        "error": outcome.get("error"),
        "redactions": outcome.get("redactions") or {},
    }


def _restore_record(item: dict[str, Any]) -> dict[str, Any]:
    # A memory as palace_recall returns it is a restore line too: its `expired` flag is derived from
    # expires_at, so it is checked (a JSON boolean) and dropped.
    strict_boolean("expired", item.get("expired"))
    given = {key: value for key, value in item.items() if value is not None and key != "expired"}
    fields = RestoreForm(given).parsed()
    record: dict[str, Any] = {key: fields.get(key) or None for key in MEMORY_FIELDS}
    record.update(id=fields["id"], text=fields["text"])
    for key in TIMESTAMP_KEYS:
        if fields.get(key):
            record[key] = format_rfc3339(fields[key])
    record["timestamp"] = record["timestamp"] or format_rfc3339(utc_now())
    record["supersedes"] = fields.get("supersedes") or None
    return record


def ingest_chunk(
    lines: list[Line],
    *,
    skip_duplicates: bool = False,
    added_by: str = "",
    keep_added_by: bool = False,
    wings: Wings = None,
    import_id: str = "",
) -> list[dict[str, Any]]:
    """Store one chunk (<= 256 lines): restores for lines with ids, then one store_batch for the rest.

    import_id (`palazzo import qdrant` only) is stamped on every memory the chunk stores or restores.

    A restore line keeps its own added_by only with keep_added_by (the local operator's CLI); otherwise the
    writer's stamp replaces it, so no client can file memories under another writer's name.
    """
    results: dict[int, dict[str, Any]] = {}
    restores: list[tuple[int, dict[str, Any]]] = []
    stores: list[tuple[int, dict[str, Any]]] = []
    for line in lines:
        if line.error is not None:
            results[line.number] = _result(line.number, {"status": "failed", "error": line.error})
        elif line.item.get("id") is not None:
            try:
                record = _restore_record(line.item)
                refuse_outside(record["wing"], wings)
                if not keep_added_by:
                    record["added_by"] = writer_stamp(added_by) or None
                if import_id:
                    record["import_id"] = import_id
                restores.append((line.number, record))
            except InvalidInput as exc:
                error = redaction.scrub_message(str(exc))
                results[line.number] = _result(line.number, {"status": "failed", "error": error})
        else:
            stores.append((line.number, {key: value for key, value in line.item.items() if key != "id"}))
    if restores:
        outcomes = services.restore_records(
            records=[record for _, record in restores], skip_duplicates=skip_duplicates, added_by=added_by, wings=wings
        )
        for (number, _), outcome in zip(restores, outcomes):
            results[number] = _result(number, outcome)
    if stores:
        batch = services.store_batch(
            items=[item for _, item in stores],
            skip_duplicates=skip_duplicates,
            added_by=added_by,
            import_id=import_id,
            wings=wings,
        )
        for (number, _), outcome in zip(stores, batch["items"]):
            results[number] = _result(number, outcome)
    return [results[line.number] for line in lines]


def _chunks(lines: Iterator[Line]) -> Iterator[list[Line]]:
    chunk: list[Line] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == CHUNK_SIZE:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def ingest(
    *,
    lines: Iterable[bytes | str] | Iterator[Line],
    skip_duplicates: bool = False,
    added_by: str = "",
    keep_added_by: bool = False,
    wings: Wings = None,
) -> Iterator[ChunkReport]:
    """Open the palace (raising StoreLocked etc. now), then ingest JSON Lines chunk by chunk.

    Each chunk yields a report; a PalaceError while processing yields one report with `error` and ends
    the run (the chunks before it stay stored).
    """
    skip_duplicates = strict_boolean("skip_duplicates", skip_duplicates)
    get_palace()
    return _run(lines, skip_duplicates=skip_duplicates, added_by=added_by, keep_added_by=keep_added_by, wings=wings)


def _parsed(lines: Iterable[Any]) -> Iterator[Line]:
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, Line):
            yield raw
            continue
        line = parse_line(raw, number)
        if line is not None:
            yield line


def _run(
    lines: Iterable[Any],
    *,
    skip_duplicates: bool,
    added_by: str,
    keep_added_by: bool = False,
    wings: Wings = None,
    import_id: str = "",
) -> Iterator[ChunkReport]:
    running = empty_counts()
    redacted: Counter[str] = Counter()
    number = 0
    parsed = _chunks(_parsed(lines))
    while True:
        number += 1
        try:
            chunk = next(parsed, None)
            if chunk is None:
                return
            results = ingest_chunk(
                chunk,
                skip_duplicates=skip_duplicates,
                added_by=added_by,
                keep_added_by=keep_added_by,
                wings=wings,
                import_id=import_id,
            )
        except PalaceError as exc:
            yield ChunkReport(chunk=number, error=str(exc), running=dict(running), running_redactions=dict(redacted))
            return
        counts = empty_counts()
        tally = Counter(result["status"] for result in results)
        for status, count in tally.items():
            counts[_STATUS_COUNT.get(status, "failed")] += count
        for key in COUNT_KEYS:
            running[key] += counts[key]
        report = ChunkReport(chunk=number, results=results, counts=counts, running=dict(running))
        redacted.update(report.redactions)
        report.running_redactions = dict(redacted)
        yield report


def export_memories(
    *, batch_size: int = 256, actor: str = "", operation: str = "export", wings: Wings = None
) -> Iterator[dict[str, Any]]:
    """Every memory (superseded ones included) with every field, in id order; opens the palace now.

    Audited once the export ends (or stops early), with the ids actually handed out.
    """
    palace = get_palace()

    def memories() -> Iterator[dict[str, Any]]:
        sent: list[int] = []
        try:
            for point in palace.store.scroll(memory_filter=MemoryFilter(wings=wings), batch_size=batch_size):
                sent.append(point.id)  # handed out once the consumer's next() returns it
                yield public_memory(point.id, point.payload)
        finally:
            audit.record_read(operation=operation, actor=actor, result_ids=sent)

    return memories()


def export_line(memory: dict[str, Any]) -> str:
    """One JSONL line of an export (ingest accepts it back)."""
    return json.dumps(memory, ensure_ascii=False, separators=(",", ":")) + "\n"


# Payload keys of the Rust palazzo that carry over as they are.
_LEGACY_FIELDS = ("text", "category", "wing", "room", "hall", "timestamp", "session", "source_file")
_LEGACY_TEMPORAL = ("valid_from", "valid_until", "superseded_by", "superseded_reason", "supersedes")


@dataclass(frozen=True)
class ImportDefaults:
    """Values that replace a missing or out-of-vocabulary category/wing/hall, or a missing room."""

    category: str | None = None
    wing: str | None = None
    room: str | None = None
    hall: str | None = None


def _keepable_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, int) and FIRST_MEMORY_ID <= value <= MAX_MEMORY_ID:
        return value
    return None


def legacy_item(point_id: int | str, payload: dict[str, Any], defaults: ImportDefaults) -> dict[str, Any]:
    """Map a Rust palazzo or mcp-server-qdrant payload to an ingest item (with `id` when it can be kept).

    mcp-server-qdrant points are {"document": text, "metadata": {...}}; schema keys found in metadata are
    used. Ids that are not integers >= 1e9 (e.g. UUIDs) cannot be kept: such points get new ids and go
    through the normal store path (dedup by text), without temporal fields.
    """
    if "document" in payload and "text" not in payload:
        metadata = payload.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        source = {key: value for key, value in metadata.items() if key in _LEGACY_FIELDS}
        source["text"] = payload.get("document")
    else:
        source = dict(payload)
    item: dict[str, Any] = {key: source[key] for key in _LEGACY_FIELDS if source.get(key) not in (None, "")}
    env = active_vocabulary()
    for key, allowed in (("category", env.categories), ("wing", env.wings), ("hall", env.halls)):
        default = getattr(defaults, key)
        if default and item.get(key) not in allowed:
            item[key] = default
    if defaults.room and not (isinstance(item.get("room"), str) and item["room"].strip()):
        item["room"] = defaults.room
    kept = _keepable_id(point_id)
    if kept is not None:
        item["id"] = kept
        for key in _LEGACY_TEMPORAL:
            if source.get(key) not in (None, "", []):
                item[key] = source[key]
        if "superseded_by" in item:
            item["superseded_by"] = _keepable_id(item["superseded_by"]) or item["superseded_by"]
        if source.get("author"):
            item["added_by"] = source["author"]
    return item


def _line_problem(line: Line) -> str | None:
    """Why a line cannot be stored or restored (as the ingest would find it), or None."""
    if line.error is not None:
        return line.error
    try:
        if line.item.get("id") is not None:
            _restore_record(line.item)
        else:
            MemoryForm({key: value for key, value in line.item.items() if key != "id" and value is not None}).parsed()
    except InvalidInput as exc:
        return str(exc)
    return None


def import_qdrant(
    *,
    collection: str,
    url: str | None = None,
    api_key: str | None = None,
    path: str | None = None,
    defaults: ImportDefaults | None = None,
    skip_duplicates: bool = False,
    added_by: str = "",
    skip_bad: bool = False,
    import_id: str = "",
    dry_run: bool = False,
) -> tuple[int, Iterator[ChunkReport]]:
    """Import a Rust palazzo (or mcp-server-qdrant) collection, re-embedding with the current model.

    Every point is read and validated before anything is stored: a point that cannot be a memory raises
    InvalidInput naming each (nothing stored) unless skip_bad. Returns the number of points and the chunk
    reports; each result carries `source_id`, the point's id in the old collection (equal to `id` unless
    the old id could not be kept). import_id is stamped on every memory stored. A dry run stores nothing:
    one report lists every point as would-store (with the memory) or failed (with the reason).
    """
    from palace.store.legacy import count_points, open_client, read_points

    client = open_client(url=url, api_key=api_key, path=path)
    total = count_points(client, collection)
    get_palace()
    chosen = defaults or ImportDefaults()

    sources: dict[int, int | str] = {}
    lines = []
    try:
        for number, point in enumerate(read_points(client, collection), start=1):
            sources[number] = point.id
            lines.append(Line(number, item=legacy_item(point.id, point.payload, chosen)))
    finally:
        client.close()
    problems = {line.number: problem for line in lines if (problem := _line_problem(line))}
    if dry_run:
        planned = [
            {"line": line.number, "source_id": sources[line.number]}
            | (
                {"status": "failed", "error": problems[line.number]}
                if line.number in problems
                else {"status": "would-store", "memory": line.item}
            )
            for line in lines
        ]
        return total, iter([ChunkReport(chunk=1, results=planned)])
    if problems and not skip_bad:
        shown = {f"point {sources[number]}": [problem] for number, problem in list(problems.items())[:20]}
        raise InvalidInput(
            shown | {"import": [f"{len(problems)} bad points, nothing stored (--skip-bad stores the others)"]}
        )

    def run() -> Iterator[ChunkReport]:
        # The local operator's command: the source's authors are kept.
        for report in _run(
            lines, skip_duplicates=skip_duplicates, added_by=added_by, keep_added_by=True, import_id=import_id
        ):
            for result in report.results:
                result["source_id"] = sources.pop(result["line"], None)
            yield report

    return total, run()
