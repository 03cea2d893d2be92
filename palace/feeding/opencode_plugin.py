"""palazzo in opencode's config dir: its MCP server in opencode.json, its plugin in plugins/ (stdlib only).

`mcp.palazzo` runs `<palazzo> runmcp` (the palace's tools, named `palazzo_palace_*` in opencode); the plugin
(palace/feeding/opencode/palazzo.js, palazzo's command written in) puts the wake-up in the system prompt and
queues each session for feeding when it settles and when opencode exits. opencode reads its config as JSONC
(comments, trailing commas), so the file is edited as text: palazzo's entry is inserted right after an
opening brace and, on uninstall, that same text is taken out again, which gives the user's file its bytes
back. A file that cannot be parsed, or a local `mcp.palazzo` that does not run `palazzo runmcp`, is refused
untouched; a remote `mcp.palazzo` (a team server the user added) is left as it is and only the plugin is
installed. A plugins/palazzo.js without palazzo's marker is never overwritten or removed. `opencode.jsonc` is
edited when it is the config file in use (no opencode.json beside it).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palace.feeding.config_files import replace_keeping_mode

SOURCE = Path(__file__).with_name("opencode") / "palazzo.js"
PLUGIN_NAME = "palazzo.js"
PLACEHOLDER = '"__PALAZZO_COMMAND__"'
MARKER = "palazzo inside opencode"
CONFIG_NAMES = ("opencode.json", "opencode.jsonc")
SERVER_NAME = "palazzo"
SCHEMA_URL = "https://opencode.ai/config.json"
MAX_CONFIG_BYTES = 4 * 1024 * 1024
DEFAULT_INDENT = "  "


class ConfigError(Exception):
    """The harness's config cannot be read or written safely (left untouched)."""


def default_config_dir(environ: dict[str, str] | None = None) -> Path:
    """opencode's config dir: $XDG_CONFIG_HOME/opencode, else ~/.config/opencode."""
    env = os.environ if environ is None else environ
    root = env.get("XDG_CONFIG_HOME")
    return (Path(root).expanduser() if root else Path.home() / ".config") / "opencode"


def plugin_path(config_dir: Path) -> Path:
    """Where the installed plugin lives: opencode loads every plugins/*.js of its config dir."""
    return config_dir / "plugins" / PLUGIN_NAME


def config_path(config_dir: Path) -> Path:
    """The config file palazzo edits: opencode.json, or opencode.jsonc when only that one exists."""
    json_file, jsonc_file = (config_dir / name for name in CONFIG_NAMES)
    return jsonc_file if jsonc_file.exists() and not json_file.exists() else json_file


def server_entry(palazzo: Path) -> dict[str, Any]:
    """The `mcp.palazzo` value: a local server opencode starts with its own environment."""
    return {"type": "local", "command": [str(palazzo), "runmcp"], "enabled": True}


def is_our_server(value: Any) -> bool:
    """Whether an `mcp.palazzo` value is one palazzo wrote: a local `<path>/palazzo runmcp`, whatever the path."""
    if not isinstance(value, dict) or value.get("type") != "local":
        return False
    command = value.get("command")
    return (
        isinstance(command, list)
        and len(command) == 2
        and all(isinstance(part, str) for part in command)
        and Path(command[0]).name in ("palazzo", "palazzo.exe")
        and command[1] == "runmcp"
    )


def rendered_plugin(palazzo: Path) -> str:
    """The plugin with this installation's palazzo command written in."""
    return SOURCE.read_text(encoding="utf-8").replace(PLACEHOLDER, json.dumps(str(palazzo)), 1)


