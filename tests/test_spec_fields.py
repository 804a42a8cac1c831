"""The fields the spec names for each reply are in every reply, however lean the rest: a search hit's
path, snippet, score and last_modified; status's indexed_files, last_scan, index_size_mb,
total_documents and errors_encountered; a refresh's success, files_processed and errors. Through a
real MCP session, and in the tools' output schemas as required fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import write
from tests.mcp_client import call, server_params, wait_for

pytestmark = pytest.mark.anyio

HIT_FIELDS = {"path", "snippet", "score", "last_modified"}
STATUS_FIELDS = {"indexed_files", "last_scan", "index_size_mb", "total_documents", "errors_encountered"}
REFRESH_FIELDS = {"success", "files_processed", "errors"}
UTC_SECOND = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


async def test_every_reply_carries_the_fields_the_spec_names(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "# Heron\n\nThe grey heron waits by the water.\n")
    write(source, "b.md", "# Egret\n\nAn egret, a small white heron.\n")
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

        async def idle() -> bool:
            return (await call(client, "get_index_status"))["state"] == "idle"

        await wait_for(idle)
        status = await call(client, "get_index_status")
        assert STATUS_FIELDS <= set(status), status
        assert status["errors_encountered"] == 0 and UTC_SECOND.fullmatch(status["last_scan"])
        hits = (await call(client, "search", {"query": "heron"}))["results"]
        assert len(hits) == 2 and all(HIT_FIELDS <= set(hit) for hit in hits), hits
        assert all(UTC_SECOND.fullmatch(hit["last_modified"]) for hit in hits)
        refreshed = await call(client, "refresh_index")
        assert REFRESH_FIELDS <= set(refreshed) and refreshed["errors"] == [] and refreshed["success"]
        one = await call(client, "refresh_index", {"filepath": "a.md"})
        assert REFRESH_FIELDS <= set(one) and one["errors"] == []
        for refused in ({"filepath": "../outside.md"}, {"collection": "nope"}):
            failed = await client.call_tool("refresh_index", refused)
            assert failed.is_error and REFRESH_FIELDS <= set(failed.structured_content), failed
            assert failed.structured_content["success"] is False and failed.structured_content["errors"][0], failed
            assert json.loads(failed.content[0].text) == failed.structured_content
    hit_schema = tools["search"].output_schema["properties"]["results"]["items"]
    assert HIT_FIELDS <= set(hit_schema["required"])
    assert STATUS_FIELDS <= set(tools["get_index_status"].output_schema["required"])
    assert REFRESH_FIELDS <= set(tools["refresh_index"].output_schema["required"])
