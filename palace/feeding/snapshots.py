"""Wake-up snapshots: the session-start context per project, prepared by the palace holder, read by hooks.

Standard library only. A SessionStart hook has 300 ms and must not load the model or open the shard
(another process holds it), so the process holding the palace writes, after its writes, one file per
project under `<data dir>/wake-up/` (and `_palace.json` for a project it does not know yet); the hook
reads one file. A hook that finds no file for its project leaves a `.want` file naming the project,
and the holder prepares it at its next poll.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

SNAPSHOT_DIR = "wake-up"
PALACE_WIDE = "_palace"
WANT_SUFFIX = ".want"


def snapshot_dir(data_dir: Path) -> Path:
    """Where the snapshots of a data dir live."""
    return data_dir / SNAPSHOT_DIR


def room_key(room: str | None) -> str:
    """The file stem of a project's snapshot."""
    if room is None:
        return PALACE_WIDE
    return hashlib.sha256(room.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def write(data_dir: Path, room: str | None, context: dict[str, Any]) -> None:
    """Replace a project's snapshot atomically."""
    directory = snapshot_dir(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{room_key(room)}.json"
    staged = directory / f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    staged.write_text(json.dumps(context | {"room": room, "written_at": time.time()}, ensure_ascii=False))
    os.replace(staged, target)
    (directory / f"{room_key(room)}{WANT_SUFFIX}").unlink(missing_ok=True)


def read(data_dir: Path, room: str) -> dict[str, Any] | None:
    """The project's snapshot, else the palace-wide one (asking the holder for the project's); None if neither."""
    directory = snapshot_dir(data_dir)
    for key in (room_key(room), PALACE_WIDE):
        try:
            snapshot = json.loads((directory / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            if key != PALACE_WIDE:
                want(data_dir, room)
            continue
        if isinstance(snapshot, dict):
            return snapshot
    return None


def want(data_dir: Path, room: str) -> None:
    """Ask the holder to prepare this project's snapshot."""
    with contextlib.suppress(OSError):
        directory = snapshot_dir(data_dir)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{room_key(room)}{WANT_SUFFIX}").write_text(room, encoding="utf-8")


def wanted(data_dir: Path) -> list[str]:
    """Projects hooks asked for."""
    rooms = []
    with contextlib.suppress(OSError):
        for entry in snapshot_dir(data_dir).glob(f"*{WANT_SUFFIX}"):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                rooms.append(entry.read_text(encoding="utf-8"))
    return rooms
