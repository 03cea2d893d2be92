"""The REST API's request and response models (ninja Schemas), the memory's derived from palace.schema.memories.FIELDS.

The routes parse their bodies themselves (each error names the field and the rule, as the MCP tools'
do, and /ingest streams a body of any size line by line), so these models describe the API in
/api/openapi.json; they do not validate. Models of a streamed body's lines are published under
components/schemas and named from the operation's `x-item-schema` (see stream_content).
"""

from __future__ import annotations

from typing import Any

from ninja import Field, Schema
from ninja.openapi.schema import REF_TEMPLATE
from pydantic import BaseModel, create_model

from palace.feeding.devices import DEVICE_PATTERN
from palace.feeding.exchanges import MAX_KEY_CHARS
from palace.feeding.transcripts import HARNESSES
from palace.schema.memories import (
    FIELDS,
    FIRST_MEMORY_ID,
    MAX_MEMORY_ID,
    MAX_TTL_DAYS,
    RESTORE_FIELDS,
    STORED_FIELDS,
    WRITABLE_FIELDS,
    Kind,
    MemoryField,
    python_type,
)

MAX_EXCHANGES_PER_REQUEST = 256
MAX_TEXT_CHARS = 4 * 1024 * 1024
MAX_FIELD_CHARS = 4096


def _constraints(field: MemoryField) -> dict[str, Any]:
    """The JSON-schema limits of a memory field as pydantic Field arguments."""
    if field.kind is Kind.TIMESTAMP:
        return {"json_schema_extra": {"format": "date-time"}}
    if field.kind is Kind.ID:
        return {"ge": FIRST_MEMORY_ID, "le": MAX_MEMORY_ID}
    if field.kind is Kind.DAYS:
        return {"gt": 0, "le": MAX_TTL_DAYS}
    if field.max_length is not None:  # strings (TEXT counts UTF-8 bytes: at most as many characters), id lists
        return {"max_length": field.max_length}
    return {}


def _written(field: MemoryField, *, required: bool) -> tuple[Any, Any]:
    kind = python_type(field)
    if required:
        return kind, Field(description=field.about, **_constraints(field))
    return kind | None, Field(None, description=field.about, **_constraints(field))


def memory_schema(name: str, fields: tuple[MemoryField, ...], *, doc: str, required: tuple[str, ...]) -> type[Schema]:
    """A ninja Schema of the given memory fields, in order; required ones non-null, the rest optional."""
    definitions: dict[str, Any] = {field.name: _written(field, required=field.name in required) for field in fields}
    model: type[Schema] = create_model(name, __base__=Schema, __doc__=doc, __module__=__name__, **definitions)
    return model


_REQUIRED = tuple(field.name for field in WRITABLE_FIELDS if field.required)

IngestLine = memory_schema(
    "IngestLine",
    (*WRITABLE_FIELDS, *RESTORE_FIELDS, FIELDS["expired"]),
    doc=(
        "One memory per line (blank lines and lines starting with # are ignored). A line with an `id` (as GET "
        "/export writes them) is restored as-is with its temporal fields, idempotent by id; `expired` is checked "
        "and dropped."
    ),
    required=_REQUIRED,
)
ExportedMemory = memory_schema(
    "ExportedMemory",
    (FIELDS["id"], *STORED_FIELDS),
    doc="One memory with every field (superseded memories included); null when unset. POST /ingest restores it.",
    required=("id", "text"),
)


class IngestCounts(Schema):
    """Items per outcome."""

    stored: int
    duplicates_returned: int
    skipped_duplicates: int
    failed: int


class FailedLine(Schema):
    """An input line that was not stored, and why."""

    line: int
    error: str


class IngestProgress(Schema):
    """One processed chunk of up to 256 items."""

    chunk: int
    items_in_chunk: int
    counts: IngestCounts
    running: IngestCounts = Field(description="Counts over every chunk so far.")
    redactions: dict[str, int] = Field(description="Redaction rule -> matches in this chunk (never the text).")
    failed: list[FailedLine]


class IngestDone(Schema):
    """The last line of a run that processed every chunk."""

    done: bool = Field(description="Always true.")
    total: int
    counts: IngestCounts
    redactions: dict[str, int]


class IngestError(Schema):
    """An error while processing (e.g. the store or the journal failing): the stream ends here."""

    chunk: int | None = Field(description="The chunk that failed (null for an internal error); earlier chunks stay.")
    error: str


class ApiError(Schema):
    """A refused request: the field and the rule, or why the palace cannot answer."""

    error: str


class FedExchange(Schema):
    """One exchange of a transcript, as the client parsed it."""

    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS, description="Stable identity within the transcript.")
    index: int = Field(ge=0, lt=10**9)
    prompt: str | None = Field(None, max_length=MAX_TEXT_CHARS)
    reply: str | None = Field(None, max_length=MAX_TEXT_CHARS)
    started_at: str = Field(json_schema_extra={"format": "date-time"})
    complete: bool = Field(description="The reply is written; an incomplete exchange is held until it is.")


class FedTranscript(Schema):
    """A transcript's exchanges (all or a slice) and, for a subagent, its parent's identity."""

    path: str = Field(min_length=1, max_length=MAX_FIELD_CHARS)
    session_id: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    parent_session_id: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    agent_id: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    cwd: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    parent_path: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    parent_cwd: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    exchanges: list[FedExchange] = Field(max_length=MAX_EXCHANGES_PER_REQUEST)


class FeedRequest(Schema):
    """POST /feed: a transcript parsed where it is, from one harness on one device."""

    harness: str = Field(json_schema_extra={"enum": list(HARNESSES)})
    device: str = Field(pattern=f"^{DEVICE_PATTERN.pattern}$")
    final: bool = Field(False, description="The session ended: incomplete exchanges are fed as they are.")
    dry_run: bool = Field(False, description="Report what would be stored; write nothing.")
    room: str | None = Field(None, description="The room for the session; null: the project's, from its cwd.")
    transcript: FedTranscript


class WakeUpContext(Schema):
    """GET /wake-up: what a SessionStart hook injects."""

    context: str = Field(description="Palace status and memory previews, at most 8,000 characters.")
    room: str | None


def stream_content(media_type: str, *items: type[BaseModel], **schema: Any) -> dict[str, Any]:
    """An OpenAPI content entry for a streamed body: a string, each line one of items (in components/schemas)."""
    entry: dict[str, Any] = {"schema": {"type": "string", **schema}}
    refs = [{"$ref": REF_TEMPLATE.format(model=item.__name__)} for item in items]
    if refs:
        entry["x-item-schema"] = refs[0] if len(refs) == 1 else {"oneOf": refs}
    return {media_type: entry}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """An OpenAPI requestBody of model, for a route that parses the body itself (to name each bad field)."""
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}},
    }


# Models the routes name by reference (streamed lines, bodies parsed by hand): PalazzoAPI publishes them.
REFERENCED_MODELS: tuple[type[BaseModel], ...] = (
    IngestLine,
    IngestProgress,
    IngestDone,
    IngestError,
    ExportedMemory,
    FeedRequest,
)
