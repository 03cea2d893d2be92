"""Feeding a remote palace (PALAZZO_URL + PALAZZO_TOKEN): transcripts parsed here, exchanges POSTed to /feed.

Fail-closed: with a remote configured nothing is written to a local palace; a server that cannot be
reached (connection refused, DNS, timeout) or that refuses the token ends in one RemoteUnavailable
naming the URL and the reason, and a spooled job stays queued for the next trigger.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from palace.errors import PalaceError
from palace.feeding import spool
from palace.feeding.exchanges import FeedReport
from palace.feeding.transcripts import Exchange, Transcript, TranscriptError, parse_transcript

logger = logging.getLogger(__name__)

EXCHANGES_PER_REQUEST = 64
COUNTS = ("stored", "duplicates", "superseded", "unchanged", "failed")


class RemoteUnavailable(PalaceError):
    """The remote palace cannot be reached or refused the request."""

    code = "remote_unavailable"


def _exchange_json(exchange: Exchange) -> dict[str, Any]:
    return {
        "key": exchange.key,
        "index": exchange.index,
        "prompt": exchange.prompt,
        "reply": exchange.reply,
        "started_at": exchange.started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "complete": exchange.complete,
    }


def _post(payload: dict[str, Any]) -> dict[str, Any]:
    env = settings.PALAZZO
    url = f"{env.remote_url}/feed"
    headers = {"Authorization": f"Bearer {env.remote_token}"} if env.remote_token else {}
    timeout = httpx.Timeout(env.remote_timeout_seconds, connect=min(env.remote_timeout_seconds, 5.0))
    try:
        response = httpx.post(url, json=payload, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise RemoteUnavailable(f"cannot reach the palace at {env.remote_url}: {type(exc).__name__}: {exc}") from None
    if response.status_code == 401:
        raise RemoteUnavailable(
            f"the palace at {env.remote_url} refused the token (401): set PALAZZO_TOKEN to a valid write token"
        )
    if response.status_code != 200:
        raise RemoteUnavailable(
            f"the palace at {env.remote_url} answered {response.status_code}: {response.text[:300]}"
        )
    try:
        answer = response.json()
    except ValueError:
        raise RemoteUnavailable(f"the palace at {env.remote_url} answered something that is not JSON") from None
    if not isinstance(answer, dict):
        raise RemoteUnavailable(f"the palace at {env.remote_url} answered an unexpected body")
    return answer


def _chunks(items: Sequence[Exchange], size: int) -> Iterable[Sequence[Exchange]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def feed_one(
    transcript: Transcript,
    *,
    final: bool,
    dry_run: bool,
    parent: Transcript | None = None,
    room: str | None = None,
) -> FeedReport:
    """Send one parsed transcript (and its subagents) to the remote palace; room, when given, files it there."""
    report = FeedReport(harness=transcript.harness, path=str(transcript.path), session=transcript.session_id, room="")
    report.exchanges = len(transcript.exchanges)
    if not transcript.worth_keeping:
        report.status, report.reason = "skipped", "nothing worth keeping (no user prompt with text)"
        return report
    ready = [exchange for exchange in transcript.exchanges if exchange.complete or final]
    report.held_incomplete = len(transcript.exchanges) - len(ready)
    described = {
        "path": str(transcript.path),
        "session_id": transcript.session_id,
        "parent_session_id": transcript.parent_session_id,
        "agent_id": transcript.agent_id,
        "cwd": transcript.cwd,
        "parent_path": str(parent.path) if parent else None,
        "parent_cwd": parent.cwd if parent else None,
    }
    statuses = set()
    for chunk in _chunks(ready, EXCHANGES_PER_REQUEST) if ready else [[]]:
        answer = _post(
            {
                "harness": transcript.harness,
                "device": settings.PALAZZO.device,
                "final": final,
                "dry_run": dry_run,
                "room": room,
                "transcript": described | {"exchanges": [_exchange_json(exchange) for exchange in chunk]},
            }
        )
        for key in COUNTS:
            value = answer.get(key)
            setattr(report, key, getattr(report, key) + (value if type(value) is int else 0))
        report.room = str(answer.get("room") or report.room)
        report.session = answer.get("session") or report.session
        statuses.add(answer.get("status"))
        if answer.get("status") == "failed":
            report.status, report.reason = "failed", str(answer.get("reason"))
            return report
    if dry_run:
        report.status = "dry-run"
    elif not (report.stored or report.superseded or report.duplicates):
        report.status = "unchanged"
    for subagent in transcript.subagents:
        report.subagents.append(feed_one(subagent, final=final, dry_run=dry_run, parent=transcript, room=room))
    return report


def feed_remote(
    found: Sequence[tuple[str, Path]], *, dry_run: bool, progress: Any, room: str | None = None
) -> list[FeedReport]:
    """`palazzo feed` against PALAZZO_URL: every transcript as an ended session (all in room, when given)."""
    reports = []
    with progress as bar:
        for harness, path in found:
            try:
                reports.append(feed_one(parse_transcript(path, harness), final=True, dry_run=dry_run, room=room))
            except (TranscriptError, OSError) as exc:
                reports.append(FeedReport.failure(harness=harness, path=str(path), session=None, reason=str(exc)))
            bar.update(1)
    return reports


def drain_remote(data_dir: Path) -> list[FeedReport]:
    """`palazzo feed --spool` with a remote palace: send every queued transcript; keep them queued when it fails."""
    reports: list[FeedReport] = []
    with spool.feeder_lock(data_dir, wait_seconds=10.0) as locked:
        if not locked:
            return reports
        spool.recover(data_dir)
        spool.requeue_failed(data_dir)
        for job_file in spool.pending(data_dir):
            claimed = spool.claim(job_file)
            if claimed is None:
                continue
            job, working = claimed
            try:
                transcript = parse_transcript(Path(job.path), job.harness)
            except (TranscriptError, OSError) as exc:
                spool.finish(working)  # its next trigger queues it again
                reports.append(
                    FeedReport.failure(harness=job.harness, path=job.path, session=job.session_id, reason=str(exc))
                )
                continue
            try:
                reports.append(feed_one(transcript, final=job.final, dry_run=False, room=job.room))
            except RemoteUnavailable as exc:
                spool.give_back(working, failed=True)
                spool.record_remote_error(data_dir, str(exc))
                logger.error("%s; %s stays queued and is retried at the next trigger", exc, job.path)
                reports.append(
                    FeedReport.failure(harness=job.harness, path=job.path, session=job.session_id, reason=str(exc))
                )
                break
            spool.finish(working)
            spool.record_remote_error(data_dir, None)
    return reports
