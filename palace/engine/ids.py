"""Memory ids: integers >= 1_000_000_000 from a counter that only grows, so none is reused."""

from __future__ import annotations

import time

from django.db import connection, transaction

from palace.errors import PalaceError
from palace.models import FIRST_MEMORY_ID, IdAllocator
from palace.schema.forms import MAX_MEMORY_ID


class IdSpaceExhausted(PalaceError):
    """The allocator reached MAX_MEMORY_ID (or holds a value no palazzo can have written)."""

    code = "id_space_exhausted"


def allocate_ids(count: int) -> list[int]:
    """Reserve count consecutive new ids (at least the current Unix milliseconds, like palazzo's)."""
    floor = max(int(time.time() * 1000), FIRST_MEMORY_ID)
    table = IdAllocator._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        # One statement that both reads and advances the counter, so concurrent callers never overlap.
        cursor.execute(
            f"UPDATE {table} SET next_id = (CASE WHEN next_id > %s THEN next_id ELSE %s END) + %s "
            "WHERE id = 1 RETURNING next_id",
            [floor, floor, count],
        )
        row = cursor.fetchone()
        if row is None:
            IdAllocator.objects.create(pk=1, next_id=floor + count)
            end = floor + count
        else:
            end = row[0]
        # Checked inside the transaction, so a refused allocation leaves the counter where it was. A
        # non-integer is a counter SQLite turned into a REAL on overflow: its ids would repeat.
        if not isinstance(end, int) or end - 1 > MAX_MEMORY_ID:
            raise IdSpaceExhausted(
                f"the id allocator is at {end!r}, past the largest memory id {MAX_MEMORY_ID}: no new id can be "
                "allocated without repeating one"
            )
    return list(range(end - count, end))


def reserve_existing_ids(ids: list[int]) -> None:
    """Move the counter past ids that arrive from outside (imports, restores)."""
    if not ids:
        return
    if max(ids) > MAX_MEMORY_ID:
        raise IdSpaceExhausted(f"id {max(ids)} is past the largest memory id {MAX_MEMORY_ID}")
    with transaction.atomic():
        allocator, _ = IdAllocator.objects.select_for_update().get_or_create(pk=1)
        if allocator.next_id <= max(ids):
            allocator.next_id = max(ids) + 1
            allocator.save(update_fields=["next_id"])
