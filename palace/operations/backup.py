"""Backup and restore.

What a backup holds: a consistent snapshot of the database (SQLite's online backup API, or pg_dump on
PostgreSQL), which carries the journal (every memory's text and fields), the API tokens, the users and the
usage events; a copy of the JSONL journal mirror; and a manifest. It does not copy the vector store: the
embedded shard is held open by the running server and Qdrant Edge offers no way to snapshot it from another
process, and the store is derived data anyway. Restore loads the database into an empty data dir and
rebuilds the store from the journal (re-embedding every memory, as `rebuild` does).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection, connections

from palace import __version__
from palace.errors import InvalidInput
from palace.schema.timefmt import format_rfc3339, utc_now

FORMAT = "palazzo-backup/1"
MANIFEST = "manifest.json"
SQLITE_FILE = "palazzo.sqlite3"
PG_FILE = "database.pgdump"
WAL_FILE = "wal.jsonl"


def _engine() -> str:
    return str(connection.vendor)


def _pg_environment() -> dict[str, str]:
    """libpq variables for pg_dump/pg_restore, so the password never appears on a command line."""
    parts = urlsplit(settings.PALAZZO.database_url or "")
    env = dict(os.environ)
    env.update(
        PGHOST=parts.hostname or "localhost",
        PGPORT=str(parts.port or 5432),
        PGUSER=parts.username or "",
        PGPASSWORD=parts.password or "",
        PGDATABASE=parts.path.lstrip("/"),
    )
    return env


def _run(argv: list[str]) -> None:
    try:
        subprocess.run(argv, env=_pg_environment(), check=True, capture_output=True, text=True, timeout=3600)
    except FileNotFoundError:
        raise InvalidInput.single("database", f"{argv[0]} is not installed (needed on PostgreSQL)") from None
    except subprocess.CalledProcessError as exc:
        raise InvalidInput.single("database", f"{argv[0]} failed: {exc.stderr.strip()[:500]}") from None


def create_backup(*, out: Path) -> dict[str, Any]:
    """Snapshot the database and the journal mirror into a new directory `out` (refuses an existing path)."""
    out = out.expanduser()
    if out.exists():
        raise InvalidInput.single("out", f"{out} already exists; a backup never overwrites: choose a new path")
    engine = _engine()
    if engine not in ("sqlite", "postgresql"):
        raise InvalidInput.single("database", f"backups support SQLite and PostgreSQL, not {engine}")
    partial = out.with_name(out.name + ".partial")
    if partial.exists() or partial.is_symlink():
        # Never deleted here: it may be another backup in progress, or something the operator keeps there.
        raise InvalidInput.single(
            "out",
            f"{partial} already exists (a backup to {out} is running or was interrupted); "
            "remove it once no backup is running, or choose another path",
        )
    try:
        partial.mkdir(parents=True)
    except FileExistsError:
        raise InvalidInput.single("out", f"{partial} already exists: another backup to {out} just started") from None
    except OSError as exc:
        raise InvalidInput.single("out", f"cannot create {partial}: {exc.strerror or exc}") from None
    try:
        if engine == "sqlite":
            source = sqlite3.connect(str(settings.DATABASES["default"]["NAME"]), timeout=30)
            target = sqlite3.connect(str(partial / SQLITE_FILE))
            try:
                # One step: the whole copy happens under one read transaction, so it is consistent.
                source.backup(target)
            finally:
                target.close()
                source.close()
        else:
            _run(["pg_dump", "--format=custom", "--no-owner", "--file", str(partial / PG_FILE)])
        wal = settings.PALAZZO.wal_path
        if wal.is_file():
            shutil.copyfile(wal, partial / WAL_FILE)
        from palace.models import ApiToken, JournalEntry

        manifest = {
            "format": FORMAT,
            "created_at": format_rfc3339(utc_now()),
            "palazzo_version": __version__,
            "engine": engine,
            "database": SQLITE_FILE if engine == "sqlite" else PG_FILE,
            "collection": settings.PALAZZO.collection,
            "embedding_model": settings.PALAZZO.embed_model,
            "journal_entries": JournalEntry.objects.count(),
            "tokens": ApiToken.objects.count(),
            "store": "not copied: restore rebuilds it from the journal",
        }
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest | {"path": str(out)}


def _read_manifest(source: Path) -> dict[str, Any]:
    try:
        manifest: Any = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        raise InvalidInput.single("path", f"{source} is not a palazzo backup (no readable {MANIFEST})") from None
    if not isinstance(manifest, dict):
        raise InvalidInput.single("path", f"{source / MANIFEST} is not a JSON object")
    if manifest.get("format") != FORMAT:
        shown = manifest.get("format")
        raise InvalidInput.single("path", f"{source} has format {shown!r:.60}, expected {FORMAT}")
    if manifest.get("engine") not in ("sqlite", "postgresql"):
        raise InvalidInput.single("path", f"{source / MANIFEST} names no database engine (sqlite or postgresql)")
    database = source / (SQLITE_FILE if manifest["engine"] == "sqlite" else PG_FILE)
    if not database.is_file():
        raise InvalidInput.single("path", f"{source} holds no database file {database.name}")
    return manifest


def _database_is_empty() -> bool:
    if _engine() == "sqlite":
        name = Path(str(settings.DATABASES["default"]["NAME"]))
        if not name.exists() or name.stat().st_size == 0:
            return True
    return not connection.introspection.table_names()


def _copy_sqlite(backup: Path, target_path: Path) -> None:
    """Copy the backup's SQLite database into place; a file that is not a palazzo database is refused."""
    try:
        backup_db = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in backup_db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "palace_journalentry" not in tables:
                raise InvalidInput.single("path", f"{backup} holds no palazzo journal")
            target = sqlite3.connect(str(target_path))
            try:
                backup_db.backup(target)
            finally:
                target.close()
        finally:
            backup_db.close()
    except sqlite3.DatabaseError as exc:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target_path}{suffix}").unlink(missing_ok=True)
        raise InvalidInput.single("path", f"{backup} is not a readable SQLite database: {exc}") from None