def _is_our_plugin(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8")[:300]
    except (OSError, UnicodeDecodeError):
        return False
    return MARKER in head


# --- JSONC, read with the positions of what is in it -------------------------------------------------


@dataclass
class _Node:
    """A JSONC value with its span in the text; an object keeps its members (key, key start, value) in order."""

    start: int
    end: int
    value: Any
    members: list[tuple[str, int, _Node]] = field(default_factory=list)

    def member(self, key: str) -> _Node | None:
        found = [node for name, _start, node in self.members if name == key]
        return found[-1] if found else None  # a repeated key: the last one wins, as in opencode


_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


class _Syntax(ValueError):
    """Where and why a text is not JSONC."""


class _Reader:
    """A JSONC parser (comments and trailing commas allowed, as opencode reads its config) keeping spans."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def document(self) -> _Node:
        index = self.blank(0)
        node = self.value(index)
        if self.blank(node.end) != len(self.text):
            raise self.error(self.blank(node.end), "unexpected text after the value")
        return node

    def error(self, index: int, problem: str) -> _Syntax:
        line = self.text.count("\n", 0, index) + 1
        column = index - (self.text.rfind("\n", 0, index) + 1) + 1
        return _Syntax(f"line {line} column {column}: {problem}")

    def blank(self, index: int) -> int:
        """The index after whitespace and comments."""
        text = self.text
        while index < len(text):
            if text[index] in " \t\r\n\ufeff":
                index += 1
            elif text.startswith("//", index):
                newline = text.find("\n", index)
                index = len(text) if newline < 0 else newline + 1
            elif text.startswith("/*", index):
                close = text.find("*/", index + 2)
                if close < 0:
                    raise self.error(index, "unclosed comment")
                index = close + 2
            else:
                break
        return index

    def value(self, index: int) -> _Node:
        if index >= len(self.text):
            raise self.error(index, "unexpected end of file")
        first = self.text[index]
        if first == "{":
            return self.container(index, "}")
        if first == "[":
            return self.container(index, "]")
        if first == '"':
            text, end = self.string(index)
            return _Node(index, end, text)
        match = _SCALAR.match(self.text, index)
        if not match:
            raise self.error(index, "expected a value")
        return _Node(index, match.end(), json.loads(match.group()))

    def string(self, index: int) -> tuple[str, int]:
        match = _STRING.match(self.text, index)
        if not match:
            raise self.error(index, "unterminated string")
        try:
            return json.loads(match.group()), match.end()
        except ValueError as exc:
            raise self.error(index, f"bad string ({exc})") from None

    def container(self, start: int, close: str) -> _Node:
        self.depth += 1
        if self.depth > 200:
            raise self.error(start, "nested too deeply")
        is_object = close == "}"
        node = _Node(start, start, {} if is_object else [])
        index = self.blank(start + 1)
        while True:
            if index < len(self.text) and self.text[index] == close:
                node.end = index + 1
                self.depth -= 1
                return node
            if is_object:
                if index >= len(self.text) or self.text[index] != '"':
                    raise self.error(index, "expected a key in double quotes")
                key, after_key = self.string(index)
                colon = self.blank(after_key)
                if colon >= len(self.text) or self.text[colon] != ":":
                    raise self.error(colon, "expected ':'")
                item = self.value(self.blank(colon + 1))
                node.members.append((key, index, item))
                node.value[key] = item.value
            else:
                item = self.value(index)
                node.value.append(item.value)
            index = self.blank(item.end)
            if index < len(self.text) and self.text[index] == ",":
                index = self.blank(index + 1)
            elif index >= len(self.text) or self.text[index] != close:
                raise self.error(index, f"expected ',' or '{close}'")


def _parse(path: Path, text: str) -> _Node:
    try:
        root = _Reader(text).document()
    except _Syntax as exc:
        raise ConfigError(f"cannot read {path} as JSONC ({exc}); fix it first, palazzo left it untouched") from None
    if not isinstance(root.value, dict):
        raise ConfigError(f"{path} does not hold a JSON object; palazzo left it untouched")
    return root


def _read(path: Path) -> str | None:
    """The config file's text (None when there is none)."""
    if not path.exists():
        return None
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes; palazzo left it untouched")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; palazzo left it untouched") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def _write(path: Path, text: str) -> None:
    """Replace the file atomically, keeping its mode; a symlinked config (dotfiles) is written through."""
    replace_keeping_mode(path.resolve() if path.is_symlink() else path, text.encode("utf-8"))


