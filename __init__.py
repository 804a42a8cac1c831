"""The installed package's entry point: puts the package's own folder first on the path, then runs main.

The modules import each other by their plain names (``import config``), as they do in a clone run
with ``python main.py``. Installed, they live in this one private folder, ``docsearch_mcp/`` in
site-packages, and only the console scripts (``docsearch-mcp``, ``docsearch``) put that folder on
their own process's path: nothing generic sits at the top of site-packages, and another
distribution's ``config`` or ``search`` there can neither shadow ours nor be shadowed for anyone else.
"""

from __future__ import annotations

import os
import sys


def run() -> int:
    """The console scripts' entry point."""
    folder = os.path.dirname(os.path.abspath(__file__))
    own = {name[:-3] for name in os.listdir(folder) if name.endswith(".py") and name != "__init__.py"}
    for name in own & set(sys.modules):  # imported before us (a .pth file, say) from somewhere else
        if os.path.dirname(os.path.abspath(getattr(sys.modules[name], "__file__", None) or "")) != folder:
            del sys.modules[name]
    sys.path.insert(0, folder)
    import main

    return main.main()
