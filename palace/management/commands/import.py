"""`palazzo import SOURCE PATH`: move memories in from another memory server or a conversation archive.

SOURCE is one of memory-json, basic-memory, mempalace, mem0, mcp-memory-service, chatgpt, claude-ai or
qdrant (a Qdrant local-mode directory; `import_qdrant` for a server). Every record goes through the
store path (redaction, validation, the duplicate rule, the journal); a second run stores nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from tqdm import tqdm

from palace.errors import InvalidInput, PalaceError, StoreLocked
from palace.management.database import held_palace_error, prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.operations import imports
from palace.operations.ingest import ImportDefaults

SHOWN_FAILURES = 20


class Command(HeldPalaceCommand):
    help = "Import memories from another memory server's files or a conversation archive (see --help for sources)."
    path_options = ("path",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", choices=imports.SOURCES, help="what wrote PATH")
        parser.add_argument("path", type=Path, help="the file or folder to read")
        parser.add_argument("--dry-run", action="store_true", help="show what would be stored; write nothing")
        parser.add_argument("--json", action="store_true", help="one JSON line per source record, then a done line")
        for key in ("category", "wing", "room", "hall"):
            parser.add_argument(f"--{key}", help=f"{key} for records that do not name one (in the vocabulary)")
        parser.add_argument("--collection", help="qdrant: the collection to read")

    def handle(self, *args: Any, **options: Any) -> None:
        source: str = options["source"]
        path: Path = options["path"].expanduser()
        if source == "qdrant":
            self._qdrant(path, options)
            return
        defaults = ImportDefaults(
            category=options["category"], wing=options["wing"], room=options["room"], hall=options["hall"]
        )
        prepare_database()
        counts: dict[str, int] = {}
        failures: list[str] = []
        try:
            outcomes = imports.import_records(source=source, path=path, defaults=defaults, dry_run=options["dry_run"])
            with tqdm(unit="record", file=self.raw_stderr(), disable=not self.raw_stderr().isatty()) as bar:
                for outcome in outcomes:
                    bar.update(1)
                    counts[outcome.status] = counts.get(outcome.status, 0) + 1
                    if options["json"]:
                        self.stdout.write(json.dumps(outcome.as_dict(), ensure_ascii=False))
                    if outcome.status == "failed" and len(failures) < SHOWN_FAILURES:
                        failures.append(f"  {outcome.ref}: {outcome.error}")
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except (InvalidInput, PalaceError) as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps({"done": True, "counts": counts}))
        shown = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no records"
        self.stderr.write(
            f"import {source} {path}: {shown}" + (" (dry run: nothing written)" if options["dry_run"] else "")
        )
        for line in failures:
            self.stderr.write(line)
        if counts.get("failed"):
            sys.exit(1)

    def _qdrant(self, path: Path, options: dict[str, Any]) -> None:
        if not options["collection"]:
            raise CommandError("import qdrant needs --collection (and PATH, a qdrant-client local directory)")
        if options["dry_run"]:
            raise CommandError("import qdrant has no dry run; import into a scratch PALAZZO_DATA_DIR first")
        arguments = ["--path", str(path), "--collection", options["collection"]]
        for key in ("category", "wing", "room", "hall"):
            if options[key]:
                arguments += [f"--default-{key}", options[key]]
        if options["json"]:
            arguments.append("--json")
        call_command("import_qdrant", *arguments, stdout=self.stdout, stderr=self.stderr)