def _indent_inside(text: str, node: _Node, fallback: str) -> str:
    """The indentation of an object's first member (or the fallback for an empty or one-line object)."""
    if not node.members:
        return fallback
    key_start = node.members[0][1]
    line_start = text.rfind("\n", node.start, key_start)
    if line_start < 0:
        return fallback
    indentation = text[line_start + 1 : key_start]
    return indentation if indentation.strip() == "" else fallback


def _line_indent(text: str, index: int) -> str:
    line_start = text.rfind("\n", 0, index) + 1
    indentation = text[line_start:index]
    return indentation if indentation.strip() == "" else ""


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _member_text(key: str, value: Any) -> str:
    return f"{json.dumps(key)}: {_compact(value)}"


def _mcp_member(entry: Any) -> str:
    """The "mcp" member palazzo adds when there is none. Spaced inside its braces, unlike palazzo's server
    inserted into an empty `"mcp": {}`, so an uninstall can tell which of the two it added."""
    return f'"mcp": {{ {_member_text(SERVER_NAME, entry)} }}'


def _insertion(text: str, node: _Node, indent: str, member: str) -> tuple[int, str]:
    """What palazzo inserts right after an object's opening brace, and where: on a line of its own in an
    object written over several lines, inline in a one-line one."""
    at = node.start + 1
    if "\n" in text[node.start : node.end]:
        return at, f"\n{indent}{member}{',' if node.members else ''}"
    return at, f"{member}, " if node.members else member


def _new_file(entry: dict[str, Any]) -> str:
    body = {"$schema": SCHEMA_URL, "mcp": {SERVER_NAME: entry}}
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def _with_server(path: Path, text: str | None, entry: dict[str, Any]) -> str | None:
    """The config text with palazzo's server registered (None when it already is, as it is)."""
    if text is None:
        return _new_file(entry)
    root = _parse(path, text)
    mcp = root.member("mcp")
    if mcp is None:
        indent = _indent_inside(text, root, DEFAULT_INDENT)
        at, insert = _insertion(text, root, indent, _mcp_member(entry))
        return text[:at] + insert + text[at:]
    if not isinstance(mcp.value, dict):
        raise ConfigError(f"{path}: 'mcp' is not an object; palazzo left the file untouched")
    current = mcp.member(SERVER_NAME)
    if current is None:
        key_start = next(start for _name, start, node in root.members if node is mcp)
        outer = _line_indent(text, key_start)
        indent = _indent_inside(text, mcp, outer * 2 if outer else DEFAULT_INDENT * 2)
        at, insert = _insertion(text, mcp, indent, _member_text(SERVER_NAME, entry))
        return text[:at] + insert + text[at:]
    if isinstance(current.value, dict) and current.value.get("type") == "remote":
        return None  # the user's own palazzo, a team server over HTTP: the plugin feeds it through PALAZZO_URL
    if not is_our_server(current.value):
        raise ConfigError(
            f"{path}: mcp.{SERVER_NAME} is not palazzo's `palazzo runmcp` entry; remove or rename it first "
            "(palazzo left the file untouched)"
        )
    # An older installation's entry (another path, or disabled) is brought up to date where it stands; what
    # the user added to it (a timeout, an environment) stays.
    merged = current.value | entry
    if merged == current.value:
        return None
    return text[: current.start] + _compact(merged) + text[current.end :]


