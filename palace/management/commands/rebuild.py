"""python manage.py rebuild: recreate the vector store from the journal."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from palace.errors import PalaceError, StoreLocked
from palace.management.database import held_palace_error, prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.writes import services


class Command(HeldPalaceCommand):
    help = "Recreate the vector store from the journal, re-embedding every memory with the configured model."
    exclusive = True  # it replaces the store: the holder runs it with nobody else connected

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database()
        try:
            result = services.rebuild()
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(json.dumps(result))
