"""Checks a built wheel's file list and metadata: one package, docsearch_mcp/, holding every module of
the repository's top level and nothing else; no top-level module that could clash in site-packages;
the licence file shipped and named, and the project's links.

    python .ci/wheel_contents.py dist/docsearch_mcp-X.Y.Z-py3-none-any.whl
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def main(wheel: str) -> None:
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"docsearch_mcp"}, f"top-level entries besides the package: {sorted(tops)}"
    shipped = {name.split("/", 1)[1] for name in names if name.startswith("docsearch_mcp/")}
    expected = {path.name for path in REPOSITORY.glob("*.py")}
    assert shipped == expected, f"shipped {sorted(shipped ^ expected)} differently from the repository's modules"
    (info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
    assert archive.read(f"{info}/licenses/LICENSE") == (REPOSITORY / "LICENSE").read_bytes(), "LICENSE not shipped as it is"
    metadata = archive.read(f"{info}/METADATA").decode()
    for line in ("License-Expression: MIT", "License-File: LICENSE", "Project-URL: Repository, https://github.com/docsearch-mcp/docsearch-mcp"):
        assert line in metadata.splitlines(), f"METADATA lacks {line!r}"
    print(f"{Path(wheel).name}: docsearch_mcp/ with {len(shipped)} modules, nothing else at the top; MIT, LICENSE shipped")


if __name__ == "__main__":
    main(sys.argv[1])
