"""Result models of the MCP tools: each tool's outputSchema and the shape of its structured content."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, create_model, model_serializer

from palace.feeding.status import FeedSource
from palace.schema.memories import RETURNED_FIELDS, MemoryField, python_type


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The outputSchema published for a tool whose structured content is model: an object and its keys.

    The SDK 1.x client (and other SDKs) validates every result against it, and Python's jsonschema
    first checks the schema itself against the 2020-12 metaschema, on every call, at 0.3-0.5 ms per
    subschema: palace_find's nine (results, its items, id, text, count, degraded ...) cost 2.5-5 ms
    of each find, its top-level object alone 0.3-0.6 ms. So the schema names the keys every result
    carries in one subschema (a memory-shaped result leaves its null fields out), and the tool
    descriptions say what they mean.
    """
    fields = model.model_fields
    if issubclass(model, WithoutNulls):
        return {"type": "object", "required": [name for name, field in fields.items() if field.default is not None]}
    return {"type": "object", "required": list(fields)}


class WithoutNulls(BaseModel):
    """A result that leaves out its null fields.

    A memory has nine fields that are null unless it was corrected, expires or came from a
    transcript: in a find of 10 short memories they were 1,860 of 6,130 characters, each shipped
    twice (the text block and the structured content) and read by the agent.
    """

    @model_serializer(mode="wrap")
    def _without_nulls(self, serialize: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in serialize(self).items() if value is not None}


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


def memory_model() -> type[WithoutNulls]:
    """One memory as the palace returns it: palace.schema.memories.RETURNED_FIELDS, in order; unset fields left out."""
    fields: dict[str, Any] = {field.name: _returned(field) for field in RETURNED_FIELDS}
    model: type[WithoutNulls] = create_model(
        "Memory",
        __doc__="One memory as the palace returns it; unset fields are left out.",
        __base__=WithoutNulls,
        __module__=__name__,
        **fields,
    )
    return model


if TYPE_CHECKING:  # the fields come from the memory schema at run time; to the type checker it is a model

    class Memory(WithoutNulls):
        """One memory as the palace returns it; unset fields are left out."""

else:
    Memory = memory_model()


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


class Passaged(Memory):
    """A memory whose text may be cut to passages."""

    length: int | None = Field(None, description="Characters in the whole memory.")
    passages: list[tuple[int, int]] | None = Field(
        None,
        description="Present when text holds only these [start, end) character ranges of the memory, joined by […] "
        "lines.",
    )


class FindResult(WithoutNulls):
    """palace_find: best matches first."""

    results: list[Passaged]
    count: int
    shared: dict[str, str] | None = Field(
        default=None, description="The filing (wing, room, hall, category, added_by) every result shares, said once."
    )
    degraded: bool = Field(default=False, description="True when the embedder was unavailable: keyword (BM25) only.")
    degraded_reason: str | None = Field(default=None, description="Why the results are keyword-only, when degraded.")
    cut: str | None = Field(default=None, description="What max_chars left out, and how to read it.")


class BrowseResult(BaseModel):
    """palace_browse: one page, newest first, and the cursor of the next (null at the end)."""

    memories: list[Passaged]
    count: int
    next_cursor: str | None
    cut: str | None = Field(default=None, description="What max_chars shortened or moved to the next page.")


class RecallResult(BaseModel):
    """palace_recall: the memories found (superseded ones included) and the ids that do not exist."""

    memories: list[Passaged]
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
    """palace_check_duplicate: what palace_store would do with the text, and the closest current memory."""

    duplicate: bool = Field(description="palace_store would return closest and write nothing.")
    closest: Memory | None
    redactions: dict[str, int] = Field(
        default_factory=dict, description="Redaction rule -> matches palace_store would replace in the text."
    )


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
