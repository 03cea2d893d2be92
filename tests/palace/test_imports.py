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
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from django.core.management import call_command
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from palace.engine.runtime import Palace
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


def real_memory_json(path: Path) -> None:
    """Have the official memory server write its knowledge graph to path, through its own MCP tools."""
    params = StdioServerParameters(
        command=str(memory_server()), env={"MEMORY_FILE_PATH": str(path), "PATH": "/usr/bin:/bin"}
    )
    entities = [
        {"name": "Ada", "entityType": "person", "observations": ["Prefers tea", "Maintains the orrery"]},
        {"name": "Orrery", "entityType": "project", "observations": ["The lunar gear has 235 teeth"]},
    ]
    relations = [{"from": "Ada", "to": "Orrery", "relationType": "maintains"}]
    with start_blocking_portal() as portal:
        client = Client(params, mode="legacy", client_info=CLIENT_INFO, read_timeout_seconds=60)
        with portal.wrap_async_context_manager(client):
            portal.call(client.call_tool, "create_entities", {"entities": entities})
            portal.call(client.call_tool, "create_relations", {"relations": relations})


def test_it_imports_the_knowledge_graph_the_official_memory_server_writes(palace: Palace, tmp_path: Path) -> None:
    graph = tmp_path / "memory.json"
    real_memory_json(graph)
    assert '"type":"entity"' in graph.read_text().replace(" ", "")

    dry = run("memory-json", graph, dry_run=True)
    assert statuses(dry) == {"would-store": 2} and palace_status.status()["total"] == 0, "a dry run writes nothing"
    stored = run("memory-json", graph)
    assert statuses(stored) == {"stored": 2}
    [ada] = selectors.recall(ids=[outcome.id for outcome in stored if outcome.ref == "line 1"])["memories"]
    assert ada["text"].splitlines() == [
        "Ada (person)",
        "- Prefers tea",
        "- Maintains the orrery",
        "Ada maintains Orrery",
    ]
    assert ada["added_by"] == "import:memory-json" and ada["room"] == "memory-graph"
    assert statuses(run("memory-json", graph)) == {"duplicate": 2}, "a second import stores nothing"


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
    outcomes = run("mempalace", export, defaults=ImportDefaults(wing="projects"))
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
    outcomes = run("mem0", mem0)
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
    outcomes = run("chatgpt", chatgpt)
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
    outcomes = run("claude-ai", claude)
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
    with pytest.raises(SystemExit):  # a failed record makes the exit status 1; the others are stored
        call_command("import", "mem0", str(source), "--json", stdout=out, stderr=err)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line.get("status") for line in lines[:-1]] == ["stored", "failed", "stored"]
    assert "longer than" in lines[1]["error"] and lines[-1] == {"done": True, "counts": {"stored": 2, "failed": 1}}
    assert "import mem0" in err.getvalue() and "2 stored" in err.getvalue()


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
    assert statuses(came_back) == {"stored": 6}
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
