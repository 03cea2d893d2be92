"""palazzo in Gemini CLI's settings.json: installed beside the user's own settings, removed to the byte."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from palace.feeding import gemini_settings
from palace.feeding.gemini_settings import ConfigError, default_config_dir, install, uninstall
from palazzo_site import install_hooks

PALAZZO = Path("/opt/palazzo/bin/palazzo")
# What a user has before palazzo: Gemini CLI's auth choice, a server and hooks of their own.
USERS_OWN: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "mcpServers": {"github": {"httpUrl": "https://example.test/mcp", "trust": False}},
    "hooks": {
        "BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "./check.sh"}]}],
        "SessionStart": [{"hooks": [{"name": "greet", "type": "command", "command": "echo '{}'"}]}],
    },
    "hooksConfig": {"enabled": True},
}


def gemini_json(data: Any) -> str:
    """JSON as Gemini CLI writes its settings: two-space indent, no final newline."""
    return json.dumps(data, indent=2)


def settings_of(config_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((config_dir / "settings.json").read_text())
    return data


def test_it_installs_beside_the_users_settings_idempotently_and_uninstalls_to_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(gemini_json(USERS_OWN))
    before = path.read_bytes()
    changed = install(tmp_path, PALAZZO)
    assert changed == ["mcpServers.palazzo", "hooks.SessionStart", "hooks.AfterAgent", "hooks.SessionEnd"]
    data = settings_of(tmp_path)
    assert data["mcpServers"]["github"] == USERS_OWN["mcpServers"]["github"]
    server = data["mcpServers"]["palazzo"]
    assert server["command"] == str(PALAZZO) and server["args"] == ["runmcp"] and server["trust"] is True
    assert server["env"]["DATABASE_URL"] == "${DATABASE_URL:-}", "what Gemini CLI withholds by name is passed on"
    assert data["hooks"]["BeforeTool"] == USERS_OWN["hooks"]["BeforeTool"]
    user_group, our_group = data["hooks"]["SessionStart"]
    assert user_group == USERS_OWN["hooks"]["SessionStart"][0], "the user's own hook comes first, untouched"
    assert our_group["hooks"] == [
        {"name": "palazzo-wake-up", "type": "command", "command": f"{PALAZZO} hook gemini", "timeout": 10000}
    ]
    assert [group["hooks"][0]["name"] for group in data["hooks"]["AfterAgent"]] == ["palazzo-feed"]
    assert install(tmp_path, PALAZZO) == [], "a second install changes nothing"
    assert uninstall(tmp_path) == ["mcpServers.palazzo", "hooks.SessionStart", "hooks.AfterAgent", "hooks.SessionEnd"]
    assert path.read_bytes() == before
    assert uninstall(tmp_path) == []


def test_it_replaces_its_entries_when_installed_from_another_palazzo(tmp_path: Path) -> None:
    install(tmp_path, Path("/old place/palazzo"))
    assert settings_of(tmp_path)["hooks"]["AfterAgent"][0]["hooks"][0]["command"] == "'/old place/palazzo' hook gemini"
    assert install(tmp_path, PALAZZO) == [
        "mcpServers.palazzo",
        "hooks.SessionStart",
        "hooks.AfterAgent",
        "hooks.SessionEnd",
    ]
    data = settings_of(tmp_path)
    assert data["mcpServers"]["palazzo"]["command"] == str(PALAZZO)
    commands = [
        handler["command"] for groups in data["hooks"].values() for group in groups for handler in group["hooks"]
    ]
    assert commands == [f"{PALAZZO} hook gemini"] * 3, "one handler per event, the new one"


def test_it_keeps_what_the_user_added_to_its_server_entry(tmp_path: Path) -> None:
    install(tmp_path, PALAZZO)
    data = settings_of(tmp_path)
    data["mcpServers"]["palazzo"]["excludeTools"] = ["palace_delete"]
    (tmp_path / "settings.json").write_text(gemini_json(data))
    assert install(tmp_path, PALAZZO) == []
    assert install(tmp_path, Path("/elsewhere/palazzo")) == [
        "mcpServers.palazzo",
        "hooks.SessionStart",
        "hooks.AfterAgent",
        "hooks.SessionEnd",
    ]
    assert settings_of(tmp_path)["mcpServers"]["palazzo"]["excludeTools"] == ["palace_delete"]


def test_it_creates_the_file_and_removes_it_when_it_held_only_palazzo(tmp_path: Path) -> None:
    config_dir = tmp_path / "home" / ".gemini"
    install(config_dir, PALAZZO)
    assert set(settings_of(config_dir)) == {"mcpServers", "hooks"}
    assert uninstall(config_dir)[-1] == "settings.json removed"
    assert list(config_dir.iterdir()) == []


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(USERS_OWN, indent=4) + "\n",
        json.dumps(USERS_OWN, indent="\t"),
        json.dumps(USERS_OWN, indent=2).replace("\n", "\r\n") + "\r\n",
        json.dumps(USERS_OWN),
        json.dumps(USERS_OWN, separators=(",", ":")),
        json.dumps({"ui": {"theme": "Ätna ☀"}, "general": {"vimMode": True}}, indent=2, ensure_ascii=False),
        json.dumps({"ui": {"theme": "Ätna ☀"}}, indent=2) + "\n",
        "{}",
        "{}\n",
    ],
    ids=["4-spaces", "tabs", "crlf", "one-line", "compact", "utf-8", "ascii-escapes", "empty-object", "empty-line"],
)
def test_it_gives_back_the_bytes_of_every_layout_it_can_write(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(text.encode("utf-8"))
    changed = install(tmp_path, PALAZZO)
    assert not any("layout" in change for change in changed), changed
    assert settings_of(tmp_path)["mcpServers"]["palazzo"]["command"] == str(PALAZZO)
    uninstall(tmp_path)
    if text.strip() == "{}":
        assert not path.exists(), "an empty settings file is palazzo's to remove"
    else:
        assert path.read_bytes() == text.encode("utf-8")


def test_it_says_so_when_it_cannot_keep_a_hand_made_layout(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{\n  "ui": { "theme": "Default" },\n  "general": {"vimMode": true}\n}\n')
    changed = install(tmp_path, PALAZZO)
    assert changed[-1].startswith("(the file's layout could not be kept")
    uninstall(tmp_path)
    assert json.loads(path.read_text()) == {"ui": {"theme": "Default"}, "general": {"vimMode": True}}


def test_it_keeps_the_files_mode(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(gemini_json(USERS_OWN))
    os.chmod(path, 0o600)
    install(tmp_path, PALAZZO)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [entry.name for entry in tmp_path.iterdir() if entry.name != "settings.json"], "no staged file left"


def test_it_leaves_the_hooks_switches_of_older_clis_alone(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(gemini_json({"hooks": {"enabled": True, "disabled": ["palazzo-feed"]}}))
    before = path.read_bytes()
    install(tmp_path, PALAZZO)
    assert settings_of(tmp_path)["hooks"]["disabled"] == ["palazzo-feed"]
    uninstall(tmp_path)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"ui": {"theme": "Default"},}', "cannot read .* as JSON"),
        (b'{\n  // my theme\n  "ui": {"theme": "Default"}\n}', "holds comments"),
        (b'{"ui": /* mine */ {"theme": "Default"}}', "holds comments"),
        (b"[1, 2]", "does not hold a JSON object"),
        (b'{"hooks": []}', "'hooks' is not an object of event lists"),
        (b'{"hooks": {"SessionStart": {"command": "x"}}}', "'hooks' is not an object of event lists"),
        (b'{"mcpServers": ["palazzo"]}', "'mcpServers' is not an object"),
        (b'{"mcpServers": {"palazzo": {"httpUrl": "https://team.test/mcp"}}}', "is not palazzo's runmcp"),
        (b'{"ui": {"theme": "\xff"}}', "is not UTF-8"),
    ],
    ids=[
        "trailing-comma",
        "line-comment",
        "block-comment",
        "array",
        "hooks-list",
        "event-object",
        "servers",
        "other-palazzo",
        "latin-1",
    ],
)
def test_it_refuses_a_file_it_cannot_rewrite_safely_and_leaves_it_untouched(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    for action in (lambda: install(tmp_path, PALAZZO), lambda: uninstall(tmp_path)):
        with pytest.raises(ConfigError, match=problem) as refused:
            action()
        assert str(path) in str(refused.value)
        assert path.read_bytes() == content


def test_it_reads_a_comment_marker_inside_a_string_as_text(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(gemini_json({"mcpServers": {"web": {"httpUrl": "https://example.test/*mcp*/"}}}))
    before = path.read_bytes()
    install(tmp_path, PALAZZO)
    uninstall(tmp_path)
    assert path.read_bytes() == before


def test_it_finds_the_config_dir_where_gemini_cli_does() -> None:
    assert default_config_dir({"GEMINI_CLI_HOME": "/srv/g"}) == Path("/srv/g/.gemini")
    assert default_config_dir({}) == Path.home() / ".gemini"
    assert gemini_settings.is_our_server({"command": "C:\\palazzo\\palazzo.exe", "args": ["runmcp"]})
    assert not gemini_settings.is_our_server({"command": "/usr/bin/python", "args": ["manage.py", "runmcp"]})


def test_it_answers_install_hooks_with_what_changed_or_why_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install_hooks.main(["gemini", "--config-dir", str(tmp_path)]) == 0
    assert "mcpServers.palazzo, hooks.SessionStart" in capsys.readouterr().out
    assert install_hooks.main(["gemini", "--config-dir", str(tmp_path), "--uninstall"]) == 0
    assert "settings.json removed" in capsys.readouterr().out
    (tmp_path / "settings.json").write_text("{ oops")
    assert install_hooks.main(["gemini", "--config-dir", str(tmp_path)]) == 1
    assert f"install-hooks: cannot read {tmp_path / 'settings.json'} as JSON" in capsys.readouterr().err
