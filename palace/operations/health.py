"""Health of the parts a palazzo server depends on: the database, the store and the embedder."""

from __future__ import annotations

from typing import Any

from django.db import connection

from palace import __version__
from palace.store.base import MemoryFilter


def _database() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return {"status": "error", "error": str(exc)[:300]}
    return {"status": "ok", "engine": connection.vendor}


def _palace() -> tuple[dict[str, Any], dict[str, Any]]:
    from palace.engine import runtime

    try:
        embedder = runtime.get_embedder()
    except Exception as exc:
        failed = {"status": "error", "error": str(exc)[:300]}
        return failed, {"status": "unknown", "error": "the embedder is not available"}
    embedder_status = {"status": "ok", "model": embedder.model_name, "dimension": embedder.dimension}
    try:
        palace = runtime.get_palace()
        total = palace.store.count(memory_filter=MemoryFilter())
    except Exception as exc:
        return embedder_status, {"status": "error", "error": str(exc)[:300]}
    return embedder_status, {"status": "ok", "kind": type(palace.store).__name__, "memories": total}


def health() -> dict[str, Any]:
    """Status of each part and overall ('ok' only when every part is)."""
    database = _database()
    embedder, store = _palace()
    parts = {"database": database, "store": store, "embedder": embedder}
    feeding = _feeding()
    if database["status"] == "ok":
        try:
            from palace.engine import journal as palace_journal

            # Counts only (the route is open to all); failed entries do not make the server unhealthy
            # (a refused write is one), they are shown so an operator can look at them in the admin.
            counts = palace_journal.state()
            journal = {"status": "ok", "pending": counts["pending"], "failed": counts["failed"]}
        except Exception as exc:
            journal = {"status": "error", "error": str(exc)[:300]}
        return {"status": _overall(parts), "version": __version__, **parts, "journal": journal, "feeding": feeding}
    return {"status": _overall(parts), "version": __version__, **parts, "feeding": feeding}


def _overall(parts: dict[str, dict[str, Any]]) -> str:
    return "ok" if all(part["status"] == "ok" for part in parts.values()) else "degraded"


def _feeding() -> dict[str, Any]:
    from palace.feeding.status import feeding_status

    try:
        return feeding_status()
    except Exception as exc:  # health must answer even when the database does not
        return {"error": str(exc)[:300]}
