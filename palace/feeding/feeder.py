"""Who feeds the spool: the process holding the palace (a watcher thread in runmcp and serve) or,
when none runs, a detached `palazzo feed --spool` that gives the palace up to a server on request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import close_old_connections, connection

from palace.engine import holder as holder_module
from palace.engine import runtime
from palace.errors import PalaceError, StoreLocked
from palace.feeding import exchanges, spool, wakeup
from palace.feeding.exchanges import Destination, FeedReport
from palace.feeding.transcripts import TranscriptError, parse_transcript
from palace.models import JournalEntry

logger = logging.getLogger(__name__)

# How long a server starting while a detached feeder holds the palace waits for the feeder to let go.
TAKEOVER_SECONDS = 30.0
# How long a detached feeder waits for a server that just went away to release the palace.
RELEASE_SECONDS = 15.0
# How long a detached feeder keeps trying while the palace is busy and no server feeds the spool; then
# the jobs stay queued for the next hook or server.
FEEDER_PATIENCE_SECONDS = 600.0
SNAPSHOT_INTERVAL_SECONDS = 5.0
# A server's watcher starts feeding this long after the palace opened: its start-up work (migrate,
# the first drain and snapshots) is pure Python, and on the GIL it would slow the client's first calls
# (each Qdrant Edge call waits for the GIL on its way back). Hooks queue meanwhile; nothing waits on it.
WATCH_AFTER_SECONDS = 2.0


def feed_job(job: spool.Job, *, should_stop: Callable[[], bool] | None = None) -> FeedReport:
    """Parse one spooled transcript and feed it; an unreadable file is a failed report."""
    destination = Destination.configured(harness=job.harness, room=job.room)
    try:
        transcript = parse_transcript(Path(job.path), job.harness)
    except (TranscriptError, OSError) as exc:
        exchanges.record_failure(harness=job.harness, device=destination.device, path=job.path, error=str(exc))
        return FeedReport.failure(  # its next trigger queues it again anyway: no retry
            harness=job.harness, path=job.path, session=job.session_id, reason=str(exc), retry=False
        )
    return exchanges.feed_transcript(
        transcript=transcript, destination=destination, final=job.final, should_stop=should_stop
    )


def drain(data_dir: Path, *, should_stop: Callable[[], bool]) -> list[FeedReport]:
    """Feed every queued transcript (and those queued meanwhile) until the spool is empty or asked to stop."""
    reports: list[FeedReport] = []
    while not should_stop():
        waiting = spool.pending(data_dir)
        if not waiting:
            break
        for job_file in waiting:
            if should_stop():
                return reports
            claimed = spool.claim(job_file)
            if claimed is None:
                continue
            job, working = claimed
            try:
                report = feed_job(job, should_stop=should_stop)
            except Exception as exc:
                logger.exception("feeding %s failed", job.path)
                spool.give_back(working, failed=True)
                reason = f"{type(exc).__name__}: {exc}"
                reports.append(
                    FeedReport.failure(harness=job.harness, path=job.path, session=job.session_id, reason=reason)
                )
                continue
            reports.append(report)
            if report.status == "stopped":
                spool.give_back(working)
                return reports
            if report.status == "failed" and report.retry:
                spool.give_back(working, failed=True)
            else:
                spool.finish(working)
            logger.info("fed %s: %s %s", job.path, report.status, report.totals())
    return reports


def get_palace_taking_over(*, wait_seconds: float = TAKEOVER_SECONDS, ask_holder: bool = False) -> runtime.Palace:
    """Open the palace; when a detached feeder holds it, ask it to let go and retry for wait_seconds.

    ask_holder (`serve`): a palace holder (`palazzo holder`) serving the data dir is asked to hand it over
    too, and its sessions reconnect to this process.
    """
    data_dir = settings.PALAZZO.data_dir
    deadline = time.monotonic() + wait_seconds
    asked = False
    while True:
        try:
            palace = runtime.get_palace()
        except StoreLocked:
            if (
                ask_holder
                and time.monotonic() < deadline
                and holder_module.holder_running(data_dir)
                and holder_module.ask_to_leave(data_dir)  # a `serve` holding the palace refuses: no use waiting
            ):
                # Asked again until it is gone: one that is leaving already no longer answers, and one its
                # sessions started meanwhile is asked too.
                time.sleep(0.3)
                continue
            holder = spool.live_holder(data_dir)
            if time.monotonic() >= deadline or (holder is not None and holder.get("role") != "feeder"):
                raise
            if holder is None and not asked and not spool.pending(data_dir):
                raise  # not our feeder: some other process holds the shard
            if not asked:
                logger.info("the palace is held by a transcript feeder; asking it to release it")
                spool.request_stop(data_dir)
                asked = True
            time.sleep(0.2)
            continue
        if asked:
            spool.clear_stop(data_dir)
        return palace


class SpoolWatcher:
    """A thread of the process holding the palace: feeds the spool every poll and keeps snapshots fresh."""

    def __init__(
        self, data_dir: Path, *, poll_seconds: float = spool.POLL_SECONDS, start_after: float = WATCH_AFTER_SECONDS
    ) -> None:
        self.data_dir = data_dir
        self.poll_seconds = poll_seconds
        self.start_after = start_after
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="palazzo-spool", daemon=True)
        self._snapshot_mark: tuple[int | None, float] = (None, 0.0)

    def start(self) -> None:
        """Begin watching."""
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current batch."""
        self._stop.set()
        self._thread.join(timeout)

    def _should_stop(self) -> bool:
        spool.beat(self.data_dir)
        return self._stop.is_set()

    def _run(self) -> None:
        if self._stop.wait(self.start_after):
            return
        try:
            # runmcp does not migrate at start-up (the client is waiting); the feed state needs its tables.
            call_command("migrate", interactive=False, verbosity=0)
            spool.spool_dir(self.data_dir).mkdir(parents=True, exist_ok=True)
            spool.claim_holder(self.data_dir, role="server")
            spool.recover(self.data_dir)
            spool.requeue_failed(self.data_dir)
        except Exception:
            logger.exception("the spool watcher cannot start; hooks will start detached feeders instead")
            spool.release_holder(self.data_dir)
            connection.close()
            return
        try:
            while not self._stop.is_set():
                close_old_connections()
                try:
                    drain(self.data_dir, should_stop=self._should_stop)
                    self._refresh_snapshots()
                except Exception:
                    logger.exception("the spool watcher failed; retrying at the next poll")
                spool.beat(self.data_dir)
                self._stop.wait(self.poll_seconds)
        finally:
            spool.release_holder(self.data_dir)
            connection.close()

    def _refresh_snapshots(self) -> None:
        last_entry = JournalEntry.objects.order_by("-id").values_list("id", flat=True).first()
        previous, refreshed_at = self._snapshot_mark
        due = last_entry != previous and time.monotonic() - refreshed_at >= SNAPSHOT_INTERVAL_SECONDS
        if due or wakeup.wanted_rooms(self.data_dir) or previous is None:
            wakeup.refresh_snapshots(self.data_dir)
            self._snapshot_mark = (last_entry, time.monotonic())


