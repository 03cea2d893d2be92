"""palazzo import: memories from other memory servers and conversation archives, through the store path.

memory-json is written by the real official MCP memory server (npm, pinned), driven over MCP. The other
sources cannot run here: basic-memory needs Python >= 3.12 (these machines have 3.11), mem0,
mcp-memory-service and MemPalace download their embedding models at run time, and the ChatGPT and
Claude.ai exports come from web accounts. Their files are documented fixtures, built below from each
project's documented format and named as such.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from palace.engine.runtime import Palace
from palace.errors import InvalidInput
from palace.operations import imports
from palace.operations import status as palace_status
from palace.operations.ingest import ImportDefaults
from palace.reads import selectors
from tests.mcpserver.conftest import CLIENT_INFO
from tests.npm_tools import npm_tool


def run(source: str, path: Path, **options: Any) -> list[imports.Outcome]:
    return list(imports.import_records(source=source, path=path, **options))


def statuses(outcomes: list[imports.Outcome]) -> dict[str, int]:
    return imports.summary(outcomes)


def memory_server() -> Path:
    return npm_tool("install-server-memory.sh", "@modelcontextprotocol/server-memory")


# A knowledge graph of several entity types, with relations and an observation holding a line break.
ENTITIES: list[dict[str, Any]] = [
    {"name": "Ada", "entityType": "person", "observations": ["Prefers tea", "Maintains the orrery"]},
    {"name": "Orrery", "entityType": "project", "observations": ["The lunar gear has 235 teeth", "Parts:\n- bronze"]},
    {"name": "Antikythera Society", "entityType": "organization", "observations": ["Meets on Thursdays"]},
    {"name": "Use bronze gears", "entityType": "decision", "observations": ["Brass wore out in a year"]},
    {"name": "Eclipse night 2025", "entityType": "event", "observations": []},
]
RELATIONS: list[dict[str, Any]] = [
    {"from": "Ada", "to": "Orrery", "relationType": "maintains"},
    {"from": "Ada", "to": "Antikythera Society", "relationType": "member of"},
    {"from": "Orrery", "to": "Use bronze gears", "relationType": "follows"},
]


def real_memory_json(path: Path, *, entities: list[Any] = ENTITIES, relations: list[Any] = RELATIONS) -> None:
    """Have the official memory server write its knowledge graph to path, through its own MCP tools."""
    params = StdioServerParameters(
        command=str(memory_server()), env={"MEMORY_FILE_PATH": str(path), "PATH": "/usr/bin:/bin"}
    )
    with start_blocking_portal() as portal:
        client = Client(params, mode="legacy", client_info=CLIENT_INFO, read_timeout_seconds=60)
        with portal.wrap_async_context_manager(client):
            portal.call(client.call_tool, "create_entities", {"entities": entities})
            portal.call(client.call_tool, "create_relations", {"relations": relations})


def official_graph(path: Path) -> Any:
    """The graph the official memory server reads from path (its read_graph tool)."""
    params = StdioServerParameters(
        command=str(memory_server()), env={"MEMORY_FILE_PATH": str(path), "PATH": "/usr/bin:/bin"}
    )
    with start_blocking_portal() as portal:
        client = Client(params, mode="legacy", client_info=CLIENT_INFO, read_timeout_seconds=60)
        with portal.wrap_async_context_manager(client):
            result = portal.call(client.call_tool, "read_graph", {})
    return result.structured_content or json.loads(result.content[0].text)


def graph_sets(lines: list[dict[str, Any]]) -> tuple[set[Any], set[Any]]:
    """A knowledge graph as comparable sets: (name, type, observations) and (from, relationType, to)."""
    entities = {
        (line["name"], line["entityType"], tuple(line["observations"]))
        for line in lines
        if line.get("type", "entity") == "entity" and "name" in line
    }
    relations = {(line["from"], line["relationType"], line["to"]) for line in lines if "from" in line}
    return entities, relations


def graph_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_it_imports_the_knowledge_graph_the_official_memory_server_writes(palace: Palace, tmp_path: Path) -> None:
    graph = tmp_path / "memory.json"
    real_memory_json(graph)
    assert '"type":"entity"' in graph.read_text().replace(" ", "")

    dry = run("memory-json", graph, dry_run=True)
    assert statuses(dry) == {"would-store": 8} and palace_status.status()["total"] == 0, "a dry run writes nothing"
    stored = run("memory-json", graph)
    assert statuses(stored) == {"stored": 8} and len({outcome.import_id for outcome in stored}) == 1
    memories = selectors.recall(ids=[outcome.id for outcome in stored])["memories"]
    by_text = {memory["text"].split("\n")[0]: memory for memory in memories}
    ada = by_text["Ada (person)"]
    assert ada["text"] == "Ada (person)\n- Prefers tea\n- Maintains the orrery"
    assert by_text["Orrery (project)"]["text"].endswith("- Parts:\n  - bronze"), "a line break indented, not a new one"
    assert (ada["category"], ada["hall"]) == ("person", "facts") and ada["room"] == "memory-graph"
    assert ada["added_by"] == "import:memory-json" and ada["import_id"] == stored[0].import_id
    assert by_text["Use bronze gears (decision)"]["hall"] == "decisions"
    assert by_text["Eclipse night 2025 (event)"]["hall"] == "events"
    assert by_text["Orrery (project)"]["category"] in ("project", "project-memory")
    assert by_text['"Ada" maintains "Orrery"']["source_file"].startswith("memory.json relation {")
    assert statuses(run("memory-json", graph)) == {"duplicate": 8}, "a second import stores nothing"

    # Out again: the same entities, types, observations and relations; the official server reads it back.
    exported = tmp_path / "exported.json"
    call_command("export", "--format", "memory-json", "--out", str(exported), stderr=io.StringIO())
    assert graph_sets(graph_lines(exported)) == graph_sets(graph_lines(graph))
    read_back = official_graph(exported)
    assert graph_sets(read_back["entities"] + read_back["relations"]) == graph_sets(graph_lines(graph))


def test_it_refuses_a_truncated_file_whole_and_a_retry_leaves_no_near_duplicates(
    palace: Palace, tmp_path: Path
) -> None:
    graph = tmp_path / "memory.json"
    real_memory_json(graph)
    whole = graph.read_bytes()
    first_relation = whole.index(b'{"type":"relation"')
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(whole[: first_relation + 30])  # cut inside the first relation's line
    with pytest.raises(imports.ImportRefused, match=r"line 6, column \d+: not JSON") as refused:
        run("memory-json", truncated)
    assert "nothing stored" in str(refused.value) and palace_status.status()["total"] == 0

    knowingly = run("memory-json", truncated, skip_bad=True)
    assert statuses(knowingly) == {"stored": 5, "failed": 1}
    planned = run("memory-json", graph, dry_run=True)
    assert statuses(planned) == {"duplicate": 5, "would-store": 3}, "the dry run names what is already held"
    assert {outcome.id for outcome in planned if outcome.status == "duplicate"} == {o.id for o in knowingly if o.id}
    assert statuses(run("memory-json", graph)) == {"duplicate": 5, "stored": 3}, "only the relations are new"
    assert palace_status.status()["total"] == 8, "one memory per entity and per relation, no near-duplicates"


def test_it_undoes_an_import_of_a_real_file_exactly_and_idempotently(palace: Palace, tmp_path: Path) -> None:
    from palace.engine.journal import JournalEntry
    from palace.operations import memory_graph
    from palace.writes import services
    from tests.palace.helpers import memory

    graph = tmp_path / "memory.json"
    real_memory_json(graph)
    ada = ENTITIES[0]
    kept = services.store(**memory(memory_graph.entity_text(ada["name"], "person", ada["observations"])))
    other = services.store(**memory("Not from the graph"))
    outcomes = run("memory-json", graph)
    assert statuses(outcomes) == {"stored": 7, "duplicate": 1}
    assert {outcome.import_id for outcome in outcomes if outcome.status == "duplicate"} == {None}
    [import_id] = {outcome.import_id for outcome in outcomes if outcome.status == "stored"}

    undone = imports.undo_import(import_id=import_id)
    assert undone["deleted"] == 7 and sorted(undone["ids"]) == sorted(
        o.id or 0 for o in outcomes if o.status == "stored"
    )
    assert palace_status.status()["total"] == 2, "the memory the import found already there is not its to remove"
    assert {m["id"] for m in selectors.recall(ids=[kept["id"], other["id"]])["memories"]} == {kept["id"], other["id"]}
    journaled = JournalEntry.objects.filter(operation=JournalEntry.Operation.DELETE, reason=f"undo import {import_id}")
    assert sum(len(entry.memory_ids) for entry in journaled) == 7
    assert imports.undo_import(import_id=import_id)["deleted"] == 0, "undoing again deletes nothing"
    with pytest.raises(InvalidInput, match="no import with this id"):
        imports.undo_import(import_id="imp-20990101T000000Z-000000")
    with pytest.raises(InvalidInput, match="not an import id"):
        imports.undo_import(import_id={"id": 1})


def test_it_imports_lists_and_undoes_through_the_palazzo_command(tmp_path: Path) -> None:
    from tests.mcpserver.conftest import migrate, server_env
    from tests.palazzo_site.test_hook import PALAZZO

    graph, data_dir = tmp_path / "memory.json", tmp_path / "data"
    real_memory_json(graph)
    migrate(data_dir)

    def palazzo(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PALAZZO), *arguments], env=server_env(data_dir), capture_output=True, text=True, timeout=300
        )

    dry = palazzo("import", "memory-json", str(graph), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = dry.stdout.splitlines()
    assert len(listed) == 8 and all(line.startswith("would store line ") for line in listed)
    assert any("/memory-graph/facts category=person: Ada (person) - Prefers tea" in line for line in listed)
    assert "dry run: nothing written" in dry.stderr

    cut = tmp_path / "cut.json"
    cut.write_bytes(graph.read_bytes()[:-20])
    refused = palazzo("import", "memory-json", str(cut), "--json")
    assert refused.returncode == 1 and "nothing stored" in refused.stderr and "column" in refused.stderr
    assert json.loads(refused.stdout.splitlines()[-1]) == {"done": False, "counts": {"failed": 1}, "stored": 0}

    done = palazzo("import", "memory-json", str(graph), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["counts"] == {"stored": 8} and report["import_id"].startswith("imp-")
    undo = palazzo("import", "--undo", report["import_id"], "--json")
    assert undo.returncode == 0, undo.stderr
    assert json.loads(undo.stdout) == {"import_id": report["import_id"], "deleted": 8}
    unknown = palazzo("import", "--undo", "imp-nothing")
    assert unknown.returncode == 1 and "no import with this id" in unknown.stderr


def test_it_imports_a_mempalace_export_with_its_own_filing_and_writers(palace: Palace, tmp_path: Path) -> None:
    # Documented fixture: MemPalace's export layout (export-manifest.json, <wing>/<room>.jsonl).
    export = tmp_path / "mempalace"
    (export / "projects").mkdir(parents=True)
    (export / "export-manifest.json").write_text(json.dumps({"version": 1, "drawers": 3}))
    lines = [
        {
            "id": "d1",
            "document": "We chose Hugo for the blog",
            "metadata": {
                "wing": "projects",
                "room": "blog",
                "hall": "decisions",
                "added_by": "claude",
                "filed_at": "2025-03-01T10:00:00",
                "source_file": "notes/blog.md",
            },
        },
        {
            "id": "d2",
            "document": "Deploys run from CI",
            "metadata": {"wing": "attic", "hall": "hall_facts", "filed_at": "2025-03-02T10:00:00"},
        },
        {"id": "d3", "document": 42, "metadata": {}},
    ]
    (export / "projects" / "blog.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n{truncated\n")
    with pytest.raises(imports.ImportRefused, match=r"projects/blog\.jsonl line 3: document"):
        run("mempalace", export, defaults=ImportDefaults(wing="projects"))
    outcomes = run("mempalace", export, defaults=ImportDefaults(wing="projects"), skip_bad=True)
    assert [outcome.status for outcome in outcomes] == ["stored", "stored", "failed", "failed"]
    assert "document" in str(outcomes[2].error) and "JSON" in str(outcomes[3].error)
    first, second = selectors.recall(ids=[outcome.id for outcome in outcomes[:2]])["memories"]
    assert (first["wing"], first["room"], first["hall"], first["added_by"]) == (
        "projects",
        "blog",
        "decisions",
        "claude",
    )
    assert first["timestamp"] == "2025-03-01T10:00:00Z" and first["source_file"] == "notes/blog.md"
    assert (second["wing"], second["room"], second["added_by"]) == ("projects", "blog", "import:mempalace")


def test_it_imports_mem0_and_mcp_memory_service_records_keeping_what_does_not_map(
    palace: Palace, tmp_path: Path
) -> None:
    # Documented fixtures: mem0's memory records (get_all), mcp-memory-service's JSON export.
    mem0 = tmp_path / "mem0.json"
    mem0.write_text(
        json.dumps(
            {
                "results": [
                    {
                        "id": "0f4c",
                        "memory": "Likes hiking in the Alps",
                        "user_id": "alice",
                        "metadata": {"source": "chat"},
                        "created_at": "2025-01-05T08:00:00-08:00",
                    },
                    {"id": "9aa1", "memory": "", "user_id": "alice"},
                ]
            }
        )
    )
    outcomes = run("mem0", mem0, skip_bad=True)
    assert [outcome.status for outcome in outcomes] == ["stored", "failed"]
    [hiking] = selectors.recall(ids=[outcomes[0].id])["memories"]
    assert hiking["timestamp"] == "2025-01-05T16:00:00Z" and hiking["added_by"] == "mem0:alice"
    assert '"source": "chat"' in hiking["text"] and "user_id=alice" in hiking["source_file"]

    service = tmp_path / "memories.json"
    service.write_text(
        json.dumps(
            {
                "export_metadata": {"total_memories": 2},
                "memories": [
                    {
                        "content": "The VPN uses WireGuard on port 51820",
                        "content_hash": "ab12",
                        "tags": ["infrastructure", "vpn"],
                        "memory_type": "note",
                        "created_at": 1735689600.0,
                    },
                    {"content": "Tea at 4", "tags": "not-a-list", "created_at_iso": "2025-02-01T16:00:00Z"},
                ],
            }
        )
    )
    outcomes = run("mcp-memory-service", service)
    assert statuses(outcomes) == {"stored": 2}
    vpn, tea = selectors.recall(ids=[outcome.id for outcome in outcomes])["memories"]
    assert vpn["category"] == "infrastructure" and vpn["timestamp"] == "2025-01-01T00:00:00Z"
    assert vpn["text"].endswith("tags: infrastructure, vpn\ntype: note") and tea["timestamp"] == "2025-02-01T16:00:00Z"


def test_it_imports_chatgpt_and_claude_ai_conversations_one_memory_per_exchange(palace: Palace, tmp_path: Path) -> None:
    # Documented fixtures: a ChatGPT data export's conversations.json and a Claude.ai export's.
    def node(node_id: str, parent: str | None, role: str, text: str, at: float) -> dict[str, Any]:
        message = {"author": {"role": role}, "content": {"content_type": "text", "parts": [text]}, "create_time": at}
        return {"id": node_id, "parent": parent, "message": message, "children": []}

    chatgpt = tmp_path / "chatgpt.json"
    mapping = {
        "root": {"id": "root", "parent": None, "message": None, "children": ["a"]},
        "a": node("a", "root", "user", "How do I rotate the deploy key?", 1735689600),
        "b": node("b", "a", "assistant", "Run rotate-key, then update CI secrets.", 1735689610),
        "x": node("x", "a", "assistant", "An abandoned branch", 1735689605),
    }
    chatgpt.write_text(
        json.dumps(
            [{"title": "Keys", "conversation_id": "c-1", "current_node": "b", "mapping": mapping}, {"title": "broken"}]
        )
    )
    outcomes = run("chatgpt", chatgpt, skip_bad=True)
    assert [outcome.status for outcome in outcomes] == ["stored", "failed"]
    [exchange] = selectors.recall(ids=[outcomes[0].id])["memories"]
    assert (
        exchange["text"]
        == "User: How do I rotate the deploy key?\n\nAssistant: Run rotate-key, then update CI secrets."
    )
    assert (
        exchange["session"] == "c-1"
        and exchange["timestamp"] == "2025-01-01T00:00:00Z"
        and exchange["room"] == "chatgpt"
    )

    claude = tmp_path / "claude.json"
    claude.write_text(
        json.dumps(
            [
                {
                    "uuid": "u-1",
                    "name": "Orrery",
                    "created_at": "2025-02-01T09:00:00Z",
                    "chat_messages": [
                        {
                            "sender": "human",
                            "text": "What ratio drives the lunar gear?",
                            "created_at": "2025-02-01T09:00:00Z",
                        },
                        {
                            "sender": "assistant",
                            "text": "",
                            "content": [{"type": "text", "text": "235/19, the Metonic cycle."}],
                            "created_at": "2025-02-01T09:00:05Z",
                        },
                        {"sender": "human", "text": "Thanks \ud800", "created_at": "2025-02-01T09:01:00Z"},
                    ],
                }
            ]
        )
    )
    outcomes = run("claude-ai", claude, skip_bad=True)
    assert statuses(outcomes) == {"stored": 1, "failed": 1}, "a lone surrogate fails its record alone"
    [lunar] = selectors.recall(ids=[outcome.id for outcome in outcomes if outcome.status == "stored"])["memories"]
    assert lunar["text"].endswith("Assistant: 235/19, the Metonic cycle.") and lunar["session"] == "u-1"


def test_it_imports_basic_memory_notes_and_refuses_unreadable_sources_whole(palace: Palace, tmp_path: Path) -> None:
    # Documented fixture: basic-memory's Markdown notes (front matter, observations, relations).
    notes = tmp_path / "notes" / "projects"
    notes.mkdir(parents=True)
    (notes / "orrery.md").write_text(
        "---\ntitle: Orrery build\ntype: note\ntags: [gears, bronze]\ncreated: 2025-04-01T12:00:00Z\n---\n\n"
        "## Observations\n- [fact] The lunar gear has 235 teeth #gears\n\n## Relations\n- part_of [[Antikythera]]\n"
    )
    [outcome] = run("basic-memory", tmp_path / "notes")
    [note] = selectors.recall(ids=[outcome.id])["memories"]
    assert note["text"].startswith("# Orrery build") and "- part_of [[Antikythera]]" in note["text"]
    assert "tags: [gears, bronze]" in note["text"] and note["room"] == "projects"
    assert note["timestamp"] == "2025-04-01T12:00:00Z"
    truncated = tmp_path / "cut.json"
    truncated.write_text('{"memories": [{"content": "half')
    with pytest.raises(imports.ImportProblem, match="path"):
        run("mcp-memory-service", truncated)
    with pytest.raises(imports.ImportProblem, match="not a folder"):
        run("basic-memory", truncated)


def test_it_reports_each_record_and_the_counts_from_the_command(palace: Palace, tmp_path: Path) -> None:
    source = tmp_path / "mem0.jsonl"
    source.write_text(
        json.dumps({"memory": "One"}) + "\n" + "x" * (300 * 1024) + "\n" + json.dumps({"memory": "Two"}) + "\n"
    )
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="line 2: line is longer than"):  # the whole file refused
        call_command("import", "mem0", str(source), "--json", stdout=out, stderr=err)
    assert palace_status.status()["total"] == 0
    out = io.StringIO()
    call_command("import", "mem0", str(source), "--json", "--skip-bad", stdout=out, stderr=err)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line.get("status") for line in lines[:-1]] == ["stored", "failed", "stored"]
    done = lines[-1]
    assert "longer than" in lines[1]["error"] and done["counts"] == {"stored": 2, "failed": 1}
    assert done["import_id"] and "import mem0" in err.getvalue() and "2 stored" in err.getvalue()


def test_it_leaves_as_memory_json_and_markdown_notes_that_come_back_in(palace: Palace, tmp_path: Path) -> None:
    from palace.writes import services
    from tests.palace.helpers import memory

    old = services.store(**memory("The router is a Fritzbox", room="network"))
    services.supersede(
        supersedes=[old["id"]], reason="replaced", **memory("The router is an OpenWrt box", room="network")
    )
    services.store(**memory("Tea at four", room="habits", hall="preferences", category="person"))
    graph, notes = tmp_path / "memory.json", tmp_path / "notes"
    call_command("export", "--format", "memory-json", "--out", str(graph), stderr=io.StringIO())
    call_command("export", "--format", "markdown", "--out", str(notes), stderr=io.StringIO())
    lines = [json.loads(line) for line in graph.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["entity"] * 3 + ["relation"]
    assert lines[-1]["relationType"] == "supersedes" and lines[-1]["to"] == f"network/{old['id']}"
    note = (notes / "projects" / "network" / f"{old['id']}.md").read_text()
    assert note.startswith('---\ntitle: "The router is a Fritzbox"') and "superseded_by [[" in note

    # Moving back in (here, into the same palace: the formats wrap each text, so nothing is a duplicate).
    came_back = run("memory-json", graph) + run("basic-memory", notes)
    assert statuses(came_back) == {"stored": 7}, "3 entities, their supersedes relation, 3 notes"
    texts = [
        found["text"] for found in selectors.find(query="router Fritzbox OpenWrt", limit=10, whole=True)["results"]
    ]
    assert any(text.startswith("network/") and "OpenWrt" in text for text in texts), "the graph's entities"
    assert any(text.startswith("# The router is a Fritzbox") for text in texts), "the notes, titled"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=15,
)
RECORD_KEYS = ("memory", "content", "document", "metadata", "tags", "created_at", "type", "name", "observations")


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    source=st.sampled_from(["memory-json", "mempalace", "mem0", "mcp-memory-service"]),
    records=st.lists(
        st.one_of(JSON_VALUES, st.dictionaries(st.sampled_from(RECORD_KEYS), JSON_VALUES, max_size=5)), max_size=6
    ),
)
def test_it_gives_every_hostile_record_one_outcome_and_never_raises(
    palace: Palace, tmp_path_factory: pytest.TempPathFactory, source: str, records: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("hostile") / "records.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    outcomes = run(source, path, dry_run=True)
    assert all(outcome.status in ("would-store", "failed") for outcome in outcomes)
    assert all(outcome.error for outcome in outcomes if outcome.status == "failed")
    if source != "memory-json":  # the graph merges entities: fewer memories than lines
        assert len(outcomes) == len(records), "one outcome per source record"


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    name=st.text(min_size=1, max_size=30).filter(str.strip),
    entity_type=st.text(max_size=20),
    observations=st.lists(st.text(max_size=40), max_size=5),
    relation=st.tuples(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20), st.text(max_size=20)),
)
def test_it_reads_back_every_entity_and_relation_it_writes_as_a_memory(
    name: str, entity_type: str, observations: list[str], relation: tuple[str, str, str]
) -> None:
    from palace.operations import memory_graph

    entity = {
        "text": memory_graph.entity_text(name, entity_type, observations),
        "source_file": memory_graph.entity_stamp(name, entity_type),
    }
    assert memory_graph.entity_of(entity) == {
        "type": "entity",
        "name": name,
        "entityType": entity_type,
        "observations": observations,
    }
    source, verb, target = relation
    stamped = {"text": memory_graph.relation_text(source, verb, target)}
    stamped["source_file"] = memory_graph.relation_stamp(source, verb, target)
    assert memory_graph.relation_of(stamped) == {"type": "relation", "from": source, "to": target, "relationType": verb}
    assert memory_graph.entity_of(stamped) is None and memory_graph.relation_of(entity) is None


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    entity_type=st.text(max_size=20) | st.sampled_from(["Person", "people", "tech_stack", "Decisions", "event"]),
    categories=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5, unique=True),
    halls=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5, unique=True),
    category=st.none() | st.text(max_size=12),
    hall=st.none() | st.text(max_size=12),
)
def test_it_files_every_entity_type_inside_the_vocabulary(
    entity_type: str, categories: list[str], halls: list[str], category: str | None, hall: str | None
) -> None:
    from palace.operations import memory_graph

    chosen = memory_graph.filing_for(entity_type, categories=categories, halls=halls, category=category, hall=hall)
    assert chosen[0] in categories and chosen[1] in halls


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    source=st.sampled_from(["memory-json", "mempalace", "mem0", "mcp-memory-service"]),
    records=st.lists(
        st.one_of(JSON_VALUES, st.dictionaries(st.sampled_from(RECORD_KEYS), JSON_VALUES, max_size=5)), max_size=6
    ),
)
def test_it_stores_all_of_a_file_or_nothing_and_undoes_what_it_stored(
    palace: Palace, tmp_path_factory: pytest.TempPathFactory, source: str, records: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("hostile") / "records.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    before = palace_status.status()["total"]
    planned = statuses(run(source, path, dry_run=True))
    if planned.get("failed"):
        with pytest.raises(imports.ImportRefused):
            run(source, path)
        assert palace_status.status()["total"] == before, "a refused file stores nothing"
        return
    outcomes = run(source, path)
    stored = [outcome for outcome in outcomes if outcome.status == "stored"]
    assert palace_status.status()["total"] == before + len(stored)
    if stored:
        assert imports.undo_import(import_id=stored[0].import_id)["deleted"] == len(stored)
        assert palace_status.status()["total"] == before


def test_it_removes_what_it_stored_when_storing_stops_halfway(
    palace: Palace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from palace.errors import StoreUnavailable
    from palace.writes import services

    source = tmp_path / "mem0.jsonl"
    source.write_text("".join(json.dumps({"memory": f"Fact number {index}"}) + "\n" for index in range(5)))
    real_store_batch = services.store_batch
    calls = []

    def store_batch_then_fail(**arguments: Any) -> dict[str, Any]:
        calls.append(arguments)
        if len(calls) == 3:  # the disk fills up on the third batch
            raise StoreUnavailable("disk full")
        return real_store_batch(**arguments)

    monkeypatch.setattr(imports, "BATCH", 2)
    monkeypatch.setattr(services, "store_batch", store_batch_then_fail)
    with pytest.raises(imports.ImportProblem, match=r"nothing kept \(4 stored memories removed\): disk full"):
        run("mem0", source)
    assert palace_status.status()["total"] == 0


def test_it_keeps_the_import_id_through_an_export_restored_in_another_palace(tmp_path: Path) -> None:
    from tests.mcpserver.conftest import migrate, server_env
    from tests.palazzo_site.test_hook import PALAZZO

    graph, exported = tmp_path / "memory.json", tmp_path / "export.jsonl"
    real_memory_json(graph, entities=ENTITIES[:2], relations=RELATIONS[:1])
    first, second = tmp_path / "first", tmp_path / "second"
    migrate(first)
    migrate(second)

    def palazzo(data_dir: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(PALAZZO), *arguments], env=server_env(data_dir), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done

    report = json.loads(palazzo(first, "import", "memory-json", str(graph), "--json").stdout.splitlines()[-1])
    palazzo(first, "export", "--out", str(exported))
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(lines) == 3 and {line["import_id"] for line in lines} == {report["import_id"]}
    palazzo(second, "ingest", "--file", str(exported))
    undo = palazzo(second, "import", "--undo", report["import_id"], "--json")
    assert json.loads(undo.stdout) == {"import_id": report["import_id"], "deleted": 3}, "the restored memories"
