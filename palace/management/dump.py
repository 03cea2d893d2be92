"""Shared body of the commands that print a read-only view of the palace."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, CommandParser

from palace.errors import PalaceError
from palace.management.database import prepare_database
from palace.management.forwarding import HeldPalaceCommand


class DumpCommand(HeldPalaceCommand):
    """Print a selector's result as a table, or JSON with --json."""

    selector: Callable[[], dict[str, Any]]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        prepare_database(required=False)
        try:
            result = type(self).selector()
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(result, indent=2))
            return
        for key, value in result.items():
            if isinstance(value, dict) and all(type(count) is int for count in value.values()):
                self.stdout.write(f"{key}:")  # counts, largest first
                for name, count in sorted(value.items(), key=lambda pair: -pair[1]):
                    self.stdout.write(f"  {name:<32} {count:>8}")
            elif isinstance(value, dict):
                self.stdout.write(f"{key}:")
                for name, item in value.items():
                    self.stdout.write(f"  {name}: {item}")
            else:
                self.stdout.write(f"{key}: {value}")
