"""python manage.py export [--format jsonl|memory-json|markdown] [--out PATH]: every memory, to restore or to leave.

jsonl (the default) is what `ingest` restores as-is; memory-json is the official MCP memory server's
memory.json (what `import memory-json` brought in goes back as the same entities and relations); markdown
is a folder of notes (basic-memory's format; --out names the folder).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

from django.core.management.base import CommandError, CommandParser

from palace.errors import PalaceError
from palace.governance.audit import command_actor
from palace.management.database import prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.operations import ingest as ingest_service
from palace.operations import leaving


class Command(HeldPalaceCommand):
    help = "Write every memory (superseded ones included, every field) as JSON Lines, in id order."
    path_options = ("out",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", help="file to write (default: standard output); the folder for markdown")
        parser.add_argument(
            "--format",
            choices=("jsonl", "memory-json", "markdown"),
            default="jsonl",
            help="jsonl: palazzo's own (ingest restores it); memory-json: the official MCP memory server's; "
            "markdown: one note per memory (basic-memory)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        count = relations = 0
        prepare_database(required=False)
        if options["format"] == "markdown":
            if not options["out"]:
                raise CommandError("--format markdown needs --out FOLDER")
            try:
                count = leaving.write_markdown_notes(
                    ingest_service.export_memories(actor=command_actor("export")), Path(options["out"])
                )
            except PalaceError as exc:
                raise CommandError(str(exc)) from None
            except OSError as exc:
                raise CommandError(f"cannot write {options['out']}: {exc.strerror or exc}") from None
            self.stderr.write(f"export: {count} notes written under {options['out']}")
            return
        try:
            memories = ingest_service.export_memories(actor=command_actor("export"))
            with ExitStack() as stack:
                sink: IO[str] = (
                    stack.enter_context(open(options["out"], "w", encoding="utf-8"))
                    if options["out"]
                    else self.raw_stdout()
                )
                if options["format"] == "memory-json":
                    for line in leaving.memory_json_lines(memories):
                        sink.write(line)
                        count += 1
                        relations += line.startswith('{"type": "relation"')
                else:
                    for memory in memories:
                        sink.write(ingest_service.export_line(memory))
                        count += 1
                sink.flush()
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"cannot write {options['out'] or 'standard output'}: {exc.strerror or exc}") from None
        written = (
            f"{count - relations} entities and {relations} relation{'' if relations == 1 else 's'}"
            if options["format"] == "memory-json"
            else f"{count} memories"
        )
        self.stderr.write(f"export: {written} written to {options['out'] or 'standard output'}")
