"""Real agent turns through the real Codex CLI (npm, pinned): palazzo's MCP server and hooks installed by
install-hooks into a private CODEX_HOME, runmcp over stdio, and a scripted model on loopback
(tests/agents/responses_model.py, the only stand-in: no model runs offline) that calls palazzo's tools.
What the model was sent is kept and checked.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from palace.feeding import codex_config, snapshots
from tests.agents.responses_model import (
    MODEL,
    Reply,
    ResponsesServer,
    all_text,
    namespace_tools,
    scripted,
    tool_output,
)
from tests.agents.test_pi import settle
from tests.mcpserver.conftest import connect, migrate, server_env, stdio_parameters
from tests.npm_tools import npm_tool
from tests.palazzo_site.test_hook import PALAZZO, wait_for

pytestmark = pytest.mark.slow
FACT = "The orrery's lunar gear has 235 teeth (the Metonic cycle)"
STORE = {"text": FACT, "category": "technical", "wing": "projects", "room": "orrery", "hall": "facts"}
# The user's own config before palazzo arrives: comments, a setting, the (scripted) provider they use.
USER_CONFIG = """# My Codex settings (kept by hand)
model = "{model}"
model_provider = "scripted"  # the loopback stand-in for a model provider

[model_providers.scripted]
name = "Scripted"
base_url = "{url}"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"
"""


def codex_cli() -> Path:
    """The pinned Codex CLI under .tools/ (installed from the npm registry on first use)."""
    return npm_tool("install-codex.sh", "the Codex CLI")


class Codex:
    """Codex CLI with a private HOME and CODEX_HOME, a project dir and a palace."""

    def __init__(self, tmp_path: Path, *, palace: bool = True) -> None:
        self.cli = codex_cli()
        self.home, self.codex_home, self.data_dir = tmp_path / "home", tmp_path / "codex", tmp_path / "data"
        self.project = tmp_path / "work" / "orrery"
        for directory in (self.home, self.codex_home, self.project):
            directory.mkdir(parents=True)
        if palace:
            migrate(self.data_dir)
        self.env = server_env(
            self.data_dir,
            HOME=str(self.home),
            CODEX_HOME=str(self.codex_home),
            SCRIPTED_API_KEY="scripted",
            NO_COLOR="1",
        )

    def install_hooks(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`palazzo install-hooks codex` (CODEX_HOME points it at the private config dir)."""
        command = [str(PALAZZO), "install-hooks", "codex", *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)

    def run(self, prompt: str, *options: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """One `codex exec` session in the project against the configured provider; how long it took.

        --dangerously-bypass-hook-trust stands for the trust the interactive CLI asks of its user once
        (its "Hooks need review" prompt); without it, `exec` skips untrusted hooks silently.
        """
        command = [
            str(self.cli),
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-hook-trust",
            *options,
            prompt,
        ]
        started = time.monotonic()
        done = subprocess.run(
            command,
            env=self.env,
            cwd=self.project,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        return done, time.monotonic() - started


def events(stdout: str) -> list[dict[str, Any]]:
    """`codex exec --json` output, one event a line."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_it_finds_a_stored_memory_through_a_real_codex_turn_and_feeds_the_session(tmp_path: Path) -> None:
    codex = Codex(tmp_path)
    with connect(stdio_parameters(codex.data_dir), "stdio") as client:
        stored = client.ok("palace_store", STORE)  # also starts the palace's holder, as a laptop has it running
    # The holder prepares the project's wake-up after its writes; the hook only reads it.
    wait_for(
        lambda: "235 teeth" in str((snapshots.read(codex.data_dir, "orrery") or {}).get("context")), what="wake-up"
    )

    script = scripted(
        lambda _b: Reply(tool="mcp__palazzo__palace_find", arguments={"query": "teeth of the lunar gear"}),
        lambda _b: Reply(text="The lunar gear has 235 teeth."),
    )
    with ResponsesServer(script) as model:
        config, hooks = codex.codex_home / "config.toml", codex.codex_home / "hooks.json"
        config.write_text(USER_CONFIG.format(model=MODEL, url=model.url))
        user_hooks = {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "true"}]}]}}
        hooks.write_text(json.dumps(user_hooks, indent=2) + "\n")
        before = config.read_bytes(), hooks.read_bytes()
        installed = codex.install_hooks()
        assert installed.returncode == 0 and "mcp_servers.palazzo" in installed.stdout, installed.stderr

        done, seconds = codex.run("How many teeth has the lunar gear?")
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
        requests = model.agent_requests("mcp__palazzo__palace_find")

    assert len(requests) == 2, [all_text(body)[-300:] for body in model.requests]
    listed = namespace_tools(requests[0], "mcp__palazzo")
    [namespace] = [tool for tool in requests[0]["tools"] if tool.get("name") == "mcp__palazzo"]
    assert {"palace_store", "palace_find", "palace_recall", "palace_browse", "palace_status"} <= {
        tool["name"] for tool in listed
    }
    first_text = all_text(model.requests[0])  # the very first request the model receives
    assert "<palazzo-wake-up>" in first_text, "the SessionStart hook's wake-up reaches the model's first request"
    wake_up = first_text[first_text.index("<palazzo-wake-up>") : first_text.index("</palazzo-wake-up>")]
    assert "235 teeth" in wake_up and "room 'orrery'" in wake_up, wake_up
    answer = tool_output(requests[1])
    assert FACT in answer and str(stored["id"]) in answer, "palace_find brought the stored memory back"
    calls = [event["item"] for event in events(done.stdout) if event.get("type") == "item.completed"]
    assert any(item.get("type") == "mcp_tool_call" and item.get("status") == "completed" for item in calls)

    settle(codex.data_dir)  # the feeder SessionEnd started has fed the rollout and let go
    with connect(stdio_parameters(codex.data_dir), "stdio") as client:
        fed = client.ok("palace_browse", {"room": "orrery", "hall": "events"})["memories"]
    assert fed and all(memory["added_by"].startswith("codex@") for memory in fed), fed
    session = next(memory for memory in fed if "How many teeth has the lunar gear?" in memory["text"])
    assert "235 teeth" in session["text"] and "palace_find" in session["text"]
    assert "<palazzo-wake-up>" not in session["text"], "the wake-up is not fed back into the palace"

    removed = codex.install_hooks("--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert (config.read_bytes(), hooks.read_bytes()) == before, "uninstall leaves Codex's config as it found it"
    print(
        f"\ncodex: {len(listed)} palazzo tools listed ({len(json.dumps(listed))} JSON chars, "
        f"{len(json.dumps(namespace))} with the namespace and its description); "
        f"wake-up {len(wake_up)} chars in the first request; find answer {len(answer)} chars; session {seconds:.1f} s"
    )


def test_it_stops_codex_from_starting_without_palazzo_unless_the_user_makes_it_optional(tmp_path: Path) -> None:
    codex = Codex(tmp_path, palace=False)
    gone = tmp_path / "uninstalled" / "bin" / "palazzo"  # a palazzo that moved away after install-hooks
    with ResponsesServer(scripted(lambda _b: Reply(text="unused"))) as model:
        (codex.codex_home / "config.toml").write_text(USER_CONFIG.format(model=MODEL, url=model.url))
        codex_config.install(codex.codex_home, gone)
        refused, _seconds = codex.run("Anything remembered?")
        assert refused.returncode != 0 and not model.requests, "a required server that cannot start stops the session"
        assert "required MCP servers failed to initialize: palazzo" in refused.stderr, refused.stderr[-2000:]

        optional, seconds = codex.run("Anything remembered?", "-c", "mcp_servers.palazzo.required=false")
        assert optional.returncode == 0, optional.stderr[-3000:]
        (request,) = model.requests
        assert not namespace_tools(request, "mcp__palazzo") and "<palazzo-wake-up>" not in all_text(request)
        assert any(event.get("type") == "turn.completed" for event in events(optional.stdout)), "hooks failed quietly"
    print(f"\ncodex without palazzo: refused at start; optional, the session ran in {seconds:.1f} s")
