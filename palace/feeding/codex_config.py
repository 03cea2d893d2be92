"""palazzo in Codex CLI's config dir: its MCP server in config.toml, its hooks in hooks.json (stdlib + tomlkit).

To be written (issue 39):
register [mcp_servers.palazzo] (required) and SessionStart/Stop/SessionEnd hooks; remove them exactly.
"""

from __future__ import annotations

import os
from pathlib import Path


class ConfigError(Exception):
    """The harness's config cannot be read or written safely (left untouched)."""


def default_config_dir(environ: dict[str, str] | None = None) -> Path:
    """Codex CLI's home: $CODEX_HOME, else ~/.codex."""
    env = os.environ if environ is None else environ
    root = env.get("CODEX_HOME")
    return Path(root).expanduser() if root else Path.home() / ".codex"


def install(config_dir: Path, palazzo: Path) -> list[str]:
    """Register palazzo's MCP server and session hooks; returns what changed (empty when already installed)."""
    raise ConfigError("not written yet")


def uninstall(config_dir: Path) -> list[str]:
    """Remove exactly what palazzo added; returns what changed."""
    raise ConfigError("not written yet")
