"""Input JSON schemas of the MCP tools, built from the deployment's vocabularies.

The schemas tell the model what to send (descriptions, enums, ranges, defaults); they do not
validate. The palace's forms do, and their InvalidInput names the field and the rule.
"""

from __future__ import annotations

from typing import Any, Protocol

from palace.forms import (
    FIRST_MEMORY_ID,
    MAX_BATCH_ITEMS,
    MAX_DELETE_IDS,
    MAX_FILTER_DELETE,
    MAX_FIND_LIMIT,
    MAX_RECALL_IDS,
    MAX_SUPERSEDE_IDS,
    MAX_TAG_CHARS,
    MAX_TEXT_BYTES,
    MAX_TTL_DAYS,
)
from palace.timefmt import EXAMPLE

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


def _object(properties: Schema, required: tuple[str, ...] = ()) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def _text(description: str) -> Schema:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_TEXT_BYTES,
        "description": f"{description} 1 byte to 32 KB ({MAX_TEXT_BYTES} bytes) of UTF-8.",
    }


def _enum(description: str, values: tuple[str, ...]) -> Schema:
    return {"type": "string", "enum": list(values), "description": description}


def _tag(description: str) -> Schema:
    return {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS, "description": description}


def _timestamp(description: str) -> Schema:
    return {
        "type": "string",
        "format": "date-time",
        "description": f"{description} RFC3339 with a zone, e.g. {EXAMPLE}.",
    }


def _ids(description: str, maximum: int) -> Schema:
    return {
        "type": "array",
        "items": {"type": "integer", "minimum": FIRST_MEMORY_ID},
        "minItems": 1,
        "maxItems": maximum,
        "uniqueItems": True,
        "description": f"{description} 1 to {maximum} memory ids.",
    }


def _boolean(description: str, default: bool = False) -> Schema:
    return {"type": "boolean", "default": default, "description": description}


def _reason(description: str) -> Schema:
    return {"type": "string", "minLength": 1, "maxLength": 1000, "description": description}


def memory_properties(env: PalazzoEnvironment) -> Schema:
    """The fields of one memory to store (palace_store, batch items, palace_supersede)."""
    return {
        "text": _text("The memory, verbatim: store the exact wording, do not summarise."),
        "category": _enum("What kind of knowledge this is.", env.categories),
        "wing": _enum("The top-level area of life or work it belongs to.", env.wings),
        "room": _tag("The specific topic inside the wing, free text (e.g. a project or host name), 1-64 characters."),
        "hall": _enum("The kind of memory: a fact, an event, a decision, a discovery or a preference.", env.halls),
        "session": _tag("Optional: the work session or conversation it came from, 1-64 characters."),
        "source_file": {
            "type": "string",
            "maxLength": 1024,
            "description": "Optional: the file the memory is about or was taken from.",
        },
        "expires_at": _timestamp(
            "Optional: when the memory expires (then hidden from palace_find and wake-up, deleted by the operator's "
            "`manage.py expire`); must be in the future. Give this or ttl_days, not both."
        ),
        "ttl_days": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_TTL_DAYS,
            "description": "Optional: days from now until the memory expires (e.g. 30, or 0.5 for 12 hours).",
        },
    }


MEMORY_REQUIRED = ("text", "category", "wing", "room", "hall")


def filter_properties(env: PalazzoEnvironment) -> Schema:
    """The filters shared by palace_find and palace_delete_by_filter (exact matches, ANDed)."""
    return {
        "wing": _enum("Only memories in this wing.", env.wings),
        "category": _enum("Only memories of this category.", env.categories),
        "room": _tag("Only memories in this room (exact match)."),
        "hall": _enum("Only memories in this hall.", env.halls),
        "since": _timestamp("Only memories whose timestamp is at or after this moment."),
        "until": _timestamp("Only memories whose timestamp is at or before this moment."),
        "include_superseded": _boolean("Also match memories replaced by palace_supersede (hidden by default)."),
    }


def store(env: PalazzoEnvironment) -> Schema:
    properties = memory_properties(env)
    properties["timestamp"] = _timestamp("Optional: when the remembered thing happened; defaults to now.")
    return _object(properties, MEMORY_REQUIRED)


def store_batch(env: PalazzoEnvironment) -> Schema:
    item = store(env)
    item["description"] = "One memory, with the same fields as palace_store."
    return _object(
        {
            "items": {
                "type": "array",
                "items": item,
                "minItems": 1,
                "maxItems": MAX_BATCH_ITEMS,
                "description": f"1 to {MAX_BATCH_ITEMS} memories to store in one call.",
            },
            "skip_duplicates": _boolean(
                "Report duplicates as status 'skipped' instead of 'duplicate' (nothing is written either way)."
            ),
        },
        ("items",),
    )


def find(env: PalazzoEnvironment) -> Schema:
    properties: Schema = {
        "query": _text("What to look for, in natural language."),
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_FIND_LIMIT,
            "default": 5,
            "description": f"How many results to return, 1-{MAX_FIND_LIMIT}.",
        },
    }
    properties.update(filter_properties(env))
    properties["recency_half_life_days"] = {
        "type": "number",
        "minimum": 0,
        "default": 0,
        "description": "Favour recent memories: a memory this many days old counts half. 0 (default) = off.",
    }
    return _object(properties, ("query",))


def recall(env: PalazzoEnvironment) -> Schema:
    return _object({"ids": _ids("The ids to fetch.", MAX_RECALL_IDS)}, ("ids",))


def no_arguments(env: PalazzoEnvironment) -> Schema:
    return _object({})


def check_duplicate(env: PalazzoEnvironment) -> Schema:
    return _object({"text": _text("The candidate text, exactly as you would store it.")}, ("text",))


def supersede(env: PalazzoEnvironment) -> Schema:
    properties: Schema = {"supersedes": _ids("The memories the new text replaces.", MAX_SUPERSEDE_IDS)}
    properties.update(memory_properties(env))
    properties["text"] = _text("The corrected memory, verbatim.")
    properties["reason"] = _reason("Why the old memories are out of date (e.g. 'moved to new host'), 1-1000 chars.")
    return _object(properties, ("supersedes", *MEMORY_REQUIRED, "reason"))


def delete(env: PalazzoEnvironment) -> Schema:
    return _object(
        {
            "ids": _ids("The memories to delete for good.", MAX_DELETE_IDS),
            "reason": _reason("Who approved the deletion and why (e.g. 'operator approved: PII scrub')."),
            "confirm": {
                "type": "boolean",
                "const": True,
                "description": "Must be true: the operator explicitly approved this deletion.",
            },
        },
        ("ids", "reason", "confirm"),
    )


def delete_by_filter(env: PalazzoEnvironment) -> Schema:
    properties = filter_properties(env)
    properties.update(
        {
            "reason": _reason("Who approved the deletion and why."),
            "confirm": {
                "type": "boolean",
                "const": True,
                "description": "Must be true, also for a dry run: the operator explicitly approved this deletion.",
            },
            "dry_run": _boolean("Only count and sample the matches; delete nothing. Do this first."),
            "expected_count": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_FILTER_DELETE,
                "description": "Required to delete: the matched_count of the dry run. A different count refuses.",
            },
        }
    )
    return _object(properties, ("reason", "confirm"))


def gain(env: PalazzoEnvironment) -> Schema:
    return _object({"since": _timestamp("Optional: only count calls made at or after this moment.")})
