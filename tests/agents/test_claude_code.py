"""Real agent turns through the real Claude Code CLI (npm, pinned): palazzo over stdio as an MCP server, its
hooks installed by install-hooks, and a scripted model on loopback (tests/agents/model_server.py, the only
stand-in) that calls palazzo's tools. What the model was sent is kept and checked.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.model_server import ModelServer, Reply, all_text, scripted, tool_result_text
from tests.agents.test_pi import settle
from tests.mcpserver.conftest import connect, migrate, server_env, stdio_parameters
from tests.palazzo_site.test_claude_code import claude_cli
from tests.palazzo_site.test_hook import PALAZZO

pytestmark = pytest.mark.slow
FACT = "The orrery's lunar gear has 235 teeth (the Metonic cycle)"
STORE = {"text": FACT, "category": "technical", "wing": "projects", "room": "orrery", "hall": "facts"}
TOOLS = ",".join(f"mcp__palazzo__palace_{name}" for name in ("store", "find", "recall", "browse", "status"))


class Claude:
    """Claude Code with palazzo's hooks and its MCP server registered in a temporary config dir."""

    def __init__(self, tmp_path: Path, *, data_dir: Path | None = None) -> None:
        self.cli = claude_cli()
        self.data_dir, self.config_dir = data_dir or tmp_path / "data", tmp_path / "claude"
        self.project = tmp_path / "work" / "orrery"
        self.project.mkdir(parents=True)
        migrate(self.data_dir)
        self.env = server_env(
            self.data_dir, CLAUDE_CONFIG_DIR=str(self.config_dir), HOME=str(tmp_path / "home"), NO_COLOR="1"
        )
        for command in (
            [str(PALAZZO), "install-hooks", "claude-code"],
            [str(self.cli), "mcp", "add", "--scope", "user", "palazzo", "--", str(PALAZZO), "runmcp"],
        ):
            done = subprocess.run(command, env=self.env, cwd=self.project, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr + done.stdout

    def command(self, model: ModelServer, prompt: str) -> tuple[list[str], dict[str, str]]:
        """The `claude -p` command line and environment of one session against the scripted model."""
        env = self.env | {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "scripted"}
        return [str(self.cli), "-p", prompt, "--allowedTools", TOOLS], env

    def warm(self) -> None:
        """Start the palace's holder, as a laptop with another window open has it running.

        `claude -p` sends its first request without waiting long for its MCP servers: on a loaded 2-core CI
        machine a cold holder (Django, the MCP SDK) can answer `initialize` after it, and the turn has no
        palace tools. A holder already up answers in a fraction of a second.
        """
        done = subprocess.run([str(PALAZZO), "status"], env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr

    def run(self, model: ModelServer, prompt: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """One `claude -p` session against the scripted model (the holder warm); how long it took."""
        self.warm()
        command, env = self.command(model, prompt)
        started = time.monotonic()
        done = subprocess.run(command, env=env, cwd=self.project, capture_output=True, text=True, timeout=300)
        return done, time.monotonic() - started


def test_it_stores_finds_and_recalls_through_real_claude_code_turns_and_feeds_the_sessions(tmp_path: Path) -> None:
    claude = Claude(tmp_path)
    store = scripted(
        lambda _b: Reply(tool="mcp__palazzo__palace_store", arguments=STORE), lambda _b: Reply(text="Stored.")
    )
    with ModelServer(store) as model:
        first, first_seconds = claude.run(model, "Remember how many teeth the lunar gear has.")
        assert first.returncode == 0, first.stderr + first.stdout
        requests = model.agent_requests("mcp__palazzo__palace_store")
    listed = {tool["name"]: tool for tool in requests[0]["tools"] if tool["name"].startswith("mcp__palazzo__")}
    assert listed["mcp__palazzo__palace_store"]["input_schema"]["required"] == [
        "text",
        "category",
        "wing",
        "room",
        "hall",
    ]
    first_text = all_text(requests[0])
    assert "<palazzo-wake-up>" in first_text, "the SessionStart hook's wake-up reaches the model"
    stored, failed = tool_result_text(requests[1])
    assert not failed and json.loads(stored)["text"] == FACT
    assert json.loads(stored)["added_by"].startswith("claude-code"), "the CLI's own name stamps its writes"

    ids: list[int] = []

    def recall(body: dict[str, Any]) -> Reply:
        text, _ = tool_result_text(body)
        ids.append(next(hit["id"] for hit in json.loads(text)["results"] if hit["text"] == FACT))
        return Reply(tool="mcp__palazzo__palace_recall", arguments={"ids": ids})

    find = scripted(
        lambda _b: Reply(tool="mcp__palazzo__palace_find", arguments={"query": "teeth of the lunar gear"}),
        recall,
        lambda _b: Reply(text="235."),
    )
    with ModelServer(find) as model:
        second, second_seconds = claude.run(model, "How many teeth has the lunar gear?")
        assert second.returncode == 0, second.stderr + second.stdout
        requests = model.agent_requests("mcp__palazzo__palace_find")
    answer, failed = tool_result_text(requests[1])
    assert not failed and FACT in answer
    recalled, failed = tool_result_text(requests[2])
    assert not failed and json.loads(recalled)["memories"][0]["text"] == FACT

    settle(claude.data_dir)  # the detached feeder SessionEnd started has fed both sessions and let go
    with connect(stdio_parameters(claude.data_dir), "stdio") as client:
        sessions = client.ok("palace_browse", {"room": "orrery", "hall": "events"})["memories"]
    assert len(sessions) >= 2, sessions
    assert all(memory["added_by"].startswith("claude-code@") for memory in sessions)
    assert any("lunar gear" in memory["text"] for memory in sessions)
    wake_up = first_text[first_text.index("<palazzo-wake-up>") : first_text.index("</palazzo-wake-up>")]
    print(
        f"\nclaude: {len(listed)} palace tools listed; wake-up {len(wake_up)} chars; find answer {len(answer)} chars; "
        f"sessions {first_seconds:.1f} s and {second_seconds:.1f} s"
    )
