"""Wake-up snapshots: the session-start context per project, prepared by the palace holder, read by hooks.

Standard library only. A SessionStart hook has 300 ms and must not load the model or open the shard
(another process holds it), so the process holding the palace writes, after its writes, one file per
project under `<data dir>/wake-up/` (and `_palace.json` for a project it does not know yet); the hook
reads one file. A hook that finds no file for its project leaves a `.want` file naming the project,
and the holder prepares it at its next poll.

When several hosts share the palace (PostgreSQL and a Qdrant server: palace.engine.locks.shared_palace)
the snapshots live in the database instead (palace.models.WakeUpSnapshot, written by
palace.feeding.wakeup), so a hook on any host reads what any host prepared: `read_shared` is the hook's
one query, with psycopg and no Django.
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
SHARED_TABLE = "palace_wakeupsnapshot"  # palace.models.WakeUpSnapshot
# Django engines whose connection.vendor is "postgresql" (the database half of locks.shared_palace).
POSTGRES_ENGINES = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")
# A SessionStart hook has 300 ms: a database that does not answer in time leaves the session without context.
SHARED_CONNECT_SECONDS = 1


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


def shared_database(database_url: str | None, qdrant_url: str | None) -> dict[str, Any] | None:
    """psycopg's connection arguments when snapshots live in the database (PostgreSQL and a Qdrant server).

    What palace.engine.locks.shared_palace decides inside Django, from the environment alone (for the hook).
    """
    if not database_url or not qdrant_url:
        return None
    import dj_database_url  # urllib only

    try:
        config = dj_database_url.parse(database_url)
    except (ValueError, dj_database_url.UnknownSchemeError):
        return None
    if config.get("ENGINE") not in POSTGRES_ENGINES:
        return None
    arguments: dict[str, Any] = {
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "dbname": config.get("NAME") or None,
    }
    options = {key: value for key, value in (config.get("OPTIONS") or {}).items() if isinstance(value, (str, int))}
    return {key: value for key, value in (arguments | options).items() if value is not None}


def read_shared(database: dict[str, Any], room: str) -> dict[str, Any] | None:
    """`read` from the database: the project's snapshot, else the palace-wide one (asking for the project's)."""
    import psycopg  # only a hook of a shared palace pays for it

    keys = [room_key(room), PALACE_WIDE]
    try:
        with psycopg.connect(**database, connect_timeout=SHARED_CONNECT_SECONDS, autocommit=True) as connection:
            rows = dict(
                connection.execute(
                    f"SELECT key, payload FROM {SHARED_TABLE} WHERE key = ANY(%s) AND payload IS NOT NULL", [keys]
                ).fetchall()
            )
            if keys[0] not in rows:  # the next refresh (any host's) prepares it
                connection.execute(
                    f"INSERT INTO {SHARED_TABLE} (key, room, payload, journal_mark, wanted, written_at) "
                    "VALUES (%s, %s, NULL, 0, true, NULL) ON CONFLICT (key) DO UPDATE SET wanted = true",
                    [keys[0], room],
                )
    except psycopg.Error:
        return None
    for key in keys:
        snapshot = rows.get(key)
        if isinstance(snapshot, dict):
            return snapshot
    return None
