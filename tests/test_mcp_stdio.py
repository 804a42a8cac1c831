"""The server as an MCP client sees it: a real subprocess over stdio, driven by the SDK's client."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from models import VERSION
from tests.conftest import write
from tests.mcp_client import call, server_params, wait_for

pytestmark = pytest.mark.anyio


async def test_stdio_session_end_to_end(source: Path, tmp_path: Path) -> None:
    for i in range(3000):
        write(source, f"bulk/{i // 100}/n{i}.md", f"# Note {i}\n\nbulk{i} " + "filler text " * 40)
    write(source, "network/firewall.md", "# Firewall\n\nOpen port 22: `ufw allow 22`.\n")
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "1")) as client:
        assert (client.server_info.name, client.server_info.version) == ("docsearch", VERSION)
        # Answered at once, while the first index runs in the background.
        first = await call(client, "get_index_status")
        during = await call(client, "search", {"query": "filler"})
        if first["state"] == "indexing":  # #23: progress only then
            assert first["progress"]["files_done"] <= first["progress"]["files_total"]
        assert during.get("indexing") or first["state"] == "idle"

        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"search", "get_index_status", "refresh_index", "get_document", "list_files"}
        assert all(tool.output_schema for tool in tools.values())
        assert tools["search"].annotations.read_only_hint is True
        # Bounds the tools enforce are in their input schemas, so clients see them.
        bounds = {
            (tool, name): {key: value for key, value in field.items() if key.startswith(("min", "max"))}
            for tool in tools for name, field in tools[tool].input_schema["properties"].items()
        }
        assert bounds["search", "limit"] == {"minimum": 1, "maximum": 100}
        assert bounds["search", "offset"] == {"minimum": 0, "maximum": 1000}
        assert bounds["search", "extensions"] == {"maxItems": 50}  # a bound of 0 bounds nothing: left out
        assert bounds["get_document", "max_chars"] == {"minimum": 1, "maximum": 100_000}
        assert bounds["get_document", "start_line"] == bounds["get_document", "end_line"] == {"minimum": 1}
        assert bounds["refresh_index", "filepath"] == {"minLength": 1, "maxLength": 4096}

        async def idle() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 3001

        await wait_for(idle)
        hit = (await call(client, "search", {"query": "how do I open a port in the firewall?"}))["results"][0]
        assert hit["path"] == "network/firewall.md"
        assert "**port**" in hit["snippet"] and hit["heading"] == "Firewall"  # the heading's words: in heading, not the snippet
        assert set(hit) >= {"path", "snippet", "score", "line_start", "line_end", "heading"}  # #23: no title repeating the heading

        bad = await client.call_tool("search", {"query": '"" *'})
        assert bad.is_error and "no words to search for" in bad.content[0].text

        refused = await client.call_tool("refresh_index", {"filepath": "../../etc/passwd"})
        assert refused.is_error and "refused" in refused.content[0].text

        write(source, "fresh.md", "# Fresh\n\nkumquat harvest\n")
        one = await call(client, "refresh_index", {"filepath": "fresh.md"})
        assert one == {"success": True, "files_processed": 1, "files_removed": 0, "errors": []}  # the spec names errors: always there
        assert (await call(client, "search", {"query": "kumquat"}))["results"][0]["path"] == "fresh.md"

        # The rescan loop (1 s) notices edits and deletions without being asked.
        write(source, "network/firewall.md", "# Firewall\n\nnow about iptables only\n")
        (source / "fresh.md").unlink()

        async def caught_up() -> bool:
            reply = await call(client, "search", {"query": "iptables"})
            gone = await call(client, "search", {"query": "kumquat"})
            return bool(reply["results"]) and not gone["results"]

        await wait_for(caught_up, 30)

        progress: list[tuple[float, float | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total))

        full = await client.call_tool("refresh_index", {}, progress_callback=on_progress)
        assert not full.is_error and full.structured_content["success"] is True
        assert progress, "a full refresh reports progress to a client that asks for it"


async def test_unwritable_index_directory_keeps_the_server_answering(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "alpha")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the index directory should be")
    async with Client(server_params(source, blocker / "idx")) as client:
        status = await call(client, "get_index_status")
        assert status["state"] == "error" and "cannot open or create the index" in status["last_error"]
        result = await client.call_tool("search", {"query": "alpha"})
        assert result.is_error and "no index yet" in result.content[0].text
        refresh = await client.call_tool("refresh_index", {"filepath": "a.md"})
        assert refresh.is_error and "cannot open or create the index" in refresh.content[0].text
