"""python manage.py import_qdrant --url URL --collection NAME: import a Rust palazzo or mcp-server-qdrant collection."""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Iterator
from typing import Any

from django.core.management.base import CommandError, CommandParser
from tqdm import tqdm

from palace.errors import PalaceError, StoreLocked
from palace.management.commands.ingest import SHOWN_FAILURES, summary
from palace.management.database import held_palace_error, prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.operations import imports
from palace.operations import ingest as ingest_service


class Command(HeldPalaceCommand):
    help = (
        "Import every point of a Qdrant collection written by the Rust palazzo (or mcp-server-qdrant), "
        "re-embedding with the current model and keeping ids, timestamps and temporal fields."
    )
    path_options = ("path",)

    def add_arguments(self, parser: CommandParser) -> None:
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--url", help="Qdrant server URL, e.g. http://127.0.0.1:6333")
        where.add_argument("--path", help="a qdrant-client local-mode directory instead of a server")
        parser.add_argument("--collection", required=True, help="collection to read")
        parser.add_argument("--api-key", help="Qdrant API key")
        for key in ("category", "wing", "hall"):
            parser.add_argument(
                f"--default-{key}", help=f"{key} for points whose {key} is missing or not in this palace's vocabulary"
            )
        parser.add_argument("--default-room", help="room for points that have none (e.g. mcp-server-qdrant's)")
        parser.add_argument("--skip-duplicates", action="store_true", help="report duplicates as skipped")
        parser.add_argument(
            "--skip-bad",
            action="store_true",
            help="store the good points of a collection with bad ones (each reported)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="list what would be stored and where (wing/room/hall/category)"
        )
        parser.add_argument("--json", action="store_true", help="print every point's result (JSON Lines) on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        defaults = ingest_service.ImportDefaults(
            category=options["default_category"],
            wing=options["default_wing"],
            room=options["default_room"],
            hall=options["default_hall"],
        )
        prepare_database()
        import_id = imports.new_import_id()
        try:
            total, reports = ingest_service.import_qdrant(
                collection=options["collection"],
                url=options["url"],
                path=options["path"],
                api_key=options["api_key"],
                defaults=defaults,
                skip_duplicates=options["skip_duplicates"],
                added_by=f"manage.py import_qdrant/{user}",
                skip_bad=options["skip_bad"],
                import_id=import_id,
                dry_run=options["dry_run"],
            )
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        if options["dry_run"]:
            self._list(reports, options)
            return
        started = time.perf_counter()
        running = ingest_service.empty_counts()
        redactions: dict[str, int] = {}
        failures = reassigned = 0
        error = None
        with tqdm(total=total, unit="point", file=self.raw_stderr(), disable=not self.raw_stderr().isatty()) as bar:
            for report in reports:
                if report.error is not None:
                    error = f"chunk {report.chunk}: {report.error}"
                    break
                running, redactions = report.running, report.running_redactions
                bar.update(len(report.results))
                for result in report.results:
                    if options["json"]:
                        self.stdout.write(json.dumps(result))
                    if result["status"] == "failed":
                        failures += 1
                        message = f"point {result['source_id']}: {result['error']}"
                    elif result["id"] != result["source_id"]:
                        reassigned += 1
                        message = f"point {result['source_id']} -> id {result['id']} ({result['status']})"
                    else:
                        continue
                    if not options["json"] and failures + reassigned <= SHOWN_FAILURES:
                        self.stderr.write(message)
        if options["json"]:
            stamp = import_id if running["stored"] else None
            self.stdout.write(json.dumps(ingest_service.done_line(running, redactions) | {"import_id": stamp}))
        self.stderr.write(
            summary(running, time.perf_counter() - started, redactions).replace("ingest:", "import_qdrant:", 1)
            + f"; {reassigned} points got new ids (their old ids were not integers >= 1000000000)"
            + (
                f"; import id {import_id} (`palazzo import --undo {import_id}` removes them)"
                if running["stored"]
                else ""
            )
        )
        if error:
            self.stderr.write(f"import stopped: {error}")
        if error or (running["failed"] and not options["skip_bad"]):
            raise SystemExit(1)

    def _list(self, reports: Iterator[ingest_service.ChunkReport], options: dict[str, Any]) -> None:
        """A dry run: every point as it would be stored, or why it cannot be."""
        counts: dict[str, int] = {}
        for report in reports:
            for result in report.results:
                counts[result["status"]] = counts.get(result["status"], 0) + 1
                if options["json"]:
                    self.stdout.write(json.dumps(result, ensure_ascii=False))
                elif result["status"] == "would-store":
                    self.stdout.write(imports.dry_run_line(f"point {result['source_id']}", result["memory"]))
                else:
                    self.stderr.write(f"  point {result['source_id']}: {result['error']}")
        if options["json"]:
            self.stdout.write(json.dumps({"done": True, "counts": counts}))
        shown = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no points"
        self.stderr.write(f"import_qdrant {options['collection']}: {shown} (dry run: nothing written)")
        if counts.get("failed") and not options["skip_bad"]:
            raise SystemExit(1)
