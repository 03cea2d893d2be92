"""Result models of the MCP tools: each tool's outputSchema and the shape of its structured content."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver.utilities.func_metadata import StrictJsonSchema
from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from palace.feedstatus import FeedSource
from palace.memories import RETURNED_FIELDS, MemoryField, python_type


class _NullableAsTypeList(StrictJsonSchema):
    """Writes an optional scalar as `"type": [T, "null"]` rather than `anyOf` of two schemas.

    Both mean the same; clients validate every result against the outputSchema, and Python's
    jsonschema checks a type list in one step but an anyOf by trying each branch (building an
    error for the failed one): validating a palace_find result of 5 memories took 1.5 ms with
    anyOf and 0.8 ms with type lists.
    """

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        if isinstance(inner.get("type"), str) and inner["type"] != "null":
            return {**inner, "type": [inner["type"], "null"]}
        return super().nullable_schema(schema)


def _lean(schema: Any) -> Any:
    """A schema without what only costs tokens: titles, descriptions, defaults, required, nullable fields.

    Results always carry every field, so `required` says nothing; a field that may be null (a memory's
    session, valid_until, score ...) is left out of the schema, which allows it anyway, since its values
    are self-evident in every result and its type list would cost ~25 characters per field per tool
    in every session's context.
    """
    if isinstance(schema, list):
        return [_lean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    lean: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "description", "default", "required"):
            continue
        if key in ("properties", "$defs"):  # names, not keywords: keep the names, lean each schema
            lean[key] = {name: _lean(inner) for name, inner in value.items() if not _nullable(inner)}
        elif key == "additionalProperties" and value == {"type": "integer"}:
            continue  # a count per wing, room ...: {"type": "object"} says enough
        else:
            lean[key] = _lean(value)
    return lean


def _nullable(schema: Any) -> bool:
    types = schema.get("type")
    return (isinstance(types, list) and "null" in types) or {"type": "null"} in schema.get("anyOf", [])


def _referenced(schema: dict[str, Any]) -> set[str]:
    text = json.dumps({key: value for key, value in schema.items() if key != "$defs"})
    names = set(re.findall(r'"#/\$defs/([^"]+)"', text))
    while True:  # definitions referenced by referenced definitions
        more = {
            inner
            for name in names
            for inner in re.findall(r'"#/\$defs/([^"]+)"', json.dumps(schema["$defs"].get(name, {})))
        }
        if more <= names:
            return names
        names |= more


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The outputSchema published for a tool whose structured content is model.

    Every client validates each result against it and every session loads it into the model's context,
    so it carries types and structure only; the tool descriptions say what the fields mean. A nested model
    used more than once is defined once under $defs and referenced; one used once (each of them today)
    is written in place, ~40 characters less than a definition and its reference.
    """
    lean: dict[str, Any] = _lean(model.model_json_schema(schema_generator=_NullableAsTypeList))
    if "$defs" in lean:
        used = _referenced(lean)
        lean["$defs"] = {name: inner for name, inner in lean["$defs"].items() if name in used}
        lean = _inline_single_use(lean)
        if not lean["$defs"]:
            del lean["$defs"]
    return lean


