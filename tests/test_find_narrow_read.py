"""The agent's loop through a real MCP stdio session: search narrowed by path, extension and date,
paged, fresh and with one result per text; then get_document, and each of its refusals."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import write
from tests.mcp_client import call, server_params, wait_for

pytestmark = pytest.mark.anyio

GUIDE = """# Install

Intro to the install guide.

## Linux

Run the installer on linux.

### Debian

Debian needs the deb package.

## Windows

Use winget to install.
"""
OLD = 1_000_000_000  # 2001-09-09
NEW = 1_700_000_000  # 2023-11-14


def tree(source: Path) -> None:
    write(source, "guides/install.md", GUIDE)
    write(source, "guides/deep/er/walrus.md", "# Walrus\n\nThe walrus guide, deep down.\n")
    write(source, "guides/walrus.txt", "walrus notes in plain text\n")
    write(source, "other/walrus.md", "# Walrus\n\nwalrus walrus walrus walrus: the best walrus page outside guides.\n")
    write(source, "other/install.md", "# Not a guide\n\nwalrus\n")
    for version in ("5.1", "7.4", "7.5"):
        write(source, f"docs/{version}/about_signing.md", f"# About signing {version}\n\n## Details\n\nSigning scripts with a certificate keeps them trusted.\n")
    write(source, "docs/7.6/about_signing.md", "# About signing 7.6\n\n## Details\n\nSigning scripts is different now: certificate rules changed.\n")
    for n in range(25):
        write(source, f"many/page{n:02}.md", f"# Page {n}\n\nquokka " + "filler words " * n + "\n")
    os.utime(source / "other/walrus.md", ns=(OLD * 10**9, OLD * 10**9))
    os.utime(source / "guides/deep/er/walrus.md", ns=(NEW * 10**9, NEW * 10**9))


async def session_ready(client: Client, files: int) -> None:
    async def idle() -> bool:
        status = await call(client, "get_index_status")
        return status["state"] == "idle" and status["indexed_files"] == files

    await wait_for(idle)


async def paths(client: Client, args: dict[str, Any]) -> list[str]:
    return [hit["path"] for hit in (await call(client, "search", args))["results"]]


async def refused(client: Client, tool: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text


async def test_search_filters_apply_inside_the_ranking(source: Path, tmp_path: Path) -> None:
    tree(source)
    async with Client(server_params(source, tmp_path / "idx")) as client:
        await session_ready(client, 34)
        everywhere = await paths(client, {"query": "walrus"})
        assert everywhere[0] == "other/walrus.md"
        # limit=1 with a filter is the best file that passes it, not the best file overall, filtered.
        assert await paths(client, {"query": "walrus", "path": "guides/**/*.md", "limit": 1}) == ["guides/deep/er/walrus.md"]
        assert set(await paths(client, {"query": "walrus", "path": "guides/"})) == {"guides/deep/er/walrus.md", "guides/walrus.txt"}
        assert set(await paths(client, {"query": "walrus", "path": "guides"})) == {"guides/deep/er/walrus.md", "guides/walrus.txt"}
        assert await paths(client, {"query": "walrus", "path": "*/walrus.md"}) == ["other/walrus.md"]  # * stays in one folder
        assert await paths(client, {"query": "walrus", "extensions": [".txt"]}) == ["guides/walrus.txt"]
        assert await paths(client, {"query": "walrus", "extensions": ["TXT"]}) == ["guides/walrus.txt"]
        reply = await call(client, "search", {"query": "walrus", "extensions": [".md"], "path": "guides/**"})
        assert [hit["path"] for hit in reply["results"]] == ["guides/deep/er/walrus.md"] and reply["files_matched"] == 1
        assert await paths(client, {"query": "walrus", "modified_before": "2002-01-01"}) == ["other/walrus.md"]
        dated = await paths(client, {"query": "walrus", "modified_after": "2023-11-14T00:00:00Z", "modified_before": "2023-11-15"})
        assert dated == ["guides/deep/er/walrus.md"]
        assert await paths(client, {"query": "walrus", "path": "nowhere/"}) == []

        for args, named in [
            ({"path": "/etc"}, "path"), ({"path": "../x"}, "path"), ({"path": "a/***b*c*d"}, "path"),
            ({"extensions": ["m d"]}, "extensions"), ({"modified_after": "yesterday"}, "modified_after"),
            ({"offset": -1}, "offset"), ({"offset": 10**6}, "offset"),
        ]:
            message = await refused(client, "search", {"query": "walrus", **args})
            assert f": {named}: " in message, message
        assert (await call(client, "search", {"query": "walrus"}))["results"], "the server keeps answering"


async def test_paging_duplicates_and_fresh_results(source: Path, tmp_path: Path) -> None:
    tree(source)
    async with Client(server_params(source, tmp_path / "idx")) as client:
        await session_ready(client, 34)
        whole = await call(client, "search", {"query": "quokka", "limit": 25})
        assert len(whole["results"]) == 25 and not whole["has_more"] and "next_offset" not in whole
        pages, offset = [], 0
        while offset is not None:
            page = await call(client, "search", {"query": "quokka", "limit": 10, "offset": offset})
            pages += [hit["path"] for hit in page["results"]]
            offset = page.get("next_offset")  # #23: left out on the last page
            assert page["has_more"] == (offset is not None)
        assert pages == [hit["path"] for hit in whole["results"]]

        # Three versions hold the same section: one result, the others named in also_in.
        signing = (await call(client, "search", {"query": "signing certificate"}))["results"]
        texts = [hit for hit in signing if hit["path"].startswith("docs/")]
        assert len(texts) == 2, texts  # 7.6 says something else
        same = next(hit for hit in texts if hit.get("also_in"))
        assert len(same["also_in"]) == 2 and len({same["path"], *same["also_in"]}) == 3
        every = await paths(client, {"query": "signing certificate", "collapse_duplicates": False})
        assert len([p for p in every if p.startswith("docs/")]) == 4

        # A deleted file is never returned, and leaves the index; a changed one is indexed again first.
        (source / "other/walrus.md").unlink()
        write(source, "guides/walrus.txt", "now the notes speak of a narwhal and a walrus\n")
        fresh = await call(client, "search", {"query": "walrus"})
        assert "other/walrus.md" not in [hit["path"] for hit in fresh["results"]]
        txt = next(hit for hit in fresh["results"] if hit["path"] == "guides/walrus.txt")
        assert "narwhal" in txt["snippet"] and "stale" not in txt  # #23: left out when false
        assert (await call(client, "get_index_status"))["indexed_files"] == 33


async def test_get_document_reads_sections_ranges_and_continues(source: Path, tmp_path: Path) -> None:
    tree(source)
    write(source, "long.txt", "".join(f"line {n} of the long file\n" for n in range(1, 401)))
    async with Client(server_params(source, tmp_path / "idx")) as client:
        await session_ready(client, 35)
        doc = await call(client, "get_document", {"path": "guides/install.md"})
        assert doc["text"] == GUIDE.rstrip("\n") and (doc["line_start"], doc["line_end"], doc["total_lines"]) == (1, 15, 15)
        assert not ({"truncated", "next_start_line", "changed_since_indexed"} & set(doc))  # #23: left out when they say nothing
        assert "outline" not in doc  # only when asked for
        doc = await call(client, "get_document", {"path": "guides/install.md", "outline": True})
        assert [(e["heading"], e["level"], e["line_start"], e["line_end"]) for e in doc["outline"]] == [
            ("Install", 1, 1, 15), ("Install > Linux", 2, 5, 12), ("Install > Linux > Debian", 3, 9, 12), ("Install > Windows", 2, 13, 15),
        ]
        linux = await call(client, "get_document", {"path": "guides/install.md", "heading": "Install > Linux"})
        assert linux["text"].startswith("## Linux") and "deb package" in linux["text"] and "winget" not in linux["text"]
        assert (linux["line_start"], linux["line_end"]) == (5, 12)
        # The heading a search result names opens that section.
        hit = (await call(client, "search", {"query": "winget"}))["results"][0]
        section = await call(client, "get_document", {"path": hit["path"], "heading": hit["heading"]})
        assert "winget" in section["text"]

        ranged = await call(client, "get_document", {"path": "long.txt", "start_line": 10, "end_line": 12})
        assert ranged["text"] == "line 10 of the long file\nline 11 of the long file\nline 12 of the long file"
        # Bounded, cut at a line end, and continued from next_start_line to the end.
        read, start = [], 1
        while start is not None:
            part = await call(client, "get_document", {"path": "long.txt", "start_line": start, "max_chars": 1000})
            assert len(part["text"]) <= 1000 and part["line_start"] == start
            read.append(part["text"])
            start = part.get("next_start_line")
            assert part.get("truncated", False) == (start is not None)
        assert "\n".join(read) == (source / "long.txt").read_text().rstrip("\n")

        missing = await refused(client, "get_document", {"path": "guides/install.md", "heading": "Install > Mac"})
        assert "Install > Linux" in missing and "Install > Windows" in missing
        assert "past its end" in await refused(client, "get_document", {"path": "long.txt", "start_line": 401})
        assert "max_chars" in await refused(client, "get_document", {"path": "long.txt", "max_chars": 0})

        write(source, "guides/install.md", GUIDE + "\n## Mac\n\nbrew install it.\n")
        changed = await call(client, "get_document", {"path": "guides/install.md", "heading": "Install > Mac"})
        assert changed["changed_since_indexed"] and "stale" not in changed and "brew" in changed["text"]
        assert await paths(client, {"query": "brew"}) == ["guides/install.md"]  # indexed again on the way
        again = await call(client, "get_document", {"path": "guides/install.md"})
        assert "changed_since_indexed" not in again


@pytest.mark.parametrize("tool,args", [
    ("get_document", {"path": "notes.md", "max_chars": True}), ("get_document", {"path": "notes.md", "start_line": True}),
    ("get_document", {"path": "notes.md", "end_line": False}), ("search", {"query": "hello", "limit": True}),
    ("search", {"query": "hello", "offset": False}), ("list_files", {"limit": True}),
])
async def test_true_or_false_for_a_number_is_refused_naming_it(source: Path, tmp_path: Path, tool: str, args: dict[str, Any]) -> None:
    """The SDK's validation read `max_chars: true` as 1 (one character read) and `limit: true` as one hit."""
    write(source, "notes.md", "# Notes\n\nhello\n")
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        name = next(key for key in args if key not in ("path", "query"))
        message = await refused(client, tool, args)
        assert name in message and "whole number" in message, message


