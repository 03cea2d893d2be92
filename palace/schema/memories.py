"""How a memory looks in the store and to callers: its one schema, and the payload and public forms.

FIELDS below declares each field of a memory once: its kind, limits, vocabulary, descriptions and where
it applies. Everything else is derived from it: the forms that validate writes and restores
(palace.schema.forms, palace.operations.ingest), the stored payload and the public memory (below), the MCP tools' input
schemas and result models (mcpserver.schemas, mcpserver.models) and the REST API's models and OpenAPI
(palace.routes).
"""

from __future__ import annotations

import enum
import hashlib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from palace.schema.timefmt import EXAMPLE

MAX_TEXT_BYTES = 32 * 1024
MAX_TAG_CHARS = 64
MAX_SOURCE_FILE_CHARS = 1024
MAX_REASON_CHARS = 1000
MAX_STAMP_CHARS = 200
MAX_SUPERSEDE_IDS = 50
MAX_TTL_DAYS = 36_500
FIRST_MEMORY_ID = 1_000_000_000
# The largest id the palace allocates or accepts: 2**53 - 1, exact in every JSON parser (JavaScript
# included) and far below SQLite's and Qdrant's 2**63 - 1, so no counter arithmetic can overflow.
MAX_MEMORY_ID = 2**53 - 1


class Kind(enum.Enum):
    """What a field's value is; each kind has one form field (palace.schema.forms) and one JSON type."""

    TEXT = "text"  # verbatim text, 1 byte to MAX_TEXT_BYTES of UTF-8, never trimmed
    VOCABULARY = "vocabulary"  # one of the palace's values (palace.schema.vocabulary.active_vocabulary())
    ROOM = "room"  # a tag stored and matched in its canonical form (canonical_room)
    TAG = "tag"  # free text, trimmed, up to max_length characters (MAX_TAG_CHARS for every tag today)
    STRING = "string"  # free text up to max_length characters
    TIMESTAMP = "timestamp"  # RFC3339 with a zone, stored as UTC
    ID = "id"  # a memory id, FIRST_MEMORY_ID to MAX_MEMORY_ID
    IDS = "ids"  # memory ids, without repeats, at most max_length
    DAYS = "days"  # a number of days > 0, at most MAX_TTL_DAYS
    FLAG = "flag"  # true or false
    SCORE = "score"  # a search result's relevance, a number


class Group(enum.IntEnum):
    """What part of a memory a writable field gives; writes list their fields group by group, in this order."""

    CONTENT = 0  # the text
    FILING = 1  # where it is filed: category, wing, room, hall, and session and source_file
    TIME = 2  # when it happened
    EXPIRY = 3  # when it goes
    HISTORY = 4  # what only a restore (an /export line) carries: id, temporal links, writer


@dataclass(frozen=True)
class MemoryField:
    """One field of a memory and every place it applies."""

    name: str
    kind: Kind
    hint: str = ""  # what a writer is told (each MCP session reads it: keep it short)
    description: str = ""  # what the value means in results and in the OpenAPI; the hint when empty
    group: Group | None = None  # writable, in this group (None: never written by a caller)
    required: bool = False  # a store needs it (in the item or the batch defaults)
    batch_default: bool = False  # store_batch's defaults may give it
    supersede_hint: str = ""  # palace_supersede's hint when it differs (every writable field is inherited)
    filter_position: int | None = None  # position among the exact-match filters of find, browse, delete
    stored: bool = True  # in the store's payload
    returned: bool = True  # in every memory a caller gets (null when unset)
    always: bool = False  # never null in a returned memory
    max_length: int | None = None  # characters (bytes for TEXT, ids for IDS)
    strip: bool = True  # leading and trailing whitespace trimmed
    vocabulary: str | None = None  # the Vocabulary attribute listing the allowed values: wings, halls, categories

    @property
    def about(self) -> str:
        """The field's meaning for results and documentation."""
        return self.description or self.hint

    @property
    def restore_only(self) -> bool:
        """Written only by a restore: an exported line keeps it, a store or correction never sets it."""
        return self.group is Group.HISTORY


