"""The README's first screen, run as a new user would: the built wheel installed by the README's own `pipx
install` line into a private pipx home, then its other commands, from a directory outside the checkout, with a
private HOME, data dir (the XDG default) and Claude Code config.

Only the install source changes (the clone's path becomes the wheel just built) and the closing `claude`
(interactive) runs one prompt with `-p`, offline and logged out as in tests/palazzo_site/test_claude_code.py.
pip resolves the wheel's dependencies from a wheelhouse that `pip download` fills from the package index once
per set of requirements (kept under ~/.cache/palazzo-tests): the same files a user's pipx would fetch, without
fetching them again on every run; it skips byte-compiling them (PIP_COMPILE=0), which changes no behaviour.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.mcpserver.conftest import HOLDER_IDLE_SECONDS
from tests.palazzo_site.test_claude_code import claude_cli

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ("palace", "palazzo_site", "mcpserver", "embeddings", "pyproject.toml", "README.md")
WHEELHOUSES = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "palazzo-tests"
MEMORY = {"text": "The orrery's lunar gear has 59 teeth.", "wing": "projects", "room": "orrery", "hall": "facts"}


def first_screen_commands() -> list[str]:
    """The lines of README.md's first code block: what the first screen tells a new user to run."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme.partition("## Install on a laptop")[0]
    block = re.search(r"^```\w*\n(.*?)^```", first_screen, re.MULTILINE | re.DOTALL)
    assert block is not None, "the README's first screen has no code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def build_wheel(tmp_path: Path) -> Path:
    """palazzo's wheel, built (pip wheel, isolated) from a copy of what it packages: the checkout stays clean."""
    source = tmp_path / "source"
    for name in PACKAGED:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(origin, source / name)
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = out.glob("palazzo-*.whl")
    return wheel


def wheelhouse(wheel: Path) -> Path:
    """A directory holding every wheel the install resolves to (and pip, which pipx upgrades to), made once."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        requires = [line for line in archive.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")]
    key = hashlib.sha256("\n".join([sys.version, sys.platform, *requires]).encode()).hexdigest()[:16]
    house = WHEELHOUSES / f"wheelhouse-{key}"
    if not house.is_dir():
        filling = WHEELHOUSES / f"wheelhouse-{key}.{os.getpid()}"
        downloaded = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(filling), str(wheel), "pip"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if downloaded.returncode != 0:
            pytest.skip(f"the package index cannot be reached to fill the wheelhouse: {downloaded.stderr[-500:]}")
        (filling / wheel.name).unlink()  # this build's wheel, not a dependency
        filling.replace(house)
    return house


def user_environment(tmp_path: Path, house: Path) -> dict[str, str]:
    """A new user's environment: own HOME, nothing of palazzo's set, pipx and claude on PATH (no checkout venv)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "pipx").symlink_to(Path(sys.executable).with_name("pipx"))
    (tools / "claude").symlink_to(claude_cli())
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PALAZZO_", "QDRANT_", "PIP_", "PIPX_", "XDG_", "CLAUDE_", "ANTHROPIC_"))
        and key not in ("DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONPATH", "DATABASE_URL", "FASTEMBED_CACHE_DIR")
    }
    env.update(
        HOME=str(tmp_path / "home"),
        PATH=os.pathsep.join(
            [str(tmp_path / "home" / ".local" / "bin"), str(tools), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(house),
        # No byte-compiling at install (half the install's time here); Python compiles each module on first import.
        PIP_COMPILE="0",
        NO_COLOR="1",
        # The holder the commands start leaves soon after the last of them, as in every test.
        PALAZZO_HOLDER_IDLE_SECONDS=HOLDER_IDLE_SECONDS,
    )
    (tmp_path / "home").mkdir()
    return env


def test_it_runs_the_readmes_first_screen_from_the_built_wheel(tmp_path: Path) -> None:
    commands = first_screen_commands()
    assert len(commands) == 3, commands
    install, setup, session = commands
    assert install.startswith("pipx install "), install
    assert session == "claude"
    wheel = build_wheel(tmp_path)
    env = user_environment(tmp_path, wheelhouse(wheel))
    elsewhere = tmp_path / "elsewhere" / "workshop"  # a project directory (room), outside the checkout
    elsewhere.mkdir(parents=True)

    def run(line: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-c", line], cwd=elsewhere, env=env, input=stdin, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{line}: {done.stderr}"
        return done

    run(install.replace(install.split()[-1], str(wheel)))
    palazzo = Path(run("command -v palazzo").stdout.strip())
    assert palazzo.parent == tmp_path / "home" / ".local" / "bin", palazzo
    assert run("palazzo --version").stdout.startswith("palazzo ")

    assert "registered with Claude Code" in run(setup).stdout
    # Claude Code's health check starts `palazzo runmcp` and is answered: the installed server runs.
    mcp = run("claude mcp get palazzo").stdout
    assert f"Command: {palazzo.resolve()}" in mcp and "✔ Connected" in mcp, mcp
    settings = json.loads((tmp_path / "home" / ".claude" / "settings.json").read_text())
    assert "palazzo" in json.dumps(settings["hooks"]["SessionStart"])
    session_done = subprocess.run(
        ["bash", "-c", f"{session} -p 'What do we know about the orrery?'"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in session_done.stderr, session_done.stderr

    # The palace is under the user's data dir (XDG), and the model shipped with the install embeds a memory.
    run("palazzo ingest", stdin=json.dumps({**MEMORY, "category": "technical"}) + "\n")
    status = json.loads(run("palazzo status --json").stdout)
    assert status["rooms"].get("orrery") == 1, status  # the session feeds room workshop meanwhile
    data_dir = tmp_path / "home" / ".local" / "share" / "palazzo"
    model = data_dir / "models" / "bge-small-en-v1.5-int8" / "model_quantized.onnx"
    assert model.resolve().is_relative_to(tmp_path / "home" / ".local"), model.resolve()  # pipx's venv
    assert not (tmp_path / "home" / ".palazzo").exists()
    # The admin's chart ships in the wheel.
    chart = next((tmp_path / "home" / ".local").glob("**/palace/vendor/chart.js/chart.umd.min.js"))
    assert chart.read_bytes().startswith(b"/*!\n * Chart.js v4.6.1")
