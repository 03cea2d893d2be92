"""palazzo in Gemini CLI's settings.json: its MCP server and its hooks (stdlib only).

`mcpServers.palazzo` runs `<palazzo> runmcp`, trusted (its tools run without a confirmation each time).
Gemini CLI hands a stdio MCP server its own environment minus the variables whose names look secret
(…KEY, …TOKEN, DATABASE_URL), so the ones runmcp reads among those are passed back by name
(`"${DATABASE_URL:-}"`: Gemini CLI expands them from its own environment; unset, they are empty, which
palazzo reads as unset). `hooks` gets one group per event, after the user's own: SessionStart prints the
wake-up, AfterAgent (the end of every turn) and SessionEnd queue the session's chat file for feeding.
A handler is palazzo's when its command is `<path>/palazzo hook gemini`, the server when its command is a
`palazzo` and its args start with `runmcp`, whatever the path, so a reinstall from elsewhere replaces them.

Gemini CLI reads settings.json as JSON with comments; palazzo rewrites the file as JSON, so a file with
comments is refused untouched (as is one that is not a JSON object), and the file keeps its layout (indent,
final newline) so that uninstall gives back its bytes. Uninstall removes exactly palazzo's entries, the
containers that held only them, and the file when nothing is left in it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from palace.feeding.config_files import replace_keeping_mode, without_handlers

SETTINGS_NAME = "settings.json"
SERVER_NAME = "palazzo"
# Event -> (hook name, timeout in ms). The hook answers in well under a second; Gemini CLI's default is 60 s.
EVENTS = {
    "SessionStart": ("palazzo-wake-up", 10_000),
    "AfterAgent": ("palazzo-feed", 10_000),
    "SessionEnd": ("palazzo-feed", 5_000),
}
# A tool call's bound: the first palace_find of a cold holder loads the embedding model (Gemini's default: 10 min).
TOOL_TIMEOUT_MS = 60_000
# Variables runmcp reads (palazzo_site/environment.py: a shared palace's PostgreSQL and Qdrant, Django's key)
# that Gemini CLI withholds from MCP servers by their names.
WITHHELD_ENVIRONMENT = ("DATABASE_URL", "QDRANT_API_KEY", "PALAZZO_SECRET_KEY")
# Keys Gemini CLI 0.1x kept inside `hooks` beside the events (now under hooksConfig); left as they are.
HOOKS_CONFIG_FIELDS = ("enabled", "disabled", "notifications")
OURS = re.compile(r"""(^|[/\\'"\s])palazzo['"]?\s+hook\s+gemini\s*$""")
_PALAZZO_PROGRAM = re.compile(r"(^|[/\\])palazzo(\.exe)?$")


class ConfigError(Exception):
    """The harness's config cannot be read or written safely (left untouched)."""


def default_config_dir(environ: dict[str, str] | None = None) -> Path:
    """Gemini CLI's user dir: $GEMINI_CLI_HOME/.gemini, else ~/.gemini (Gemini CLI's own rule)."""
    env = os.environ if environ is None else environ
    root = env.get("GEMINI_CLI_HOME")
    return (Path(root).expanduser() if root else Path.home()) / ".gemini"


def hook_command(palazzo: Path) -> str:
    """The command Gemini CLI runs (through bash) on palazzo's events."""
    return f"{shlex.quote(str(palazzo))} hook gemini"


def server_entry(palazzo: Path) -> dict[str, Any]:
    """palazzo's entry under mcpServers."""
    return {
        "command": str(palazzo),
        "args": ["runmcp"],
        "env": {name: f"${{{name}:-}}" for name in WITHHELD_ENVIRONMENT},
        "timeout": TOOL_TIMEOUT_MS,
        "trust": True,
    }


def is_ours(handler: Any) -> bool:
    """Whether a hook handler is palazzo's."""
    return (
        isinstance(handler, dict) and isinstance(handler.get("command"), str) and bool(OURS.search(handler["command"]))
    )


def is_our_server(entry: Any) -> bool:
    """Whether an mcpServers entry runs palazzo's runmcp."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    args = entry.get("args")
    return bool(_PALAZZO_PROGRAM.search(entry["command"])) and isinstance(args, list) and args[:1] == ["runmcp"]


@dataclass(frozen=True)
class _Layout:
    """How a settings file is written, so that rewriting it changes only what palazzo changes."""

    indent: str | None = "  "
    compact: bool = False
    ensure_ascii: bool = False
    final_newline: bool = True
    crlf: bool = False

    def render(self, data: dict[str, Any]) -> str:
        separators = (",", ":") if self.compact else None
        text = json.dumps(data, indent=self.indent, separators=separators, ensure_ascii=self.ensure_ascii)
        if self.final_newline:
            text += "\n"
        return text.replace("\n", "\r\n") if self.crlf else text


def _layout_of(text: str, data: dict[str, Any]) -> tuple[_Layout, bool]:
    """The layout that writes the file's data back as its exact text, and whether one was found."""
    crlf = "\r\n" in text
    final_newline = text.endswith("\n")
    match = re.search(r"\n([ \t]+)\S", text.replace("\r\n", "\n"))
    indents = [match.group(1)] if match else ["  "]
    candidates = [
        _Layout(indent=indent, ensure_ascii=ascii_only, final_newline=final_newline, crlf=crlf)
        for indent in [*indents, "  ", "    ", "\t"]
        for ascii_only in (False, True)
    ]
    candidates += [_Layout(indent=None, compact=compact, final_newline=final_newline) for compact in (False, True)]
    for layout in candidates:
        if layout.render(data) == text:
            return layout, True
    return _Layout(indent=indents[0], final_newline=final_newline, crlf=crlf), False


def _strip_comments(text: str) -> str:
    """The text without // and /* */ comments outside strings (what Gemini CLI strips before parsing)."""
    out: list[str] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char == '"':
            end = index + 1
            while end < length and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[index : end + 1])
            index = end + 1
        elif text.startswith("//", index):
            newline = text.find("\n", index)
            index = length if newline == -1 else newline
        elif text.startswith("/*", index):
            close = text.find("*/", index + 2)
            index = length if close == -1 else close + 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


