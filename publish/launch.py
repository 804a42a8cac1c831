"""The .mcpb bundle's entry point: puts the bundle's dependencies (lib/) and package on the path, then
runs the installed command's launcher.

Claude Desktop runs it as ``python3 -I -S server/launch.py --source DIR``: isolated (no current
folder, PYTHONPATH or user site-packages) and without site-packages, so the server runs on the
standard library and what the bundle holds, whatever else that Python has installed.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Runs the server with the bundle's folders first on the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.join(here, "lib")]
    import docsearch_mcp

    return docsearch_mcp.run()


if __name__ == "__main__":
    sys.exit(main())
