"""What every management command shares before it touches the palace: a prepared database, one held-palace message."""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError

from palace.errors import StoreLocked


def prepare_database(*, required: bool = True) -> None:
    """Apply any unapplied migration (as `serve` does), so every command works on a brand-new data dir.

    A read-only command passes required=False: a database it cannot prepare (a read-only data dir) is left
    to fail, if it must, with that command's own error about what it could not open.
    """
    try:
        # Output goes to stderr: in runmcp, stdout carries only the protocol.
        call_command("migrate", interactive=False, verbosity=0, stdout=sys.stderr)
    except DatabaseError as exc:
        if not required:
            return
        env = settings.PALAZZO
        raise CommandError(
            f"cannot prepare the database ({exc}); check that the data dir {env.data_dir} (or DATABASE_URL) "
            "is writable by this user, or run `palazzo migrate` as its owner"
        ) from None


def held_palace_error(exc: StoreLocked) -> CommandError:
    """The refusal every store-writing command gives when a running server holds the embedded palace."""
    return CommandError(
        f"{exc}\nThe palace is held by a running server: send the file to it with "
        f"`palazzo ingest --file FILE --url http://{settings.PALAZZO.bind}`, "
        "or stop the server and run this again.",
        returncode=2,
    )