def restore_backup(*, source: Path) -> dict[str, Any]:
    """Load a backup into an empty data dir (database without tables, no store), then rebuild the store."""
    from palace.writes import services

    source = source.expanduser()
    manifest = _read_manifest(source)
    engine = _engine()
    if manifest["engine"] != engine:
        raise InvalidInput.single(
            "path", f"the backup holds a {manifest['engine']} database but palazzo is configured for {engine}"
        )
    if not _database_is_empty():
        raise InvalidInput.single("database", "is not empty: restore only into a fresh data dir / empty database")
    shard = settings.PALAZZO.data_dir / "shards" / settings.PALAZZO.collection
    if not settings.PALAZZO.qdrant_url:
        from palace.engine import runtime

        held_exclusively = getattr(runtime.build_store(), "held_exclusively", None)
        if held_exclusively is not None:
            with held_exclusively():  # a running server on this data dir: refused as ingest refuses it
                pass
    if not settings.PALAZZO.qdrant_url and shard.exists() and any(shard.iterdir()):
        raise InvalidInput.single("data_dir", f"{shard} already holds a store: restore only into a fresh data dir")
    connections.close_all()
    if engine == "sqlite":
        target_path = Path(str(settings.DATABASES["default"]["NAME"]))
        target_path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target_path}{suffix}").unlink(missing_ok=True)
        _copy_sqlite(source / SQLITE_FILE, target_path)
    else:
        _run(
            [
                "pg_restore",
                "--no-owner",
                "--exit-on-error",
                "--dbname",
                _pg_environment()["PGDATABASE"],
                str(source / PG_FILE),
            ]
        )
    wal_copy = source / WAL_FILE
    if wal_copy.is_file() and not settings.PALAZZO.wal_path.exists():
        settings.PALAZZO.wal_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(wal_copy, settings.PALAZZO.wal_path)
    # A backup from an older palazzo gets this version's schema before the store is rebuilt from it.
    try:
        call_command("migrate", interactive=False, verbosity=0)
    except DatabaseError as exc:
        raise InvalidInput.single("path", f"the database of {source} cannot be brought up to date: {exc}") from None
    rebuilt = services.rebuild()
    return {"restored_from": str(source), "manifest": manifest, "rebuild": rebuilt}
