"""Input JSON schemas of the MCP tools, built from the palace's vocabularies (server.with_palace_vocabulary).

The schemas tell the model what to send (descriptions, enums, ranges, defaults); they do not
validate. The palace's forms do, and their InvalidInput names the field and the rule. Descriptions
are short: every tool's schema goes into the model's context on every session.
"""

from __future__ import annotations

from typing import Any, Protocol

from palace.reads.passages import BUDGET_HITS, BUDGET_SHARE, MAX_DEFAULT_CHARS, MIN_DEFAULT_CHARS
from palace.schema.forms import (
    DEFAULT_BROWSE_MAX_CHARS,
    DEFAULT_FIND_LIMIT,
    MAX_BATCH_ITEMS,
    MAX_BROWSE_LIMIT,
    MAX_DELETE_IDS,
    MAX_FILTER_DELETE,
    MAX_FIND_LIMIT,
    MAX_MAX_CHARS,
    MAX_RECALL_IDS,
    MAX_SUPERSEDE_IDS,
    MAX_TEXT_BYTES,
    MAX_TEXT_OFFSET,
    MIN_MAX_CHARS,
)
from palace.schema.memories import (
    BATCH_DEFAULT_FIELDS,
    FILTER_FIELDS,
    REQUIRED_FIELDS,
    WRITABLE_FIELDS,
    Kind,
    MemoryField,
)

Schema = dict[str, Any]


class PalazzoEnvironment(Protocol):
    """What the MCP server reads of the configuration (settings.PALAZZO, built by palazzo_site.environment).

    A protocol of the same name, so that the entry points describe what they need instead of
    importing the site above them.
    """

    @property
    def categories(self) -> tuple[str, ...]: ...
    @property
    def wings(self) -> tuple[str, ...]: ...
    @property
    def halls(self) -> tuple[str, ...]: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def log_level(self) -> str: ...
    @property
    def wake_up_count(self) -> int: ...
    @property
    def redaction_mode(self) -> str: ...
    @property
    def redaction_packs(self) -> tuple[str, ...]: ...
    @property
    def gain_tool(self) -> bool: ...


def _object(properties: Schema, required: tuple[str, ...] = ()) -> Schema:
    # No additionalProperties=false: the palace refuses unknown keys anyway, naming them, and the
    # keyword would cost 28 characters of every session's context per object.
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _text(description: str) -> Schema:
    return {"type": "string", "maxLength": MAX_TEXT_BYTES, "description": description}


def _timestamp(description: str) -> Schema:
    return {"type": "string", "format": "date-time", "description": description}


def _ids(description: str, maximum: int) -> Schema:
    return {
        "type": "array",
        "items": {"type": "integer"},
        "minItems": 1,
        "maxItems": maximum,
        "description": description,
    }


def _boolean(description: str, default: bool = False) -> Schema:
    return {"type": "boolean", "default": default, "description": description}


def _reason(description: str) -> Schema:
    return {"type": "string", "maxLength": 1000, "description": description}


def field_schema(field: MemoryField, env: PalazzoEnvironment, description: str) -> Schema:
    """The JSON schema of a memory field as a tool takes it (palace.schema.memories.FIELDS)."""
    if field.kind is Kind.VOCABULARY:
        assert field.vocabulary is not None
        return {"type": "string", "enum": list(getattr(env, field.vocabulary)), "description": description}
    if field.kind is Kind.TIMESTAMP:
        return _timestamp(description)
    if field.kind is Kind.DAYS:
        # No bounds here: the form enforces and explains them, and each character is in every session.
        return {"type": "number", "description": description}
    if field.kind in (Kind.TEXT, Kind.ROOM, Kind.TAG, Kind.STRING):
        return {"type": "string", "maxLength": field.max_length, "description": description}
    raise ValueError(f"{field.name} is not a tool argument")


def memory_properties(env: PalazzoEnvironment, *, correction: bool = False) -> Schema:
    """The fields of one memory to store (palace_store, batch items) or to correct (palace_supersede)."""
    return {
        field.name: field_schema(field, env, (correction and field.supersede_hint) or field.hint)
        for field in WRITABLE_FIELDS
    }


MEMORY_REQUIRED = tuple(field.name for field in REQUIRED_FIELDS)


def filter_properties(env: PalazzoEnvironment) -> Schema:
    """The filters shared by palace_find, palace_browse and palace_delete_by_filter (exact matches, ANDed).

    The vocabularies are palace_store's alone: a filter with another value is refused with the allowed
    ones listed, and each vocabulary repeated in five tools cost over a thousand characters a session.
    """
    properties = {
        field.name: _without_enum(field_schema(field, env, f"Only this {field.name}.")) for field in FILTER_FIELDS
    }
    properties.update(
        {
            "since": _timestamp("Timestamp at or after this."),
            "until": _timestamp("Timestamp at or before this."),
            "include_superseded": _boolean("Also superseded memories (hidden by default)."),
        }
    )
    return properties


def store(env: PalazzoEnvironment) -> Schema:
    return _object(memory_properties(env), MEMORY_REQUIRED)


