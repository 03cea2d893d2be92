"""python manage.py expire [--dry-run]: delete the memories whose expires_at has passed (journaled)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from palace.errors import PalaceError, StoreLocked
from palace.governance.audit import command_actor
from palace.management.database import held_palace_error, prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.writes import services


class Command(HeldPalaceCommand):
    help = "Hard-delete every expired memory; the journal keeps their full records. --dry-run only lists them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count and list the expired memories only")

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database()
        try:
            result = services.expire(dry_run=options["dry_run"], added_by=command_actor("expire"))
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(result))
