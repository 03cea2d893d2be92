"""Real agent turns through the real pi CLI (npm, pinned) with palazzo's extension installed by install-hooks.

A scripted model on loopback (tests/agents/model_server.py, the only stand-in: no model runs offline)
answers pi's Messages API requests; palazzo, runmcp, the hooks and the spool are all real. Each test
keeps what the model was sent and checks it: the tools and their schemas, the wake-up context, answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from palace.feeding import pi_extension, spool
from tests.agents.model_server import ModelServer, Reply, all_text, scripted, tool_names, tool_result_text
from tests.mcpserver.conftest import connect, http_server, migrate, server_env, stdio_parameters
from tests.mcpserver.test_auth_http import create_token
from tests.npm_tools import npm_tool
from tests.palazzo_site.test_hook import PALAZZO, wait_for

pytestmark = pytest.mark.slow
FACT = "The orrery's lunar gear has 235 teeth (the Metonic cycle)"
STORE = {"text": FACT, "category": "technical", "wing": "projects", "room": "orrery", "hall": "facts"}


def pi_cli() -> Path:
    """The pinned pi CLI under .tools/ (installed from the npm registry on first use)."""
    return npm_tool("install-pi.sh", "the pi CLI")


class Pi:
    """One pi installation: an agent dir with the scripted provider and palazzo's extension, a project, a palace."""

    def __init__(self, tmp_path: Path, *, data_dir: Path | None = None, **extra_env: str) -> None:
        self.cli = pi_cli()
        self.agent_dir = tmp_path / "agent"
        self.data_dir = data_dir or tmp_path / "data"
        self.project = tmp_path / "work" / "orrery"
        self.project.mkdir(parents=True)
        self.agent_dir.mkdir()
        self.env = server_env(
            self.data_dir,
            PI_CODING_AGENT_DIR=str(self.agent_dir),
            PI_OFFLINE="1",
            HOME=str(tmp_path / "home"),
            NO_COLOR="1",
            PALAZZO_PI_FEED_DEBOUNCE_MS="200",
            **extra_env,
        )
        installed = subprocess.run(
            [str(PALAZZO), "install-hooks", "pi"], env=self.env, capture_output=True, text=True, timeout=60
        )
        assert installed.returncode == 0, installed.stderr
        assert pi_extension.extension_path(self.agent_dir).is_file()

    def command(self, model: ModelServer, prompt: str, *options: str) -> list[str]:
        """The `pi -p` command line of one session against the scripted model (its provider written)."""
        provider = {"baseUrl": model.url, "api": "anthropic-messages", "apiKey": "scripted", "models": [{"id": "m"}]}
        (self.agent_dir / "models.json").write_text(json.dumps({"providers": {"scripted": provider}}))
        return [str(self.cli), "--provider", "scripted", "--model", "m", *options, "-p", prompt]

    def run(self, model: ModelServer, prompt: str, *options: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """One `pi -p` session in the project against the scripted model; how long it took."""
        command = self.command(model, prompt, *options)
        started = time.monotonic()
        done = subprocess.run(command, env=self.env, cwd=self.project, capture_output=True, text=True, timeout=300)
        return done, time.monotonic() - started

    def settle(self) -> None:
        """Wait until the transcripts the session queued are fed (the spool empty, no feeder running)."""
        settle(self.data_dir)


def settle(data_dir: Path) -> None:
    """Wait until a data dir's queued transcripts are fed: the spool empty and no feeder holding the palace."""

    def drained() -> bool:
        # Nothing queued or being fed, and no detached feeder left; the palace's holder may stay (it is idle).
        return not spool.has_work(data_dir) and not spool.feeder_active(data_dir)

    wait_for(lambda: drained() or None, seconds=240, what="the session's transcript to be fed")


def test_it_installs_the_extension_idempotently_and_uninstalls_exactly(tmp_path: Path) -> None:
    agent_dir = tmp_path / "agent"
    env = server_env(tmp_path / "data", PI_CODING_AGENT_DIR=str(agent_dir))

    def install(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(PALAZZO), "install-hooks", "pi", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    first = install()
    assert first.returncode == 0 and "installed" in first.stdout, first.stderr
    target = pi_extension.extension_path(agent_dir)
    assert json.dumps(str(PALAZZO)) in target.read_text(), "the extension runs this installation's palazzo"
    assert "nothing to change" in install().stdout
    (agent_dir / "extensions" / "mine.ts").write_text("export default function () {}\n")
    assert install("--uninstall").returncode == 0
    assert not target.exists() and (agent_dir / "extensions" / "mine.ts").exists()
    target.write_text("// someone else's palazzo.ts\n")
    refused = install()
    assert refused.returncode == 1 and "not palazzo's" in refused.stderr
    other = tmp_path / "elsewhere"
    other.mkdir()  # a mistyped --agent-dir is refused (tests/palazzo_site/test_install_hooks.py)
    assert install("--agent-dir", str(other)).returncode == 0 and pi_extension.extension_path(other).is_file()


def test_it_stores_then_finds_and_recalls_through_real_pi_turns_and_feeds_the_session(tmp_path: Path) -> None:
    found_ids: list[int] = []

    def find(_body: dict[str, Any]) -> Reply:
        return Reply(tool="palace_find", arguments={"query": "How many teeth has the lunar gear?"})

    def recall(body: dict[str, Any]) -> Reply:
        text, _ = tool_result_text(body)
        # The stored fact, beside the fed exchange that stored it (it quotes the fact too).
        found_ids.append(next(hit["id"] for hit in json.loads(text)["results"] if hit["text"] == FACT))
        return Reply(tool="palace_recall", arguments={"ids": found_ids[-1:]})

    store_script = scripted(lambda _b: Reply(tool="palace_store", arguments=STORE), lambda _b: Reply(text="Stored."))
    with ModelServer(store_script) as model:
        pi = Pi(tmp_path)
        migrate(pi.data_dir)
        first, first_seconds = pi.run(model, "Remember how many teeth the lunar gear has.")
        assert first.returncode == 0, first.stderr
        requests = model.agent_requests("palace_store")
    listed = {tool["name"]: tool for tool in requests[0]["tools"] if tool["name"].startswith("palace_")}
    assert set(listed) >= {"palace_store", "palace_find", "palace_recall", "palace_browse", "palace_status"}
    assert listed["palace_store"]["input_schema"]["required"] == ["text", "category", "wing", "room", "hall"]
    assert "default" not in listed["palace_find"]["input_schema"]["properties"]["max_chars"]
    first_text = all_text(requests[0])
    assert "<palazzo-wake-up>" in first_text, "the wake-up context reaches the model before its first turn"
    wake_up = first_text[first_text.index("<palazzo-wake-up>") : first_text.index("</palazzo-wake-up>")]
    stored, failed = tool_result_text(requests[1])
    assert not failed and json.loads(stored)["text"] == FACT and json.loads(stored)["added_by"].startswith("pi/")
    pi.settle()

    with ModelServer(scripted(find, recall, lambda _b: Reply(text="235."))) as model:
        second, second_seconds = pi.run(model, "How many teeth has the lunar gear?")
        assert second.returncode == 0, second.stderr
        requests = model.agent_requests("palace_find")
    answer, failed = tool_result_text(requests[1])
    assert not failed and FACT in answer, "palace_find brought the stored memory back"
    recalled, failed = tool_result_text(requests[2])
    assert not failed and json.loads(recalled)["memories"][0]["text"] == FACT
    second_wake_up = [text for text in [all_text(requests[0])] if "<palazzo-wake-up>" in text]
    assert second_wake_up and FACT in second_wake_up[0], "the next session wakes up knowing the fact"
    pi.settle()

    with connect(stdio_parameters(pi.data_dir), "stdio") as client:
        fed = client.ok("palace_browse", {"room": "orrery", "hall": "events"})["memories"]
    assert fed and all(memory["added_by"].startswith("pi@") for memory in fed), "the sessions' own exchanges"
    assert any("lunar gear" in memory["text"] for memory in fed)
    print(
        f"\npi: {len(listed)} palace tools listed; wake-up {len(wake_up)} chars in the first request; "
        f"find answer {len(answer)} chars; sessions {first_seconds:.1f} s and {second_seconds:.1f} s"
    )


def _runmcp_of(data_dir: Path) -> int | None:
    """The pid of the runmcp serving this data dir (the extension's child)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"runmcp" in command and f"PALAZZO_DATA_DIR={data_dir}".encode() in environ:
            return int(entry.name)
    return None


def test_it_times_out_a_stalled_palazzo_and_the_next_call_works(tmp_path: Path) -> None:
    stalled: list[int] = []

    def stall_then_find(_body: dict[str, Any]) -> Reply:
        pid = _runmcp_of(tmp_path / "data")
        assert pid is not None, "the extension's runmcp is running"
        os.kill(pid, signal.SIGSTOP)  # a palazzo that stops answering mid-session
        stalled.append(pid)
        return Reply(tool="palace_find", arguments={"query": "anything"})

    script = scripted(
        stall_then_find,
        lambda _b: Reply(tool="palace_find", arguments={"query": "anything"}),
        lambda _b: Reply(text="done"),
    )
    with ModelServer(script) as model:
        pi = Pi(tmp_path, PALAZZO_PI_CALL_TIMEOUT_MS="3000")
        migrate(pi.data_dir)
        done, seconds = pi.run(model, "Look something up.")
        assert done.returncode == 0, done.stderr
        requests = model.agent_requests("palace_find")
    timed_out, failed = tool_result_text(requests[1])
    assert failed and "did not answer tools/call within 3 s" in timed_out
    answered, failed = tool_result_text(requests[2])
    assert not failed and json.loads(answered)["count"] == 0, "the next call respawned palazzo"
    assert stalled and _gone(stalled[0]), "the stalled server was killed"
    print(f"\npi stalled palazzo: timeout error after 3 s, next call answered; session {seconds:.1f} s")


def _gone(pid: int) -> bool:
    """The process no longer runs (exited, or a zombie its parent has not reaped)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_it_gives_a_session_without_palace_tools_when_the_remote_is_unreachable(tmp_path: Path) -> None:
    with ModelServer(lambda _body: Reply(text="no memory today")) as model:
        pi = Pi(tmp_path, PALAZZO_URL="http://127.0.0.1:9", PALAZZO_TOKEN="pz_unused")
        done, _seconds = pi.run(model, "Hello")
        assert done.returncode == 0, done.stderr
    assert model.requests, "the session ran"
    assert not any(name.startswith("palace_") for body in model.requests for name in tool_names(body))
    assert "this session has no palace tools" in done.stderr
    assert not (pi.data_dir / "shards").exists() and not _runmcp_of(pi.data_dir), "nothing local instead"


def test_it_speaks_to_a_team_server_over_http_and_refuses_to_fall_back_on_a_bad_token(tmp_path: Path) -> None:
    server_dir = tmp_path / "team"
    migrate(server_dir)
    token = create_token(server_dir, "alice", "write")
    store = scripted(lambda _b: Reply(tool="palace_store", arguments=STORE), lambda _b: Reply(text="Stored."))
    with http_server(server_dir) as base_url, ModelServer(store) as model:
        pi = Pi(tmp_path, PALAZZO_URL=base_url, PALAZZO_TOKEN=token)
        done, _seconds = pi.run(model, "Remember the lunar gear.")
        assert done.returncode == 0, done.stderr
        stored, failed = tool_result_text(model.agent_requests("palace_store")[1])
        assert not failed and json.loads(stored)["added_by"] == "token:alice", "the team server stamps the token"
        assert not (pi.data_dir / "shards").exists() and not _runmcp_of(pi.data_dir), "no local palace"
        with ModelServer(lambda _body: Reply(text="fine")) as refused_model:
            pi.env["PALAZZO_TOKEN"] = "pz_not_a_token"
            refused, _seconds = pi.run(refused_model, "Hello")
        assert refused.returncode == 0, refused.stderr
        assert "refused the token" in refused.stderr and "this session has no palace tools" in refused.stderr
        assert not any(name.startswith("palace_") for body in refused_model.requests for name in tool_names(body))


def test_it_wakes_a_fresh_session_up_but_not_a_continued_one(tmp_path: Path) -> None:
    pi = Pi(tmp_path)
    migrate(pi.data_dir)
    with ModelServer(lambda _body: Reply(text="first answer")) as model:
        assert pi.run(model, "First question")[0].returncode == 0
        first = model.agent_requests("palace_find")[0]
    with ModelServer(lambda _body: Reply(text="second answer")) as model:
        continued, _seconds = pi.run(model, "Second question", "--continue")
        assert continued.returncode == 0, continued.stderr
        second = model.agent_requests("palace_find")[0]
    assert all_text(first).count("<palazzo-wake-up>") == 1
    assert "First question" in all_text(second), "the session was continued"
    assert all_text(second).count("<palazzo-wake-up>") == 1, "only the first turn's wake-up, in the history"
