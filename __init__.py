"""The installed package's entry point: puts the package's own folder first on the path, then runs main.

The modules import each other by their plain names (``import config``), as they do in a clone run
with ``python main.py``. Installed, they live in this one private folder, ``docsearch_mcp/`` in
site-packages, and only our own entry points put that folder on their process's path: the console
scripts (``docsearch-mcp``, ``docsearch``) through ``run``, and ``python -m docsearch_mcp`` (or
``-m docsearch_mcp.<module>``) when this package is imported on the way. Nothing generic sits at the
top of site-packages, and another distribution's ``config`` or ``search`` there can neither shadow
ours nor be shadowed for anyone else.
"""

# No "from __future__ import ...": under `python -m` it would be imported from the working
# directory before the path is mended below.
import os
import sys

_FOLDER = os.path.dirname(os.path.abspath(__file__))


def _own_modules_first() -> None:
    """Put this folder first on the path, and forget modules of our names imported from elsewhere."""
    own = {name[:-3] for name in os.listdir(_FOLDER) if name.endswith(".py") and not name.startswith("__")}
    for name in own & set(sys.modules):  # imported before us (a .pth file, say) from somewhere else
        if os.path.dirname(os.path.abspath(getattr(sys.modules[name], "__file__", None) or "")) != _FOLDER:
            del sys.modules[name]
    if sys.path[:1] != [_FOLDER]:
        sys.path.insert(0, _FOLDER)


def _leave_the_working_directory_out() -> None:
    """``python -m`` puts the working directory first on the path (unless -P): any module there,
    ``config.py`` or ``json.py``, would be imported in place of ours or the standard library's. The
    working directory is where an MCP client starts us: an untrusted project."""
    if sys.path and not getattr(sys.flags, "safe_path", False) and sys.path[0] in ("", ".", os.getcwd()):
        del sys.path[0]


def run() -> int:
    """The console scripts' entry point (and ``python -m docsearch_mcp``'s)."""
    _leave_the_working_directory_out()
    _own_modules_first()
    import main

    return main.main()


if sys.argv[:1] == ["-m"]:  # runpy imports this package to find the module it runs (`python -m docsearch_mcp...`)
    _leave_the_working_directory_out()
    _own_modules_first()
