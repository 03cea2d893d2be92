"""palazzo in Gemini CLI's settings.json: its MCP server and its hooks (stdlib only).

To be written (issue 39):
register mcpServers.palazzo and SessionStart/AfterAgent/SessionEnd hooks; remove them exactly.
"""

from __future__ import annotations

import os
from pathlib import Path


class ConfigError(Exception):
    """The harness's config cannot be read or written safely (left untouched)."""


def default_config_dir(environ: dict[str, str] | None = None) -> Path:
    """Gemini CLI's user dir: $GEMINI_CLI_HOME/.gemini, else ~/.gemini."""
    env = os.environ if environ is None else environ
    root = env.get("GEMINI_CLI_HOME")
    return (Path(root).expanduser() if root else Path.home()) / ".gemini"


def install(config_dir: Path, palazzo: Path) -> list[str]:
    """Register palazzo's MCP server and session hooks; returns what changed (empty when already installed)."""
    raise ConfigError("not written yet")


def uninstall(config_dir: Path) -> list[str]:
    """Remove exactly what palazzo added; returns what changed."""
    raise ConfigError("not written yet")
