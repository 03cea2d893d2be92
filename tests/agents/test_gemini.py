"""Real agent turns through the real Gemini CLI (npm, pinned): palazzo's MCP server and hooks installed by
`palazzo install-hooks gemini` in a private config dir, and a scripted Gemini API on loopback
(tests/agents/gemini_model.py, the only stand-in: no model runs offline) that calls palazzo's tools.
What the model was sent is kept and checked.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from palace.feeding import gemini_settings
from tests.agents.gemini_model import (
    GeminiModelServer,
    all_text,
    declarations,
    function_response_text,
    scripted,
)
from tests.agents.model_server import Reply
from tests.agents.test_pi import settle
from tests.mcpserver.conftest import connect, migrate, server_env, stdio_parameters
from tests.npm_tools import npm_tool
from tests.palazzo_site.test_hook import PALAZZO

pytestmark = pytest.mark.slow
FACT = "The orrery's lunar gear has 235 teeth (the Metonic cycle)"
STORE = {"text": FACT, "category": "technical", "wing": "projects", "room": "orrery", "hall": "facts"}
FIND = "mcp_palazzo_palace_find"
# The user's own settings before palazzo: what Gemini CLI needs to talk to an API key's endpoint, written the
# way Gemini CLI writes its settings (two-space JSON, no final newline).
USER_SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "ui": {"hideBanner": True}}
ESCAPED_OPEN, ESCAPED_CLOSE = "&lt;palazzo-wake-up&gt;", "&lt;/palazzo-wake-up&gt;"


def gemini_cli() -> Path:
    """The pinned Gemini CLI under .tools/ (installed from the npm registry on first use)."""
    return npm_tool("install-gemini-cli.sh", "the Gemini CLI")


class Gemini:
    """The Gemini CLI with a private home, palazzo installed in its config dir, a project and a palace."""

    def __init__(self, tmp_path: Path) -> None:
        self.cli = gemini_cli()
        self.home, self.data_dir = tmp_path / "home", tmp_path / "data"
        self.config_dir = self.home / ".gemini"
        self.project = tmp_path / "work" / "orrery"
        self.project.mkdir(parents=True)
        (tmp_path / "tmp").mkdir()
        migrate(self.data_dir)
        self.env = server_env(
            self.data_dir,
            HOME=str(self.home),
            GEMINI_CLI_HOME=str(self.home),
            GEMINI_API_KEY="scripted",
            # -p runs are headless: the workspace is trusted as the user would trust it once interactively.
            GEMINI_CLI_TRUST_WORKSPACE="true",
            NO_COLOR="1",
            TMPDIR=str(tmp_path / "tmp"),  # where Gemini CLI writes its error reports
        )
        # Under GitHub Actions (GITHUB_SHA) Gemini CLI gives hooks and MCP servers a bare environment.
        for name in ("GITHUB_SHA", "SURFACE"):
            self.env.pop(name, None)
        self.config_dir.mkdir(parents=True)
        self.settings = self.config_dir / "settings.json"
        self.settings.write_text(json.dumps(USER_SETTINGS, indent=2))
        self.before = self.settings.read_bytes()
        done = self.palazzo("install-hooks", "gemini")
        assert done.returncode == 0 and "mcpServers.palazzo" in done.stdout, done.stderr

    def palazzo(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run this installation's palazzo with the test's environment."""
        return subprocess.run([str(PALAZZO), *args], env=self.env, capture_output=True, text=True, timeout=120)

    def warm(self) -> None:
        """Start the palace's holder, as it runs when another session is open (see Claude.warm)."""
        done = self.palazzo("status")
        assert done.returncode == 0, done.stderr

    def run(
        self, model: GeminiModelServer, prompt: str, *, warm: bool = True
    ) -> tuple[subprocess.CompletedProcess[str], float]:
        """One `gemini -p` session in the project against the scripted model (the holder warm); its time."""
        if warm:
            self.warm()
        command = [str(self.cli), "-p", prompt, "--output-format", "json"]
        env = self.env | {"GOOGLE_GEMINI_BASE_URL": model.url}
        started = time.monotonic()
        done = subprocess.run(command, env=env, cwd=self.project, capture_output=True, text=True, timeout=300)
        return done, time.monotonic() - started


