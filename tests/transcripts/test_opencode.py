"""The opencode storage-tree parser: the saved v2 and legacy trees, and a tree with a child session."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from palace.feeding.transcripts import TranscriptError, detect_harness, discover, parse_transcript
from tests.transcripts.helpers import SAMPLES, sample

TREES = "opencode/jazzyalex-agent-sessions"
# sample -> (exchanges, prompts)
EXPECTED = {
    f"{TREES}/storage_v2/session/proj_test/ses_s_stage0_small.json": ["Hello"],
    f"{TREES}/storage_v2/session/proj_test/ses_s_stage0_large.json": ["Step 1", "Step 2"],
    f"{TREES}/storage_legacy/session/proj_test/ses_s_stage0_drift.json": ["Open README"],
}


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_it_parses_every_saved_opencode_session(relative: str) -> None:
    path = sample(relative)
    assert detect_harness(path) == "opencode"
    transcript = parse_transcript(path)
    assert [exchange.prompt for exchange in transcript.exchanges] == EXPECTED[relative]
    assert transcript.worth_keeping
    assert all(exchange.complete for exchange in transcript.exchanges)


def test_it_lists_sessions_not_messages_or_parts() -> None:
    found = list(discover([SAMPLES / "opencode"]))
    assert sorted(path.name for _, path in found) == [
        "ses_s_stage0_drift.json",
        "ses_s_stage0_large.json",
        "ses_s_stage0_small.json",
    ]
    assert {harness for harness, _ in found} == {"opencode"}


def test_it_condenses_tool_parts_and_skips_synthetic_and_reasoning_parts() -> None:
    transcript = parse_transcript(sample(f"{TREES}/storage_v2/session/proj_test/ses_s_stage0_large.json"))
    assert transcript.session_id == "s_stage0_large"
    assert transcript.cwd == "/tmp/large"
    step_1 = transcript.exchanges[0]
    assert step_1.key == "m_user_large_1"
    assert step_1.started_at.isoformat() == "2024-10-27T03:35:01+00:00"
    assert step_1.reply == (
        "[tool bash: ls /non-existent-directory] -> ls: /non-existent-directory: No such file or directory"
        "\n\n[file: error.log]"
    )
    assert transcript.skipped["synthetic"] == 1
    assert transcript.skipped["thinking"] == 1


def write(path: Path, record: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_it_reads_a_child_session_as_a_subagent(tmp_path: Path) -> None:
    storage = tmp_path / "opencode" / "storage"
    sessions = storage / "session" / "proj"
    write(sessions / "ses_parent.json", {"id": "ses_parent", "directory": "/code/shop", "parentID": None})
    write(sessions / "ses_child.json", {"id": "ses_child", "directory": "/code/shop", "parentID": "ses_parent"})
    for session, prompt, reply in (("ses_parent", "Plan the sale", "Delegated."), ("ses_child", "Price it", "$5")):
        write(
            storage / "message" / session / "m1.json",
            {"id": f"{session}_u", "sessionID": session, "role": "user", "time": {"created": 1_770_000_000_000}},
        )
        write(
            storage / "message" / session / "m2.json",
            {
                "id": f"{session}_a",
                "sessionID": session,
                "role": "assistant",
                "time": {"created": 1_770_000_001_000, "completed": 1_770_000_002_000},
            },
        )
        write(storage / "part" / f"{session}_u" / "p1.json", {"type": "text", "text": prompt})
        write(storage / "part" / f"{session}_a" / "p1.json", {"type": "text", "text": reply})
    (storage / "part" / "ses_parent_a" / "p2.json").write_text("{not json")
    assert [path.name for _, path in discover([tmp_path])] == ["ses_parent.json"]
    transcript = parse_transcript(sessions / "ses_parent.json")
    assert [(exchange.prompt, exchange.reply) for exchange in transcript.exchanges] == [("Plan the sale", "Delegated.")]
    assert transcript.skipped["invalid_json"] == 1
    (child,) = transcript.subagents
    assert child.parent_session_id == "ses_parent"
    assert child.agent_id == child.session_id == "ses_child"
    assert child.exchanges[0].reply == "$5"


# The tables of opencode's current SQLite storage (packages/opencode/src/session/session.sql.ts), the
# columns the parser reads plus the NOT NULL ones around them.
SCHEMA = """
CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id TEXT, slug TEXT NOT NULL,
    directory TEXT NOT NULL, title TEXT NOT NULL, version TEXT NOT NULL, time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL);
CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL, data TEXT NOT NULL);
CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
"""


def opencode_database(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    connection.executescript(SCHEMA)
    sessions = [("ses_1", None, 1_770_000_000_000), ("ses_2", "ses_1", 1_770_000_050_000)]
    for session_id, parent, created in sessions:
        connection.execute(
            "INSERT INTO session VALUES (?, 'proj', ?, 'slug', '/code/shop', 'title', '1.4.0', ?, ?)",
            (session_id, parent, created, created),
        )
    messages = [
        ("msg_1", "ses_1", 1_770_000_001_000, {"role": "user", "time": {"created": 1_770_000_001_000}}),
        ("msg_2", "ses_1", 1_770_000_002_000, {"role": "assistant", "time": {"created": 1, "completed": 2}}),
        ("msg_3", "ses_2", 1_770_000_051_000, {"role": "user", "time": {"created": 1_770_000_051_000}}),
        ("msg_4", "ses_2", 1_770_000_052_000, {"role": "assistant", "finish": "stop"}),
    ]
    for message_id, session_id, created, data in messages:
        connection.execute(
            "INSERT INTO message VALUES (?, ?, ?, ?, ?)", (message_id, session_id, created, created, json.dumps(data))
        )
    parts = [
        ("prt_1", "msg_1", "ses_1", {"type": "text", "text": "Add a discount field"}),
        ("prt_2", "msg_2", "ses_1", {"type": "reasoning", "text": "hm"}),
        ("prt_3", "msg_2", "ses_1", {"type": "tool", "callID": "c1", "tool": "edit",
                                     "state": {"status": "completed", "input": {"filePath": "shop.py"},
                                               "output": "Edit applied"}}),
        ("prt_4", "msg_2", "ses_1", {"type": "text", "text": "Added."}),
        ("prt_5", "msg_2", "ses_1", "{broken"),
        ("prt_6", "msg_3", "ses_2", {"type": "text", "text": "Check the tests"}),
        ("prt_7", "msg_4", "ses_2", {"type": "text", "text": "Green."}),
    ]  # fmt: skip
    for part_id, message_id, session_id, data in parts:
        payload = data if isinstance(data, str) else json.dumps(data)
        connection.execute("INSERT INTO part VALUES (?, ?, ?, 0, 0, ?)", (part_id, message_id, session_id, payload))
    connection.commit()
    connection.close()
    return path


def test_it_reads_sessions_from_opencodes_sqlite_database(tmp_path: Path) -> None:
    data_dir = tmp_path / "opencode"
    database = opencode_database(data_dir / "opencode.db")
    # opencode migrated its JSON storage into the database: the old copy of ses_1 is not listed twice
    write(data_dir / "storage" / "session" / "proj" / "ses_1.json", {"id": "ses_1", "directory": "/code/shop"})
    write(data_dir / "storage" / "session" / "proj" / "ses_old.json", {"id": "ses_old", "directory": "/code/x"})
    found = list(discover([data_dir]))
    main = database.with_name("opencode.db#ses_1")
    assert found == [("opencode", main), ("opencode", data_dir / "storage" / "session" / "proj" / "ses_old.json")]
    assert list(discover([database])) == [("opencode", main)]
    with pytest.raises(TranscriptError, match="an opencode database holds many sessions"):
        parse_transcript(database)
    transcript = parse_transcript(main)
    assert transcript.session_id == "ses_1"
    assert transcript.cwd == "/code/shop"
    assert transcript.version == "1.4.0"
    (exchange,) = transcript.exchanges
    assert exchange.key == "msg_1"
    assert exchange.prompt == "Add a discount field"
    assert exchange.reply == "[tool edit: shop.py] -> Edit applied\n\nAdded."
    assert exchange.started_at.isoformat() == "2026-02-02T02:40:01+00:00"
    assert exchange.complete
    assert transcript.skipped == {"thinking": 1, "invalid_json": 1}
    (child,) = transcript.subagents
    assert child.path == database.with_name("opencode.db#ses_2")
    assert (child.parent_session_id, child.agent_id) == ("ses_1", "ses_2")
    assert [(item.prompt, item.reply) for item in child.exchanges] == [("Check the tests", "Green.")]
    with pytest.raises(TranscriptError, match="no such file"):
        parse_transcript(tmp_path / "missing.db#ses_1")


# Real opencode 1.18.33 samples (tests/fixtures/transcripts/opencode/SOURCES.md).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "opencode"
SESSION = "ses_dbc949f62ffeeyarY8uOlaK2l7"
CHILD = "ses_dbc941270ffevUHQ6XUICy0l1M"
PROMPTS = ['"How many teeth has the lunar gear?"', '"Ask a helper to count the gear files."']


def test_it_reads_opencode_1_18_sessions_from_its_database() -> None:
    database = FIXTURES / "opencode.db"
    main = database.with_name(f"opencode.db#{SESSION}")
    assert list(discover([FIXTURES])) == [("opencode", main)], "the subagent's session is not listed on its own"
    transcript = parse_transcript(main)
    assert (transcript.session_id, transcript.version) == (SESSION, "1.18.33")
    assert transcript.cwd is not None and transcript.cwd.endswith("/work/orrery")
    assert [exchange.prompt for exchange in transcript.exchanges] == PROMPTS
    find, helper = transcript.exchanges
    assert find.reply.startswith("[tool palazzo_palace_find: query=lunar gear teeth] -> {")
    assert "235 teeth (the Metonic cycle)" in find.reply and find.reply.endswith("\n\n235 teeth.")
    assert helper.reply.startswith("[tool task: Count gear files, general] -> <task id=")
    assert helper.reply.endswith("Two gear files: lunar.txt and solar.txt. </task_result> </task>\n\nTwo files.")
    assert all(exchange.complete for exchange in transcript.exchanges)
    assert transcript.skipped == {"metadata": 8}, "step-start and step-finish parts"
    (child,) = transcript.subagents
    assert (child.session_id, child.parent_session_id, child.agent_id) == (CHILD, SESSION, CHILD)
    assert [(item.prompt, item.reply) for item in child.exchanges] == [
        ("Count the gear files in this project.", "Two gear files: lunar.txt and solar.txt.")
    ]


def test_it_reads_a_saved_opencode_export_as_the_same_session() -> None:
    export = FIXTURES / "export.json"
    assert detect_harness(export) == "opencode"
    from_export = parse_transcript(export)
    from_database = parse_transcript(FIXTURES / f"opencode.db#{SESSION}")
    assert from_export.session_id == SESSION and from_export.cwd == from_database.cwd
    assert [(item.key, item.prompt, item.reply, item.started_at, item.complete) for item in from_export.exchanges] == [
        (item.key, item.prompt, item.reply, item.started_at, item.complete) for item in from_database.exchanges
    ]
    assert from_export.subagents == [], "an export holds its own session only"


def test_it_reads_the_database_while_opencode_writes_it_and_never_changes_it(tmp_path: Path) -> None:
    database = tmp_path / "opencode.db"
    database.write_bytes((FIXTURES / "opencode.db").read_bytes())
    writer = sqlite3.connect(database, isolation_level=None)
    assert writer.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)  # as opencode keeps it
    writer.execute("BEGIN IMMEDIATE")  # opencode in the middle of writing a turn
    writer.execute("UPDATE session SET title = 'renamed' WHERE id = ?", (SESSION,))
    transcript = parse_transcript(database.with_name(f"opencode.db#{SESSION}"))
    assert [exchange.prompt for exchange in transcript.exchanges] == PROMPTS
    writer.execute("COMMIT")  # the reader held nothing that stops the writer
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM part")
    writer.execute("COMMIT")  # in the WAL, not yet in the database file: a reader must look there too
    assert parse_transcript(database.with_name(f"opencode.db#{SESSION}")).exchanges == []
    writer.close()
    read_only = tmp_path / "read-only.db"
    read_only.write_bytes((FIXTURES / "opencode.db").read_bytes())
    before = read_only.read_bytes()
    assert parse_transcript(read_only.with_name(f"read-only.db#{SESSION}")).exchanges
    assert read_only.read_bytes() == before
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("read-only")] == ["read-only.db"]


def test_it_keeps_a_turn_open_while_opencode_is_between_a_tool_call_and_its_answer(tmp_path: Path) -> None:
    database = tmp_path / "opencode.db"
    database.write_bytes((FIXTURES / "opencode.db").read_bytes())
    with sqlite3.connect(database) as connection:
        # The last turn as it stood mid-way: the task call's step finished ("tool-calls"), no answer yet.
        (last,) = connection.execute(
            "SELECT id FROM message WHERE session_id = ? ORDER BY time_created DESC LIMIT 1", (SESSION,)
        ).fetchall()
        (data,) = connection.execute("SELECT data FROM message WHERE id = ?", last).fetchone()
        assert json.loads(data)["finish"] == "stop"
        connection.execute("DELETE FROM part WHERE message_id = ?", last)
        connection.execute("DELETE FROM message WHERE id = ?", last)
    transcript = parse_transcript(database.with_name(f"opencode.db#{SESSION}"))
    assert [exchange.complete for exchange in transcript.exchanges] == [True, False]
    assert transcript.exchanges[1].reply.endswith("</task_result> </task>")


def test_it_skips_and_counts_what_is_malformed_in_an_export(tmp_path: Path) -> None:
    record = json.loads((FIXTURES / "export.json").read_text())
    record["messages"][0]["parts"][0]["text"] += "\n<palazzo-wake-up>\nold context\n</palazzo-wake-up>"
    record["messages"][0]["parts"].append("not a part")
    record["messages"].insert(1, {"info": "not a message"})
    record["messages"].append(None)
    export = tmp_path / "session.json"
    export.write_text(json.dumps(record))
    transcript = parse_transcript(export)
    assert [exchange.prompt for exchange in transcript.exchanges] == PROMPTS
    assert transcript.skipped == {"malformed": 3, "metadata": 8, "wake_up": 1}
    broken = tmp_path / "broken.json"
    broken.write_text('{"info": {"id": "ses_x", "directory": "/x"}, "messages": [')
    with pytest.raises(TranscriptError, match="not a transcript"):
        detect_harness(broken)
