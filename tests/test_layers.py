"""The import rules of `make lint` (import-linter, pyproject.toml): kept by the tree, broken by a forbidden import."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("palazzo_site", "mcpserver", "palace", "embeddings")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy_of_the_tree(destination: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # Run inside the copy: lint-imports puts its working directory first on the path, so it reads the copy.
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _add_import(module: Path, statement: str) -> None:
    source = module.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in source, module
    module.write_text(source.replace(marker, f"{marker}\n{statement}\n", 1))


def test_it_keeps_every_contract_on_the_tree_as_it_is(tmp_path: Path) -> None:
    result = _lint_imports(_copy_of_the_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "statement", "broken"),
    [
        ("embeddings/base.py", "import django  # noqa", "embeddings is free of Django and of the palace"),
        ("embeddings/prefixes.py", "from palace import errors  # noqa", "embeddings is free of Django"),
        ("palace/reads/selectors.py", "import mcpserver.server  # noqa", "The palace imports neither"),
        ("palace/operations/health.py", "import palazzo_site.environment  # noqa", "The palace imports neither"),
        ("palace/reads/selectors.py", "import qdrant_edge  # noqa", "Only palace.store talks to Qdrant"),
        ("mcpserver/tools.py", "from qdrant_client import models  # noqa", "Only palace.store talks to Qdrant"),
        ("mcpserver/schemas.py", "import palazzo_site.environment  # noqa", "Layers: the site, then the MCP"),
        ("palace/store/base.py", "from palace.writes import services  # noqa", "Inside the palace: entry points"),
        ("palace/engine/metrics.py", "from palace.reads import selectors  # noqa", "Inside the palace: entry points"),
        ("palace/writes/services.py", "from palace.routes import ingest  # noqa", "Inside the palace: entry points"),
        ("palace/reads/selectors.py", "from palace.writes import services  # noqa", "Inside the palace: entry points"),
        ("palace/governance/scope.py", "from palace.feeding import spool  # noqa", "Inside the palace: entry points"),
        ("mcpserver/models.py", "from mcpserver import server  # noqa", "No import cycles"),
    ],
)
def test_it_fails_when_a_forbidden_import_is_added(tmp_path: Path, module: str, statement: str, broken: str) -> None:
    tree = _copy_of_the_tree(tmp_path)
    _add_import(tree / module, statement)
    result = _lint_imports(tree)
    assert result.returncode != 0, result.stdout
    (name,) = [name for name in _contract_names() if name.startswith(broken)]
    report = " ".join(result.stdout.split())  # lint-imports wraps long contract names
    assert f"{name} BROKEN" in report, result.stdout


def _contract_names() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [contract["name"] for contract in config["tool"]["importlinter"]["contracts"]]