_FIELDS = (
    MemoryField(
        "id",
        Kind.ID,
        description="Memory id (>= 1000000000); pass it to palace_recall, palace_supersede, palace_delete.",
        group=Group.HISTORY,
        stored=False,  # the point's id, not part of its payload
        always=True,
    ),
    MemoryField(
        "text",
        Kind.TEXT,
        hint="Verbatim, never summarised.",
        description="The verbatim text.",
        group=Group.CONTENT,
        required=True,
        supersede_hint="Corrected text; omit to keep the old one.",
        always=True,
        max_length=MAX_TEXT_BYTES,
        strip=False,
    ),
    MemoryField(
        "category",
        Kind.VOCABULARY,
        hint="Subject: what it is about, whatever the wing.",
        group=Group.FILING,
        required=True,
        batch_default=True,
        filter_position=1,
        vocabulary="categories",
    ),
    MemoryField(
        "wing",
        Kind.VOCABULARY,
        hint="Top-level area of work or life; the broadest filing.",
        group=Group.FILING,
        required=True,
        batch_default=True,
        filter_position=0,  # first: the top of the palace, and what a token is scoped to
        vocabulary="wings",
    ),
    MemoryField(
        "room",
        Kind.ROOM,
        hint="Topic, free text; case and spacing ignored.",
        group=Group.FILING,
        required=True,
        batch_default=True,
        filter_position=2,
        max_length=MAX_TAG_CHARS,
    ),
    MemoryField(
        "hall",
        Kind.VOCABULARY,
        hint="Kind of statement, e.g. a fact, a decision or a preference.",
        group=Group.FILING,
        required=True,
        batch_default=True,
        filter_position=3,
        vocabulary="halls",
    ),
    MemoryField(
        "timestamp",
        Kind.TIMESTAMP,
        hint=f"When it happened, e.g. {EXAMPLE}; default now.",
        description="When it happened or was stored (RFC3339 UTC).",
        group=Group.TIME,
        supersede_hint="When it happened; omit to keep the old one.",
    ),
    MemoryField(
        "session",
        Kind.TAG,
        hint="Conversation or work session.",
        group=Group.FILING,
        batch_default=True,
        max_length=MAX_TAG_CHARS,
    ),
    MemoryField(
        "source_file",
        Kind.STRING,
        hint="File it is about.",
        group=Group.FILING,
        batch_default=True,
        max_length=MAX_SOURCE_FILE_CHARS,
    ),
    MemoryField(
        "valid_from", Kind.TIMESTAMP, description="Set on a memory created by palace_supersede.", group=Group.HISTORY
    ),
    MemoryField(
        "valid_until",
        Kind.TIMESTAMP,
        description="Set when the memory was superseded; null while current.",
        group=Group.HISTORY,
    ),
    MemoryField("superseded_by", Kind.ID, description="Id of the memory that replaced this one.", group=Group.HISTORY),
    MemoryField(
        "superseded_reason",
        Kind.STRING,
        description="Why it was superseded.",
        group=Group.HISTORY,
        max_length=MAX_REASON_CHARS,
    ),
    MemoryField(
        "supersedes",
        Kind.IDS,
        description="Ids this memory replaced.",
        group=Group.HISTORY,
        max_length=MAX_SUPERSEDE_IDS,
    ),
    MemoryField(
        "added_by",
        Kind.STRING,
        description="The MCP client that wrote it (name/version).",
        group=Group.HISTORY,
        max_length=MAX_STAMP_CHARS,
        strip=False,
    ),
    MemoryField(
        "import_id",
        Kind.TAG,
        description="The `palazzo import` that stored it (`palazzo import --undo ID` removes what it stored).",
        group=Group.HISTORY,
        max_length=MAX_TAG_CHARS,
    ),
    MemoryField(
        "expires_at",
        Kind.TIMESTAMP,
        # Terse, and ttl_days' bounds are the form's to enforce and explain: every character of a hint
        # is in each session's context, three times over (store, batch, supersede).
        hint="When it expires; a future moment.",
        description="When it expires (RFC3339 UTC); null = never.",
        group=Group.EXPIRY,
    ),
    MemoryField(
        "ttl_days",
        Kind.DAYS,
        hint="Or days to expiry: > 0, at most 36500.",
        description="Days until it expires (instead of expires_at).",
        group=Group.EXPIRY,
        stored=False,  # turned into expires_at
        returned=False,
    ),
    MemoryField(
        "expired",
        Kind.FLAG,
        description="palace_recall: true when expires_at has passed (hidden from find).",
        stored=False,  # derived from expires_at when read
    ),
    MemoryField("score", Kind.SCORE, description="Similarity score (search results only).", stored=False),
)
FIELDS: dict[str, MemoryField] = {field.name: field for field in _FIELDS}


