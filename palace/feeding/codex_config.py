"""palazzo in Codex CLI's config dir: its MCP server in config.toml, its hooks in hooks.json (stdlib + tomlkit).

`[mcp_servers.palazzo]` runs `<palazzo> runmcp`, required (Codex sends its first request only once the
server is up, so the first turn has palazzo's tools) and handed the variables that choose the palace (Codex
starts MCP servers with a bare environment; its hooks get the whole one). hooks.json gets one group per
event, appended after the user's own: SessionStart prints the wake-up, Stop (after every turn) and
SessionEnd queue the rollout for feeding. A handler is palazzo's when its command is `<path>/palazzo hook
codex`, the server when its command is a `palazzo` and its args start with `runmcp`, whatever the path, so
a reinstall from elsewhere replaces them. Both files are checked before either is written; one that cannot
be parsed is refused and left untouched. Uninstall removes exactly those entries (and the trust Codex
recorded for palazzo's hooks); a config.toml palazzo appended to gets its bytes back.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Array

from palace.feeding.config_files import replace_keeping_mode, without_handlers

CONFIG_NAME = "config.toml"
HOOKS_NAME = "hooks.json"
SERVER_NAME = "palazzo"
# Event -> seconds. Codex clamps SessionEnd to 3 s; the hook answers in well under one.
EVENTS = {"SessionStart": 10, "Stop": 10, "SessionEnd": 3}
# A cold runmcp (Django, the MCP SDK) on a busy machine; Codex's default is 10 s, and a required server that
# misses it stops the session from starting.
STARTUP_TIMEOUT_SECONDS = 30
# Codex gives an MCP server only HOME, PATH, USER, LANG and a few more; these are the ones palazzo reads
# (palazzo_site/environment.py, plus the holder's runtime dir), so runmcp serves the palace the hooks feed.
FORWARDED_ENVIRONMENT = (
    "PALAZZO_DATA_DIR",
    "XDG_DATA_HOME",  # the default data dir's base
    "PALAZZO_URL",
    "PALAZZO_TOKEN",
    "PALAZZO_REMOTE_TIMEOUT",
    "PALAZZO_DEVICE",
    "PALAZZO_HOLDER",
    "PALAZZO_HOLDER_IDLE_SECONDS",
    "DATABASE_URL",
    "QDRANT_URL",
    "QDRANT_API_KEY",
    "PALAZZO_QDRANT_TIMEOUT",
    "COLLECTION",
    "PALAZZO_WAL",
    "PALAZZO_WAL_VERBATIM",
    "PALAZZO_EMBED_BACKEND",
    "PALAZZO_EMBED_MODEL",
    "PALAZZO_EMBED_THREADS",
    "PALAZZO_EMBED_TIMEOUT",
    "FASTEMBED_CACHE_DIR",
    "OLLAMA_URL",
    "OLLAMA_MODEL",
    "PALAZZO_CATEGORIES",
    "PALAZZO_WINGS",
    "PALAZZO_HALLS",
    "PALAZZO_VOCABULARY",
    "PALAZZO_FEED_WING",
    "PALAZZO_FEED_HALL",
    "PALAZZO_FEED_CATEGORY",
    "PALAZZO_READ_ONLY",
    "PALAZZO_WAKE_UP_COUNT",
    "PALAZZO_INDEX_AFTER",
    "PALAZZO_INGEST_MAX_BYTES",
    "PALAZZO_REDACTION_MODE",
    "PALAZZO_REDACTION_PACKS",
    "PALAZZO_AUDIT_QUERY_PLAIN",
    "PALAZZO_USAGE_LOG",
    "PALAZZO_GAIN_ENABLED",
    "PALAZZO_GAIN_TOOL",
    "PALAZZO_LOG_LEVEL",
    "PALAZZO_SECRET_KEY",
    "PALAZZO_DEBUG",
    "XDG_RUNTIME_DIR",
)
OURS = re.compile(r"""(^|[/\\'"\s])palazzo['"]?\s+hook\s+codex\s*$""")
# The table header palazzo writes, in the spellings TOML allows for it.
_HEADER = re.compile(r"""^\s*\[\s*("?)mcp_servers\1\s*\.\s*("?)palazzo\2\s*\]\s*(#.*)?$""")
_ANY_HEADER = re.compile(r"^\s*\[")


class ConfigError(Exception):
    """The harness's config cannot be read or written safely (left untouched)."""


def default_config_dir(environ: dict[str, str] | None = None) -> Path:
    """Codex CLI's home: $CODEX_HOME, else ~/.codex."""
    env = os.environ if environ is None else environ
    root = env.get("CODEX_HOME")
    return Path(root).expanduser() if root else Path.home() / ".codex"


def hook_command(palazzo: Path) -> str:
    """The command Codex runs for palazzo's hooks."""
    return f"{shlex.quote(str(palazzo))} hook codex"


def is_our_handler(handler: Any) -> bool:
    """Whether a hooks.json handler is palazzo's."""
    return (
        isinstance(handler, dict) and isinstance(handler.get("command"), str) and bool(OURS.search(handler["command"]))
    )


def is_our_server(server: Any) -> bool:
    """Whether an [mcp_servers.palazzo] entry runs `palazzo runmcp` (one this command wrote, from any path)."""
    if not isinstance(server, dict):
        return False
    command, args = server.get("command"), server.get("args")
    return (
        isinstance(command, str)
        and re.split(r"[/\\]", command.strip())[-1] == "palazzo"
        and isinstance(args, list)
        and args[:1] == ["runmcp"]
    )


def server_settings(palazzo: Path) -> dict[str, Any]:
    """What palazzo writes into [mcp_servers.palazzo]."""
    return {
        "command": str(palazzo),
        "args": ["runmcp"],
        "required": True,
        "startup_timeout_sec": STARTUP_TIMEOUT_SECONDS,
        "env_vars": list(FORWARDED_ENVIRONMENT),
    }


# ---------------------------------------------------------------------------------------------- config.toml


def _read_text(path: Path) -> str | None:
    if not path.exists():
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {path}: not UTF-8 ({exc.reason} at byte {exc.start}); left untouched") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def _parse_toml(path: Path, text: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except (TOMLKitError, ValueError, RecursionError) as exc:
        raise ConfigError(f"cannot read {path} as TOML ({exc}); fix it, palazzo left it untouched") from None


def _servers(path: Path, document: tomlkit.TOMLDocument) -> Any:
    servers = document.get("mcp_servers")
    if servers is not None and not isinstance(servers, dict):
        raise ConfigError(f"{path}: 'mcp_servers' is not a table; palazzo leaves it alone")
    return servers


def _existing_server(path: Path, document: tomlkit.TOMLDocument) -> Any:
    servers = _servers(path, document)
    server = servers.get(SERVER_NAME) if servers is not None else None
    if server is not None and not is_our_server(server):
        raise ConfigError(
            f"{path} already has an [mcp_servers.{SERVER_NAME}] that does not run `palazzo runmcp`; palazzo leaves it "
            "alone (remove or rename it, then install again)"
        )
    return server


def _toml_value(value: Any) -> Any:
    """A TOML item for a setting; a long list one name a line, as people write it."""
    item = tomlkit.item(value)
    if isinstance(item, Array) and len(value) > 3:
        item.multiline(True)
    return item


def _server_block(palazzo: Path) -> str:
    lines = [f"[mcp_servers.{SERVER_NAME}]"]
    for key, value in server_settings(palazzo).items():
        lines.append(f"{key} = {_toml_value(value).as_string()}")
    return "\n".join(lines) + "\n"


def _installed_config(path: Path, text: str | None, palazzo: Path) -> str | None:
    """The new config.toml text, or None when it already registers this palazzo as it should."""
    document = _parse_toml(path, text or "")
    existing = _existing_server(path, document)
    wanted = server_settings(palazzo)
    if existing is None:
        original = text or ""
        # Exactly one blank line before palazzo's table, so uninstall can take it away again.
        separator = "" if not original else ("\n" if original.endswith("\n") else "\n\n")
        updated = original + separator + _server_block(palazzo)
    else:
        current = {key: existing.get(key) for key in wanted}
        # The user's own settings for it (required, startup_timeout_sec, tool filters) stay as they are.
        kept = {"required", "startup_timeout_sec"} & {key for key in existing if existing[key] is not None}
        if all(current[key] == value for key, value in wanted.items() if key not in kept):
            return None
        for key, value in wanted.items():
            if key not in kept:
                existing[key] = _toml_value(value)
        updated = tomlkit.dumps(document)
    try:
        check = tomlkit.parse(updated)
    except (TOMLKitError, ValueError) as exc:
        raise ConfigError(f"cannot add [mcp_servers.{SERVER_NAME}] to {path} ({exc}); left untouched") from None
    server = check.get("mcp_servers", {}).get(SERVER_NAME)
    if not is_our_server(server) or server.get("command") != wanted["command"]:
        raise ConfigError(
            f"cannot write [mcp_servers.{SERVER_NAME}] into {path} (its mcp_servers is not a plain table)"
        )
    return updated


def _without_server_text(text: str, expected: dict[str, Any]) -> str | None:
    """config.toml with palazzo's table cut out line by line (its bytes as before install), if that is exact."""
    lines = text.splitlines(keepends=True)
    headers = [number for number, line in enumerate(lines) if _HEADER.match(line)]
    if len(headers) != 1:
        return None
    start = end = headers[0]
    for number in range(start + 1, len(lines)):
        if _ANY_HEADER.match(lines[number]):
            break
        if lines[number].strip() and not lines[number].lstrip().startswith("#"):
            end = number  # blank lines and comments before the next table belong to it
    if start > 0 and not lines[start - 1].strip("\r\n"):
        start -= 1  # the blank line install put before the table
    candidate = "".join(lines[:start] + lines[end + 1 :])
    try:
        if _without_empty_servers(tomlkit.parse(candidate).unwrap()) != _without_empty_servers(expected):
            return None
    except (TOMLKitError, ValueError):
        return None
    return candidate


def _without_empty_servers(config: dict[str, Any]) -> dict[str, Any]:
    """An empty [mcp_servers] header is the same configuration as none (one the user wrote stays)."""
    return {key: value for key, value in config.items() if key != "mcp_servers" or value}


def _trust_keys(hooks_path: Path, hooks: dict[str, list[Any]]) -> set[str]:
    """Where Codex records the user's trust in palazzo's handlers: "<hooks.json>:<event>:<group>:<handler>"."""
    paths = {str(hooks_path.absolute())}
    with contextlib.suppress(OSError):
        paths.add(str(hooks_path.resolve()))
    keys = set()
    for event, groups in hooks.items():
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()
        for group_number, group in enumerate(groups):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler_number, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if is_our_handler(handler):
                    keys |= {f"{path}:{snake}:{group_number}:{handler_number}" for path in paths}
    return keys


def _uninstalled_config(path: Path, text: str, trust_keys: set[str]) -> tuple[str | None, list[str]]:
    """The config.toml text without palazzo's server and palazzo's hook trust (None: unchanged)."""
    document = _parse_toml(path, text)
    servers = _servers(path, document)
    hooks = document.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    stale = sorted(key for key in (state or {}) if key in trust_keys) if isinstance(state, dict) else []
    server = servers.get(SERVER_NAME) if servers is not None else None
    ours = server is not None and is_our_server(server)
    if not ours and not stale:
        return None, []
    changed = []
    if stale:
        assert isinstance(hooks, dict) and isinstance(state, dict)
        for key in stale:
            del state[key]
        if not state:
            del hooks["state"]
        if not hooks:
            del document["hooks"]
        changed.append("hook trust")
        text = tomlkit.dumps(document)
        document = tomlkit.parse(text)
        servers = document.get("mcp_servers")
    if ours:
        assert servers is not None
        del servers[SERVER_NAME]
        if not servers:
            del document["mcp_servers"]
        expected = document.unwrap()
        text = _without_server_text(text, expected) or tomlkit.dumps(document)
        changed.insert(0, f"[mcp_servers.{SERVER_NAME}]")
    return text, changed


# ----------------------------------------------------------------------------------------------- hooks.json


def _load_hooks(path: Path) -> tuple[dict[str, Any], str]:
    """hooks.json as an object, and the indent it is written with."""
    text = _read_text(path)
    if text is None:
        return {}, "  "
    try:
        data = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"cannot read {path} as JSON ({exc}); fix it, palazzo left it untouched") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object; palazzo leaves it alone")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(groups, list) for groups in hooks.values()):
        raise ConfigError(f"{path}: 'hooks' is not an object of event lists; palazzo leaves it alone")
    indent = re.search(r"\n([ \t]+)\S", text)
    return data, indent.group(1) if indent else "  "


