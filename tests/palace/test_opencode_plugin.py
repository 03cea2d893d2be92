"""install-hooks opencode: palazzo's MCP server in opencode.json and its plugin in plugins/, in and out exactly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.feeding import opencode_plugin
from tests.mcpserver.conftest import server_env

PALAZZO = Path(sys.executable).with_name("palazzo")
ENTRY = {"type": "local", "command": [str(PALAZZO), "runmcp"], "enabled": True}
# What a user's opencode.json may look like: JSONC, comments and trailing commas included.
USER_CONFIG = """{
  "$schema": "https://opencode.ai/config.json",
  // my provider
  "model": "anthropic/claude-sonnet-4-5",
  "mcp": {
    "github": { "type": "remote", "url": "https://api.githubcopilot.com/mcp/", }, /* work only */
  },
  "theme": "tokyonight",
}
"""


def install_hooks(config_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = server_env(config_home.parent / "data", XDG_CONFIG_HOME=str(config_home))
    command = [str(PALAZZO), "install-hooks", "opencode", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def parsed(path: Path) -> Any:
    """A config file read the way opencode reads it (JSONC)."""
    return opencode_plugin._Reader(path.read_text()).document().value


def test_it_installs_beside_the_users_jsonc_config_idempotently_and_uninstalls_byte_for_byte(tmp_path: Path) -> None:
    config_home = tmp_path / "config"
    config = config_home / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(USER_CONFIG)
    config.chmod(0o600)
    installed = install_hooks(config_home)
    assert installed.returncode == 0, installed.stderr
    assert "opencode.json (mcp.palazzo)" in installed.stdout and "plugins/palazzo.js" in installed.stdout
    data = parsed(config)
    assert data["mcp"]["palazzo"] == ENTRY
    assert data["mcp"]["github"]["type"] == "remote" and data["model"] == "anthropic/claude-sonnet-4-5"
    assert "// my provider" in config.read_text() and "/* work only */" in config.read_text()
    assert config.stat().st_mode & 0o777 == 0o600
    plugin = opencode_plugin.plugin_path(config.parent)
    assert plugin.read_text().startswith("/**\n * palazzo inside opencode")
    assert json.dumps(str(PALAZZO)) in plugin.read_text(), "the plugin runs this installation's palazzo"
    assert "__PALAZZO_COMMAND__" not in plugin.read_text() and "process.env.PALAZZO_COMMAND ||" in plugin.read_text()
    assert "nothing to change" in install_hooks(config_home).stdout
    removed = install_hooks(config_home, "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert config.read_text() == USER_CONFIG and not plugin.exists()
    assert "nothing to change" in install_hooks(config_home, "--uninstall").stdout


def test_it_writes_a_config_of_its_own_when_there_is_none_and_removes_it_whole(tmp_path: Path) -> None:
    config_dir = tmp_path / "opencode"
    opencode_plugin.install(config_dir, PALAZZO)
    config = config_dir / "opencode.json"
    assert json.loads(config.read_text()) == {"$schema": opencode_plugin.SCHEMA_URL, "mcp": {"palazzo": ENTRY}}
    assert opencode_plugin.uninstall(config_dir) == ["opencode.json (mcp.palazzo)", "plugins/palazzo.js"]
    assert not config.exists() and not opencode_plugin.plugin_path(config_dir).exists()


def test_it_edits_opencode_jsonc_when_that_is_the_config_in_use(tmp_path: Path) -> None:
    config_dir = tmp_path / "opencode"
    config_dir.mkdir()
    jsonc = config_dir / "opencode.jsonc"
    jsonc.write_text(USER_CONFIG)
    assert opencode_plugin.install(config_dir, PALAZZO)[0] == "opencode.jsonc (mcp.palazzo)"
    assert parsed(jsonc)["mcp"]["palazzo"] == ENTRY and not (config_dir / "opencode.json").exists()
    opencode_plugin.uninstall(config_dir)
    assert jsonc.read_text() == USER_CONFIG


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"model": "x",\n  "mcp": ', "line 2 column 10: unexpected end of file"),
        ('{"model": "x" /* never closed', "unclosed comment"),
        ("[1, 2]", "does not hold a JSON object"),
        ('{"mcp": ["palazzo"]}', "'mcp' is not an object"),
        ('{"mcp": {"palazzo": {"type": "local", "command": ["npx", "palazzo-fork"]}}}', "is not palazzo's"),
        ('{"model": "\\x"}', "bad string"),
    ],
)
def test_it_refuses_a_config_it_cannot_edit_safely_and_leaves_it_untouched(
    tmp_path: Path, text: str, problem: str
) -> None:
    config_home = tmp_path / "config"
    config = config_home / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    refused = install_hooks(config_home)
    assert refused.returncode == 1 and str(config) in refused.stderr and problem in refused.stderr, refused.stderr
    assert config.read_text() == text
    assert not opencode_plugin.plugin_path(config.parent).exists(), "nothing is written when the config is refused"


def test_it_never_overwrites_or_removes_a_plugin_it_did_not_write(tmp_path: Path) -> None:
    config_dir = tmp_path / "opencode"
    plugin = opencode_plugin.plugin_path(config_dir)
    plugin.parent.mkdir(parents=True)
    plugin.write_text("export const Mine = async () => ({})\n")
    with pytest.raises(opencode_plugin.ConfigError, match="is not palazzo's"):
        opencode_plugin.install(config_dir, PALAZZO)
    assert not (config_dir / "opencode.json").exists()
    with pytest.raises(opencode_plugin.ConfigError, match="is not palazzo's"):
        opencode_plugin.uninstall(config_dir)
    assert plugin.read_text() == "export const Mine = async () => ({})\n"


def test_it_brings_an_older_installations_entry_up_to_date_keeping_what_the_user_added(tmp_path: Path) -> None:
    config_dir = tmp_path / "opencode"
    config_dir.mkdir()
    config = config_dir / "opencode.json"
    old = {"type": "local", "command": ["/old/venv/bin/palazzo", "runmcp"], "enabled": False, "timeout": 30000}
    config.write_text(json.dumps({"mcp": {"palazzo": old}}, indent=2))
    assert opencode_plugin.install(config_dir, PALAZZO) == ["opencode.json (mcp.palazzo)", "plugins/palazzo.js"]
    assert parsed(config)["mcp"]["palazzo"] == ENTRY | {"timeout": 30000}
    assert opencode_plugin.install(config_dir, PALAZZO) == []
    opencode_plugin.uninstall(config_dir)
    assert parsed(config) == {"mcp": {}}, "palazzo's entry goes; the 'mcp' it did not add stays"


def test_it_keeps_a_team_palace_the_user_added_and_installs_the_plugin_beside_it(tmp_path: Path) -> None:
    config_dir = tmp_path / "opencode"
    config_dir.mkdir()
    config = config_dir / "opencode.json"
    team = '{"mcp": {"palazzo": {"type": "remote", "url": "https://palace.example/mcp"}}}'
    config.write_text(team)
    assert opencode_plugin.install(config_dir, PALAZZO) == ["plugins/palazzo.js"]
    assert opencode_plugin.uninstall(config_dir) == ["plugins/palazzo.js"]
    assert config.read_text() == team


def test_it_writes_through_a_symlinked_config(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles" / "opencode.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(USER_CONFIG)
    config_dir = tmp_path / "opencode"
    config_dir.mkdir()
    (config_dir / "opencode.json").symlink_to(dotfiles)
    opencode_plugin.install(config_dir, PALAZZO)
    assert (config_dir / "opencode.json").is_symlink() and parsed(dotfiles)["mcp"]["palazzo"] == ENTRY
    opencode_plugin.uninstall(config_dir)
    assert dotfiles.read_text() == USER_CONFIG


def test_it_finds_the_config_dir_where_opencode_does(tmp_path: Path) -> None:
    assert opencode_plugin.default_config_dir({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "opencode"
    assert opencode_plugin.default_config_dir({}) == Path.home() / ".config" / "opencode"


# Any JSON object a user may hold, written in any of the layouts json.dumps gives.
scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
user_configs = st.dictionaries(st.text(max_size=8), values, max_size=4) | st.fixed_dictionaries(
    {"mcp": st.dictionaries(st.text(max_size=8).filter(lambda key: key != "palazzo"), values)}
)
layouts = st.sampled_from([None, 0, 1, 2, 4, "\t"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_configs, layouts, st.booleans())
def test_it_gives_any_user_config_its_bytes_back(
    tmp_path: Path, original: dict[str, Any], indent: int | str | None, ascii_only: bool
) -> None:
    if "mcp" in original and not isinstance(original["mcp"], dict):
        return  # refused, tested above
    config_dir = tmp_path / "opencode"
    shutil.rmtree(config_dir, ignore_errors=True)
    config_dir.mkdir()
    config = config_dir / "opencode.json"
    text = json.dumps(original, indent=indent, ensure_ascii=ascii_only)
    config.write_text(text)
    opencode_plugin.install(config_dir, Path("/old place/palazzo"))
    opencode_plugin.install(config_dir, PALAZZO)  # a reinstall from elsewhere replaces the value in place
    installed = json.loads(config.read_text())  # still plain JSON when it was
    assert installed["mcp"]["palazzo"] == ENTRY
    assert {key: value for key, value in installed.items() if key != "mcp"} == {
        key: value for key, value in original.items() if key != "mcp"
    }
    assert {key: value for key, value in installed["mcp"].items() if key != "palazzo"} == original.get("mcp", {})
    opencode_plugin.uninstall(config_dir)
    assert config.read_text() == text


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_it_injects_the_wake_up_from_the_plugin_and_never_throws_into_opencode(tmp_path: Path) -> None:
    plugin = tmp_path / "palazzo.mjs"
    plugin.write_text(opencode_plugin.rendered_plugin(tmp_path / "missing" / "palazzo"))
    fake = tmp_path / "fake-palazzo"
    answer = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "<palazzo-wake-up>W"}}
    events = tmp_path / "events"
    fake.write_text(f"#!/bin/sh\ncat >> {events}\necho >> {events}\necho '{json.dumps(answer)}'\n")
    fake.chmod(0o755)
    driver = tmp_path / "driver.mjs"
    driver.write_text(
        """
