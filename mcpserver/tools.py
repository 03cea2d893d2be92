"""The palace tools: name, description, schema, annotations and the one palace call each makes."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_types import ToolAnnotations
from pydantic import BaseModel

from mcpserver import models, schemas
from mcpserver.schemas import PalazzoEnvironment

Call = Callable[[dict[str, Any], "Caller"], dict[str, Any]]


@dataclass(frozen=True)
class Caller:
    """Who calls a tool: the added_by stamp (and audit actor), and the wings its token is limited to."""

    added_by: str
    wings: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool; `call(arguments, caller)` makes its single palace call."""

    name: str
    operation: str
    title: str
    description: str
    input_schema: Callable[[PalazzoEnvironment], dict[str, Any]]
    output_model: type[BaseModel]
    call: Call
    read_only: bool
    destructive: bool = False
    idempotent: bool = True
    batch_key: str | None = None
    listed_by_default: bool = True  # False: only where the deployment asks for it (PALAZZO_GAIN_TOOL)

    def annotations(self) -> ToolAnnotations:
        # The title is the tool's own (not repeated here); destructive and idempotent mean nothing
        # for a read-only tool (MCP), so those are left out to keep tools/list short.
        if self.read_only:
            return ToolAnnotations(read_only_hint=True, open_world_hint=False)
        return ToolAnnotations(
            read_only_hint=False,
            destructive_hint=self.destructive,
            idempotent_hint=self.idempotent,
            open_world_hint=False,
        )

    def describe(self, env: PalazzoEnvironment) -> str:
        """The description a client shows the model, with what this deployment does to the text filled in."""
        return self.description.format(redaction=redaction_notice(env))

    def items(self, arguments: dict[str, Any]) -> int:
        """How many items the call carries (for the gain estimate of batches)."""
        if self.batch_key is None:
            return 1
        value = arguments.get(self.batch_key)
        return len(value) if isinstance(value, list) else 0


def redaction_notice(env: PalazzoEnvironment) -> str:
    """What a write does to secrets in the text under the deployment's redaction mode (PALAZZO_REDACTION_MODE)."""
    if env.redaction_mode == "off" or not env.redaction_packs:
        return "Redaction is off: the text is stored exactly as sent."
    if env.redaction_mode == "dry-run":
        return "Secrets are only counted (redaction dry-run): redactions says which rules matched."
    return (
        "Secrets (tokens, keys, passwords) are replaced by [REDACTED:<rule>] before anything is written; "
        "redactions counts them per rule."
    )


def _palace_function(module: str, name: str) -> Callable[..., dict[str, Any]]:
    # Imported on first call: stdio answers initialize before numpy and the store bindings load.
    function: Callable[..., dict[str, Any]] = getattr(importlib.import_module(f"palace.{module}"), name)
    return function


def _store(arguments: dict[str, Any], caller: Caller) -> dict[str, Any]:
    memory = _palace_function("writes.services", "store")(**arguments, added_by=caller.added_by, wings=caller.wings)
    return memory | {"duplicate_of": memory["id"] if memory["duplicate"] else None}


def _writer(name: str) -> Call:
    """A palace.writes.services write, stamped with the client's identity, inside its token's wings."""
    return lambda arguments, caller: _palace_function("writes.services", name)(
        **arguments, added_by=caller.added_by, wings=caller.wings
    )


def _reader(name: str) -> Call:
    """A palace.operations.gain read that does not touch memories."""
    return lambda arguments, _caller: _palace_function("operations.gain", name)(**arguments)


def _scoped_reader(name: str) -> Call:
    """A palace.operations.status read of counts, inside the token's wings."""
    return lambda arguments, caller: _palace_function("operations.status", name)(**arguments, wings=caller.wings)


