"""Real agent turns through the real opencode CLI (npm, pinned) with palazzo installed by install-hooks.

`palazzo install-hooks opencode` registers `palazzo runmcp` in the user's opencode.json and writes the
plugin (wake-up in the system prompt, feeding on idle and at exit); a scripted model on loopback
(tests/agents/model_server.py, the only stand-in) answers opencode's Anthropic Messages requests through
its bundled `@ai-sdk/anthropic` provider. Everything opencode does is real: its SQLite store, the plugin,
the MCP server, the hook, the spool and the feeder. Each run has its own HOME and XDG directories.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from palace.feeding import opencode_plugin
from palace.feeding.transcripts import parse_transcript
from tests.agents.model_server import ModelServer, Reply, all_text, scripted, tool_names, tool_result_text
from tests.agents.test_pi import settle
from tests.mcpserver.conftest import connect, migrate, server_env, stdio_parameters
from tests.npm_tools import npm_tool
from tests.palazzo_site.test_hook import PALAZZO

pytestmark = pytest.mark.slow
FACT = "The orrery's lunar gear has 235 teeth (the Metonic cycle)"
STORE = {"text": FACT, "category": "technical", "wing": "projects", "room": "orrery", "hall": "facts"}
FIND = "palazzo_palace_find"
# The user's own config, JSONC as opencode allows it: the scripted provider, its URL from the environment.
USER_CONFIG = """{
  // the model this machine talks to
  "$schema": "https://opencode.ai/config.json",
  "model": "scripted/m",
  "provider": {
    "scripted": {
      "npm": "@ai-sdk/anthropic",
      "options": { "baseURL": "{env:SCRIPTED_MODEL_URL}/v1", "apiKey": "scripted" },
      "models": { "m": { "name": "scripted model" } },
    },
  },
  "autoupdate": false,
  "share": "disabled",
}
"""


def opencode_cli() -> Path:
    """The pinned opencode CLI under .tools/ (installed from the npm registry on first use)."""
    return npm_tool("install-opencode.sh", "the opencode CLI")


def plugin_sdk_stand_in(config_dir: Path, version: str) -> None:
    """What makes opencode skip installing `@opencode-ai/plugin` into its config dir at start.

    opencode installs that package (64 MB, for plugins written in TypeScript) into any config dir with
    plugins, and waits about 80 s for a registry it cannot reach. palazzo's plugin imports nothing from
    it; a lock file naming the version and the package's manifest are all opencode checks.
    """
    lock = {
        "lockfileVersion": 3,
        "requires": True,
        "packages": {
            "": {"dependencies": {"@opencode-ai/plugin": version}},
            "node_modules/@opencode-ai/plugin": {"version": version},
        },
    }
    (config_dir / "package-lock.json").write_text(json.dumps(lock))
    manifest = config_dir / "node_modules" / "@opencode-ai" / "plugin" / "package.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"name": "@opencode-ai/plugin", "version": version}))


class OpenCode:
    """opencode with a private HOME and XDG dirs, the user's config, palazzo installed, a project, a palace."""

    def __init__(self, tmp_path: Path) -> None:
        self.cli = opencode_cli()
        self.version = json.loads((self.cli.parents[1] / "opencode-ai" / "package.json").read_text())["version"]
        self.data_dir = tmp_path / "data"
        xdg = {name: tmp_path / name.lower() for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}
        xdg["XDG_STATE_HOME"] = tmp_path / "xdg_state"
        self.config_dir = xdg["XDG_CONFIG_HOME"] / "opencode"
        self.database = xdg["XDG_DATA_HOME"] / "opencode" / "opencode.db"
        self.project = tmp_path / "work" / "orrery"
        self.project.mkdir(parents=True)
        self.config_dir.mkdir(parents=True)
        self.user_config = self.config_dir / "opencode.json"
        self.user_config.write_text(USER_CONFIG)
        plugin_sdk_stand_in(self.config_dir, self.version)
        migrate(self.data_dir)
        self.env = server_env(
            self.data_dir,
            HOME=str(tmp_path / "home"),
            **{name: str(path) for name, path in xdg.items()},
            PWD=str(self.project),  # opencode takes its directory from PWD, which subprocess leaves as it was
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
            NO_COLOR="1",
        )

    def install_hooks(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`palazzo install-hooks opencode` into the default config dir ($XDG_CONFIG_HOME/opencode)."""
        command = [str(PALAZZO), "install-hooks", "opencode", *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)

    def warm(self) -> None:
        """Start the palace's holder, as a laptop with another window open has it running (see test_claude_code)."""
        done = subprocess.run([str(PALAZZO), "status"], env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr

    def run(self, model: ModelServer, prompt: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """One `opencode run` session in the project against the scripted model; how long it took."""
        self.warm()
        command = [str(self.cli), "run", "--format", "json", prompt]
        env = self.env | {"SCRIPTED_MODEL_URL": model.url}
        started = time.monotonic()
        done = subprocess.run(command, env=env, cwd=self.project, capture_output=True, text=True, timeout=300)
        return done, time.monotonic() - started


def recording(tmp_path: Path) -> tuple[Path, Path]:
    """A palazzo command that keeps every hook event it is sent (one JSON line each), then runs palazzo on it."""
    record = tmp_path / "hook-events.jsonl"
    recorder = tmp_path / "recording-palazzo"
    recorder.write_text(
        f'#!/bin/sh\nevent=$(cat)\nprintf "%s\\n" "$event" >> {record}\nprintf "%s" "$event" | exec {PALAZZO} "$@"\n'
    )
    recorder.chmod(0o755)
    return recorder, record


def session_of(output: str) -> str:
    """The session id `opencode run --format json` reports."""
    for line in output.splitlines():
        if line.startswith("{") and isinstance(json.loads(line).get("sessionID"), str):
            return str(json.loads(line)["sessionID"])
    raise AssertionError(f"no session id in {output!r}")


def test_it_finds_a_stored_memory_through_a_real_opencode_turn_and_feeds_the_session(tmp_path: Path) -> None:
    opencode = OpenCode(tmp_path)
    installed = opencode.install_hooks()
    assert installed.returncode == 0, installed.stderr
    assert opencode_plugin.plugin_path(opencode.config_dir).is_file()
    with connect(stdio_parameters(opencode.data_dir), "stdio") as client:
        client.ok("palace_store", STORE)
    # The plugin's PALAZZO_COMMAND override: palazzo answers every hook, and the test keeps what it was sent.
    recorder, record = recording(tmp_path)
    opencode.env["PALAZZO_COMMAND"] = str(recorder)

    read_mid_turn: list[list[tuple[str, bool]]] = []

    def find(_body: dict[str, Any]) -> Reply:
        return Reply(tool=FIND, arguments={"query": "How many teeth has the lunar gear?"})

    def answer(_body: dict[str, Any]) -> Reply:
        # opencode holds its database open (WAL) and waits for this answer: palazzo reads it meanwhile.
        (session,) = [path for path in read_sessions(opencode.database)]
        read_mid_turn.append([(item.prompt, item.complete) for item in parse_transcript(session).exchanges])
        return Reply(text="235 teeth.")

    with ModelServer(scripted(find, answer)) as model:
        done, seconds = opencode.run(model, "How many teeth has the lunar gear?")
        assert done.returncode == 0, done.stderr + done.stdout
        requests = model.agent_requests(FIND)
    session_id = session_of(done.stdout)
    listed = [tool for tool in requests[0]["tools"] if tool["name"].startswith("palazzo_")]
    assert {tool["name"] for tool in listed} >= {"palazzo_palace_find", "palazzo_palace_store", "palazzo_palace_recall"}
    first_text = all_text(requests[0])
    assert first_text.count("<palazzo-wake-up>") == 1, "the wake-up stands in the first request, once"
    assert all(all_text(body).count("<palazzo-wake-up>") == 1 for body in requests), "and stays in the later ones"
    assert not any("<palazzo-wake-up>" in all_text(body) for body in model.requests if body not in requests), (
        "opencode's title generator gets no wake-up"
    )
    wake_up = first_text[first_text.index("<palazzo-wake-up>") : first_text.index("</palazzo-wake-up>")]
    assert FACT in wake_up, "the session wakes up knowing what the palace holds"
    found, failed = tool_result_text(requests[1])
    assert not failed and FACT in found, "palazzo_palace_find brought the stored memory back"
    # opencode's `run` quotes a prompt with spaces; the turn is open (the tool's result not answered yet).
    assert read_mid_turn == [[('"How many teeth has the lunar gear?"', False)]], "read while opencode held it"

    exported = subprocess.run(
        [str(opencode.cli), "export", session_id], env=opencode.env, cwd=opencode.project, capture_output=True
    )
    assert exported.returncode == 0, exported.stderr
    (tmp_path / "export.json").write_bytes(exported.stdout)
    from_export = parse_transcript(tmp_path / "export.json")
    assert [(item.key, item.reply) for item in from_export.exchanges] == [
        (item.key, item.reply) for item in parse_transcript(Path(f"{opencode.database}#{session_id}")).exchanges
    ]
    events = [json.loads(line) for line in record.read_text().splitlines()]
    assert [event["hook_event_name"] for event in events] == ["SessionStart", "Stop", "SessionEnd"], (
        "one wake-up, a feed when the turn settled, the end when opencode exited; `opencode export` loads the "
        "plugin too and says nothing"
    )
    assert all(event["session_id"] == session_id and event["cwd"] == str(opencode.project) for event in events)
    assert {event["transcript_path"] for event in events[1:]} == {f"{opencode.database}#{session_id}"}

    settle(opencode.data_dir)
    with connect(stdio_parameters(opencode.data_dir), "stdio") as client:
        fed = client.ok("palace_browse", {"room": "orrery", "hall": "events"})["memories"]
    assert fed and all(memory["added_by"].startswith("opencode@") for memory in fed), fed
    assert any("lunar gear" in memory["text"] and "235 teeth." in memory["text"] for memory in fed)
    assert [memory["session"] for memory in fed] == [session_id], "the session opencode ran, fed once"

    removed = opencode.install_hooks("--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert opencode.user_config.read_text() == USER_CONFIG, "uninstall leaves opencode.json as it was"
    assert not opencode_plugin.plugin_path(opencode.config_dir).exists()
    tools_chars = len(json.dumps(listed))
    print(
        f"\nopencode: {len(listed)} palazzo tools listed ({tools_chars} JSON chars); wake-up {len(wake_up)} chars "
        f"in the first request; find answer {len(found)} chars; session {seconds:.1f} s"
    )


def read_sessions(database: Path) -> list[Path]:
    """The main sessions of an opencode database, as the feeder addresses them."""
    from palace.feeding.transcripts import opencode

    return opencode.database_sessions(database)


def test_it_leaves_opencode_working_when_palazzo_cannot_be_started(tmp_path: Path) -> None:
    opencode = OpenCode(tmp_path)
    gone = tmp_path / "uninstalled" / "bin" / "palazzo"
    opencode_plugin.install(opencode.config_dir, gone)  # palazzo removed after install-hooks
    with ModelServer(lambda _body: Reply(text="Still here.")) as model:
        done, seconds = opencode.run(model, "Hello")
        assert done.returncode == 0, done.stderr + done.stdout
    assert "Still here." in done.stdout and not done.stderr.strip()
    assert model.requests and not any("<palazzo-wake-up>" in all_text(body) for body in model.requests)
    assert not any(name.startswith("palazzo_") for body in model.requests for name in tool_names(body))
    log = "".join(path.read_text() for path in (opencode.database.parent / "log").glob("*.log"))
    assert "palazzo hook SessionStart failed: ENOENT" in log and str(gone) in log, "said in opencode's log"
    print(f"\nopencode without palazzo: session {seconds:.1f} s, no palace tools, no wake-up, failure logged")