@dataclass
class _Settings:
    path: Path
    data: dict[str, Any]
    layout: _Layout
    layout_kept: bool
    existed: bool


def _load(config_dir: Path) -> _Settings:
    path = config_dir / SETTINGS_NAME
    if not path.exists():
        return _Settings(path, {}, _Layout(), True, existed=False)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; palazzo leaves it alone") from None
    if not text.strip():
        return _Settings(path, {}, _Layout(), True, existed=True)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        try:
            json.loads(_strip_comments(text))
        except (ValueError, RecursionError):
            raise ConfigError(f"cannot read {path} as JSON ({exc}); fix it or pass --config-dir") from None
        raise ConfigError(
            f"{path} holds comments, which palazzo would lose when it rewrites the file; remove them, or add "
            "palazzo's entries by hand (docs/harnesses/gemini.md)"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not all(
        isinstance(groups, list) for event, groups in hooks.items() if event not in HOOKS_CONFIG_FIELDS
    ):
        raise ConfigError(f"{path}: 'hooks' is not an object of event lists; palazzo leaves it alone")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: 'mcpServers' is not an object; palazzo leaves it alone")
    if SERVER_NAME in servers and not is_our_server(servers[SERVER_NAME]):
        raise ConfigError(
            f"{path}: mcpServers.{SERVER_NAME} is not palazzo's runmcp; rename or remove it, then install again"
        )
    layout, kept = _layout_of(text, data)
    return _Settings(path, data, layout, kept, existed=True)


def _save(settings: _Settings) -> None:
    try:
        raw = settings.layout.render(settings.data).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, read from a \ud800 escape: written back escaped
        raw = replace(settings.layout, ensure_ascii=True).render(settings.data).encode("utf-8")
    replace_keeping_mode(settings.path, raw)


def _without_ours(groups: list[Any]) -> tuple[list[Any], int]:
    return without_handlers(groups, is_ours)


def install(config_dir: Path, palazzo: Path) -> list[str]:
    """Register palazzo's MCP server and session hooks; returns what changed (empty when already installed)."""
    settings = _load(config_dir)
    data = settings.data
    changed = []
    servers: dict[str, Any] = data.setdefault("mcpServers", {})
    wanted = servers.get(SERVER_NAME, {}) | server_entry(palazzo)
    if servers.get(SERVER_NAME) != wanted:
        servers[SERVER_NAME] = wanted
        changed.append(f"mcpServers.{SERVER_NAME}")
    hooks: dict[str, list[Any]] = data.setdefault("hooks", {})
    command = hook_command(palazzo)
    for event, (name, timeout) in EVENTS.items():
        groups = hooks.get(event, [])
        group = {"hooks": [{"name": name, "type": "command", "command": command, "timeout": timeout}]}
        if groups[-1:] == [group] and _without_ours(groups[:-1])[1] == 0:
            continue
        kept, _removed = _without_ours(groups)
        hooks[event] = [*kept, group]
        changed.append(f"hooks.{event}")
    if changed:
        if not settings.layout_kept:
            changed.append("(the file's layout could not be kept: it is rewritten with indented JSON)")
        _save(settings)
    return changed


def uninstall(config_dir: Path) -> list[str]:
    """Remove exactly what palazzo added; returns what changed."""
    settings = _load(config_dir)
    if not settings.existed:
        return []
    data = settings.data
    changed = []
    servers = data.get("mcpServers", {})
    if SERVER_NAME in servers:
        del servers[SERVER_NAME]
        changed.append(f"mcpServers.{SERVER_NAME}")
        if not servers:
            del data["mcpServers"]
    hooks: dict[str, list[Any]] = data.get("hooks", {})
    for event in [name for name in hooks if name not in HOOKS_CONFIG_FIELDS]:
        kept, removed = _without_ours(hooks[event])
        if not removed:
            continue
        changed.append(f"hooks.{event}")
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
        if not hooks:
            del data["hooks"]
    if not changed:
        return []
    if data:
        _save(settings)
    else:
        settings.path.unlink()  # palazzo's entries were all it held: palazzo created it
        changed.append(f"{SETTINGS_NAME} removed")
    return changed
