"""`palazzo feed` with no paths: every harness's sessions where that harness keeps them, as the caller's
environment names those places (the palace's holder, started earlier by another shell, may have another)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.mcpserver.conftest import migrate, server_env
from tests.palace.sessions import claude_session, write_session
from tests.palazzo_site.test_hook import PALAZZO, TURNS
from tests.transcripts.helpers import sample


def machine_with_every_harness(home: Path) -> dict[str, str]:
    """A home with one session of each harness in its default place; the environment that names them."""
    write_session(
        home / ".claude" / "projects" / "-work-orrery" / "s1.jsonl", claude_session("s1", "/work/orrery", TURNS)
    )
    pi_sessions = home / "pi-agent" / "sessions" / "--work-orrery--"
    pi_sessions.mkdir(parents=True)
    shutil.copy(sample("pi/jazzyalex-agent-sessions/small.jsonl"), pi_sessions / "small.jsonl")
    rollouts = home / "codex-home" / "sessions" / "2026" / "02" / "23"
    rollouts.mkdir(parents=True)
    for rollout in sorted(sample("codex/madshn-localpush").glob("rollout-*.jsonl"))[:1]:
        shutil.copy(rollout, rollouts / rollout.name)
    storage = sample("opencode/jazzyalex-agent-sessions/storage_v2")
    shutil.copytree(storage, home / "xdg-data" / "opencode" / "storage")
    gemini = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "gemini" / "cli-0.61.0" / "tmp"
    shutil.copytree(gemini, home / "gemini-home" / ".gemini" / "tmp")
    return {
        "HOME": str(home),
        "PI_CODING_AGENT_DIR": str(home / "pi-agent"),
        "CODEX_HOME": str(home / "codex-home"),
        "XDG_DATA_HOME": str(home / "xdg-data"),
        "GEMINI_CLI_HOME": str(home / "gemini-home"),
    }


LOCATION_VARIABLES = (
    "CLAUDE_CONFIG_DIR",
    "PI_CODING_AGENT_DIR",
    "PI_CODING_AGENT_SESSION_DIR",
    "CODEX_HOME",
    "XDG_DATA_HOME",
    "GEMINI_CLI_HOME",
)


def shell(data_dir: Path, **places: str) -> dict[str, str]:
    """A shell's environment naming only the given harness places (none inherited from the test run's)."""
    env = server_env(data_dir)
    for name in LOCATION_VARIABLES:
        env.pop(name, None)
    return env | places


def fed_harnesses(env: dict[str, str], *args: str) -> set[str]:
    """The harnesses `palazzo feed --dry-run --json` reports sessions of."""
    done = subprocess.run(
        [str(PALAZZO), "feed", "--dry-run", "--json", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert all(report.get("status") != "failed" for report in reports), reports
    return {report["harness"] for report in reports if "harness" in report}


def test_it_feeds_every_harness_s_sessions_from_where_the_caller_s_environment_keeps_them(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    migrate(data_dir)
    # The holder is started from a shell whose home has nothing in it; the feed comes from another shell.
    bare = shell(data_dir, HOME=str(tmp_path / "bare"))
    started = subprocess.run([str(PALAZZO), "status"], env=bare, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    env = shell(data_dir, **machine_with_every_harness(tmp_path / "home"))
    assert fed_harnesses(env) == {"claude-code", "pi", "codex", "opencode", "gemini"}
    assert fed_harnesses(env, "--harness", "codex") == {"codex"}
    assert fed_harnesses(bare) == set()
