"""`manage.py audit export [--from] [--to] [--actor] --format csv|json [--out FILE]`, `audit purge --before DATE`."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, date, datetime
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from palace.governance import audit
from palace.management.database import prepare_database
from palace.schema.timefmt import EXAMPLE, parse_rfc3339


def moment(value: str) -> datetime:
    """An RFC3339 timestamp, or a plain date (midnight UTC)."""
    try:
        return parse_rfc3339(value)
    except ValueError:
        pass
    try:
        return datetime.combine(date.fromisoformat(value), datetime.min.time(), tzinfo=UTC)
    except ValueError:
        raise CommandError(f"{value!r} is not a date (2026-04-20) or an RFC3339 timestamp ({EXAMPLE})") from None


class Command(BaseCommand):
    help = "Export the read audit (CSV or JSON Lines) or purge records older than a date (itself audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        export = sub.add_parser("export", help="Write audit records in time order.")
        export.add_argument("--from", dest="since", help="first moment (date or RFC3339), inclusive")
        export.add_argument("--to", dest="until", help="last moment (date or RFC3339), inclusive")
        export.add_argument("--actor", help="only this actor (e.g. token:laptop)")
        export.add_argument("--format", choices=("csv", "json"), required=True)
        export.add_argument("--out", help="file to write (default: standard output)")
        purge = sub.add_parser("purge", help="Delete the records older than DATE (retention); the purge is audited.")
        purge.add_argument("--before", required=True, help="date or RFC3339 timestamp; older records are deleted")

    def handle(self, *args: Any, **options: Any) -> None:
        # An export only reads: on a data dir it cannot migrate it still says what it could not open.
        prepare_database(required=options["action"] == "purge")
        if options["action"] == "purge":
            before = moment(options["before"])
            deleted = audit.purge(before=before, actor=audit.command_actor("audit purge"))
            self.stderr.write(f"audit purge: {deleted} records older than {before.isoformat()} deleted")
            return
        since = moment(options["since"]) if options["since"] else None
        until = moment(options["until"]) if options["until"] else None
        rows = audit.records(since=since, until=until, actor=options["actor"])
        count = 0
        try:
            with ExitStack() as stack:
                sink: IO[str] | None = (
                    stack.enter_context(open(options["out"], "w", encoding="utf-8", newline=""))
                    if options["out"]
                    else None
                )
                for line in audit.export_lines(rows, format=options["format"]):
                    if sink is None:
                        self.stdout.write(line, ending="")
                    else:
                        sink.write(line)
                    count += line.count("\n")
                self.stdout.flush()
        except OSError as exc:
            raise CommandError(f"cannot write {options['out'] or 'standard output'}: {exc.strerror or exc}") from None
        self.stderr.write(f"audit export: {count} lines written to {options['out'] or 'standard output'}")
