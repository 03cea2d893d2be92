"""install-hooks codex: palazzo's MCP server and hooks land beside the user's own Codex config, and leave exactly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palace.feeding import codex_config
from tests.mcpserver.conftest import server_env

PALAZZO = Path(sys.executable).with_name("palazzo")
ROOT = Path(__file__).resolve().parents[2]
USER_CONFIG = """# Codex, the way I like it
model = "gpt-5-codex"   # pinned on purpose
approval_policy = "on-request"

[profiles.fast]
model = "gpt-5-mini"

# the docs server I use everywhere
[mcp_servers.docs]
command = "npx"
args = ["-y", "docs-mcp"]
"""
USER_HOOKS = {
    "hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "~/bin/notes.sh"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}],
    }
}


def install_hooks(*args: str, codex_home: Path) -> subprocess.CompletedProcess[str]:
    env = server_env(codex_home.parent / "data", CODEX_HOME=str(codex_home))
    command = [str(PALAZZO), "install-hooks", "codex", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def palazzo_commands(hooks_file: Path) -> dict[str, list[str]]:
    hooks = json.loads(hooks_file.read_text())["hooks"]
    return {event: [h["command"] for g in groups for h in g["hooks"]] for event, groups in hooks.items()}


def test_it_installs_beside_the_users_config_idempotently_and_uninstalls_to_the_same_bytes(tmp_path: Path) -> None:
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    config, hooks = codex_home / "config.toml", codex_home / "hooks.json"
    config.write_text(USER_CONFIG)
    hooks.write_text(json.dumps(USER_HOOKS, indent=2) + "\n")
    config.chmod(0o600)
    before = config.read_bytes(), hooks.read_bytes()

    installed = install_hooks(codex_home=codex_home)  # CODEX_HOME is where it goes without --config-dir
    assert installed.returncode == 0, installed.stderr
    assert (
        "config.toml [mcp_servers.palazzo]" in installed.stdout and "SessionStart, Stop, SessionEnd" in installed.stdout
    )
    text = config.read_text()
    assert text.startswith(USER_CONFIG + "\n[mcp_servers.palazzo]\n"), "appended after the user's config, untouched"
    server = tomlkit.parse(text)["mcp_servers"]["palazzo"]
    assert server["command"] == str(PALAZZO) and server["args"] == ["runmcp"] and server["required"] is True
    assert server["startup_timeout_sec"] == codex_config.STARTUP_TIMEOUT_SECONDS
    assert "PALAZZO_DATA_DIR" in server["env_vars"] and tomlkit.parse(text)["mcp_servers"]["docs"]["command"] == "npx"
    command = f"{PALAZZO} hook codex"
    assert palazzo_commands(hooks) == {
        "SessionStart": ["~/bin/notes.sh", command],  # after the user's: Codex trusts hooks by their position
        "PreToolUse": ["~/bin/guard.sh"],
        "Stop": [command],
        "SessionEnd": [command],
    }
    written = json.loads(hooks.read_text())["hooks"]
    timeouts = {event: written[event][-1]["hooks"][0]["timeout"] for event in codex_config.EVENTS}
    assert timeouts["SessionEnd"] == 3, "Codex clamps SessionEnd to 3 s; asking for more only draws a warning"
    assert config.stat().st_mode & 0o777 == 0o600

    installed_bytes = config.read_bytes(), hooks.read_bytes()
    again = install_hooks(codex_home=codex_home)
    assert "nothing to change" in again.stdout and (config.read_bytes(), hooks.read_bytes()) == installed_bytes

    removed = install_hooks("--uninstall", codex_home=codex_home)
    assert removed.returncode == 0, removed.stderr
    assert (config.read_bytes(), hooks.read_bytes()) == before
    assert "nothing to change" in install_hooks("--uninstall", codex_home=codex_home).stdout


def test_it_leaves_no_files_behind_in_a_config_dir_it_created_them_in(tmp_path: Path) -> None:
    codex_home = tmp_path / "fresh"
    assert codex_config.install(codex_home, PALAZZO)
    assert sorted(path.name for path in codex_home.iterdir()) == ["config.toml", "hooks.json"]
    assert codex_config.uninstall(codex_home)
    assert list(codex_home.iterdir()) == []


def test_it_replaces_an_older_installation_in_place_and_keeps_the_users_own_settings_for_it(tmp_path: Path) -> None:
    codex_config.install(tmp_path, Path("/old/venv/bin/palazzo"))
    config = tmp_path / "config.toml"
    # The user made palazzo optional and gave it more time; Codex added its trust records after the table.
    config.write_text(
        config.read_text().replace("required = true", "required = false  # start without it")
        + '\n[hooks.state."/x/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:1"\n'
    )
    codex_config.install(tmp_path, Path("/new place/bin/palazzo"))
    document = tomlkit.parse(config.read_text())
    assert document["mcp_servers"]["palazzo"]["command"] == "/new place/bin/palazzo"
    assert document["mcp_servers"]["palazzo"]["required"] is False
    assert "required = false  # start without it" in config.read_text()
    assert config.read_text().count("[mcp_servers.palazzo]") == 1 and "hooks" in document
    commands = palazzo_commands(tmp_path / "hooks.json")
    assert commands == {event: ["'/new place/bin/palazzo' hook codex"] for event in codex_config.EVENTS}


def test_it_removes_only_the_trust_codex_recorded_for_palazzos_hooks(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks.json"
    hooks.write_text(json.dumps(USER_HOOKS, indent=2) + "\n")
    (tmp_path / "config.toml").write_text(USER_CONFIG)
    codex_config.install(tmp_path, PALAZZO)
    # What the interactive CLI writes when its user trusts every hook ("<file>:<event>:<group>:<handler>").
    trusted = [f"{hooks}:{key}" for key in ("session_start:0:0", "session_start:1:0", "pre_tool_use:0:0", "stop:0:0")]
    with (tmp_path / "config.toml").open("a") as handle:
        handle.write("\n[hooks.state]\n")
        for number, key in enumerate(trusted):
            handle.write(f'\n[hooks.state."{key}"]\ntrusted_hash = "sha256:{number}"\n')
    changed = codex_config.uninstall(tmp_path)
    assert changed == ["config.toml [mcp_servers.palazzo], hook trust", "hooks.json SessionStart, Stop, SessionEnd"]
    document = tomlkit.parse((tmp_path / "config.toml").read_text()).unwrap()
    assert set(document["hooks"]["state"]) == {trusted[0], trusted[2]}, "the user's own hooks stay trusted"
    assert "palazzo" not in document["mcp_servers"] and document["model"] == "gpt-5-codex"
    assert json.loads(hooks.read_text()) == USER_HOOKS


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("config.toml", '[mcp_servers.palazzo\ncommand = "x"\n', "cannot read {path} as TOML"),
        ("config.toml", b"model = '\xff'\n", "cannot read {path}: not UTF-8"),
        ("config.toml", 'mcp_servers = "none"\n', "{path}: 'mcp_servers' is not a table"),
        ("config.toml", '[mcp_servers.palazzo]\nurl = "https://palace.example/mcp"\n', "not run `palazzo runmcp`"),
        ("hooks.json", '{"hooks": ', "cannot read {path} as JSON"),
        ("hooks.json", "[]", "{path} does not hold a JSON object"),
        ("hooks.json", '{"hooks": {"Stop": {}}}', "{path}: 'hooks' is not an object of event lists"),
    ],
)
def test_it_refuses_a_config_it_cannot_trust_and_leaves_both_files_untouched(
    tmp_path: Path, name: str, content: str | bytes, problem: str
) -> None:
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    target = codex_home / name
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    other = codex_home / ("hooks.json" if name == "config.toml" else "config.toml")
    other.write_text(json.dumps(USER_HOOKS) if other.name == "hooks.json" else USER_CONFIG)
    before = target.read_bytes(), other.read_bytes()
    refused = install_hooks(codex_home=codex_home)
    assert refused.returncode == 1 and problem.format(path=target) in refused.stderr, refused.stderr
    assert (target.read_bytes(), other.read_bytes()) == before
    uninstalled = install_hooks("--uninstall", codex_home=codex_home)
    if "runmcp" in problem:  # a server palazzo did not write is not palazzo's to remove
        assert uninstalled.returncode == 0 and "nothing to change" in uninstalled.stdout
    else:
        assert uninstalled.returncode == 1 and problem.format(path=target) in uninstalled.stderr
    assert (target.read_bytes(), other.read_bytes()) == before


def test_it_forwards_every_variable_that_chooses_or_shapes_the_palace() -> None:
    source = (ROOT / "palazzo_site" / "environment.py").read_text()
    read = set(re.findall(r'"([A-Z][A-Z0-9_]{3,})"', source))  # every name environment.py quotes
    serving_only = {name for name in read if name.startswith("PALAZZO_OAUTH_")} | {
        "PALAZZO_BIND",
        "PALAZZO_ALLOWED_HOSTS",
        "PALAZZO_PUBLIC_URL",
        "PALAZZO_HTTP_STATELESS",
        "PALAZZO_ALLOW_INSECURE",
    }
    assert len(read) > 30, "the variables are read with get(NAME, ...)"
    codex_passes = {"HOME"}  # Codex gives every MCP server HOME itself
    assert set(codex_config.FORWARDED_ENVIRONMENT) == (read - serving_only - codex_passes) | {"XDG_RUNTIME_DIR"}


@pytest.mark.parametrize(
    "command", ["/x/.venv/bin/palazzo hook codex", "'/a b/palazzo' hook codex", "palazzo hook codex"]
)
def test_it_recognises_its_own_handlers_and_server(command: str) -> None:
    assert codex_config.is_our_handler({"type": "command", "command": command})
    assert not codex_config.is_our_handler({"type": "command", "command": "notpalazzo hook codex"})
    assert not codex_config.is_our_handler({"type": "command", "command": "palazzo hook claude-code"})
    assert codex_config.is_our_server({"command": "/opt/bin/palazzo", "args": ["runmcp"]})
    assert not codex_config.is_our_server({"command": "/opt/bin/palazzo-proxy", "args": ["runmcp"]})
    assert not codex_config.is_our_server({"url": "https://palace.example/mcp"})


scalar = st.one_of(st.integers(-5, 5), st.booleans(), st.text("abc é#\"'\\", max_size=6))
key = st.text("abcxyz_-", min_size=1, max_size=6)
user_tables = st.dictionaries(
    st.sampled_from(["profiles", "tui", "mcp_servers", "model_providers", "features"]),
    st.dictionaries(key, st.one_of(scalar, st.dictionaries(key, scalar, max_size=2)), max_size=3),
    max_size=3,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    top=st.dictionaries(key, scalar, max_size=3),
    tables=user_tables,
    comment=st.sampled_from(["", "# mine\n", "# mine\n\n"]),
    tail=st.sampled_from(["", "\n", "# the end\n", "\n\n"]),
)
def test_it_gives_any_user_config_toml_its_bytes_back(
    tmp_path: Path, top: dict[str, Any], tables: dict[str, Any], comment: str, tail: str
) -> None:
    tables.get("mcp_servers", {}).pop("palazzo", None)
    text = comment + tomlkit.dumps(top | tables) + tail
    codex_home = tmp_path / "codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "hooks.json").unlink(missing_ok=True)
    config = codex_home / "config.toml"
    config.write_text(text)
    codex_config.install(codex_home, PALAZZO)
    codex_config.install(codex_home, Path("/elsewhere/palazzo"))
    assert tomlkit.parse(config.read_text()).unwrap() == tomlkit.parse(text).unwrap() | {
        "mcp_servers": tomlkit.parse(text).unwrap().get("mcp_servers", {})
        | {"palazzo": codex_config.server_settings(Path("/elsewhere/palazzo"))}
    }
    codex_config.uninstall(codex_home)
    if text.strip():
        assert config.read_text() == text
    else:
        assert not config.exists()
