"""The tool list an agent loads before its first question: small (compact JSON at most
MAX_TOOL_LIST_CHARS), every parameter described, output schemas naming the fields every reply
carries, and capabilities that advertise only what the server holds (tools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from schemas import compact_schema
from tests.conftest import write
from tests.mcp_client import server_params

#: The budget the tool list is held to (compact JSON of tools/list's tools).
MAX_TOOL_LIST_CHARS = 7000


def test_compact_schema_drops_titles_null_defaults_and_vacuous_bounds_but_not_properties_named_title() -> None:
    schema = {
        "title": "searchArguments", "type": "object", "required": ["query"],
        "properties": {
            "query": {"title": "Query", "type": "string", "description": "Words."},
            "title": {"title": "Title", "anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "minLength": 0},
            "either": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        },
    }
    assert compact_schema(schema) == {
        "type": "object", "required": ["query"],
        "properties": {
            "query": {"type": "string", "description": "Words."},
            "title": {"type": "string"},
            "either": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        },
    }


def test_compact_output_schema_keeps_required_fields_inlined_and_null_where_required() -> None:
    schema = {
        "title": "Reply", "description": "for readers of the code", "type": "object", "required": ["hits", "last_scan"],
        "properties": {
            "hits": {"type": "array", "items": {"$ref": "#/$defs/Hit"}},
            "last_scan": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Last Scan"},
            "extra": {"type": "integer"},
        },
        "$defs": {"Hit": {"title": "Hit", "type": "object", "required": ["path"],
                          "properties": {"path": {"type": "string"}, "stale": {"type": "boolean"}}}},
    }
    assert compact_schema(schema, descriptions=False, required_only=True) == {
        "type": "object", "required": ["hits", "last_scan"],
        "properties": {
            "hits": {"type": "array", "items": {"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}},
            "last_scan": {"type": ["string", "null"]},
        },
    }


@pytest.mark.anyio
async def test_the_tool_list_is_small_and_says_what_an_agent_needs(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "# A\n")
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        tools = (await client.list_tools()).tools
        capabilities = client.server_capabilities
    dumped = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
    size = len(json.dumps(dumped, separators=(",", ":"), ensure_ascii=False))
    assert size <= MAX_TOOL_LIST_CHARS, f"the tool list is {size:,} characters, over the budget of {MAX_TOOL_LIST_CHARS:,} (docs/tools.md, the tool list's size)"
    for tool in dumped:
        assert tool["description"] and "\n" not in tool["description"], tool["name"]
        assert '"title"' not in json.dumps(tool), tool["name"]
        for name, field in tool["inputSchema"]["properties"].items():
            assert field.get("description"), f"{tool['name']}.{name} has no description"
        assert tool["outputSchema"]["required"], tool["name"]
    assert capabilities.tools is not None
    assert capabilities.prompts is None and capabilities.resources is None
