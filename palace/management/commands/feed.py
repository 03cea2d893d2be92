"""`palazzo feed [--harness H] [--room ROOM] [--dry-run] [--json] [PATH ...]`: feed harness transcripts.

Files or directories (default: every session of every harness found where it keeps them on this
machine: Claude Code, pi, Codex CLI, opencode, Gemini CLI; `--harness` narrows it to one). An explicit
feed treats each session as ended: an exchange still waiting for its reply is fed too (and superseded
when the reply comes). `--spool` drains the hook spool instead (what a hook starts, detached, when no
server holds the palace).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from tqdm import tqdm

from palace.errors import PalaceError, StoreLocked
from palace.feeding import exchanges, feeder, spool
from palace.feeding.exchanges import Destination, FeedReport
from palace.feeding.transcripts import HARNESSES, TranscriptError, default_roots, discover
from palace.management.database import prepare_database
from palace.management.forwarding import HeldPalaceCommand


def describe(report: FeedReport) -> str:
    """One line per session ("would store" in a dry run, which stores nothing)."""
    totals = report.totals()
    if report.status == "dry-run":
        counts = (
            f"would store {totals['stored']}, would supersede {totals['superseded']}, {totals['unchanged']} "
            f"unchanged, {totals['duplicates']} duplicates"
        )
    else:
        counts = (
            f"{totals['stored']} stored, {totals['superseded']} superseded, {totals['unchanged']} unchanged, "
            f"{totals['duplicates']} duplicates"
        )
    if totals["failed"]:
        counts += f", {totals['failed']} failed"
    extra = f" (+{len(report.subagents)} subagents)" if report.subagents else ""
    reason = f": {report.reason}" if report.reason else ""
    return f"{report.status} {report.path} [session {report.session}, room {report.room}]{extra}: {counts}{reason}"


class Command(HeldPalaceCommand):
    help = "Feed harness transcripts (files or directories; default: every harness's sessions on this machine)."
    path_options = ("paths",)

    def forwarded_here(self, argv: list[str]) -> bool:
        # `feed --spool` is the detached feeder a hook starts when no holder runs: it holds the palace itself.
        return "--spool" not in argv and super().forwarded_here(argv)

    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", help="transcript files or directories")
        parser.add_argument("--harness", choices=HARNESSES, help="the format (default: detected per file)")
        parser.add_argument(
            "--room", help="file every session of this run in ROOM (default: the project's name, from its cwd)"
        )
        parser.add_argument("--dry-run", action="store_true", help="show what would be stored; write nothing")
        parser.add_argument("--json", action="store_true", help="one JSON line per session, then a done line")
        parser.add_argument("--spool", action="store_true", help="drain the hook spool (what hooks start)")
        # Where each harness keeps its sessions, as the caller's environment says (the holder's may differ).
        parser.add_argument("--harness-root", action="append", default=[], help=argparse.SUPPRESS)

    def caller_arguments(self, options: dict[str, Any]) -> list[str]:
        if options["paths"] or options["spool"]:
            return []
        return [f"--harness-root={name}={root}" for name, root in default_roots().items()]

    def handle(self, *args: Any, **options: Any) -> None:
        env = settings.PALAZZO
        if options["spool"]:
            self._drain_spool()
            return
        if options["room"] is not None:
            try:
                options["room"] = exchanges.checked_room(options["room"])
            except PalaceError as exc:
                raise CommandError(str(exc)) from None
        try:
            if options["paths"]:
                roots = [Path(path).expanduser() for path in options["paths"]]
                found = list(discover(roots, options["harness"]))
            else:
                roots, found = self._discover_on_this_machine(options["harness"], options["harness_root"])
        except TranscriptError as exc:
            raise CommandError(str(exc)) from None
        if not found:
            self.stderr.write(f"feed: no transcripts under {', '.join(map(str, roots))}")
            return
        if env.remote_url:  # fail-closed: never the local palace
            from palace.feeding import remote

            try:
                reports = remote.feed_remote(
                    found, dry_run=options["dry_run"], progress=self._progress(len(found)), room=options["room"]
                )
            except remote.RemoteUnavailable as exc:
                raise CommandError(str(exc)) from None
            self._print(reports, options, shown=False)
            return
        prepare_database()
        try:
            reports = self._feed_here(found, options)
        except StoreLocked as exc:
            holder = spool.live_holder(env.data_dir)
            if holder is None or holder.get("role") != "server":
                raise CommandError(f"{exc}", returncode=2) from None
            for harness, path in found:
                job = spool.Job(harness=harness, path=str(path), event="feed", final=True, room=options["room"])
                spool.enqueue(env.data_dir, job)
            self.stderr.write(
                f"feed: the palace is held by {holder.get('command')} (pid {holder.get('pid')}); queued "
                f"{len(found)} transcripts for it to feed (see `palazzo status`)"
            )
            return
        if not options["dry_run"]:
            from palace.feeding import wakeup

            wakeup.refresh_snapshots(env.data_dir)  # SessionStart hooks read these
        self._print(reports, options, shown=True)

    @staticmethod
    def _discover_on_this_machine(harness: str | None, given: list[str]) -> tuple[list[Path], list[tuple[str, Path]]]:
        """Every harness's own sessions where it keeps them (each root read as its harness's format)."""
        known = default_roots()
        for pair in given:
            name, _, where = pair.partition("=")
            if name in known and where:
                known[name] = Path(where)
        roots: list[Path] = []
        found: list[tuple[str, Path]] = []
        for name, root in known.items():
            if harness not in (None, name):
                continue
            roots.append(root)
            if root.is_dir():
                found += discover([root], name)
        return roots, found

    def _progress(self, total: int) -> Any:
        return tqdm(total=total, unit="session", file=self.raw_stderr(), disable=not self.raw_stderr().isatty())

    def _feed_here(self, found: list[tuple[str, Path]], options: dict[str, Any]) -> list[FeedReport]:
        from palace.feeding.transcripts import parse_transcript

        reports = []
        with self._progress(len(found)) as bar:
            for harness, path in found:
                destination = Destination.configured(harness=harness, room=options["room"])
                try:
                    transcript = parse_transcript(path, harness)
                except (TranscriptError, OSError) as exc:
                    reports.append(
                        FeedReport(
                            harness=harness, path=str(path), session=None, room="", status="failed", reason=str(exc)
                        )
                    )
                    bar.update(1)
                    continue
                try:
                    report = exchanges.feed_transcript(
                        transcript=transcript, destination=destination, final=True, dry_run=options["dry_run"]
                    )
                except StoreLocked:
                    raise
                except PalaceError as exc:
                    report = FeedReport(
                        harness=harness, path=str(path), session=None, room="", status="failed", reason=str(exc)
                    )
                reports.append(report)
                if not options["json"]:
                    bar.write(describe(report), file=self.raw_stdout())
                bar.update(1)
        return reports

    def _print(self, reports: list[FeedReport], options: dict[str, Any], *, shown: bool) -> None:
        totals: Counter[str] = Counter()
        for report in reports:
            totals.update(report.totals())
            if options["json"]:
                self.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False))
            elif not shown:
                self.stdout.write(describe(report))
        statuses = Counter(report.status for report in reports)
        if options["json"]:
            self.stdout.write(
                json.dumps({"done": True, "sessions": len(reports), "statuses": statuses, "totals": totals})
            )
        counted = ", ".join(f"{count} {status}" for status, count in statuses.items())
        if options["dry_run"]:
            outcome = (
                f"{totals['stored']} memories would be stored, {totals['superseded']} superseded, "
                f"{totals['unchanged']} unchanged; nothing was written"
            )
        else:
            outcome = f"{totals['stored']} memories stored, {totals['superseded']} superseded, "
            outcome += f"{totals['unchanged']} unchanged"
        self.stderr.write(f"feed: {len(reports)} sessions ({counted}); {outcome}")
        if statuses["failed"]:
            raise SystemExit(1)

    def _drain_spool(self) -> None:
        env = settings.PALAZZO
        started = time.monotonic()
        if env.remote_url:
            from palace.feeding import remote

            reports = remote.drain_remote(env.data_dir)
        else:
            prepare_database()
            reports = feeder.run_detached_feeder(env.data_dir)
        for report in reports:
            self.stderr.write(f"feed --spool: {describe(report)}")
        self.stderr.write(f"feed --spool: {len(reports)} transcripts in {time.monotonic() - started:.1f} s")
