"""Feeding transcripts into the palace: one memory per exchange, idempotent, incremental, bounded batches."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.engine.runtime import Palace
from palace.feeding import exchanges
from palace.feeding.exchanges import Destination
from palace.feeding.transcripts import parse_transcript
from palace.models import FedExchange, FedTranscript, JournalEntry
from palace.reads import selectors
from palace.store.base import MemoryFilter
from tests.palace.sessions import INLINE_SUBAGENTS, claude_session, write_session

SESSION = "0b9c7f0e-1d2e-4f3a-8b4c-5d6e7f8a9b0c"
CWD = "/home/ada/code/orrery"


def destination() -> Destination:
    return Destination.configured(harness="claude-code", device="laptop")


def feed(path: Path, *, final: bool = False, dry_run: bool = False, batch_size: int = exchanges.FEED_BATCH):
    return exchanges.feed_transcript(
        transcript=parse_transcript(path),
        destination=destination(),
        final=final,
        dry_run=dry_run,
        batch_size=batch_size,
    )


def memories(palace: Palace, **conditions: object) -> list[dict]:
    points = palace.store.scroll(memory_filter=MemoryFilter(include_superseded=True, **conditions))  # type: ignore[arg-type]
    return sorted((point.payload | {"id": point.id} for point in points), key=lambda memory: memory["timestamp"])


def test_it_stores_one_memory_per_complete_exchange_with_its_turn_timestamp_session_room_and_source(
    palace: Palace, tmp_path: Path
) -> None:
    path = write_session(
        tmp_path / f"{SESSION}.jsonl",
        claude_session(SESSION, CWD, [("How do the gears mesh?", "Module 0.5, 40 teeth."), ("And the moon?", None)]),
    )
    report = feed(path)
    assert (report.status, report.stored, report.held_incomplete) == ("fed", 1, 1)
    [memory] = memories(palace)
    assert memory["text"] == "User: How do the gears mesh?\n\nAssistant: Module 0.5, 40 teeth."
    assert memory["timestamp"] == "2026-11-30T09:00:00Z"
    assert (memory["session"], memory["room"], memory["source_file"]) == (SESSION, "orrery", str(path))
    assert (memory["wing"], memory["hall"], memory["category"]) == ("projects", "events", "project-memory")
    assert memory["added_by"] == "claude-code@laptop"
    state = FedTranscript.objects.get(path=str(path))
    assert (state.harness, state.device, state.session, state.room, state.exchanges_fed) == (
        "claude-code",
        "laptop",
        SESSION,
        "orrery",
        1,
    )
    assert JournalEntry.objects.filter(added_by="claude-code@laptop").count() == 1


def test_it_feeds_the_incomplete_last_exchange_only_at_the_end_of_the_session(palace: Palace, tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", claude_session(SESSION, CWD, [("Only a question", None)]))
    assert feed(path).stored == 0
    assert feed(path, final=True).stored == 1
    assert [memory["text"] for memory in memories(palace)] == ["User: Only a question"]


def test_it_stores_nothing_when_fed_twice_and_only_the_new_exchanges_of_a_grown_transcript(
    palace: Palace, tmp_path: Path
) -> None:
    turns = [(f"Question {index} about the orrery", f"Answer {index}.") for index in range(5)]
    path = write_session(tmp_path / "s.jsonl", claude_session(SESSION, CWD, turns[:3]))
    assert feed(path, batch_size=2).stored == 3
    journal_size = JournalEntry.objects.count()
    again = feed(path)
    assert (again.status, again.stored, again.unchanged) == ("unchanged", 0, 3)
    assert JournalEntry.objects.count() == journal_size
    write_session(path, claude_session(SESSION, CWD, turns))
    grown = feed(path)
    assert (grown.stored, grown.unchanged, grown.superseded) == (2, 3, 0)
    assert len(memories(palace)) == 5
    assert FedTranscript.objects.get().exchanges_fed == 5


def test_it_supersedes_an_exchange_whose_reply_arrived_after_it_was_fed(palace: Palace, tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", claude_session(SESSION, CWD, [("What is the gear ratio?", None)]))
    first = feed(path, final=True)
    assert first.stored == 1
    write_session(path, claude_session(SESSION, CWD, [("What is the gear ratio?", "It is 12:1.")]))
    second = feed(path)
    assert (second.stored, second.superseded) == (0, 1)
    old, new = memories(palace)
    assert old["superseded_by"] == new["id"] and new["supersedes"] == [old["id"]]
    assert new["text"] == "User: What is the gear ratio?\n\nAssistant: It is 12:1."
    assert new["timestamp"] == old["timestamp"] == "2026-11-30T09:00:00Z"
    assert FedExchange.objects.get().memory_id == new["id"]
    assert feed(path).status == "unchanged"


def test_it_skips_a_session_with_nothing_worth_keeping(palace: Palace, tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", claude_session(SESSION, CWD, [("/clear", None)]))
    report = feed(path, final=True)
    assert report.status == "skipped" and "worth" in (report.reason or "")
    assert memories(palace) == [] and not FedTranscript.objects.exists()


def test_it_shows_in_a_dry_run_what_would_be_stored_and_writes_nothing(palace: Palace, tmp_path: Path) -> None:
    path = write_session(tmp_path / "s.jsonl", claude_session(SESSION, CWD, [("One", "Two"), ("Three", "Four")]))
    report = feed(path, dry_run=True)
    assert (report.status, report.stored) == ("dry-run", 2)
    assert memories(palace) == [] and not FedTranscript.objects.exists()
    feed(path)
    assert feed(path, dry_run=True).unchanged == 2


def test_it_feeds_subagents_as_their_own_sessions_linked_to_the_parent(palace: Palace, tmp_path: Path) -> None:
    path = tmp_path / INLINE_SUBAGENTS.name
    shutil.copy(INLINE_SUBAGENTS, path)
    report = feed(path, final=True)
    parent = report.session
    assert report.subagents and all(child.status == "fed" for child in report.subagents)
    stored = memories(palace)
    assert len(stored) == report.totals()["stored"]
    sub_sessions = {memory["session"] for memory in stored} - {parent}
    assert len(sub_sessions) == len(report.subagents)
    assert all(session.startswith(f"{parent}:agent-") for session in sub_sessions)
    assert FedTranscript.objects.filter(parent_session=parent).count() == len(report.subagents)
    assert feed(path, final=True).totals()["stored"] == 0


@pytest.mark.django_db(transaction=True)
def test_it_keeps_finds_answering_while_a_megabyte_transcript_is_fed(palace: Palace, tmp_path: Path) -> None:
    # Like a real long session: most of the megabyte is tool output, which feeding condenses.
    build_log = "".join(f"[{line:05d}] compiling escapement module, pendulum beat ok\n" for line in range(220))
    turns = [(f"Step {index}: check the build", f"Build step {index} is clean.") for index in range(100)]
    path = write_session(tmp_path / "big.jsonl", claude_session(SESSION, CWD, turns, tool_output=build_log))
    assert path.stat().st_size > 1024 * 1024
    finished = threading.Event()
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["report"] = feed(path)
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()
            finished.set()

    feeder = threading.Thread(target=run)
    feeder.start()
    finds_during_feed = 0
    while not finished.is_set():
        selectors.find(query="escapement pendulum", limit=3)
        if not finished.is_set():
            finds_during_feed += 1
        time.sleep(0.02)  # paced like an agent
    feeder.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    assert outcome["report"].stored == 100  # type: ignore[attr-defined]
    # Finds never wait for the whole feed: they answer between (and during) its batches.
    assert finds_during_feed >= 3


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(min_size=1, max_size=300), st.text(max_size=300)), min_size=1, max_size=4))
def test_it_feeds_any_text_once_and_never_twice(palace: Palace, tmp_path: Path, turns: list[tuple[str, str]]) -> None:
    path = write_session(tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl", claude_session(SESSION, CWD, turns))
    first = feed(path, final=True)
    assert first.status in ("fed", "skipped", "unchanged")
    assert feed(path, final=True).totals()["stored"] == 0


@pytest.mark.parametrize("device", ["laptop", "ci-runner-7"])
def test_it_stamps_the_writer_with_harness_device_and_token(device: str) -> None:
    assert exchanges.writer(harness="pi", device=device) == f"pi@{device}"
    assert exchanges.writer(harness="pi", device=device, token_identity="token:team") == f"token:team/pi@{device}"
