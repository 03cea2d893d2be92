"""Database models: the write-ahead journal, usage (gain) events and the id allocator."""

from __future__ import annotations

from django.conf import settings
from django.db import models

FIRST_MEMORY_ID = 1_000_000_000


class JournalEntry(models.Model):
    """One mutation, recorded before the store is touched, holding what is needed to redo it."""

    class Operation(models.TextChoices):
        STORE = "store"
        SUPERSEDE = "supersede"
        DELETE = "delete"
        DELETE_BY_FILTER = "delete_by_filter"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPLIED = "applied"
        FAILED = "failed"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    operation = models.CharField(max_length=32, choices=Operation.choices, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    memory_ids = models.JSONField(default=list, help_text="Ids of the memories this entry wrote or removed.")
    wing = models.CharField(max_length=64, blank=True, db_index=True)
    added_by = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    payload = models.JSONField(help_text="Everything needed to redo the mutation.")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "journal entries"

    def __str__(self) -> str:
        return f"#{self.pk} {self.operation} {self.status} {self.memory_ids[:3]}"


class UsageEvent(models.Model):
    """One palace operation as seen by a caller, with its token-gain estimate."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    operation = models.CharField(max_length=32, db_index=True)
    tool = models.CharField(max_length=64, blank=True, db_index=True)
    ok = models.BooleanField(default=True)
    exec_ms = models.FloatField()
    bytes_out = models.PositiveIntegerField(default=0)
    estimated_tokens = models.PositiveIntegerField(default=0)
    baseline_tokens = models.PositiveIntegerField(default=0)
    wing = models.CharField(max_length=64, blank=True, db_index=True)
    added_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.operation} {'ok' if self.ok else 'failed'} {self.exec_ms:.1f} ms"

    @property
    def tokens_saved(self) -> int:
        """Baseline minus what palazzo spent, never negative."""
        return max(self.baseline_tokens - self.estimated_tokens, 0)


class IdAllocator(models.Model):
    """The next free memory id; only ever grows, so ids are never reused."""

    next_id = models.BigIntegerField(default=FIRST_MEMORY_ID)

    def __str__(self) -> str:
        return f"next id {self.next_id}"


class PalaceVocabulary(models.Model):
    """The palace's own wings, halls and categories (one row), recorded when it is created (schema.vocabulary)."""

    preset = models.CharField(max_length=64, help_text="The preset it started from; custom once edited.")
    wings = models.JSONField(default=list)
    halls = models.JSONField(default=list)
    categories = models.JSONField(default=list)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "palace vocabulary"

    def __str__(self) -> str:
        return f"vocabulary {self.preset}"


class ApiToken(models.Model):
    """A bearer token for the HTTP routes; only the SHA-256 of its secret is kept."""

    class Scope(models.TextChoices):
        READ = "read"
        WRITE = "write"

    name = models.CharField(max_length=64, unique=True, help_text="Stamped as token:<name> on every write it makes.")
    owner = models.CharField(max_length=200, blank=True, help_text="Who holds the token (a person or a team).")
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.WRITE)
    lookup = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False, db_index=True)
    wings = models.JSONField(
        default=list, blank=True, editable=False, help_text="The only wings it reads and writes; empty = every wing."
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="api_tokens",
        help_text="The person it belongs to: it stops working while they are inactive.",
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.scope}{', revoked' if self.revoked_at else ''})"

    @property
    def identity(self) -> str:
        """The added_by stamp of this token's writes."""
        return f"token:{self.name}"


class PalaceOverview(UsageEvent):
    """No table of its own: gives the admin's palace overview page its place in the admin index."""

    class Meta:
        proxy = True
        verbose_name = "palace overview"
        verbose_name_plural = "palace overview"


