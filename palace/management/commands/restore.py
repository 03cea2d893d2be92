"""`python manage.py restore PATH`: load a backup into an empty data dir, then rebuild the store from the journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from palace.errors import PalaceError, StoreLocked
from palace.management.database import held_palace_error
from palace.operations.backup import restore_backup


class Command(BaseCommand):
    help = (
        "Restore a `backup` directory into an empty data dir (or empty database), then re-embed every memory "
        "into the store. Stop the server first."
    )
    # System checks would open the database (and create an empty SQLite file) before the emptiness check.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="A directory written by `palazzo backup --out`.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = restore_backup(source=options["path"])
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(result, indent=2, default=str))
