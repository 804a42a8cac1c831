"""Every way into the package runs our modules and the standard library's, never a module planted
in the working directory: ``python -m docsearch_mcp``, ``-m docsearch_mcp.<module>``, and the
console scripts' launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models import VERSION
from tests.conftest import PROJECT_DIR

#: Names an attacker plants in the folder an MCP client starts the server in: ours, and the
#: standard library's that our modules import after start.
PLANTED = ("config", "database", "search", "main", "models", "json", "hashlib", "sqlite3", "pickle", "zlib", "__future__", "argparse", "heapq")


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A folder on PYTHONPATH holding the package as installed: docsearch_mcp/ with our modules."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "docsearch_mcp").symlink_to(PROJECT_DIR, target_is_directory=True)
    return site


@pytest.fixture
def hostile_cwd(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    for name in PLANTED:
        (folder / f"{name}.py").write_text(f"open({str(tmp_path / 'PWNED')!r}, 'a').write('{name} ')\n")
    return folder


def run_module(module: str, site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("module", ["docsearch_mcp", "docsearch_mcp.main"])
def test_python_dash_m_runs_the_command_line_without_the_working_directorys_modules(
    module: str, installed: Path, hostile_cwd: Path
) -> None:
    done = run_module(module, installed, hostile_cwd, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"docsearch-mcp {VERSION}"
    assert not (hostile_cwd.parent / "PWNED").exists(), (hostile_cwd.parent / "PWNED").read_text()


def test_no_module_of_ours_run_with_dash_m_imports_the_working_directorys_modules(installed: Path, hostile_cwd: Path) -> None:
    modules = sorted(path.stem for path in PROJECT_DIR.glob("*.py") if not path.stem.startswith("__") and path.stem != "main")
    assert {"config", "database", "search", "tools"} <= set(modules)
    for module in modules:
        done = run_module(f"docsearch_mcp.{module}", installed, hostile_cwd)
        assert done.returncode == 0, f"{module}: {done.stderr}"
    assert not (hostile_cwd.parent / "PWNED").exists(), (hostile_cwd.parent / "PWNED").read_text()


def test_a_clone_run_as_a_folder_runs_the_command_line(hostile_cwd: Path) -> None:
    done = subprocess.run([sys.executable, str(PROJECT_DIR), "--version"], cwd=hostile_cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"docsearch-mcp {VERSION}"
    assert not (hostile_cwd.parent / "PWNED").exists()