def _by_group(fields: Iterable[MemoryField]) -> tuple[MemoryField, ...]:
    return tuple(sorted(fields, key=lambda field: int(field.group or 0)))  # stable: declaration order within a group


# A memory as the store keeps it and as callers get it, in this order.
STORED_FIELDS = tuple(field for field in _FIELDS if field.stored)
RETURNED_FIELDS = tuple(field for field in _FIELDS if field.returned)
# What a store (a palace_store call, a batch item, an /ingest line without id) and a correction may give.
WRITABLE_FIELDS = _by_group(field for field in _FIELDS if field.group is not None and not field.restore_only)
# What an /ingest line with an id (an exported memory) may give besides.
RESTORE_FIELDS = _by_group(field for field in _FIELDS if field.restore_only)
REQUIRED_FIELDS = tuple(field for field in WRITABLE_FIELDS if field.required)
BATCH_DEFAULT_FIELDS = tuple(field for field in WRITABLE_FIELDS if field.batch_default)
FILTER_FIELDS = tuple(
    sorted(
        (field for field in _FIELDS if field.filter_position is not None), key=lambda field: field.filter_position or 0
    )
)

MEMORY_FIELDS = tuple(field.name for field in STORED_FIELDS)
# The content and filing fields: copied as given into a new memory's record, and inherited by a correction.
SCHEMA_KEYS = tuple(field.name for field in WRITABLE_FIELDS if field.group in (Group.CONTENT, Group.FILING))
# A correction inherits each of these it leaves out from the memory it corrects.
INHERITED_KEYS = tuple(field.name for field in WRITABLE_FIELDS if field.stored)
BATCH_DEFAULT_KEYS = tuple(field.name for field in BATCH_DEFAULT_FIELDS)
FILTER_KEYS = tuple(field.name for field in FILTER_FIELDS)
INTERNAL_FIELDS = ("text_hash",)


def python_type(field: MemoryField) -> Any:
    """The Python type of a field's value (for the pydantic models of the MCP results and the REST API)."""
    return {Kind.ID: int, Kind.IDS: list[int], Kind.DAYS: float, Kind.FLAG: bool, Kind.SCORE: float}.get(
        field.kind, str
    )


def text_hash(text: str) -> str:
    """Identity of a text for duplicate detection: equal texts have equal vectors."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_room(room: str) -> str:
    """The one stored form of a room: NFKC, casefolded, trimmed, inner whitespace runs as one space.

    "Palazzo", " palazzo " and "PALAZZO" are one room. The form is idempotent (checked over every
    code point), so a canonical room passes through unchanged.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", room).casefold())
    return " ".join(folded.split())


def stored_payload(memory: dict[str, Any]) -> dict[str, Any]:
    """The payload written to the store for a memory record (absent fields omitted, room canonical)."""
    payload = {key: memory[key] for key in MEMORY_FIELDS if memory.get(key) not in (None, "", [])}
    if isinstance(payload.get("room"), str):  # journal entries written before rooms were canonical
        payload["room"] = canonical_room(payload["room"])
    payload["text_hash"] = text_hash(memory["text"])
    return payload


def public_memory(point_id: int, payload: dict[str, Any], score: float | None = None) -> dict[str, Any]:
    """A memory as callers see it: every field present, null when unset."""
    memory: dict[str, Any] = {"id": point_id}
    for key in MEMORY_FIELDS:
        memory[key] = payload.get(key)
    if score is not None:
        memory["score"] = round(score, 6)
    return memory
