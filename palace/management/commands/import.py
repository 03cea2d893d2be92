"""`palazzo import SOURCE PATH`: move memories in from another memory server or a conversation archive.

SOURCE is one of memory-json, basic-memory, mempalace, mem0, mcp-memory-service, chatgpt, claude-ai or
qdrant (a Qdrant local-mode directory; `import_qdrant` for a server). The file is read and validated
whole first: a bad record refuses it, nothing stored, unless --skip-bad. Every record goes through the
store path (redaction, validation, the duplicate rule, the journal); a second run stores nothing. Every
memory stored carries the import's id, which `palazzo import --undo ID` removes again.
"""

from __future__ import annotations

import getpass
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
    help = (
        "Import memories from another memory server's files or a conversation archive, all or nothing per file; "
        "--undo ID takes an import back."
    )
    path_options = ("path",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", nargs="?", choices=imports.SOURCES, help="what wrote PATH")
        parser.add_argument("path", nargs="?", type=Path, help="the file or folder to read")
        parser.add_argument(
            "--dry-run", action="store_true", help="list what would be stored and where (wing/room/hall/category)"
        )
        parser.add_argument(
            "--skip-bad", action="store_true", help="store the good records of a file with bad ones (each reported)"
        )
        parser.add_argument("--undo", metavar="ID", help="remove every memory the import ID stored (journaled)")
        parser.add_argument("--json", action="store_true", help="one JSON line per source record, then a done line")
        for key in ("category", "wing", "hall"):
            parser.add_argument(f"--{key}", help=f"{key} for records that do not name one (in the vocabulary)")
        parser.add_argument("--room", help="room for records that do not name one (any name)")
        parser.add_argument("--collection", help="qdrant: the collection to read")
        parser.add_argument("--url", help="qdrant: a Qdrant server's URL to read instead of PATH")
        parser.add_argument("--api-key", help="qdrant: the server's API key")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["undo"] is not None:
            if options["source"] or options["path"]:
                raise CommandError("--undo ID takes no SOURCE or PATH")
            self._undo(options["undo"], options)
            return
        if options["source"] == "qdrant" and options["url"] and not options["path"]:
            self._qdrant(None, options)
            return
        if not options["source"] or not options["path"]:
            raise CommandError(
                f"name what to import: palazzo import SOURCE PATH (SOURCE: {', '.join(imports.SOURCES)})"
            )
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
        import_id = imports.new_import_id()
        dry_run = options["dry_run"]
        try:
            outcomes = imports.import_records(
                source=source,
                path=path,
                defaults=defaults,
                dry_run=dry_run,
                skip_bad=options["skip_bad"],
                import_id=import_id,
            )
            with tqdm(unit="record", file=self.raw_stderr(), disable=not self.raw_stderr().isatty()) as bar:
                for outcome in outcomes:
                    bar.update(1)
                    counts[outcome.status] = counts.get(outcome.status, 0) + 1
                    if options["json"]:
                        self.stdout.write(json.dumps(outcome.as_dict(), ensure_ascii=False))
                    elif outcome.memory is not None:
                        self.stdout.write(imports.dry_run_line(outcome.ref, outcome.memory, outcome.id))
                    if outcome.status == "failed" and len(failures) < SHOWN_FAILURES:
                        failures.append(f"  {outcome.ref}: {outcome.error}")
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except imports.ImportRefused as exc:
            if options["json"]:
                for record in exc.bad:
                    self.stdout.write(json.dumps({"ref": record.ref, "status": "failed", "error": record.error}))
                self.stdout.write(json.dumps({"done": False, "counts": {"failed": len(exc.bad)}, "stored": 0}))
            raise CommandError(str(exc)) from None
        except (InvalidInput, PalaceError) as exc:
            raise CommandError(str(exc)) from None
        stored = counts.get("stored", 0)
        if options["json"]:
            done: dict[str, Any] = {"done": True, "counts": counts}
            if not dry_run:
                done["import_id"] = import_id if stored else None
            self.stdout.write(json.dumps(done))
        shown = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no records"
        if dry_run:
            shown += " (dry run: nothing written)"
        elif stored:
            shown += f"; import id {import_id} (`palazzo import --undo {import_id}` removes what it stored)"
        self.stderr.write(f"import {source} {path}: {shown}")
        for line in failures:
            self.stderr.write(line)
        if counts.get("failed") and not options["skip_bad"]:
            sys.exit(1)

    def _undo(self, import_id: str, options: dict[str, Any]) -> None:
        prepare_database()
        try:
            result = imports.undo_import(import_id=import_id, added_by=f"palazzo import --undo/{_user()}")
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps({"import_id": import_id, "deleted": result["deleted"]}))
        already = " (already undone)" if not result["ids"] else ""
        self.stderr.write(f"import --undo {import_id}: {result['deleted']} memories deleted{already}")

    def _qdrant(self, path: Path | None, options: dict[str, Any]) -> None:
        if not options["collection"]:
            raise CommandError("import qdrant needs --collection, and PATH (a qdrant-client local directory) or --url")
        where = ["--url", options["url"]] if path is None else ["--path", str(path)]
        arguments = [*where, "--collection", options["collection"]]
        if options["api_key"]:
            arguments += ["--api-key", options["api_key"]]
        for key in ("category", "wing", "room", "hall"):
            if options[key]:
                arguments += [f"--default-{key}", options[key]]
        if options["json"]:
            arguments.append("--json")
        for flag in ("skip_bad", "dry_run"):
            if options[flag]:
                arguments.append("--" + flag.replace("_", "-"))
        call_command("import_qdrant", *arguments, stdout=self.stdout, stderr=self.stderr)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