def _inline_single_use(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every definition referenced exactly once written in place of its reference."""
    while True:
        text = json.dumps(schema)
        counts = {name: text.count(f'"#/$defs/{name}"') for name in schema["$defs"]}
        once = [name for name, count in counts.items() if count == 1]
        if not once:
            return schema
        name = once[0]
        definition = schema["$defs"].pop(name)

        def replace(node: Any, name: str = name, definition: Any = definition) -> Any:
            if isinstance(node, list):
                return [replace(item) for item in node]
            if not isinstance(node, dict):
                return node
            if node.get("$ref") == f"#/$defs/{name}":
                return {**definition, **{key: value for key, value in node.items() if key != "$ref"}}
            return {key: replace(value) for key, value in node.items()}

        schema = replace(schema)


REDACTIONS_DESCRIPTION = (
    "Redaction rule -> matches in what this call wrote (replaced by [REDACTED:<rule>]; in dry-run mode only "
    "counted). Never the matched text."
)


def _redactions() -> Any:
    return Field(default_factory=dict, description=REDACTIONS_DESCRIPTION)


def _returned(field: MemoryField) -> tuple[Any, Any]:
    kind = python_type(field)
    if field.always:
        return kind, Field(description=field.about)
    return kind | None, Field(None, description=field.about)


def memory_model() -> type[BaseModel]:
    """One memory as the palace returns it: palace.memories.RETURNED_FIELDS, in order; unset fields are null."""
    fields: dict[str, Any] = {field.name: _returned(field) for field in RETURNED_FIELDS}
    model: type[BaseModel] = create_model(
        "Memory", __doc__="One memory as the palace returns it; unset fields are null.", __module__=__name__, **fields
    )
    return model


if TYPE_CHECKING:  # the fields come from the memory schema at run time; to the type checker it is a model

    class Memory(BaseModel):
        """One memory as the palace returns it; unset fields are null."""

else:
    Memory = memory_model()


class BrowseResult(BaseModel):
    """palace_browse: one page, newest first, and the cursor of the next (null at the end)."""

    memories: list[Memory]
    count: int
    next_cursor: str | None


class StoreResult(Memory):
    """palace_store: the stored memory, or the existing one with the same text."""

    duplicate: bool = Field(description="True when nothing was written and the existing memory is returned.")
    duplicate_of: int | None = Field(None, description="The existing memory's id when duplicate is true.")
    redactions: dict[str, int] = _redactions()


class BatchItem(BaseModel):
    """The outcome of one batch item, in input order."""

    index: int
    status: Literal["stored", "duplicate", "skipped", "failed"]
    memory: Memory | None = None
    duplicate_of: int | None = None
    error: str | None = None
    redactions: dict[str, int] = _redactions()


class BatchCounts(BaseModel):
    stored: int
    duplicates_returned: int
    skipped_duplicates: int
    failed: int


class BatchResult(BaseModel):
    """palace_store_batch: per-item outcomes and counts."""

    items: list[BatchItem]
    counts: BatchCounts
    redactions: dict[str, int] = _redactions()


class FindResult(BaseModel):
    """palace_find: best matches first."""

    results: list[Memory]
    count: int
    degraded: bool = Field(default=False, description="True when the embedder was unavailable: keyword (BM25) only.")
    degraded_reason: str | None = Field(default=None, description="Why the results are keyword-only, when degraded.")


class RecallResult(BaseModel):
    """palace_recall: the memories found (superseded ones included) and the ids that do not exist."""

    memories: list[Memory]
    missing: list[int]


class SearchIndexState(BaseModel):
    """Whether the store is building its search index."""

    building: bool = Field(description="A background build of the search graphs is running; finds stay correct.")
    unindexed_writes: int | None = Field(
        default=None,
        description="Writes since the last build started (embedded store; a build starts every PALAZZO_INDEX_AFTER).",
    )


class FeedingState(BaseModel):
    """Transcript feeding: per harness and device, and the hook spool of this server's data dir."""

    sources: list[FeedSource]
    queued: int = Field(description="Transcripts waiting in the spool.")
    failed_waiting_for_retry: int = Field(description="Transcripts whose feed failed; retried at the next trigger.")
    fed_by: str | None = Field(description="Who feeds the spool now: server, feeder (a detached process) or null.")
    remote_error: str | None = Field(description="Why the last feed could not reach PALAZZO_URL, if it could not.")


class FailedEntry(BaseModel):
    entry: int
    operation: str
    error: str


class JournalState(BaseModel):
    """Journal entries the store never confirmed (pending) or that could not be applied (failed)."""

    pending: int
    failed: int = Field(description="Entries marked failed: refused writes, or rows that could not be re-applied.")
    latest_failed: list[FailedEntry] = Field(description="The newest failed entries with their reasons.")


class StatusResult(BaseModel):
    """palace_status: totals, counts by wing, room, hall and category, the search index, the journal and feeding."""

    collection: str
    embedding_model: str
    total: int = Field(description="Every memory, superseded ones included.")
    current: int = Field(description="Memories not superseded.")
    wings: dict[str, int]
    rooms: dict[str, int] = Field(description="The rooms with the most memories (at most 200), largest first.")
    room_count: int = Field(description="How many distinct rooms there are.")
    halls: dict[str, int]
    categories: dict[str, int]
    search_index: SearchIndexState
    journal: JournalState
    feeding: FeedingState | None = None


class DuplicateCheck(BaseModel):
    """palace_check_duplicate: the closest current memory."""

    is_duplicate: bool = Field(description="Closest similarity >= threshold.")
    same_text: bool = Field(description="The closest memory has exactly this text (palace_store would return it).")
    threshold: float
    closest: Memory | None


class SupersedeMark(BaseModel):
    id: int
    ok: bool
    error: str | None = None
    previously_superseded_by: int | None = None


class SupersedeResult(BaseModel):
    """palace_supersede: the new memory and how each old one was marked."""

    memory: Memory
    reason: str
    marked: list[SupersedeMark]
    redactions: dict[str, int] = _redactions()


class DeleteOutcome(BaseModel):
    id: int
    deleted: bool
    missing: bool


class DeleteCounts(BaseModel):
    deleted: int
    missing: int


class DeleteResult(BaseModel):
    """palace_delete: per-id outcomes."""

    deleted: list[DeleteOutcome]
    counts: DeleteCounts
    reason: str


class DeleteSample(BaseModel):
    id: int
    wing: str | None = None
    room: str | None = None
    hall: str | None = None
    text_preview: str


class DeleteByFilterResult(BaseModel):
    """palace_delete_by_filter: what the filter matches and what was deleted."""

    dry_run: bool
    matched_count: int
    deleted_count: int
    breakdown_by_wing: dict[str, int]
    breakdown_by_hall: dict[str, int]
    sample: list[DeleteSample]
    reason: str


class GainTotals(BaseModel):
    calls: int
    failed: int
    bytes_out: int
    estimated_tokens: int
    baseline_tokens: int
    tokens_saved: int


class GainOperation(BaseModel):
    calls: int
    failed: int
    estimated_tokens: int
    baseline_tokens: int
    tokens_saved: int
    avg_exec_ms: float


class GainResult(BaseModel):
    """palace_gain: calls and tokens saved, overall and per operation."""

    estimate: str
    since: str | None
    enabled: bool
    totals: GainTotals
    saved_percent: float
    per_operation: dict[str, GainOperation]


class RecentMemory(BaseModel):
    """A memory in the wake-up context: its filing and the start of its text."""

    id: int
    text: str = Field(description="The first 400 characters of the text.")
    truncated: bool = Field(description="The text was cut; palace_recall has all of it.")
    category: str | None = None
    wing: str | None = None
    room: str | None = None
    hall: str | None = None
    timestamp: str | None = None


class WakeUp(BaseModel):
    """The session-start context: palace status plus the newest current memories, within 2,000 tokens."""

    status: StatusResult
    recent: list[RecentMemory]
