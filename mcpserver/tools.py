"""The eleven palace tools: name, description, schema, annotations and the one palace call each makes."""

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

    def annotations(self) -> ToolAnnotations:
        return ToolAnnotations(
            title=self.title,
            read_only_hint=self.read_only,
            destructive_hint=self.destructive,
            idempotent_hint=self.idempotent,
            open_world_hint=False,
        )

    def items(self, arguments: dict[str, Any]) -> int:
        """How many items the call carries (for the gain estimate of batches)."""
        if self.batch_key is None:
            return 1
        value = arguments.get(self.batch_key)
        return len(value) if isinstance(value, list) else 0


def _palace_function(module: str, name: str) -> Callable[..., dict[str, Any]]:
    # Imported on first call: stdio answers initialize before numpy and the store bindings load.
    function: Callable[..., dict[str, Any]] = getattr(importlib.import_module(f"palace.{module}"), name)
    return function


def _store(arguments: dict[str, Any], caller: Caller) -> dict[str, Any]:
    memory = _palace_function("services", "store")(**arguments, added_by=caller.added_by, wings=caller.wings)
    return memory | {"duplicate_of": memory["id"] if memory["duplicate"] else None}


def _writer(name: str) -> Call:
    """A palace.services write, stamped with the client's identity, inside its token's wings."""
    return lambda arguments, caller: _palace_function("services", name)(
        **arguments, added_by=caller.added_by, wings=caller.wings
    )


def _reader(name: str) -> Call:
    """A palace.selectors read that does not touch memories."""
    return lambda arguments, _caller: _palace_function("selectors", name)(**arguments)


def _scoped_reader(name: str) -> Call:
    """A palace.selectors read of counts, inside the token's wings."""
    return lambda arguments, caller: _palace_function("selectors", name)(**arguments, wings=caller.wings)


def _audited_reader(name: str) -> Call:
    """A palace.selectors read of memories, inside the token's wings, audited under the caller's identity."""
    return lambda arguments, caller: _palace_function("selectors", name)(
        **arguments, actor=caller.added_by, wings=caller.wings
    )


