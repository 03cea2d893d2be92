"""Memory ids: integers >= 1_000_000_000 from a counter that only grows, so none is reused."""

from __future__ import annotations

import time

from django.db import connection, transaction

from palace.models import FIRST_MEMORY_ID, IdAllocator


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
            end = int(row[0])
    return list(range(end - count, end))


def reserve_existing_ids(ids: list[int]) -> None:
    """Move the counter past ids that arrive from outside (imports, restores)."""
    if not ids:
        return
    with transaction.atomic():
        allocator, _ = IdAllocator.objects.select_for_update().get_or_create(pk=1)
        if allocator.next_id <= max(ids):
            allocator.next_id = max(ids) + 1
            allocator.save(update_fields=["next_id"])
