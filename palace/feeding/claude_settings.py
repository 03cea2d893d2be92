"""palazzo's hooks in Claude Code's settings.json: added idempotently beside the user's own, removed exactly.

Standard library only. A palazzo handler is recognised by its command, `<path>/palazzo hook claude-code`
(whatever the path, so a reinstall elsewhere replaces the old handler instead of adding a second one);
nothing else in the file is touched.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

from palace.feeding.config_files import replace_keeping_mode, without_handlers

# Event -> matcher (None: every occurrence). SessionStart skips resume: that conversation has its context.
EVENTS: dict[str, str | None] = {
    "SessionStart": "startup|clear|compact",
    "Stop": None,
    "PreCompact": None,
    "SubagentStop": None,
    "SessionEnd": None,
}
# Seconds; the hook answers in well under one (SessionEnd's shared budget is 1.5 s).
TIMEOUTS = {"SessionStart": 10, "Stop": 10, "PreCompact": 10, "SubagentStop": 10, "SessionEnd": 5}
OURS = re.compile(r"""(^|[/\\'"\s])palazzo['"]?\s+hook\s+claude-code\s*$""")


class SettingsError(Exception):
    """The settings file cannot be read or written safely."""


def default_settings_path(environ: dict[str, str] | None = None) -> Path:
    """User-scope settings: $CLAUDE_CONFIG_DIR/settings.json, else ~/.claude/settings.json."""
    env = os.environ if environ is None else environ
    root = env.get("CLAUDE_CONFIG_DIR")
    return (Path(root).expanduser() if root else Path.home() / ".claude") / "settings.json"


def hook_command(palazzo: Path) -> str:
    """The command Claude Code runs."""
    return f"{shlex.quote(str(palazzo))} hook claude-code"


def is_ours(handler: Any) -> bool:
    """Whether a hook handler is palazzo's."""
    return (
        isinstance(handler, dict) and isinstance(handler.get("command"), str) and bool(OURS.search(handler["command"]))
    )


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SettingsError(f"cannot read {path} as JSON ({exc}); fix it or pass --settings") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} does not hold a JSON object")
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(groups, list) for groups in hooks.values()):
        raise SettingsError(f"{path}: 'hooks' is not an object of event lists; palazzo leaves it alone")
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    replace_keeping_mode(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def _without_ours(groups: list[Any]) -> tuple[list[Any], int]:
    return without_handlers(groups, is_ours)


def install(path: Path, palazzo: Path) -> list[str]:
    """Register palazzo's hooks; returns the events changed (empty when already installed as is)."""
    data = _load(path)
    hooks: dict[str, list[Any]] = data.setdefault("hooks", {})
    command = hook_command(palazzo)
    changed = []
    for event, matcher in EVENTS.items():
        groups = hooks.get(event, [])
        handler = {"type": "command", "command": command, "timeout": TIMEOUTS[event]}
        group: dict[str, Any] = ({"matcher": matcher} if matcher else {}) | {"hooks": [handler]}
        if group in groups:
            continue
        kept, _removed = _without_ours(groups)
        hooks[event] = [*kept, group]
        changed.append(event)
    if changed:
        _save(path, data)
    return changed


def uninstall(path: Path) -> list[str]:
    """Remove palazzo's handlers (and the groups and events that held only them); returns the events changed."""
    if not path.exists():
        return []
    data = _load(path)
    hooks: dict[str, list[Any]] = data.get("hooks", {})
    changed = []
    for event in list(hooks):
        kept, removed = _without_ours(hooks[event])
        if not removed:
            continue
        changed.append(event)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if changed:
        if not hooks:
            del data["hooks"]
        _save(path, data)
    return changed
