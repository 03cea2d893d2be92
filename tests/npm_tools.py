"""The real npm tools some tests drive, installed (pinned) by scripts/install-*.sh on first use."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def npm_tool(script: str, what: str) -> Path:
    """The executable scripts/<script> installs and prints; the test is skipped when npm cannot install it."""
    try:
        done = subprocess.run(["bash", str(ROOT / "scripts" / script)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot install {what} from npm: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot install {what} from npm: {done.stderr.strip()[-300:]}")
    return Path(done.stdout.strip().splitlines()[-1])
