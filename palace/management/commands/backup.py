"""`python manage.py backup --out PATH`: a consistent snapshot of the database and the journal (safe while serving)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from palace.errors import PalaceError
from palace.management.database import prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.operations.backup import create_backup


class Command(HeldPalaceCommand):
    help = (
        "Write a backup directory (never overwriting): the database snapshot, which holds the journal, tokens, users "
        "and usage, plus the JSONL journal mirror. The vector store is rebuilt from the journal on restore."
    )
    path_options = ("out",)
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, type=Path, help="New directory to create for the backup.")

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database(required=False)
        try:
            result = create_backup(out=options["out"])
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(result, indent=2))
