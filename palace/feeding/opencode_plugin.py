"""palazzo in opencode's config dir: its MCP server in opencode.json, its plugin in plugins/ (stdlib only).

To be written (issue 39):
register mcp.palazzo and write the plugin (wake-up in the system prompt, feed on idle); remove them exactly.
"""

from __future__ import annotations

import os
from pathlib import Path


class ConfigError(Exception):
    """The harness's config cannot be read or written safely (left untouched)."""


def default_config_dir(environ: dict[str, str] | None = None) -> Path:
    """opencode's config dir: $XDG_CONFIG_HOME/opencode, else ~/.config/opencode."""
    env = os.environ if environ is None else environ
    root = env.get("XDG_CONFIG_HOME")
    return (Path(root).expanduser() if root else Path.home() / ".config") / "opencode"


def install(config_dir: Path, palazzo: Path) -> list[str]:
    """Register palazzo's MCP server and session hooks; returns what changed (empty when already installed)."""
    raise ConfigError("not written yet")


def uninstall(config_dir: Path) -> list[str]:
    """Remove exactly what palazzo added; returns what changed."""
    raise ConfigError("not written yet")