_watcher: SpoolWatcher | None = None


def start_spool_watcher() -> SpoolWatcher | None:
    """Feed the spool from this process (it holds the palace); not when a remote palace is configured."""
    global _watcher
    env = settings.PALAZZO
    if env.remote_url or _watcher is not None:
        return _watcher
    _watcher = SpoolWatcher(env.data_dir)
    _watcher.start()
    return _watcher


def stop_spool_watcher() -> None:
    """Stop this process's watcher (shutdown)."""
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None


def _open_when_released(data_dir: Path) -> runtime.Palace:
    deadline = time.monotonic() + RELEASE_SECONDS
    while True:
        try:
            return runtime.get_palace()
        except StoreLocked:
            holder = spool.live_holder(data_dir)
            if time.monotonic() > deadline or (holder is not None and holder.get("role") == "server"):
                raise
            time.sleep(0.3)


def run_detached_feeder(data_dir: Path) -> list[FeedReport]:
    """`palazzo feed --spool`: drain the spool unless a server does; give the palace up when a server asks.

    The feeder stays until the spool is empty or a live server holds it: a server that takes the palace
    over and then goes away before feeding (the harness stops its MCP servers right after SessionEnd)
    leaves the queued session to this feeder again, never to nobody. It holds the palace only inside
    _feed_while_holding, which closes it and withdraws as holder whatever happens.
    """
    reports: list[FeedReport] = []
    with spool.feeder_lock(data_dir, wait_seconds=10.0) as locked:
        if not locked:
            logger.info("another feeder drains the spool")
            return reports
        spool.recover(data_dir)
        spool.requeue_failed(data_dir)
        deadline = time.monotonic() + FEEDER_PATIENCE_SECONDS
        while time.monotonic() < deadline:
            holder = spool.live_holder(data_dir)
            if holder is None and not spool.pending(data_dir):
                break
            if holder is not None and holder.get("role") == "server":
                # It feeds the spool while it lives; this feeder only watches, in case it goes first.
                if spool.watch_server(data_dir, seconds=spool.SERVER_WATCH_SECONDS):
                    break
                spool.recover(data_dir)  # what it had in hand when it went is queued again
                continue
            if spool.stop_requested(data_dir):
                if spool.stop_requester_alive(data_dir):
                    time.sleep(spool.POLL_SECONDS)  # a server is opening the palace; it announces itself
                    continue
                spool.clear_stop(data_dir)  # it died before taking over
            try:
                fed = _feed_while_holding(data_dir, reports)
            except PalaceError as exc:
                logger.error("cannot open the palace to feed: %s", exc)
                break
            if not fed:
                time.sleep(spool.POLL_SECONDS)
        if spool.pending(data_dir):
            logger.info("the spool stays queued for the next hook or server")
    return reports


def _feed_while_holding(data_dir: Path, reports: list[FeedReport]) -> bool:
    """Hold the palace and drain until the spool is empty or a server asks for it; False if it was not free."""
    spool.claim_holder(data_dir, role="feeder")

    def should_stop() -> bool:
        spool.beat(data_dir)
        return spool.stop_requested(data_dir)

    try:
        while spool.pending(data_dir) and not should_stop():
            try:
                _open_when_released(data_dir)
            except StoreLocked:
                logger.info("another process holds the palace; waiting for it to announce itself or go")
                return False
            reports.extend(drain(data_dir, should_stop=should_stop))
            if not should_stop():
                wakeup.refresh_snapshots(data_dir)
        return True
    finally:
        # Closed before the holder file goes: a server asking for the palace finds it free once we withdraw.
        runtime.close_palace()
        # Withdrawn first, checked second (by the caller's loop): a hook that saw this holder wrote its job before.
        spool.release_holder(data_dir)
