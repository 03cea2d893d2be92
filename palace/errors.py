"""The one exception tree of the palace; each entry point maps it once."""

from __future__ import annotations


class PalaceError(Exception):
    """Base of every error the palace reports to a caller."""

    code = "palace_error"


class InvalidInput(PalaceError):
    """Input broke a rule; nothing was written."""

    code = "invalid_input"

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{field}: {' '.join(messages)}" for field, messages in errors.items()))

    @classmethod
    def single(cls, field: str, message: str) -> InvalidInput:
        """Build the error for one field."""
        return cls({field: [message]})


class OutsideScope(InvalidInput):
    """A write to a wing the caller's token is not scoped to; nothing was written."""

    code = "outside_scope"


class ConfirmationRequired(InvalidInput):
    """A destructive operation was called without confirm=true."""

    code = "confirmation_required"


class ExpectedCountMismatch(PalaceError):
    """delete_by_filter matched a different number of memories than the caller expected."""

    code = "expected_count_mismatch"


class NotFound(PalaceError):
    """A referenced memory does not exist."""

    code = "not_found"


class StoreUnavailable(PalaceError):
    """The vector store could not be reached or did not answer in time."""

    code = "store_unavailable"


class StoreLocked(PalaceError):
    """The embedded store is held by another process."""

    code = "store_locked"


class ModelMismatch(PalaceError):
    """The collection was built by another embedding model."""

    code = "model_mismatch"


class EmbedderUnavailable(PalaceError):
    """The embedding backend failed or is missing its model."""

    code = "embedder_unavailable"


class ReadOnlyPalace(PalaceError):
    """A write was attempted on a read-only palace or data dir."""

    code = "read_only"
