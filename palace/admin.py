"""Read-only admin for the journal and usage events."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from palace.models import JournalEntry, UsageEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nobody adds, changes or deletes history."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    """The write-ahead journal."""

    list_display = ("id", "created_at", "operation", "status", "wing", "added_by", "memory_ids", "reason")
    list_filter = ("operation", "status", "wing", "created_at")
    search_fields = ("reason", "added_by", "memory_ids", "payload")
    date_hierarchy = "created_at"


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnlyAdmin):
    """Every palace call with its gain estimate."""

    list_display = (
        "id",
        "created_at",
        "operation",
        "tool",
        "ok",
        "exec_ms",
        "bytes_out",
        "estimated_tokens",
        "baseline_tokens",
    )
    list_filter = ("operation", "tool", "ok", "wing", "created_at")
    search_fields = ("operation", "tool", "added_by")
    date_hierarchy = "created_at"