async def test_get_document_refuses_what_the_index_would_not_read(source: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("# Secret\n\nnot yours\n")
    write(source, "notes.md", "# Notes\n\nhello\n")
    write(source, "blob.md", b"\x00\x01\x02binary\x00" * 100)
    write(source, "script.py", "print('not an included extension')\n")
    write(source, "node_modules/pkg/readme.md", "# Vendored\n")
    write(source, ".obsidian/workspace.md", "# Editor state\n")
    (source / "out.md").symlink_to(outside)
    (source / "outdir").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(source / "pipe.md")
    index_dir = source / ".idx"
    async with Client(server_params(source, index_dir)) as client:
        await wait_for(lambda: _indexed(client, 1))
        index_file = next(index_dir.glob("*.sqlite3")).name
        for path, says in [
            ("../secret.md", "'..' is not allowed"),
            (str(outside), "outside the source directory"),
            ("out.md", "points outside the source"),
            ("outdir/secret.md", "points outside the source"),
            (f".idx/{index_file}", "the daemon's own index files"),
            ("notes.md%00.txt", "no such file"),
            ("blob.md", "binary"),
            ("script.py", "excluded_extension"),
            ("node_modules/pkg/readme.md", "excluded_directory"),
            (".obsidian/workspace.md", "hidden"),
            ("pipe.md", "not_regular_file"),
            ("", "empty"),
        ]:
            message = await refused(client, "get_document", {"path": path})
            assert says in message, (path, message)
            assert "not yours" not in message
        assert (await call(client, "get_document", {"path": str(source / "notes.md")}))["text"] == "# Notes\n\nhello"


async def _indexed(client: Client, files: int) -> bool:
    status = await call(client, "get_index_status")
    return status["state"] == "idle" and status["indexed_files"] == files