_MEMORY_MODEL = (
    "Memories are filed like a memory palace: wing (area) > room (topic) > hall (kind: facts, events, "
    "decisions, discoveries, preferences), plus a category."
)

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="palace_store",
        operation="store",
        title="Store a memory",
        description=(
            "Save one memory verbatim into the palace so later sessions can find it. "
            f"{_MEMORY_MODEL} Store the exact wording; do not summarise. "
            "Use palace_store_batch for more than a few memories, and palace_supersede (not a new store) when "
            "the memory corrects or updates an existing one. "
            "Duplicates are safe: if a current memory with exactly the same text exists, nothing is written and "
            "that memory is returned with duplicate=true and duplicate_of=<its id>. "
            "Returns the memory with its id (>= 1000000000), timestamp and added_by."
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
            "Save 1-256 memories in one call (one embedding pass, one write): for imports, migrations and "
            "end-of-session dumps. Each item has the same fields as palace_store. Items are checked one by one: "
            "an invalid item gets status 'failed' with the error while the others are stored; an item whose "
            "text already exists as a current memory (or repeats an earlier item) gets status 'duplicate' with "
            "the existing memory and duplicate_of, and is not written again ('skipped' with skip_duplicates). "
            "Returns items in input order ({index, status, memory, duplicate_of, error}) and counts "
            "{stored, duplicates_returned, skipped_duplicates, failed}. An empty or oversized list is refused."
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
            "Semantic search: the memories closest in meaning to a natural-language query, best first. Use it "
            "before answering from memory or before storing, to see what is known. Optional exact filters "
            "(wing, category, room, hall) and a time window on the memory timestamp (since/until, RFC3339) "
            "narrow the search; recency_half_life_days favours recent memories. Superseded memories are hidden "
            "unless include_superseded=true. Use palace_recall when you already know the ids. Read-only. "
            "Returns {results: [memory with score], count}."
        ),
        input_schema=schemas.find,
        output_model=models.FindResult,
        call=_audited_reader("find"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_recall",
        operation="recall",
        title="Fetch memories by id",
        description=(
            "Fetch up to 100 memories by id, with no search: use it to read ids from palace_find, palace_status "
            "samples or earlier results in full. Superseded memories are returned too, with their history "
            "(valid_until, superseded_by, superseded_reason). Read-only. Returns {memories, missing} where "
            "missing lists the ids that do not exist."
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
            "Orient yourself: how many memories the palace holds (total, and current = not superseded), the "
            "collection and embedding model, counts by wing, hall and category, and whether the search index is "
            "being built (finds stay correct meanwhile, only slower). Call it at the start of a session or before "
            "choosing filters for palace_find. palace_taxonomy adds rooms. Read-only."
        ),
        input_schema=schemas.no_arguments,
        output_model=models.StatusResult,
        call=_scoped_reader("status"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_taxonomy",
        operation="taxonomy",
        title="Palace layout",
        description=(
            "The layout of the palace: value -> memory count for every wing, room, hall and category in use "
            "(superseded memories included). Use it to pick existing room names before storing, so related "
            "memories share a room, or to choose filters. palace_status gives totals. Read-only."
        ),
        input_schema=schemas.no_arguments,
        output_model=models.TaxonomyResult,
        call=_scoped_reader("taxonomy"),
        read_only=True,
    ),
    ToolSpec(
        name="palace_check_duplicate",
        operation="check_duplicate",
        title="Check for a duplicate",
        description=(
            "Before storing, see whether the palace already holds this text: returns the closest current "
            "memory, its similarity, is_duplicate (similarity >= threshold 0.95) and same_text (exactly the "
            "same text, which palace_store would return instead of writing). A near-duplicate with different "
            "wording is a hint to palace_supersede the old memory rather than store a second one. Read-only."
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
            "Replace 1-50 out-of-date memories with one corrected memory: when a fact changed, a decision was "
            "reversed or a memory was wrong. Stores the new text (no duplicate check) and marks each old memory "
            "with valid_until=now, superseded_by=<new id> and the reason. Old memories are kept for history: "
            "palace_find hides them unless include_superseded=true, palace_recall still shows them. Prefer this "
            "to palace_delete for corrections. Ids that do not exist are reported in marked with ok=false; if "
            "none exist, nothing is written. Returns {memory, reason, marked: [{id, ok, error, "
            "previously_superseded_by}]}."
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
        title="Delete memories (permanent)",
        description=(
            "DESTRUCTIVE: permanently delete up to 100 memories by id. Only with the human operator's explicit "
            "approval for this call: set confirm=true and name the approval in reason. For facts that changed "
            "use palace_supersede instead, which keeps history. Deleted records are kept in the server's "
            "journal, not in the palace. Ids that do not exist are reported as missing (repeating a delete is "
            "harmless). Returns {deleted: [{id, deleted, missing}], counts, reason}."
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
        title="Delete memories by filter (permanent)",
        description=(
            "MASS-DESTRUCTIVE: permanently delete every memory matching a filter (at least one of wing, "
            "category, room, hall, since, until; at most 1000 matches). Only with the operator's explicit "
            "approval: confirm=true and reason naming it. Two steps: first dry_run=true to get matched_count, "
            "per-wing and per-hall breakdowns and a sample of 10; then the same filter with dry_run=false and "
            "expected_count=<matched_count>; a different count refuses and deletes nothing. Superseded "
            "memories match only with include_superseded=true. Use palace_delete for known ids. Returns "
            "{dry_run, matched_count, deleted_count, breakdown_by_wing, breakdown_by_hall, sample, reason}."
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
        title="Token savings report",
        description=(
            "How much agent context the palace has saved: calls and estimated tokens per operation versus a "
            "hand-coded shell/curl equivalent (estimate@v1: response bytes / 4 against a fixed baseline per "
            "operation), overall and per operation, optionally since a moment (RFC3339). For reporting only; it "
            "does not touch memories. Read-only."
        ),
        input_schema=schemas.gain,
        output_model=models.GainResult,
        call=_reader("gain"),
        read_only=True,
    ),
)

TOOL_NAMES = tuple(spec.name for spec in TOOLS)
READ_TOOL_NAMES = tuple(spec.name for spec in TOOLS if spec.read_only)