def _hooks_text(data: dict[str, Any], indent: str) -> str:
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------------------------- both files


def _without_ours(groups: list[Any]) -> tuple[list[Any], int]:
    return without_handlers(groups, is_our_handler)


def _save(path: Path, text: str) -> None:
    replace_keeping_mode(path, text.encode("utf-8"))  # Codex never reads a half-written file


def install(config_dir: Path, palazzo: Path) -> list[str]:
    """Register palazzo's MCP server and session hooks; returns what changed (empty when already installed)."""
    config_path, hooks_path = config_dir / CONFIG_NAME, config_dir / HOOKS_NAME
    config_text = _installed_config(config_path, _read_text(config_path), palazzo)
    data, indent = _load_hooks(hooks_path)
    hooks: dict[str, list[Any]] = data.setdefault("hooks", {})
    command = hook_command(palazzo)
    events = []
    for event, timeout in EVENTS.items():
        groups = hooks.get(event, [])
        group = {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}
        kept, removed = _without_ours(groups)
        if removed == 1 and groups[-1] == group:
            continue  # already the last group, as it is: the user's trust in it (by position) stays valid
        hooks[event] = [*kept, group]
        events.append(event)
    changed = []
    if config_text is not None:
        _save(config_path, config_text)
        changed.append(f"{CONFIG_NAME} [mcp_servers.{SERVER_NAME}]")
    if events:
        _save(hooks_path, _hooks_text(data, indent))
        changed.append(f"{HOOKS_NAME} {', '.join(events)}")
    return changed


def uninstall(config_dir: Path) -> list[str]:
    """Remove exactly what palazzo added; returns what changed."""
    config_path, hooks_path = config_dir / CONFIG_NAME, config_dir / HOOKS_NAME
    config_text = _read_text(config_path)
    data, indent = _load_hooks(hooks_path) if hooks_path.exists() else ({}, "  ")
    hooks: dict[str, list[Any]] = data.get("hooks", {})
    trust = _trust_keys(hooks_path, hooks)
    new_config, config_changes = (
        _uninstalled_config(config_path, config_text, trust) if config_text is not None else (None, [])
    )
    events = []
    for event in list(hooks):
        kept, removed = _without_ours(hooks[event])
        if not removed:
            continue
        events.append(event)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    changed = []
    if new_config is not None:
        if new_config.strip():
            _save(config_path, new_config)
        else:
            config_path.unlink()  # palazzo's table was all it held
        changed.append(f"{CONFIG_NAME} {', '.join(config_changes)}")
    if events:
        if not hooks:
            del data["hooks"]
        if data:
            _save(hooks_path, _hooks_text(data, indent))
        else:
            hooks_path.unlink()  # palazzo's hooks were all it held
        changed.append(f"{HOOKS_NAME} {', '.join(events)}")
    return changed
