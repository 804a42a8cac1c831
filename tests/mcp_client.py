"""Helpers for tests that drive the server through the SDK's client: the stdio parameters that start
main.py on a folder, waiting for a condition, and a tool call that must succeed."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, ClientSession, StdioServerParameters

from tests.conftest import MAIN_PY


def server_params(source: Path, index_dir: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(MAIN_PY), "--source", str(source), "--index-dir", str(index_dir), *extra],
    )


async def wait_for(check: Callable[[], Awaitable[bool]], seconds: float = 60) -> None:
    with anyio.fail_after(seconds):
        while not await check():
            await anyio.sleep(0.1)


async def call(client: Client | ClientSession, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content
