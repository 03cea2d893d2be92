"""Where the real transcript samples live (../shared/transcripts, read in place) and small file writers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SAMPLES = Path(
    os.environ.get("PALAZZO_TRANSCRIPT_SAMPLES") or Path(__file__).resolve().parents[3] / "shared/transcripts"
)


def sample(relative: str) -> Path:
    """A saved sample transcript; fails (not skips) when the shared samples are missing."""
    path = SAMPLES / relative
    assert path.exists(), f"transcript sample {path} is missing (set PALAZZO_TRANSCRIPT_SAMPLES)"
    return path


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """Write one JSON value per line (strings are written as they are, for malformed lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", errors="surrogatepass") as handle:
        for record in records:
            handle.write(record if isinstance(record, str) else json.dumps(record, ensure_ascii=False))
            handle.write("\n")
    return path