def test_it_finds_a_stored_memory_through_a_real_gemini_turn_and_feeds_the_session(tmp_path: Path) -> None:
    gemini = Gemini(tmp_path)
    with connect(stdio_parameters(gemini.data_dir), "stdio") as client:
        client.ok("palace_store", STORE)

    def find(_body: dict[str, Any]) -> Reply:
        return Reply(tool=FIND, arguments={"query": "How many teeth has the lunar gear?"})

    with GeminiModelServer(scripted(find, lambda _b: Reply(text="235 teeth."))) as model:
        done, seconds = gemini.run(model, "How many teeth has the lunar gear?")
        assert done.returncode == 0, done.stderr + done.stdout
        requests = model.agent_requests(FIND)
    assert json.loads(done.stdout)["response"] == "235 teeth."
    listed = {name: tool for name, tool in declarations(requests[0]).items() if name.startswith("mcp_palazzo_")}
    assert {f"mcp_palazzo_palace_{name}" for name in ("store", "find", "recall", "browse", "status")} <= set(listed)
    first_text = all_text(requests[0])
    assert ESCAPED_OPEN in first_text, "the SessionStart hook's wake-up reaches the model's first request"
    wake_up = first_text[first_text.index(ESCAPED_OPEN) : first_text.index(ESCAPED_CLOSE) + len(ESCAPED_CLOSE)]
    assert FACT in wake_up, "the wake-up context names what the palace holds"
    answer, failed = function_response_text(requests[1])
    assert not failed and FACT in [hit["text"] for hit in json.loads(answer)["results"]], answer

    settle(gemini.data_dir)  # AfterAgent and SessionEnd queued the chat; the holder or a feeder fed it
    with connect(stdio_parameters(gemini.data_dir), "stdio") as client:
        fed = client.ok("palace_browse", {"room": "orrery", "hall": "events"})["memories"]
    assert fed and all(memory["added_by"].startswith("gemini@") for memory in fed), fed
    [exchange] = fed
    assert exchange["text"].startswith("User: How many teeth has the lunar gear?\n\nAssistant: [tool mcp_palazzo")
    assert "235 teeth." in exchange["text"] and "palazzo-wake-up" not in exchange["text"]

    removed = gemini.palazzo("install-hooks", "gemini", "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert gemini.settings.read_bytes() == gemini.before, "uninstall gives the user's settings back as they were"
    size = sum(len(json.dumps(tool)) for tool in listed.values())
    print(
        f"\ngemini: {len(listed)} palazzo tools listed ({size} JSON chars); wake-up {len(wake_up)} chars "
        f"(escaped); find answer {len(answer)} chars; session {seconds:.1f} s"
    )


def test_it_gives_a_session_without_palace_tools_when_palazzo_cannot_start(tmp_path: Path) -> None:
    gemini = Gemini(tmp_path)
    data = json.loads(gemini.settings.read_text())
    data["mcpServers"]["palazzo"]["command"] = str(tmp_path / "gone" / "palazzo")  # palazzo uninstalled under it
    gemini.settings.write_text(json.dumps(data, indent=2))
    with GeminiModelServer(lambda _body: Reply(text="no memory today")) as model:
        done, seconds = gemini.run(model, "Hello", warm=False)
        assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout)["response"] == "no memory today", "the session ran"
    agent = [body for body in model.requests if declarations(body)]
    assert agent and not any(name.startswith("mcp_palazzo_") for body in agent for name in declarations(body))
    assert ESCAPED_OPEN in all_text(agent[0]), "the hooks still wake the session up"
    assert "MCP issues detected" in done.stderr, "Gemini CLI tells the user"
    assert gemini_settings.uninstall(gemini.config_dir) and gemini.settings.read_bytes() == gemini.before
    print(f"\ngemini without palazzo's server: the session ran without palace tools in {seconds:.1f} s")