class AuditRecord(models.Model):
    """One read of the palace: who, what, which memories came back. Append-only (database triggers)."""

    created_at = models.DateTimeField(db_index=True, help_text="When the read happened.")
    actor = models.CharField(
        max_length=200, db_index=True, help_text="token:<name>, the MCP client's name, or manage.py <command>/<user>."
    )
    operation = models.CharField(max_length=32, db_index=True)
    query_sha256 = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the query's UTF-8 bytes.")
    query_length = models.PositiveIntegerField(null=True, blank=True, help_text="Characters in the query.")
    query_plain = models.TextField(blank=True, help_text="The (redacted) query, only with PALAZZO_AUDIT_QUERY_PLAIN=1.")
    filters = models.JSONField(default=dict, blank=True)
    result_ids = models.JSONField(default=list, blank=True)
    result_count = models.PositiveIntegerField(default=0)
    degraded = models.BooleanField(default=False, help_text="Answered from the keyword leg alone.")

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["actor", "created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.operation} ({self.result_count})"


class AuditPurge(models.Model):
    """Present only inside `manage.py audit purge`'s transaction: the one state in which audit rows may be deleted."""

    before = models.DateTimeField()
    actor = models.CharField(max_length=200)


class FedTranscript(models.Model):
    """One transcript fed into the palace: where it came from and how its feeding went."""

    harness = models.CharField(max_length=32)
    device = models.CharField(max_length=64)
    path = models.CharField(max_length=1024, help_text="The transcript file on its device.")
    session = models.CharField(max_length=64, blank=True, help_text="The harness session id (a subagent's own).")
    parent_session = models.CharField(max_length=64, blank=True, help_text="Set for a subagent transcript.")
    room = models.CharField(max_length=64, blank=True)
    first_fed_at = models.DateTimeField(auto_now_add=True)
    last_fed_at = models.DateTimeField(null=True, blank=True, db_index=True)
    exchanges_fed = models.PositiveIntegerField(default=0, help_text="Exchanges that have a memory.")
    memories_stored = models.PositiveIntegerField(default=0, help_text="Memories this transcript wrote.")
    memories_superseded = models.PositiveIntegerField(default=0, help_text="Corrections of exchanges that grew.")
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_fed_at"]
        constraints = [
            models.UniqueConstraint(fields=["harness", "device", "path"], name="fed_transcript_unique_source")
        ]

    def __str__(self) -> str:
        return f"{self.harness}@{self.device} {self.path}"


class FedExchange(models.Model):
    """One exchange (or part of one) of a fed transcript and the memory that holds it now."""

    transcript = models.ForeignKey(FedTranscript, on_delete=models.CASCADE, related_name="exchanges")
    key = models.CharField(max_length=200, help_text="The exchange's stable key in its transcript, #part when split.")
    part = models.PositiveSmallIntegerField(default=0, help_text="0, or which part of an exchange split past 32 KB.")
    memory_id = models.BigIntegerField()
    text_hash = models.CharField(max_length=64)
    fed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["transcript", "key"], name="fed_exchange_unique_key")]

    def __str__(self) -> str:
        return f"{self.key} -> {self.memory_id}"


class WakeUpSnapshot(models.Model):
    """A project's wake-up context, kept in the database when several hosts share the palace.

    With PostgreSQL and a Qdrant server (palace.engine.locks.shared_palace) every host answers /wake-up and
    every SessionStart hook reads from here, so the context does not depend on which host prepared it; one
    palazzo process alone keeps them in files of its data dir (palace.feeding.snapshots).
    """

    key = models.CharField(max_length=32, unique=True, help_text="snapshots.room_key: the room's hash, or _palace.")
    room = models.TextField(null=True, blank=True, help_text="The project (room); empty for the palace-wide one.")
    payload = models.JSONField(null=True, blank=True, help_text="The context and the ids it shows; empty: wanted.")
    journal_mark = models.BigIntegerField(default=0, help_text="The newest journal entry when it was prepared.")
    wanted = models.BooleanField(default=False, help_text="A hook asked for it: the next refresh prepares it.")
    written_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"wake-up {self.room or '(palace)'} @ journal {self.journal_mark}"
