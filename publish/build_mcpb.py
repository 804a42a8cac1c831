"""Builds the Claude Desktop bundle (.mcpb): the manifest, the package's modules, a launcher, and
the run-time dependencies as they are installed beside the Python that runs this script.

    .venv/bin/python publish/build_mcpb.py [--out DIR]     writes DIR/docsearch-mcp-X.Y.Z.mcpb (DIR: dist/)

The bundle is of mcpb's ``python`` type: everything it runs is inside it (``server/lib``), so it
needs no network and no package installer when installed or started, only a ``python3`` of the
version it was built with. Some dependencies (pydantic-core, cryptography, rpds-py) are compiled,
so a bundle is for one platform and one Python minor version, those of the building interpreter;
its manifest says so (``compatibility``). Build it with the project's venv, where ``mcp`` is
installed; ``mcpb validate`` checks the manifest (``.ci/run`` does).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
URL = "https://github.com/docsearch-mcp/docsearch-mcp"
#: The tools the server serves (tests/test_publish.py checks them against a running bundle).
TOOLS = {
    "search": "Ranked full-text search: the best section of each matching file, with its line range",
    "get_document": "A file, one section by its heading, or a line range",
    "list_files": "The indexed files by path, with titles, sizes, dates and tags",
    "get_index_status": "Files indexed, scan progress, errors and skipped files",
    "refresh_index": "Re-read one file now, or rescan the folder",
}
#: Every entry gets this time, so that building the same files twice gives the same bytes.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def version() -> str:
    """models.VERSION, read without importing the package (as pyproject.toml reads it)."""
    tree = ast.parse((REPOSITORY / "models.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "VERSION" for target in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("models.py defines no VERSION")


def manifest(release: str) -> dict[str, Any]:
    """The bundle's manifest.json (mcpb manifest 0.3)."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {
        "manifest_version": "0.3",
        "name": "docsearch-mcp",
        "display_name": "docsearch",
        "version": release,
        "description": "Local full-text search over your notes, docs or source tree (SQLite FTS5)",
        "long_description": (
            "Indexes the files under one folder into SQLite FTS5 and lets Claude search them, read the "
            "best section of each hit, and list them. Text, Markdown and reST by default. The index "
            "stays on this machine (~/.local/share/docsearch/indexes); nothing is sent anywhere."
        ),
        "author": {"name": "the docsearch-mcp authors"},
        "repository": {"type": "git", "url": URL},
        "homepage": URL,
        "documentation": f"{URL}#readme",
        "support": f"{URL}/issues",
        "license": "MIT",
        "keywords": ["search", "full-text", "notes", "documents", "sqlite"],
        "server": {
            "type": "python",
            "entry_point": "server/launch.py",
            "mcp_config": {
                "command": "python3",
                "args": ["-I", "-S", "${__dirname}/server/launch.py", "--source", "${user_config.source_directory}"],
            },
        },
        "tools": [{"name": name, "description": description} for name, description in TOOLS.items()],
        "user_config": {
            "source_directory": {
                "type": "directory",
                "title": "Folder to search",
                "description": "The folder whose notes, docs or source files are indexed and searched",
                "required": True,
            }
        },
        "compatibility": {
            "platforms": ["linux"],
            "runtimes": {"python": f">={python},<{sys.version_info.major}.{sys.version_info.minor + 1}"},
        },
    }


def distributions(root: str) -> list[metadata.Distribution]:
    """``root`` and every distribution it requires, as installed beside this Python: requirements
    of extras nobody asked for are left out, and those not installed (another platform's) skipped."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str | None]] = set()
    todo: list[tuple[str, str | None]] = [(root, None)]
    while todo:
        name, extra = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if (key, extra) in seen:
            continue
        seen.add((key, extra))
        try:
            found[key] = found.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for requirement in found[key].requires or []:
            spec, _, marker = requirement.partition(";")
            wanted = EXTRA.search(marker)
            if (wanted.group(1) if wanted else None) != extra:
                continue
            match = REQUIREMENT.match(spec)
            if match:
                extras = [part.strip() for part in (match.group(2) or "").split(",") if part.strip()]
                todo += [(match.group(1), None)] + [(match.group(1), part) for part in extras]
    return sorted(found.values(), key=lambda dist: dist.metadata["Name"].lower())


def dependency_files(dist: metadata.Distribution) -> list[tuple[str, Path]]:
    """A distribution's installed files under site-packages (scripts elsewhere and bytecode left
    out), each as its path there and on disk."""
    if dist.files is None:
        raise SystemExit(f"{dist.metadata['Name']} lists no installed files (no RECORD): reinstall it with pip")
    return [
        (file.as_posix(), Path(dist.locate_file(file)))
        for file in dist.files
        if not file.as_posix().startswith("../") and "__pycache__" not in file.parts
    ]


def add(bundle: zipfile.ZipFile, name: str, data: bytes) -> None:
    """One compressed entry, readable by all, dated ZIP_TIME."""
    entry = zipfile.ZipInfo(name, ZIP_TIME)
    entry.external_attr = 0o644 << 16
    entry.compress_type = zipfile.ZIP_DEFLATED
    bundle.writestr(entry, data)


def build(out: Path) -> Path:
    """Writes the bundle into ``out``: its path."""
    release = version()
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"docsearch-mcp-{release}.mcpb"
    with zipfile.ZipFile(target, "w") as bundle:
        add(bundle, "manifest.json", (json.dumps(manifest(release), indent=2) + "\n").encode())
        add(bundle, "LICENSE", (REPOSITORY / "LICENSE").read_bytes())
        add(bundle, "server/launch.py", (Path(__file__).parent / "launch.py").read_bytes())
        for module in sorted(REPOSITORY.glob("*.py")):
            add(bundle, f"server/docsearch_mcp/{module.name}", module.read_bytes())
        for dist in distributions("mcp"):
            for name, path in dependency_files(dist):
                add(bundle, f"server/lib/{name}", path.read_bytes())
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPOSITORY / "dist", help="folder to write the bundle into (default: dist/)")
    print(build(parser.parse_args().out))


if __name__ == "__main__":
    main()
