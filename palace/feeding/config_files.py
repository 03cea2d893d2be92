"""What every `install-hooks` target shares (standard library only): replacing a harness's config file
atomically with its mode kept, and the Claude Code hook schema (event -> groups of handlers) that Codex
CLI and Gemini CLI use too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def replace_keeping_mode(path: Path, raw: bytes) -> None:
    """Write raw to path through a staged file and one rename (the harness never reads half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        staged.write_bytes(raw)
        if path.exists():
            os.chmod(staged, path.stat().st_mode & 0o777)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)


def without_handlers(groups: list[Any], is_ours: Callable[[Any], bool]) -> tuple[list[Any], int]:
    """An event's hook groups without palazzo's handlers (a group left empty goes too); how many were removed."""
    kept, removed = [], 0
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            handlers = [handler for handler in group["hooks"] if not is_ours(handler)]
            if len(handlers) < len(group["hooks"]):
                removed += len(group["hooks"]) - len(handlers)
                if not handlers:
                    continue  # the group held only palazzo's handler: palazzo added it
                group = group | {"hooks": handlers}
        kept.append(group)
    return kept, removed
