"""What is published besides the wheel: the MCP Registry's server.json names this release on PyPI,
and the Claude Desktop bundle (.mcpb) built by publish/build_mcpb.py holds a valid manifest and,
unpacked, runs its server over stdio on nothing but the standard library and what it holds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from loader import PROCESS_LOADING_MIN_FILES
from models import VERSION
from tests.conftest import PROJECT_DIR, write
from tests.mcp_client import call, wait_for

BUILD_MCPB = PROJECT_DIR / "publish" / "build_mcpb.py"


def test_server_json_names_this_release_of_the_pypi_package_run_with_source() -> None:
    server = json.loads((PROJECT_DIR / "server.json").read_text(encoding="utf-8"))
    project = re.search(r'^name = "([^"]+)"', (PROJECT_DIR / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    assert project is not None
    (package,) = server["packages"]
    assert (package["registryType"], package["identifier"], package["transport"]) == ("pypi", project.group(1), {"type": "stdio"})
    assert server["version"] == package["version"] == VERSION
    assert [(argument["type"], argument["name"]) for argument in package["packageArguments"]] == [("named", "--source")]
    assert len(server["description"]) <= 100  # the registry's limit
    # The registry checks that the PyPI package is this server's through a line of its README.
    assert f"mcp-name: {server['name']}" in (PROJECT_DIR / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle, built as a maintainer builds it, then unpacked: the unpacked folder."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, str(BUILD_MCPB), "--out", str(out)], capture_output=True, text=True, check=True)
    assert Path(built.stdout.strip()) == out / f"docsearch-mcp-{VERSION}.mcpb"
    unpacked = tmp_path_factory.mktemp("bundle")
    with zipfile.ZipFile(built.stdout.strip()) as archive:
        archive.extractall(unpacked)
    return unpacked


def test_the_bundle_holds_the_package_its_launcher_and_its_dependencies(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["version"] == VERSION and manifest["server"]["type"] == "python"
    assert (bundle / manifest["server"]["entry_point"]).is_file()
    assert sorted(path.name for path in (bundle / "server" / "docsearch_mcp").iterdir()) == sorted(path.name for path in PROJECT_DIR.glob("*.py"))
    assert (bundle / "server" / "lib" / "mcp").is_dir() and (bundle / "server" / "lib" / "typing_extensions.py").is_file()
    assert (bundle / "LICENSE").read_bytes() == (PROJECT_DIR / "LICENSE").read_bytes()


@pytest.mark.skipif(shutil.which("mcpb") is None, reason="mcpb is not installed (npm install -g @anthropic-ai/mcpb)")
def test_mcpb_validates_the_bundle_s_manifest(bundle: Path) -> None:
    checked = subprocess.run(["mcpb", "validate", str(bundle / "manifest.json")], capture_output=True, text=True)
    assert checked.returncode == 0 and "validation passes" in checked.stdout, checked.stdout + checked.stderr


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python of this version with nothing installed (a venv without pip): the user's python3."""
    folder = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    assert subprocess.run([python, "-I", "-c", "import typing_extensions"], capture_output=True).returncode != 0
    return python


@pytest.mark.anyio
async def test_the_unpacked_bundle_answers_initialize_and_search_over_stdio(
    bundle: Path, bare_python: Path, source: Path, tmp_path: Path
) -> None:
    """Started as Claude Desktop starts it: the manifest's command line, its placeholders filled in,
    a Python with nothing installed standing for ``python3``: everything but the standard library
    comes from the bundle. More files than loader.PROCESS_LOADING_MIN_FILES make the loader
    processes (isolated interpreters of their own) run from it too."""
    for number in range(PROCESS_LOADING_MIN_FILES + 50):
        write(source, f"bulk/n{number}.md", f"# Note {number}\n\nfiller text {number}\n")
    write(source, "network/firewall.md", "# Firewall\n\nOpen port 22: `ufw allow 22`.\n")
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    config = manifest["server"]["mcp_config"]
    assert config["command"] == "python3" and "-S" in config["args"]
    filled = {"${__dirname}": str(bundle), "${user_config.source_directory}": str(source)}
    args = [re.sub(r"\$\{[^}]+\}", lambda found: filled[found.group(0)], arg) for arg in config["args"]]
    data_home = tmp_path / "data"
    environment = {"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(data_home), "PATH": os.environ["PATH"]}
    params = StdioServerParameters(command=str(bare_python), args=args, env=environment, cwd=str(tmp_path))
    log = tmp_path / "server.log"
    with open(log, "w", encoding="utf-8") as errors:
        async with stdio_client(params, errlog=errors) as (read, write_stream), ClientSession(read, write_stream) as session:
            started = await session.initialize()
            assert (started.server_info.name, started.server_info.version) == ("docsearch", VERSION)
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert tools == {tool["name"] for tool in manifest["tools"]}

            async def indexed() -> bool:
                status = await call(session, "get_index_status")
                return status["state"] == "idle" and status["indexed_files"] == PROCESS_LOADING_MIN_FILES + 51

            await wait_for(indexed, 120)
            status = await call(session, "get_index_status")
            assert Path(status["index_path"]).is_relative_to(data_home / "docsearch" / "indexes"), status["index_path"]
            hit = (await call(session, "search", {"query": "how do I open a port in the firewall?"}))["results"][0]
            assert hit["path"] == "network/firewall.md", hit
    assert "loader process" not in log.read_text(encoding="utf-8"), log.read_text(encoding="utf-8")


def test_the_design_notes_name_every_module_with_its_job() -> None:
    # A newcomer finds a module's job in docs/design.md's table: none may be missing, none stale.
    table = re.findall(r"^\| `([\w.]+\.py)` \|", (PROJECT_DIR / "docs" / "design.md").read_text(), re.M)
    modules = sorted(path.name for path in PROJECT_DIR.glob("*.py"))
    assert sorted(table) == modules
