"""`palazzo install-hooks claude-code|pi [--settings PATH | --agent-dir DIR] [--uninstall]`: hook into a harness.

Claude Code gets hooks in its settings.json; pi gets palazzo's extension in <agent dir>/extensions/.

Not a Django management command: Django's commands own `--settings` (the settings module), and this one
edits a file, so it runs on the standard library alone, like `palazzo hook`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from palace.feeding import claude_settings, pi_extension


def palazzo_executable() -> Path | None:
    """The `palazzo` console script of this installation (beside the interpreter, else on PATH)."""
    beside = Path(sys.executable).with_name("palazzo")
    if beside.is_file():
        return beside
    found = shutil.which("palazzo")
    return Path(found).resolve() if found else None


def main(args: list[str]) -> int:
    """Install or uninstall; exit status 0 on success."""
    parser = argparse.ArgumentParser(
        prog="palazzo install-hooks",
        description="Register palazzo's hooks in Claude Code's settings.json (user scope by default) or its "
        "extension in pi's agent dir, or remove them.",
    )
    parser.add_argument("harness", choices=["claude-code", "pi"], help="the harness to hook into")
    parser.add_argument(
        "--settings",
        help="Claude Code: settings file (default: $CLAUDE_CONFIG_DIR/settings.json or ~/.claude/settings.json)",
    )
    parser.add_argument("--agent-dir", help="pi: the agent dir (default: $PI_CODING_AGENT_DIR or ~/.pi/agent)")
    parser.add_argument("--uninstall", action="store_true", help="remove exactly what palazzo added")
    options = parser.parse_args(args)
    if options.harness == "pi":
        agent_dir = Path(options.agent_dir).expanduser() if options.agent_dir else pi_extension.default_agent_dir()
        target = Target(agent_dir, pi_extension.install, pi_extension.uninstall, "palazzo's pi extension")
    else:
        path = Path(options.settings).expanduser() if options.settings else claude_settings.default_settings_path()
        target = Target(path, claude_settings.install, claude_settings.uninstall, "palazzo hooks")
    return _apply(target, uninstall=options.uninstall)


@dataclass(frozen=True)
class Target:
    """Where palazzo hooks into one harness, and how it installs and uninstalls there."""

    path: Path
    install: Callable[[Path, Path], list[str]]
    uninstall: Callable[[Path], list[str]]
    what: str


def _apply(target: Target, *, uninstall: bool) -> int:
    try:
        if uninstall:
            changed = target.uninstall(target.path)
            verb = "removed from"
        else:
            palazzo = palazzo_executable()
            if palazzo is None:
                sys.stderr.write("install-hooks: cannot find the palazzo console script; install the project first\n")
                return 1
            changed = target.install(target.path, palazzo)
            verb = "installed in"
    except (claude_settings.SettingsError, pi_extension.ExtensionError, OSError) as exc:
        sys.stderr.write(f"install-hooks: {exc}\n")
        return 1
    if changed:
        sys.stdout.write(f"{target.what} {verb} {target.path}: {', '.join(changed)}\n")
    else:
        sys.stdout.write(f"nothing to change in {target.path}\n")
    return 0
