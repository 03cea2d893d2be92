"""`palazzo install-hooks claude-code [--settings PATH] [--uninstall]`: register palazzo's hooks with a harness.

Not a Django management command: Django's commands own `--settings` (the settings module), and this one
edits a file, so it runs on the standard library alone, like `palazzo hook`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from palace.feeding import claude_settings


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
        description="Register palazzo's hooks in Claude Code's settings.json (user scope by default), or remove them.",
    )
    parser.add_argument("harness", choices=["claude-code"], help="the harness to hook into")
    parser.add_argument(
        "--settings", help="settings file (default: $CLAUDE_CONFIG_DIR/settings.json or ~/.claude/settings.json)"
    )
    parser.add_argument("--uninstall", action="store_true", help="remove exactly the hooks palazzo added")
    options = parser.parse_args(args)
    path = Path(options.settings).expanduser() if options.settings else claude_settings.default_settings_path()
    try:
        if options.uninstall:
            changed = claude_settings.uninstall(path)
            verb = "removed from"
        else:
            palazzo = palazzo_executable()
            if palazzo is None:
                sys.stderr.write("install-hooks: cannot find the palazzo console script; install the project first\n")
                return 1
            changed = claude_settings.install(path, palazzo)
            verb = "installed in"
    except (claude_settings.SettingsError, OSError) as exc:
        sys.stderr.write(f"install-hooks: {exc}\n")
        return 1
    if changed:
        sys.stdout.write(f"palazzo hooks {verb} {path}: {', '.join(changed)}\n")
    else:
        sys.stdout.write(f"nothing to change in {path}\n")
    return 0