def _without_server(path: Path, text: str) -> str | None:
    """The config text without palazzo's server (None when it holds none of palazzo's)."""
    root = _parse(path, text)
    mcp = root.member("mcp")
    if mcp is None or not isinstance(mcp.value, dict):
        return None
    current = mcp.member(SERVER_NAME)
    if current is None or not is_our_server(current.value):
        return None
    if text == _new_file(current.value):
        return ""  # the whole file is the one palazzo created
    if len(mcp.members) == 1:
        # "mcp" holds only palazzo's server: palazzo added it as the compact member right after the brace.
        whole = _removed(text, root, _mcp_member(current.value))
        if whole is not None:
            return whole
    exact = _removed(text, mcp, _member_text(SERVER_NAME, current.value))
    if exact is not None:
        return exact
    return _cut_member(text, mcp, current)


def _removed(text: str, node: _Node, member: str) -> str | None:
    """The text without what `_insertion` put after the object's brace, if it stands there unchanged."""
    after = node.start + 1
    indent = re.match(r"\n[ \t]*", text[after:])
    candidates = [f"{member}, ", f"{member}"]
    if indent:
        candidates = [f"{indent.group()}{member},", f"{indent.group()}{member}", *candidates]
    for inserted in candidates:
        if text.startswith(inserted, after):
            rest = text[after + len(inserted) :]
            following = _Reader(rest).blank(0)
            if inserted.endswith(member) and rest[following : following + 1] != "}":
                continue  # not the only member: what follows is another member, not the brace
            return text[:after] + rest
    return None


def _cut_member(text: str, node: _Node, member: _Node) -> str:
    """Remove a member the user moved or reformatted: its key to its value, with one adjoining comma."""
    key_start = next(start for _name, start, item in node.members if item is member)
    line_start = text.rfind("\n", node.start, key_start)
    start = line_start if line_start >= 0 and not text[line_start + 1 : key_start].strip() else key_start
    after = _Reader(text).blank(member.end)
    if after < len(text) and text[after] == ",":
        return text[:start] + text[after + 1 :]
    head = text[:start].rstrip(" \t\r\n")
    if head.endswith(","):  # the last member: the comma before it goes
        return head[:-1] + text[member.end :]
    return text[:start] + text[member.end :]


# --- install and uninstall ---------------------------------------------------------------------------


def install(config_dir: Path, palazzo: Path) -> list[str]:
    """Register palazzo's MCP server and session hooks; returns what changed (empty when already installed)."""
    config = config_path(config_dir)
    plugin = plugin_path(config_dir)
    if plugin.exists() and not _is_our_plugin(plugin):
        raise ConfigError(f"{plugin} exists and is not palazzo's; move it away first")
    updated = _with_server(config, _read(config), server_entry(palazzo))  # checked before anything is written
    changed = []
    if updated is not None:
        _write(config, updated)
        changed.append(f"{config.name} (mcp.{SERVER_NAME})")
    plugin_text = rendered_plugin(palazzo)
    if not plugin.exists() or plugin.read_text(encoding="utf-8") != plugin_text:
        plugin.parent.mkdir(parents=True, exist_ok=True)
        staged = plugin.with_name(f".{PLUGIN_NAME}.{os.getpid()}.tmp")
        staged.write_text(plugin_text, encoding="utf-8")
        os.replace(staged, plugin)  # opencode never loads a half-written plugin
        changed.append(f"plugins/{PLUGIN_NAME}")
    return changed


def uninstall(config_dir: Path) -> list[str]:
    """Remove exactly what palazzo added; returns what changed."""
    plugin = plugin_path(config_dir)
    if plugin.exists() and not _is_our_plugin(plugin):
        raise ConfigError(f"{plugin} is not palazzo's; left as it is")
    edits = []
    for name in CONFIG_NAMES:  # both, checked before either is written
        config = config_dir / name
        text = _read(config)
        if text is not None:
            updated = _without_server(config, text)
            if updated is not None:
                edits.append((config, updated))
    changed = []
    for config, updated in edits:
        if updated == "":
            config.unlink()
        else:
            _write(config, updated)
        changed.append(f"{config.name} (mcp.{SERVER_NAME})")
    if plugin.exists():
        plugin.unlink()
        changed.append(f"plugins/{PLUGIN_NAME}")
    return changed
