"""`palazzo install-hooks HARNESS [--settings PATH | --agent-dir DIR | --config-dir DIR] [--uninstall]`.

Claude Code gets hooks in its settings.json; pi gets palazzo's extension in <agent dir>/extensions/;
Codex CLI, opencode and Gemini CLI get palazzo's MCP server and its hooks (opencode: a plugin) in their
own config dir. Each harness module installs idempotently, refuses a file it cannot parse (leaving it
untouched) and uninstalls exactly what palazzo added.

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

from palace.feeding import claude_settings, codex_config, gemini_settings, opencode_plugin, pi_extension

# The harnesses whose whole setup lives in one config dir: module, what is installed, the --config-dir help.
CONFIG_DIR_HARNESSES = {
    "codex": (codex_config, "palazzo's MCP server and hooks", "$CODEX_HOME or ~/.codex"),
    "opencode": (opencode_plugin, "palazzo's MCP server and plugin", "$XDG_CONFIG_HOME/opencode or ~/.config/opencode"),
    "gemini": (gemini_settings, "palazzo's MCP server and hooks", "$GEMINI_CLI_HOME/.gemini or ~/.gemini"),
}


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
        description="Register palazzo's hooks in Claude Code's settings.json (user scope by default), its "
        "extension in pi's agent dir, or its MCP server and hooks in Codex CLI's, opencode's or Gemini CLI's "
        "config dir; or remove them.",
    )
    parser.add_argument(
        "harness", choices=["claude-code", "pi", *CONFIG_DIR_HARNESSES], help="the harness to hook into"
    )
    parser.add_argument(
        "--settings",
        help="Claude Code: settings file, in an existing dir or a project's .claude "
        "(default: $CLAUDE_CONFIG_DIR/settings.json or ~/.claude/settings.json)",
    )
    parser.add_argument(
        "--agent-dir", help="pi: the agent dir, which must exist (default: $PI_CODING_AGENT_DIR or ~/.pi/agent)"
    )
    parser.add_argument(
        "--config-dir",
        help="codex, opencode, gemini: the harness's config dir, which must exist (default: "
        + "; ".join(f"{name}: {where}" for name, (_module, _what, where) in CONFIG_DIR_HARNESSES.items())
        + ")",
    )
    parser.add_argument("--uninstall", action="store_true", help="remove exactly what palazzo added")
    options = parser.parse_args(args)
    if options.harness in CONFIG_DIR_HARNESSES:
        module, what, _where = CONFIG_DIR_HARNESSES[options.harness]
        config_dir = Path(options.config_dir).expanduser() if options.config_dir else module.default_config_dir()
        target = Target(config_dir, module.install, module.uninstall, what)
        given = ("--config-dir", config_dir) if options.config_dir else None
    elif options.harness == "pi":
        agent_dir = Path(options.agent_dir).expanduser() if options.agent_dir else pi_extension.default_agent_dir()
        target = Target(agent_dir, pi_extension.install, pi_extension.uninstall, "palazzo's pi extension")
        given = ("--agent-dir", agent_dir) if options.agent_dir else None
    else:
        path = Path(options.settings).expanduser() if options.settings else claude_settings.default_settings_path()
        target = Target(path, claude_settings.install, claude_settings.uninstall, "palazzo hooks")
        # A project's first settings file: its .claude dir is made with it, as Claude Code would.
        folder = path.parent.parent if path.parent.name == ".claude" else path.parent
        given = ("--settings", folder) if options.settings else None
    if given is not None and not given[1].is_dir():
        # A default dir is made on first use (the harness would make it too); a dir the user typed must be there.
        flag, folder = given
        sys.stderr.write(f"install-hooks: {flag}: {folder} is not a directory; check the path (nothing was changed)\n")
        return 1
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
    except (
        claude_settings.SettingsError,
        pi_extension.ExtensionError,
        codex_config.ConfigError,
        opencode_plugin.ConfigError,
        gemini_settings.ConfigError,
        OSError,
    ) as exc:
        sys.stderr.write(f"install-hooks: {exc}\n")
        return 1
    if changed:
        sys.stdout.write(f"{target.what} {verb} {target.path}: {', '.join(changed)}\n")
    else:
        sys.stdout.write(f"nothing to change in {target.path}\n")
    return 0
