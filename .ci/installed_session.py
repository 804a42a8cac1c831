"""An MCP session through an installed console script (``docsearch-mcp`` or ``docsearch``), as a client configured with it runs
it: stdio, then Streamable HTTP. Run by .ci/run after installing the wheel in a fresh venv.

    python .ci/installed_session.py /path/to/venv/bin/docsearch-mcp

Checks what only an install shows: the console script starts, the loader processes import the
modules from site-packages, the version is the package's, and the index goes to the user's data
folder (never into site-packages)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

FILES = 300  # more than loader.PROCESS_LOADING_MIN_FILES: the loader processes run


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def until_indexed(client: Client) -> dict[str, Any]:
    with anyio.fail_after(120):
        while True:
            status = await call(client, "get_index_status")
            if status["state"] == "idle" and status["indexed_files"] == FILES + 1:
                return status
            await anyio.sleep(0.2)


async def use(client: Client, version: str, data_home: Path) -> None:
    assert (client.server_info.name, client.server_info.version) == ("docsearch", version), client.server_info
    status = await until_indexed(client)
    assert Path(status["index_path"]).is_relative_to(data_home / "docsearch" / "indexes"), status["index_path"]
    hit = (await call(client, "search", {"query": "how do I open a port in the firewall?"}))["results"][0]
    assert hit["path"] == "network/firewall.md", hit
    document = await call(client, "get_document", {"path": hit["path"], "heading": "Firewall"})
    assert "ufw allow 22" in document["text"], document


async def main(command: str) -> None:
    version = subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        source = root / "notes"
        for number in range(FILES):
            path = source / "bulk" / f"n{number}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# Note {number}\n\nfiller text {number}\n")
        (source / "network").mkdir()
        (source / "network" / "firewall.md").write_text("# Firewall\n\nOpen port 22: `ufw allow 22`.\n")
        environment = {"HOME": str(root / "home"), "XDG_DATA_HOME": str(root / "data"), "PATH": os.environ["PATH"]}

        params = StdioServerParameters(command=command, args=["--source", str(source)], env=environment, cwd=str(root))
        async with Client(params) as client:
            await use(client, version, root / "data")
        print(f"stdio session through {command}: ok (version {version})")

        log = root / "http.log"
        with open(log, "wb") as errors:
            server = subprocess.Popen(
                [command, "serve", "--transport", "http", "--port", "0", "--source", str(source)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, env=environment, cwd=root,
            )
        try:
            deadline = time.monotonic() + 60
            while not (found := re.search(r"serving (http://\S+/mcp)", log.read_text())):
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            async with Client(found.group(1)) as client:
                await use(client, version, root / "data")
        finally:
            server.terminate()
            server.wait(30)
        print(f"Streamable HTTP session through {command} serve --transport http: ok")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
