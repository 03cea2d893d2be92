"""The one exception tree of the palace; each entry point maps it once."""

from __future__ import annotations

import re

_OPERATOR_COMMAND = re.compile(r"`?(?:python )?manage\.py ([a-z_]+)[^`;,)]*`?")


class PalaceError(Exception):
    """Base of every error the palace reports to a caller."""

    code = "palace_error"
    advice = ""  # what an agent should do next, when the message does not say

    def for_agent(self) -> str:
        """The message an MCP tool returns: machine code first, then what happened and what to do.

        Commands meant for the operator (`python manage.py rebuild`) are named, not given as something
        to run: the agent cannot run them and should tell the operator.
        """
        message = _OPERATOR_COMMAND.sub(r"the operator's \1 command", str(self))
        return f"[{self.code}] {message}" + (f" ({self.advice})" if self.advice else "")


class InvalidInput(PalaceError):
    """Input broke a rule; nothing was written."""

    code = "invalid_input"
    advice = "nothing was changed; correct the named fields and call again"

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
    advice = "look the ids up with palace_find or palace_browse"


class StoreUnavailable(PalaceError):
    """The vector store could not be reached or did not answer in time."""

    code = "store_unavailable"
    advice = "nothing was changed; retry in a minute, and tell the operator if it persists"


class StoreLocked(PalaceError):
    """The embedded store is held by another process."""

    code = "store_locked"
    advice = "retrying will not help; tell the operator"


class ModelMismatch(PalaceError):
    """The collection was built by another embedding model."""

    code = "model_mismatch"
    advice = "retrying will not help; tell the operator"


class EmbedderUnavailable(PalaceError):
    """The embedding backend failed or is missing its model."""

    code = "embedder_unavailable"
    advice = "retry later; palace_find still answers by keywords meanwhile"


class ReadOnlyPalace(PalaceError):
    """A write was attempted on a read-only palace or data dir."""

    code = "read_only"
    advice = "reads still work; tell the operator that writes are refused"