def _audited_reader(name: str) -> Call:
    """A palace.reads.selectors read of memories, inside the token's wings, audited under the caller's identity."""
    return lambda arguments, caller: _palace_function("reads.selectors", name)(
        **arguments, actor=caller.added_by, wings=caller.wings
    )


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="palace_store",
        operation="store",
        title="Store a memory",
        description=(
            "Save one memory (text up to 32 KB) in your own exact words (never a summary), filed by wing "
            "(area) > room (topic) > hall (kind of statement) and category (subject); reuse the rooms "
            "palace_status lists. "
            "{redaction} A current memory with exactly this text is returned instead (duplicate=true), "
            "nothing written. Several memories: palace_store_batch; a correction: palace_supersede."
        ),
        input_schema=schemas.store,
        output_model=models.StoreResult,
        call=_store,
        read_only=False,
    ),
    ToolSpec(
        name="palace_store_batch",
        operation="store_batch",
        title="Store many memories",
        description=(
            "Save 2-256 memories in one call (one memory: palace_store), each as palace_store would, "
            "redaction included; an item's missing fields come from defaults. Per item, in input order: stored; "
            "duplicate (text already current, or an earlier item's; that memory returned); skipped (duplicate, "
            "with skip_duplicates); failed (with the error; the others are still stored)."
        ),
        input_schema=schemas.store_batch,
        output_model=models.BatchResult,
        call=_writer("store_batch"),
        read_only=False,
        batch_key="items",
    ),
    ToolSpec(
        name="palace_find",
        operation="find",
        title="Search memories",
        description=(
            "Search memories by meaning and keywords, best first (at most limit); use before answering from "
            "memory. A long memory comes back as the passages that match (text holds them joined by […] lines, "
            "passages their [start, end) and length the whole size); the answer stays within max_chars and cut "
            "says what was left out and how to read it (palace_recall with id, start, end). Each result is lean "
            "(id, text, score, timestamp); the filing all share is said once in shared (all_fields: every field). "
            "Filters are exact and combined; "
            "superseded memories are hidden unless include_superseded. score: relevance relative to a perfect "
            "match for this query, in (0, 1]; compare it only within one result list. No query: palace_browse."
        ),
        input_schema=schemas.find,
        output_model=models.FindResult,
        call=_audited_reader("find"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_browse",
        operation="browse",
        title="Browse memories",
        description=(
            "List memories newest first without a query: a room, wing, hall, category or everything, up to 100 "
            "a page; read-only. Within max_chars every memory's opening comes first, long ones cut to passages "
            "as in palace_find (palace_recall with start and end reads on). Pass next_cursor back as cursor for "
            "the next page (null after the last). With a question: palace_find."
        ),
        input_schema=schemas.browse,
        output_model=models.BrowseResult,
        call=_audited_reader("browse"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_recall",
        operation="recall",
        title="Fetch memories by id",
        description=(
            "Fetch up to 100 memories by id, read-only, superseded ones included with their history: use it for "
            "ids you were given or that a memory refers to (supersedes, superseded_by), or to read more of a "
            "memory palace_find cut to passages: one id with start and end gives exactly that range of its text "
            "(e.g. a passage's start - 2000 to its end + 2000). missing lists unknown ids."
        ),
        input_schema=schemas.recall,
        output_model=models.RecallResult,
        call=_audited_reader("recall"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_status",
        operation="status",
        title="Palace status",
        description=(
            "Counts of current memories (not superseded or expired) per wing, room (200 largest), hall and "
            "category: call at session start and before filing, to reuse existing rooms. Read-only; also the "
            "index and journal state, for operators. To search: palace_find."
        ),
        input_schema=schemas.no_arguments,
        output_model=models.StatusResult,
        call=_scoped_reader("status"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_check_duplicate",
        operation="check_duplicate",
        title="Check for a duplicate",
        description=(
            "Before storing, what palace_store would do with this text, redaction included; writes nothing. "
            "duplicate=true: a current memory has exactly this text and palace_store would return it. closest: "
            "that memory, else the most similar one; its score is the cosine of the embeddings. Measured with "
            "bge-small-en-v1.5 (bench/duplicate_bands.py): paraphrases 0.89-0.97, corrected facts 0.76-0.99, "
            "unrelated 0.37-0.59, so a high score means the same subject, not the same fact: read closest; "
            "a changed fact is a palace_supersede, the same fact needs no store."
        ),
        input_schema=schemas.check_duplicate,
        output_model=models.DuplicateCheck,
        call=_audited_reader("check_duplicate"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_supersede",
        operation="supersede",
        title="Correct memories",
        description=(
            "Correct memories: one new memory replaces up to 50 old ones, kept for history (hidden from find, "
            "shown by recall). Give only what changes: omitted fields, text and timestamp too, are copied "
            "from the first old memory. Unknown ids get ok=false; if none exist nothing is written. A new fact "
            "that replaces nothing: palace_store."
        ),
        input_schema=schemas.supersede,
        output_model=models.SupersedeResult,
        call=_writer("supersede"),
        read_only=False,
        idempotent=False,
    ),
    ToolSpec(
        name="palace_delete",
        operation="delete",
        title="Delete memories",
        description=(
            "Permanently delete memories by id (up to 100; no undo), only with the human operator's explicit "
            "approval: confirm must be true and reason must name it. A correction: palace_supersede; a memory "
            "that should lapse: ttl_days. Unknown ids come back missing; repeating is harmless."
        ),
        input_schema=schemas.delete,
        output_model=models.DeleteResult,
        call=_writer("delete"),
        read_only=False,
        destructive=True,
    ),
    ToolSpec(
        name="palace_delete_by_filter",
        operation="delete_by_filter",
        title="Delete by filter",
        description=(
            "Permanently delete what a filter matches (max 1000; no undo), only with the operator's explicit "
            "approval (confirm must be true). First dry_run=true: matched_count, breakdowns, sample; then "
            "expected_count=matched_count deletes (another count deletes nothing). Known ids: palace_delete."
        ),
        input_schema=schemas.delete_by_filter,
        output_model=models.DeleteByFilterResult,
        call=_writer("delete_by_filter"),
        read_only=False,
        destructive=True,
        idempotent=False,
    ),
    ToolSpec(
        name="palace_gain",
        operation="gain",
        title="Token savings",
        description=(
            "Operator telemetry: call only when a person asks what palazzo saved, never to answer from memory "
            "(that is palace_find). Calls and estimated tokens per operation against a hand-written shell/curl "
            "equivalent (response bytes / 4 vs a fixed baseline), optionally since a moment."
        ),
        input_schema=schemas.gain,
        output_model=models.GainResult,
        call=_reader("gain"),
        read_only=True,
        listed_by_default=False,
    ),
)

TOOL_NAMES = tuple(spec.name for spec in TOOLS)
READ_TOOL_NAMES = tuple(spec.name for spec in TOOLS if spec.read_only)
