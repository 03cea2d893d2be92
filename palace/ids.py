"""Memory ids: integers >= 1_000_000_000 from a counter that only grows, so none is reused."""

from __future__ import annotations

import time

from django.db import transaction

from palace.models import FIRST_MEMORY_ID, IdAllocator


def allocate_ids(count: int) -> list[int]:
    """Reserve count consecutive new ids (at least the current Unix milliseconds, like palazzo's)."""
    with transaction.atomic():
        allocator, _ = IdAllocator.objects.select_for_update().get_or_create(pk=1)
        first = max(allocator.next_id, int(time.time() * 1000), FIRST_MEMORY_ID)
        allocator.next_id = first + count
        allocator.save(update_fields=["next_id"])
    return list(range(first, first + count))


def reserve_existing_ids(ids: list[int]) -> None:
    """Move the counter past ids that arrive from outside (imports, restores)."""
    if not ids:
        return
    with transaction.atomic():
        allocator, _ = IdAllocator.objects.select_for_update().get_or_create(pk=1)
        if allocator.next_id <= max(ids):
            allocator.next_id = max(ids) + 1
            allocator.save(update_fields=["next_id"])
