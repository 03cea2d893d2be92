"""`palazzo setup claude-code [--uninstall]`: palazzo's MCP server and hooks in Claude Code, in one step.

Registers `<palazzo> runmcp` as the user-scope MCP server `palazzo` through the `claude` CLI on PATH
(`claude mcp add --scope user`), then installs the hooks (palazzo_site.install_hooks); `--uninstall`
removes both. Running it again changes nothing. Standard library only, like `install-hooks`: it edits
Claude Code's configuration and needs no Django.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from palazzo_site import install_hooks

SERVER_NAME = "palazzo"
CLAUDE_TIMEOUT_SECONDS = 60  # `claude mcp get` starts the server once to check it; a cold runmcp takes seconds


class SetupError(Exception):
    """Claude Code cannot be set up as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Registration:
    """The user-scope MCP server named palazzo as Claude Code reports it."""

    command: str
    args: str

    def runs_palazzo(self) -> bool:
        """Whether it is a `palazzo runmcp` (one palazzo wrote, from this install or another)."""
        return Path(self.command).name == "palazzo" and self.args == "runmcp"


def main(args: list[str]) -> int:
    """Set up (or remove) palazzo in Claude Code; exit status 0 on success."""
    parser = argparse.ArgumentParser(
        prog="palazzo setup",
        description="Register palazzo's MCP server with Claude Code (user scope, through the `claude` CLI) and "
        "install its hooks, or remove both.",
    )
    parser.add_argument("harness", choices=["claude-code"], help="the harness to set up")
    parser.add_argument(
        "--settings",
        help="hooks' settings file (default: $CLAUDE_CONFIG_DIR/settings.json or ~/.claude/settings.json)",
    )
    parser.add_argument("--uninstall", action="store_true", help="remove palazzo's MCP server and hooks")
    options = parser.parse_args(args)
    hook_args = ["claude-code", *(["--settings", options.settings] if options.settings else [])]
    try:
        claude = _claude_cli()
        if options.uninstall:
            # Hooks first: removing the server starts a Claude Code process that would fire them.
            status = install_hooks.main([*hook_args, "--uninstall"])
            _unregister(claude)
            return status
        palazzo = install_hooks.palazzo_executable()
        if palazzo is None:
            raise SetupError("cannot find the palazzo console script; install palazzo first")
        # The server first: `claude mcp add` fires Claude Code's session hooks, which must not run yet.
        _register(claude, palazzo)
        return install_hooks.main(hook_args)
    except SetupError as exc:
        sys.stderr.write(f"setup: {exc}\n")
        return 1


def _claude_cli() -> str:
    found = shutil.which("claude")
    if found is None:
        raise SetupError(
            "the Claude Code CLI `claude` is not on PATH; install it (https://docs.claude.com/en/docs/claude-code) "
            "and run `palazzo setup claude-code` again"
        )
    return found


def _claude(claude: str, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [claude, "mcp", *args], capture_output=True, text=True, timeout=CLAUDE_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"`claude mcp {' '.join(args)}` failed: {exc}") from None


def _registration(claude: str) -> Registration | None:
    """The user-scope `palazzo` server, or None when Claude Code has none (or only at another scope)."""
    answer = _claude(claude, "get", SERVER_NAME)
    if answer.returncode != 0:
        return None
    fields: dict[str, str] = {}
    for line in answer.stdout.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key in ("Scope", "Command", "Args"):
            fields[key] = value.strip()
    if not fields.get("Scope", "").startswith("User"):
        return None
    return Registration(command=fields.get("Command", ""), args=fields.get("Args", ""))


def _register(claude: str, palazzo: Path) -> None:
    current = _registration(claude)
    if current is not None and current.command == str(palazzo) and current.runs_palazzo():
        sys.stdout.write(f"MCP server {SERVER_NAME} already registered with Claude Code: {palazzo} runmcp\n")
        return
    if current is not None:
        if not current.runs_palazzo():
            raise SetupError(
                f"Claude Code already has a user-scope MCP server named {SERVER_NAME} that runs "
                f"`{current.command} {current.args}`; remove it (claude mcp remove {SERVER_NAME} -s user) and run "
                "`palazzo setup claude-code` again"
            )
        # Another palazzo install's runmcp (an old checkout's .venv): this one replaces it.
        _run(claude, "remove", SERVER_NAME, "--scope", "user")
    _run(claude, "add", "--scope", "user", SERVER_NAME, "--", str(palazzo), "runmcp")
    sys.stdout.write(f"MCP server {SERVER_NAME} registered with Claude Code: {palazzo} runmcp\n")


def _unregister(claude: str) -> None:
    current = _registration(claude)
    if current is None or not current.runs_palazzo():
        sys.stdout.write(f"no MCP server {SERVER_NAME} of palazzo's registered with Claude Code\n")
        return
    _run(claude, "remove", SERVER_NAME, "--scope", "user")
    sys.stdout.write(f"MCP server {SERVER_NAME} removed from Claude Code\n")


def _run(claude: str, *args: str) -> None:
    answer = _claude(claude, *args)
    if answer.returncode != 0:
        said = (answer.stderr or answer.stdout).strip()
        raise SetupError(f"`claude mcp {' '.join(args)}` failed (exit {answer.returncode}): {said}")
