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
    """Print a selector's result as aligned text, or JSON with --json."""

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
        self.stdout.write("\n".join(readable_lines(result)))


# A column whose values run longer than this leaves the table: it is printed under its row instead.
TABLE_CELL_CHARS = 40


def readable_lines(result: dict[str, Any], indent: str = "") -> list[str]:
    """A selector's result for a person: counts largest first, nested sections indented, lists of records as tables."""
    lines = []
    for key, value in result.items():
        if isinstance(value, (dict, list)) and not value:
            lines.append(f"{indent}{key}: none")
        elif isinstance(value, dict) and all(type(count) is int for count in value.values()):
            lines.append(f"{indent}{key}:")  # counts, largest first
            for name, count in sorted(value.items(), key=lambda pair: -pair[1]):
                lines.append(f"{indent}  {name:<32} {count:>8}")
        elif isinstance(value, dict) and all(isinstance(item, dict) for item in value.values()):
            lines.append(f"{indent}{key}:")  # records by name (per operation): one row each
            lines.extend(table_lines([{"name": name, **item} for name, item in value.items()], indent + "  "))
        elif isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.extend(readable_lines(value, indent + "  "))
        elif isinstance(value, list) and all(isinstance(item, dict) for item in value):
            lines.append(f"{indent}{key}:")
            lines.extend(table_lines(value, indent + "  "))
        elif isinstance(value, list):
            lines.append(f"{indent}{key}: {', '.join(str(item) for item in value)}")
        else:
            lines.append(f"{indent}{key}: {value}")
    return lines


def table_lines(records: list[dict[str, Any]], indent: str) -> list[str]:
    """Records as aligned columns; long values (errors, paths) on their own lines under their record."""
    columns = list(dict.fromkeys(key for record in records for key in record))
    cells = [{key: "-" if record.get(key) is None else str(record[key]) for key in columns} for record in records]
    wide = {key for key in columns if any(len(row[key]) > TABLE_CELL_CHARS for row in cells)}
    narrow = [key for key in columns if key not in wide]
    widths = {key: max(len(key), *(len(row[key]) for row in cells)) for key in narrow}
    numeric = {key for key in narrow if all(type(record.get(key)) in (int, float) for record in records)}

    def aligned(key: str, text: str) -> str:
        return text.rjust(widths[key]) if key in numeric else text.ljust(widths[key])

    lines = [indent + "  ".join(aligned(key, key) for key in narrow).rstrip()]
    for row in cells:
        lines.append(indent + "  ".join(aligned(key, row[key]) for key in narrow).rstrip())
        lines.extend(f"{indent}  {key}: {row[key]}" for key in columns if key in wide and row[key] != "-")
    return lines
