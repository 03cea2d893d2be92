"""python manage.py ingest --file F | --json < F [--url URL]: bulk-store JSON Lines in chunks of 256."""

from __future__ import annotations

import getpass
import json
import sys
import time
from contextlib import ExitStack
from typing import IO, Any

from django.core.management.base import CommandError, CommandParser
from tqdm import tqdm

from palace.errors import PalaceError, StoreLocked
from palace.management.database import held_palace_error, prepare_database
from palace.management.forwarding import HeldPalaceCommand
from palace.operations import ingest as ingest_service

# Failed lines named on stderr without --json; the rest are counted.
SHOWN_FAILURES = 20


def summary(counts: dict[str, int], seconds: float, redactions: dict[str, int] | None = None) -> str:
    """The one-line outcome of a run."""
    total = sum(counts.values())
    rate = total / seconds if seconds > 0 else 0.0
    redacted = ", ".join(f"{rule} {count}" for rule, count in sorted((redactions or {}).items()))
    return (
        f"ingest: {total} items: {counts['stored']} stored, {counts['duplicates_returned']} duplicates returned, "
        f"{counts['skipped_duplicates']} duplicates skipped, {counts['failed']} failed "
        f"({seconds:.1f} s, {rate:.0f} items/s)" + (f"; redacted: {redacted}" if redacted else "")
    )


def count_items(path: str) -> int | None:
    """Meaningful lines of a file, for the progress bar's total."""
    try:
        with open(path, "rb") as handle:
            return sum(1 for raw in handle if raw.strip() and not raw.lstrip().startswith(b"#"))
    except OSError:
        return None


class Command(HeldPalaceCommand):
    help = (
        "Store memories from JSON Lines (text, category, wing, room, hall, optional session, source_file, "
        "timestamp; lines with an id, as `export` writes them, are restored as-is) in chunks of 256."
    )
    path_options = ("file",)
    stdin_option = "file"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", help="JSON Lines file to read (default: standard input)")
        parser.add_argument(
            "--json", action="store_true", help="print every item's result (JSON Lines) and a done line on stdout"
        )
        parser.add_argument("--skip-duplicates", action="store_true", help="report duplicates as skipped")
        parser.add_argument(
            "--url",
            help="send the file to a running palazzo's POST /ingest (e.g. http://127.0.0.1:6334) instead of "
            "opening the palace here",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with ExitStack() as stack:
            source: IO[bytes] = (
                stack.enter_context(self._open(options["file"])) if options["file"] else sys.stdin.buffer
            )
            total = count_items(options["file"]) if options["file"] else None
            bar = stack.enter_context(
                tqdm(total=total, unit="item", file=self.raw_stderr(), disable=not self.raw_stderr().isatty())
            )
            started = time.perf_counter()
            if options["url"]:
                counts, errors = self._remote(options, source, bar)
            else:
                counts, errors = self._local(options, source, bar)
            bar.close()
        self.stderr.write(summary(counts, time.perf_counter() - started, self._redactions))
        if errors:
            self.stderr.write(f"ingest stopped: {errors}")
        if errors or counts["failed"]:
            raise SystemExit(1)

    _redactions: dict[str, int] = {}  # replaced per run, never mutated

    def _open(self, path: str) -> IO[bytes]:
        try:
            return open(path, "rb")
        except OSError as exc:
            raise CommandError(f"cannot read --file {path}: {exc.strerror or exc}") from None

    def _failure(self, shown: list[int], line: Any, error: Any) -> None:
        shown[0] += 1
        if shown[0] <= SHOWN_FAILURES:
            self.stderr.write(f"line {line}: {error}")
        elif shown[0] == SHOWN_FAILURES + 1:
            self.stderr.write("more failed lines not shown (use --json for every result)")

    def _local(self, options: dict[str, Any], source: IO[bytes], bar: Any) -> tuple[dict[str, int], str | None]:
        prepare_database()
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        try:
            reports = ingest_service.ingest(
                lines=ingest_service.read_lines(source.readline),
                skip_duplicates=options["skip_duplicates"],
                added_by=f"manage.py ingest/{user}",
                keep_added_by=True,  # the local operator may restore other writers' stamps
            )
        except StoreLocked as exc:
            raise held_palace_error(exc) from None
        except PalaceError as exc:
            raise CommandError(str(exc)) from None
        running = ingest_service.empty_counts()
        shown = [0]
        for report in reports:
            if report.error is not None:
                return running, f"chunk {report.chunk}: {report.error}"
            running, self._redactions = report.running, report.running_redactions
            bar.update(len(report.results))
            for result in report.results:
                if options["json"]:
                    self.stdout.write(json.dumps(result))
                elif result["status"] == "failed":
                    self._failure(shown, result["line"], result["error"])
        if options["json"]:
            self.stdout.write(json.dumps(ingest_service.done_line(running, self._redactions)))
        return running, None

    def _remote(self, options: dict[str, Any], source: IO[bytes], bar: Any) -> tuple[dict[str, int], str | None]:
        import httpx

        url = options["url"].rstrip("/") + "/ingest"
        params = {"skip_duplicates": "true"} if options["skip_duplicates"] else {}
        running = ingest_service.empty_counts()
        shown = [0]
        try:
            with httpx.stream(
                "POST",
                url,
                content=source,  # a file goes with its Content-Length, stdin chunked
                params=params,
                headers={"Content-Type": "application/x-ndjson"},
                timeout=httpx.Timeout(30.0, read=None),
            ) as response:
                if response.status_code != 200:
                    reason = response.read().decode("utf-8", "replace").strip()
                    raise CommandError(f"{url} answered {response.status_code}: {reason}")
                for raw in response.iter_lines():
                    if not raw.strip():
                        continue
                    line = json.loads(raw)
                    if options["json"]:
                        self.stdout.write(json.dumps(line))
                    if "error" in line:
                        return running, f"chunk {line['chunk']}: {line['error']}"
                    if line.get("done"):
                        self._redactions = line.get("redactions") or {}
                        return line["counts"], None
                    running = line["running"]
                    bar.update(line["items_in_chunk"])
                    if not options["json"]:
                        for failed in line.get("failed", []):
                            self._failure(shown, failed["line"], failed["error"])
        except httpx.HTTPError as exc:
            raise CommandError(f"cannot send to {url}: {type(exc).__name__}: {exc}") from None
        return running, "the server closed the stream before its done line"
