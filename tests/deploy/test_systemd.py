"""The systemd unit in deploy/: verified by systemd-analyze and hardened as docs/operations.md promises."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "palazzo.service"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def _service_section() -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_it_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None or not SYSTEM_UNITS.is_dir():
        pytest.skip("systemd-analyze is not installed (scripts/ci-services.sh installs the systemd package)")
    # A root holding the unit, the files it names and systemd's own units, so verify checks our unit only.
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, tmp_path / "etc/systemd/system/palazzo.service")
    python = tmp_path / "opt/palazzo/.venv/bin/python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (tmp_path / "etc/palazzo").mkdir()
    (tmp_path / "etc/palazzo/palazzo.env").write_text("")
    shutil.copytree(SYSTEM_UNITS, tmp_path / "usr/lib/systemd/system", symlinks=True)
    result = subprocess.run(
        [analyze, "verify", f"--root={tmp_path}", "/etc/systemd/system/palazzo.service"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # verify only warns (exit 0) about unknown keys: any output at all is a finding.
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), result.stderr


def test_it_runs_hardened_as_the_palazzo_user() -> None:
    service = _service_section()
    assert service["User"] == ["palazzo"]
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "RestrictNamespaces": "yes",
        "ProtectHome": "yes",
    }.items():
        assert service[key] == [value], key
    assert service["RestrictAddressFamilies"] == ["AF_INET AF_INET6 AF_UNIX"]
    assert service["ReadWritePaths"] == ["/var/lib/palazzo"]
    assert "gunicorn" in service["ExecStart"][0]


def test_it_documents_every_environment_variable_in_the_env_template() -> None:
    parsed = (ROOT / "palazzo_site" / "environment.py").read_text()
    template = (ROOT / "deploy" / "palazzo.env.example").read_text()
    names = set(re.findall(r'(?:get|vocabulary_value)\("([A-Z_]+)"', parsed))
    assert names, "no variables found in environment.py"
    missing = sorted(name for name in names if name not in template)
    assert not missing, f"deploy/palazzo.env.example does not document {missing}"