def store_batch(env: PalazzoEnvironment) -> Schema:
    # Item fields mean what palace_store's do; their descriptions are not repeated (they cost context).
    properties = memory_properties(env)
    item = _object({key: _without_enum(_undescribed(schema)) for key, schema in properties.items()}, ("text",))
    defaults = {field.name: {"type": "string"} for field in BATCH_DEFAULT_FIELDS}
    return _object(
        {
            "items": {
                "type": "array",
                "items": item,
                "minItems": 1,
                "maxItems": MAX_BATCH_ITEMS,
                "description": "palace_store's fields; text, category, wing, room, hall here or in defaults.",
            },
            "defaults": _object(defaults) | {"description": "Fields that items leave out."},
            "skip_duplicates": _boolean("Report duplicates as 'skipped' without returning the existing memory."),
        },
        ("items",),
    )


def _without_enum(schema: Schema) -> Schema:
    return {key: value for key, value in schema.items() if key != "enum"}


def _undescribed(schema: Schema) -> Schema:
    return {key: value for key, value in schema.items() if key != "description"}


def find(env: PalazzoEnvironment) -> Schema:
    properties: Schema = {
        "query": _text("What to look for, in natural language."),
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_FIND_LIMIT,
            "default": DEFAULT_FIND_LIMIT,
            "description": "Results at most.",
        },
        "max_chars": {
            "type": "integer",
            "minimum": MIN_MAX_CHARS,
            "maximum": MAX_MAX_CHARS,
            "description": (
                "Budget of the whole answer in characters; raise it to read more per call. Default: "
                f"{round(100 * BUDGET_SHARE)}% of the first {BUDGET_HITS} results' whole text, "
                f"{MIN_DEFAULT_CHARS}-{MAX_DEFAULT_CHARS}."
            ),
        },
    }
    properties.update(filter_properties(env))
    properties["all_fields"] = _boolean(
        "Every field of each result (session, source_file, added_by ...), not the lean id, text, score, timestamp "
        "and the filing that differs (what all share is in shared)."
    )
    properties["recency_half_life_days"] = {
        "type": "number",
        "minimum": 0,
        "default": 0,
        "description": "Favour recent: a memory this many days old counts half; 0 = off.",
    }
    return _object(properties, ("query",))


def browse(env: PalazzoEnvironment) -> Schema:
    properties: Schema = {
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_BROWSE_LIMIT,
            "default": 20,
            "description": "Page size.",
        },
        "cursor": {"type": "string", "description": "The previous page's next_cursor."},
        "max_chars": {
            "type": "integer",
            "minimum": MIN_MAX_CHARS,
            "maximum": MAX_MAX_CHARS,
            "default": DEFAULT_BROWSE_MAX_CHARS,
            "description": "Budget of the whole answer in characters.",
        },
    }
    properties.update(filter_properties(env))
    return _object(properties)


def recall(env: PalazzoEnvironment) -> Schema:
    offset = {"type": "integer", "minimum": 0, "maximum": MAX_TEXT_OFFSET}
    return _object(
        {
            "ids": _ids("Memory ids.", MAX_RECALL_IDS),
            "start": offset | {"description": "With one id: the text from this character (a passage's start)."},
            "end": offset | {"description": "With one id: the text up to this character, excluded (default: the end)."},
        },
        ("ids",),
    )


def no_arguments(env: PalazzoEnvironment) -> Schema:
    return _object({})


def check_duplicate(env: PalazzoEnvironment) -> Schema:
    return _object({"text": _text("The text exactly as you would store it.")}, ("text",))


def supersede(env: PalazzoEnvironment) -> Schema:
    properties: Schema = {
        "supersedes": _ids("The out-of-date memories.", MAX_SUPERSEDE_IDS),
        "reason": _reason("Why, e.g. 'moved to a new host'."),
    }
    properties.update({key: _without_enum(schema) for key, schema in memory_properties(env, correction=True).items()})
    return _object(properties, ("supersedes", "reason"))


def delete(env: PalazzoEnvironment) -> Schema:
    return _object(
        {
            "ids": _ids("The memories to delete for good.", MAX_DELETE_IDS),
            "reason": _reason("Who approved it and why."),
            # Not "const": clients that hand schemas to Gemini fail the whole request on it; the form refuses
            # anything but true, naming the field.
            "confirm": {"type": "boolean", "description": "Must be true: the operator approved this."},
        },
        ("ids", "reason", "confirm"),
    )


def delete_by_filter(env: PalazzoEnvironment) -> Schema:
    properties = filter_properties(env)
    properties.update(
        {
            "reason": _reason("Who approved it and why."),
            "confirm": {"type": "boolean", "description": "Must be true (also for a dry run)."},
            "dry_run": _boolean("Only count and sample the matches. Do this first."),
            "expected_count": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_FILTER_DELETE,
                "description": "The dry run's matched_count; required to delete.",
            },
        }
    )
    return _object(properties, ("reason", "confirm"))


def gain(env: PalazzoEnvironment) -> Schema:
    return _object({"since": _timestamp("Optional: only calls at or after this moment (RFC3339).")})
