"""Wing scopes of API tokens: what a scoped caller may read and write, enforced inside the store's queries."""

from __future__ import annotations

from collections.abc import Sequence

from palace.errors import OutsideScope
from palace.store.base import MemoryFilter, StoredPoint, VectorStore

Wings = tuple[str, ...] | None  # None: every wing (no token, or a token without --wings)


def retrieve(store: VectorStore, ids: Sequence[int], wings: Wings) -> list[StoredPoint]:
    """Points by id in the asked order; for a scoped caller only those in its wings (others look missing)."""
    if wings is None:
        return store.retrieve(ids)
    by_id = {point.id: point for point in store.scroll(memory_filter=MemoryFilter(ids=tuple(ids), wings=wings))}
    return [by_id[memory_id] for memory_id in ids if memory_id in by_id]


def refuse_outside(wing: str, wings: Wings) -> None:
    """OutsideScope when a scoped caller writes to a wing it is not scoped to."""
    if wings is not None and wing not in wings:
        raise OutsideScope.single(
            "wing", f"{wing!r} is outside this token's wings ({', '.join(wings)}): nothing was written"
        )
