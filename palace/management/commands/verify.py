"""`python manage.py verify [--json]`: check that the vector store and the journal agree."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser

from palace.errors import PalaceError
from palace.management.database import prepare_database
from palace.management.forwarding import HeldPalaceCommand


class Command(HeldPalaceCommand):
    help = (
        "Compare the journal with the vector store: every journaled memory present with its text and temporal "
        "fields, every deleted one gone, no point the journal does not explain. Exits 1 on any difference."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        from palace.operations.verify import verify

        prepare_database(required=False)

        try:
            report = verify()
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self._print(report)
        if not report["ok"]:
            self.stdout.flush()
            sys.exit(1)

    def _print(self, report: dict[str, Any]) -> None:
        self.stdout.write(
            f"journal: {report['journal_entries']} entries ({report['journal_applied']} applied, "
            f"{report['journal_pending']} pending, {report['journal_failed']} failed)"
        )
        for failed in report["journal_latest_failed"]:
            self.stdout.write(f"  failed entry {failed['entry']} ({failed['operation']}): {failed['error']}")
        self.stdout.write(f"store: {report['store_points']} points; journal expects {report['expected_points']}")
        for kind, count in report["difference_counts"].items():
            if not count:
                continue
            self.stdout.write(f"{kind.replace('_', ' ')}: {count}")
            for item in report["differences"][kind][:20]:
                self.stdout.write(f"  {json.dumps(item, ensure_ascii=False)}")
        if report["duplicate_current_texts"]:
            self.stdout.write(f"note: {report['duplicate_current_texts']} texts are held by several current memories")
        self.stdout.write("store and journal agree" if report["ok"] else "store and journal DIFFER")
