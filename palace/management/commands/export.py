"""python manage.py export [--out FILE]: every memory as JSON Lines that `ingest` restores as-is."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from palace.errors import PalaceError
from palace.governance.audit import command_actor
from palace.management.database import prepare_database
from palace.operations import ingest as ingest_service


class Command(BaseCommand):
    help = "Write every memory (superseded ones included, every field) as JSON Lines, in id order."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", help="file to write (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        count = 0
        prepare_database(required=False)
        try:
            memories = ingest_service.export_memories(actor=command_actor("export"))
            with ExitStack() as stack:
                sink: IO[str] = (
                    stack.enter_context(open(options["out"], "w", encoding="utf-8")) if options["out"] else sys.stdout
                )
                for memory in memories:
                    sink.write(ingest_service.export_line(memory))
                    count += 1
                sink.flush()
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"cannot write {options['out'] or 'standard output'}: {exc.strerror or exc}") from None
        self.stderr.write(f"export: {count} memories written to {options['out'] or 'standard output'}")
