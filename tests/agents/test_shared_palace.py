"""Two real Claude Code sessions and a real pi session at once on one palace (issue 38).

Each CLI starts its own `palazzo runmcp`; the first of them starts the palace's holder and every one is a
pipe to it. Each scripted model (tests/agents/model_server.py, the only stand-in) stores its agent's fact,
waits until all three are stored, then finds them all; pi leaves first, and the two Claude Code sessions
find again afterwards.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agents.model_server import ModelServer, Reply, all_text, scripted, tool_result_text
from tests.agents.test_claude_code import Claude
from tests.agents.test_pi import Pi, settle
from tests.mcpserver.conftest import connect, migrate, stdio_parameters

pytestmark = pytest.mark.slow
FACTS = {
    "claude-a": "The orrery's lunar gear has 235 teeth (the Metonic cycle)",
    "claude-b": "The orrery's solar gear has 19 teeth, pinned to the brass frame",
    "pi": "The orrery's Saturn gear has 29 teeth and turns once a Saturn year",
}
QUESTION = {"query": "how many teeth has each gear of the orrery", "limit": 10}
WAIT_SECONDS = 180.0


def _store(fact: str) -> dict[str, Any]:
    return {"text": fact, "category": "technical", "wing": "projects", "room": "orrery", "hall": "facts"}


def test_it_lets_two_claude_code_sessions_and_a_pi_session_share_one_palace_at_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    stored = {agent: threading.Event() for agent in FACTS}
    pi_left = threading.Event()

    def script(agent: str, prefix: str) -> Callable[[dict[str, Any]], Reply]:
        def find_after_all_stored(_body: dict[str, Any]) -> Reply:
            stored[agent].set()
            for event in stored.values():
                assert event.wait(WAIT_SECONDS), "every agent stored its fact"
            return Reply(tool=f"{prefix}palace_find", arguments=QUESTION)

        def find_again_after_pi_left(_body: dict[str, Any]) -> Reply:
            assert pi_left.wait(WAIT_SECONDS), "pi's session ended"
            return Reply(tool=f"{prefix}palace_find", arguments=QUESTION)

        steps = [lambda _b: Reply(tool=f"{prefix}palace_store", arguments=_store(FACTS[agent])), find_after_all_stored]
        if agent != "pi":
            steps.append(find_again_after_pi_left)
        return scripted(*steps, lambda _b: Reply(text="Done."))

    claudes = {agent: Claude(tmp_path / agent, data_dir=data_dir) for agent in ("claude-a", "claude-b")}
    pi = Pi(tmp_path / "pi", data_dir=data_dir)
    models = {agent: ModelServer(script(agent, "mcp__palazzo__")) for agent in claudes}
    models["pi"] = ModelServer(script("pi", ""))
    # The palace's holder is up, as on a laptop where a window is already open (Claude.warm says why).
    claudes["claude-a"].warm()
    for model in models.values():
        model.__enter__()
    try:
        processes: dict[str, subprocess.Popen[str]] = {}
        started = time.monotonic()
        for agent, claude in claudes.items():
            command, env = claude.command(models[agent], "What does the palace know about the orrery's gears?")
            processes[agent] = _start(command, env, claude.project)
        processes["pi"] = _start(pi.command(models["pi"], "Note the Saturn gear."), pi.env, pi.project)
        outputs = {"pi": processes["pi"].communicate(timeout=300)}
        pi_left.set()
        seconds = {"pi": time.monotonic() - started}
        for agent in claudes:
            outputs[agent] = processes[agent].communicate(timeout=300)
            seconds[agent] = time.monotonic() - started
    finally:
        for model in models.values():
            model.__exit__(None, None, None)
    for agent, process in processes.items():
        assert process.returncode == 0, f"{agent}: {outputs[agent]}"
    holder_log = (data_dir / "holder.log").read_text() if (data_dir / "holder.log").exists() else ""

    prefixes = {"claude-a": "mcp__palazzo__", "claude-b": "mcp__palazzo__", "pi": ""}
    for agent, prefix in prefixes.items():
        requests = models[agent].agent_requests(f"{prefix}palace_find")
        assert requests, f"{agent} was never offered the palace's tools: {outputs[agent]}\n{holder_log}"
        assert "<palazzo-wake-up>" in all_text(requests[0]), f"{agent} woke up with the palace"
        stored_text, failed = tool_result_text(requests[1])
        assert not failed, stored_text
        assert json.loads(stored_text)["added_by"].startswith("claude-code" if prefix else "pi/")
        finds = [tool_result_text(request) for request in requests[2:]]
        assert len(finds) == (2 if prefix else 1)
        for text, failed in finds:  # the first find, and the Claude sessions' find after pi left
            assert not failed, text
            assert {hit["text"] for hit in json.loads(text)["results"]} >= set(FACTS.values()), agent

    settle(data_dir)  # every session's transcript fed by the holder, which then left
    with connect(stdio_parameters(data_dir), "stdio") as client:
        facts = client.ok("palace_browse", {"room": "orrery", "hall": "facts"})["memories"]
        fed = client.ok("palace_browse", {"room": "orrery", "hall": "events", "limit": 50})["memories"]
    assert {memory["text"] for memory in facts} == set(FACTS.values())
    harnesses = {memory["added_by"].split("@")[0] for memory in fed}
    assert harnesses == {"claude-code", "pi"}, "each session's exchanges, stamped with its own harness"
    print(
        "\nshared palace: "
        + ", ".join(f"{agent} done after {elapsed:.1f} s" for agent, elapsed in seconds.items())
        + f"; {len(fed)} exchanges fed"
    )


def _start(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
