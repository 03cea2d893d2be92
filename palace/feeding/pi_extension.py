"""palazzo's extension in pi's agent dir: written in with this installation's palazzo command, removed exactly.

Standard library only (`palazzo install-hooks pi` runs without Django). The extension itself is
palace/feeding/pi/palazzo.ts; the installed copy is recognised by its first line, so an uninstall never
removes a file palazzo did not write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SOURCE = Path(__file__).with_name("pi") / "palazzo.ts"
INSTALLED_NAME = "palazzo.ts"
PLACEHOLDER = '"__PALAZZO_COMMAND__"'
MARKER = "palazzo inside pi"


class ExtensionError(Exception):
    """The agent dir cannot be written, or holds a palazzo.ts that is not palazzo's."""


def default_agent_dir(environ: dict[str, str] | None = None) -> Path:
    """pi's agent dir: $PI_CODING_AGENT_DIR, else ~/.pi/agent."""
    env = os.environ if environ is None else environ
    root = env.get("PI_CODING_AGENT_DIR")
    return Path(root).expanduser() if root else Path.home() / ".pi" / "agent"


def extension_path(agent_dir: Path) -> Path:
    """Where the installed extension lives: pi loads every *.ts in <agent dir>/extensions/."""
    return agent_dir / "extensions" / INSTALLED_NAME


def rendered(palazzo: Path) -> str:
    """The extension with this installation's palazzo command written in."""
    source = SOURCE.read_text(encoding="utf-8")
    return source.replace(PLACEHOLDER, json.dumps(str(palazzo)), 1)


def _is_ours(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8")[:300]
    except (OSError, UnicodeDecodeError):
        return False
    return MARKER in head


def install(agent_dir: Path, palazzo: Path) -> list[str]:
    """Write (or refresh) the extension; what changed, empty when it was already there as it is."""
    target = extension_path(agent_dir)
    text = rendered(palazzo)
    if target.exists():
        if not _is_ours(target):
            raise ExtensionError(f"{target} exists and is not palazzo's; move it away first")
        if target.read_text(encoding="utf-8") == text:
            return []
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{INSTALLED_NAME}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)  # pi never loads a half-written file
    return [str(target)]


def uninstall(agent_dir: Path) -> list[str]:
    """Remove the extension palazzo wrote, and nothing else."""
    target = extension_path(agent_dir)
    if not target.exists():
        return []
    if not _is_ours(target):
        raise ExtensionError(f"{target} is not palazzo's; left as it is")
    target.unlink()
    return [str(target)]