const results = {};
for (const command of ["missing", "fake"]) {
  if (command === "fake") process.env.PALAZZO_COMMAND = process.argv[2];
  const module = await import(`./palazzo.mjs?${command}`);
  const client = { app: { log: () => { throw new Error("no log"); } } };
  const hooks = await module.PalazzoPlugin({ client, directory: "/w" });
  const transform = hooks["experimental.chat.system.transform"];
  for (const event of [null, {}, { type: "session.idle", properties: { sessionID: 5 } }, { type: "session.created" }])
    await hooks.event({ event });
  await transform(undefined, undefined);
  await transform({ sessionID: "s1" }, { system: "not a list" });
  const title = { system: ["You are a title generator. You output ONLY a thread title."] };
  await transform({ sessionID: "s1" }, title);
  await hooks.event({ event: { type: "session.created", properties: { info: { id: "s1", directory: "/w/orrery" } } } });
  await hooks.event({ event: { type: "session.created", properties: { info: { id: "c1", parentID: "s1" } } } });
  const first = { system: ["You are opencode"] }, second = { system: ["You are opencode"] }, child = { system: ["x"] };
  await transform({ sessionID: "s1" }, first);
  await transform({ sessionID: "s1" }, second);
  await transform({ sessionID: "c1" }, child);
  await hooks.event({ event: { type: "session.idle", properties: { sessionID: "s1" } } });
  await hooks.event({ event: { type: "session.idle", properties: { sessionID: "c1" } } });
  results[command] = { title: title.system.length, first: first.system, second: second.system, child: child.system };
}
console.log(JSON.stringify(results));
"""
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    done = subprocess.run(
        ["node", str(driver), str(fake)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results["missing"] == {
        "title": 1,
        "first": ["You are opencode"],
        "second": ["You are opencode"],
        "child": ["x"],
    }
    wake_up = "<palazzo-wake-up>W"
    assert results["fake"] == {
        "title": 1,
        "first": ["You are opencode", wake_up],
        "second": ["You are opencode", wake_up],
        "child": ["x"],
    }, "the wake-up in every request of the main session, none for the title or a subagent"
    sent = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    database = tmp_path / "data" / "opencode" / "opencode.db"
    assert sent == [
        {"hook_event_name": "SessionStart", "source": "startup", "session_id": "s1", "cwd": "/w/orrery"},
        {"hook_event_name": "Stop", "transcript_path": f"{database}#s1", "session_id": "s1", "cwd": "/w/orrery"},
        {"hook_event_name": "SessionEnd", "transcript_path": f"{database}#s1", "session_id": "s1", "cwd": "/w/orrery"},
    ], "one wake-up, the settle, and the end at exit; nothing for the subagent's session"
