"""`python -m docsearch_mcp`: the command line, as the console scripts run it (``__init__.run``)."""

import sys

if __package__:  # python -m docsearch_mcp: the package was imported first and set the path
    from docsearch_mcp import run
else:  # python path/to/clone: the clone's folder is first on the path
    from main import main as run

sys.exit(run())
