"""python manage.py redact [--dry-run]: scrub an existing palace with the redaction rules in force."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from palace.errors import PalaceError, StoreLocked
from palace.management.database import held_palace_error, prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.writes import scrub


class Command(HeldPalaceCommand):
    help = (
        "Rewrite every memory and journal entry that the redaction packs in force match (journaled), then "
        "rebuild the store from the scrubbed journal; --dry-run only counts. Run it with the server stopped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count the matches, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database()
        try:
            result = scrub.scrub(dry_run=options["dry_run"])
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(result))
