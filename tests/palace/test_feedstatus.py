"""Feeding never fails silently: status, /healthz and /metrics show it per harness and device."""

from __future__ import annotations

import io
from pathlib import Path

from django.core.management import call_command

from palace.engine.runtime import Palace
from palace.feeding import exchanges, spool
from palace.feeding.exchanges import Destination
from palace.feeding.transcripts import parse_transcript
from palace.operations import health
from palace.operations import status as palace_status
from palace.routes.operations import HealthReport, render_metrics
from tests.palace.sessions import claude_session, write_session


def test_it_reports_the_last_feed_sessions_exchanges_and_last_error_per_harness_and_device(
    palace: Palace, palace_env: Path, tmp_path: Path
) -> None:
    turns = [("Which escapement?", "A verge escapement."), ("Why?", "It tolerates a poor pendulum.")]
    path = write_session(tmp_path / "a.jsonl", claude_session("session-a", "/src/clock", turns))
    exchanges.feed_transcript(
        transcript=parse_transcript(path),
        destination=Destination.configured(harness="claude-code", device="laptop"),
        final=True,
    )
    exchanges.record_failure(harness="pi", device="desk", path=tmp_path / "gone.jsonl", error="no such file")
    spool.enqueue(palace_env, spool.Job(harness="claude-code", path=str(path)))
    status = palace_status.status()["feeding"]
    by_source = {(source["harness"], source["device"]): source for source in status["sources"]}
    laptop = by_source[("claude-code", "laptop")]
    assert (laptop["sessions"], laptop["exchanges"], laptop["memories"], laptop["last_error"]) == (1, 2, 2, None)
    assert laptop["last_fed_at"] is not None
    desk = by_source[("pi", "desk")]
    assert desk["exchanges"] == 0 and desk["last_error"].endswith("gone.jsonl: no such file") and desk["last_error_at"]
    assert status["queued"] == 1 and status["fed_by"] is None
    assert health.health()["feeding"]["sources"] == status["sources"]
    # /healthz answers through its schema (nulls left out): feeding must survive it.
    report = HealthReport.model_validate(health.health()).model_dump(exclude_none=True)
    shown = [{key: value for key, value in source.items() if value is not None} for source in status["sources"]]
    assert report["feeding"]["sources"] == shown and shown[1]["last_error"] == desk["last_error"]
    assert (report["feeding"]["queued"], report["feeding"]["failed_waiting_for_retry"]) == (1, 0)
    exposition = render_metrics().decode()
    assert 'palazzo_feed_exchanges{device="laptop",harness="claude-code"} 2.0' in exposition
    assert 'palazzo_feed_sessions{device="desk",harness="pi"} 0.0' in exposition
    assert "palazzo_feed_queued 1.0" in exposition


def test_it_prints_the_feeding_sources_as_a_table_naming_each_failed_transcript_once(
    palace: Palace, palace_env: Path, tmp_path: Path
) -> None:
    path = write_session(tmp_path / "a.jsonl", claude_session("session-a", "/src/clock", [("Which?", "A verge.")]))
    exchanges.feed_transcript(
        transcript=parse_transcript(path),
        destination=Destination.configured(harness="claude-code", device="laptop"),
        final=True,
    )
    gone = tmp_path / "gone.jsonl"
    exchanges.record_failure(harness="pi", device="desk", path=gone, error=f"{gone}: no such file")
    out = io.StringIO()
    call_command("status", stdout=out)
    text = out.getvalue()
    assert "{'harness'" not in text
    lines = text[text.index("  sources:\n") :].splitlines()
    header, laptop, desk, error = lines[1:5]
    assert header.split() == ["harness", "device", "sessions", "exchanges", "memories", "last_fed_at", "last_error_at"]
    assert laptop.split()[:5] == ["claude-code", "laptop", "1", "1", "1"] and laptop.split()[6] == "-"
    assert desk.split()[:6] == ["pi", "desk", "0", "0", "0", "-"]
    assert header.index("device") == laptop.index("laptop")  # text left-aligned, counts right-aligned
    assert header.index("sessions") + len("sessions") == laptop.index("1") + 1
    assert error.strip() == f"last_error: {gone}: no such file"
    assert "  queued: 0\n" in text and "latest_failed: none" in text
