"""#23, small replies: compact text content, fields left out when they say nothing, instructions
naming what is served, every parameter described, and index progress that moves while files are read."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

import indexer as indexer_module
import replies
import tools
from config import load_config
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ScanProgress, ServerConfig
from tests.conftest import MAIN_PY, write


def server_params(source: Path, index_dir: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(MAIN_PY), "--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0"]
    )


def index_once(config: ServerConfig) -> None:
    writer = IndexWriter(config.db_path)
    try:
        TextIndexer(config, writer).scan()
    finally:
        writer.close()


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.anyio
async def test_replies_through_a_real_session(source: Path, tmp_path: Path) -> None:
    write(source, "guide/install.md", "# Install\n\n## Linux\n\nRun the installer with sudo: café.\n")
    write(source, "notes.txt", "Firewall notes: open port 22.\n")
    write(source, "setup.rst", "Setup\n=====\n\nThe firewall port list.\n")
    config = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")})
    index_once(config)  # the instructions count the index that is there at start
    async with Client(server_params(source, tmp_path / "idx")) as client:
        instructions = client.instructions
        assert str(source) in instructions
        assert "1 Markdown file" in instructions and "1 text file" in instructions and "1 reStructuredText file" in instructions

        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert all(tool.output_schema for tool in tools.values())
        undescribed = [(tool.name, name) for tool in tools.values() for name, field in tool.input_schema["properties"].items()
                       if not field.get("description")]
        assert undescribed == []
        assert tools["search"].input_schema["properties"]["limit"]["maximum"] == 100  # the bounds stay

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            assert not result.is_error, result.content[0].text
            assert result.content[0].text == compact(result.structured_content)  # no indentation
            return result.structured_content

        with anyio.fail_after(60):  # until the server's own first scan is done (the reply says "indexing" before)
            while "indexing" in (reply := await call("search", {"query": "installer sudo"})):
                await anyio.sleep(0.05)
        hit = reply["results"][0]
        assert hit["path"] == "guide/install.md" and hit["heading"] == "Install > Linux"
        # What says nothing is left out: the title is the heading's first part, no copies, not stale...
        assert set(hit) == {"path", "heading", "snippet", "score", "line_start", "line_end", "last_modified"}
        assert set(reply) == {"results", "files_matched", "has_more"}
        text = (await client.call_tool("search", {"query": "installer sudo"})).content[0].text
        assert "café" in text and "\\u00e9" not in text  # ensure_ascii=False: fewer characters

        explained = await call("search", {"query": "installer sudo", "explain": True})
        assert explained["query_read"] == {"mode": "keywords", "required": ["installer", "sudo"]}  # empty lists left out
        question = await call("search", {"query": "how do I run the installer with sudo on this machine"})
        assert "query_read" not in question  # only stopwords were dropped
        excluded = await call("search", {"query": "firewall -port"})  # read other than typed: says how
        assert excluded["query_read"]["excluded"] == ["port"]
        dated = await call("search", {"query": "firewall", "modified_after": "2000-01-01"})
        assert all("last_modified" in hit for hit in dated["results"])
        nothing = await call("search", {"query": "firewal"})
        assert nothing["results"] == [] and nothing["suggestions"]

        document = await call("get_document", {"path": "notes.txt"})
        assert set(document) == {"path", "text", "line_start", "line_end", "total_lines", "last_modified"}
        cut = await call("get_document", {"path": "guide/install.md", "max_chars": 10})
        assert cut["truncated"] and cut["next_start_line"] == cut["line_end"] + 1

        status = await call("get_index_status", {})
        assert status["state"] == "idle" and "progress" not in status and "last_error" not in status
        refreshed = await call("refresh_index", {"filepath": "notes.txt"})
        assert refreshed["success"] and refreshed["errors"] == []  # the spec's field, empty


@pytest.mark.anyio
async def test_instructions_say_a_folder_is_being_indexed(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "# A\n")
    async with Client(server_params(source, tmp_path / "idx")) as client:
        assert "being indexed" in client.instructions



def test_instructions_read_the_count_a_scan_kept_and_count_only_without_it(source: Path, tmp_path: Path) -> None:
    """A server answers initialize only once its instructions are made: from the count of files by
    extension the last scan that changed files kept in the index, not from every key again (seconds
    at a million files); counted now when the index has none, or one that does not read as a count."""
    for n in range(3):
        write(source, f"docs/page{n}.md", f"# Page {n}\n")
    write(source, "notes/todo.txt", "milk\n")
    write(source, ".hidden.md", "# dot files are not indexed by default\n")
    config = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")})
    index_once(config)
    conn = sqlite3.connect(config.db_path)
    assert json.loads(conn.execute("SELECT value FROM meta WHERE key = 'formats'").fetchone()[0]) == {".md": 3, ".txt": 1}
    with conn:  # files the kept count does not know of: the instructions must not have read them
        conn.execute("UPDATE files SET path = path || '.rst' WHERE path LIKE 'docs/%'")
    assert "3 Markdown files, 1 text file." in tools.server_instructions(config)
    for kept in (None, "not json", '{".md": "3"}', '{".md": -3}', '{".md": 0}', "[1, 2]"):
        with conn:
            conn.execute("DELETE FROM meta WHERE key = 'formats'")
            if kept is not None:
                conn.execute("INSERT INTO meta (key, value) VALUES ('formats', ?)", (kept,))
        assert "3 reStructuredText files, 1 text file." in tools.server_instructions(config), kept
    with conn:
        conn.execute("UPDATE files SET path = substr(path, 1, length(path) - 4) WHERE path LIKE '%.rst'")
        conn.execute("DELETE FROM meta WHERE key = 'formats'")
    writer = IndexWriter(config.db_path)
    try:  # a scan that changes nothing keeps a count when there is none
        assert TextIndexer(config, writer).scan()["files_processed"] == 0
    finally:
        writer.close()
    assert json.loads(conn.execute("SELECT value FROM meta WHERE key = 'formats'").fetchone()[0]) == {".md": 3, ".txt": 1}
    conn.close()

def test_lean_hit_keeps_what_tells_something() -> None:
    hit = {"path": "docs/a.md", "title": "Guide", "heading": "Install > Linux", "snippet": "s", "score": 12.345678,
           "line_start": 1, "line_end": 2, "last_modified": "2020-01-01T00:00:00+00:00", "stale": True,
           "also_in": ["b.md"], "also_in_count": 3}
    lean = replies.lean_hit(hit)  # type: ignore[arg-type]
    assert lean["score"] == 12.3 and lean["title"] == "Guide" and lean["stale"] and lean["also_in_count"] == 3
    assert lean["last_modified"] == hit["last_modified"]  # the spec's fields are in every hit
    plain = replies.lean_hit({**hit, "title": "a", "stale": False, "also_in": [], "also_in_count": 0})  # type: ignore[arg-type]
    assert set(plain) == {"path", "heading", "snippet", "score", "line_start", "line_end", "last_modified"}


def test_progress_moves_within_a_batch(config: ServerConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(40):
        write(config.source_directory, f"n{i}.md", f"# Note {i}\n\nword{i}\n")
    monkeypatch.setattr(indexer_module, "PROGRESS_EVERY_FILES", 4)  # a batch (BATCH_FILES) holds them all
    seen: list[tuple[str, int, int]] = []

    def heard(progress: ScanProgress) -> None:
        seen.append((progress.phase, progress.files_done, progress.files_total))

    writer = IndexWriter(config.db_path)
    try:
        TextIndexer(config, writer).scan(heard)
    finally:
        writer.close()
    during = [done for phase, done, total in seen if phase == "indexing" and 0 < done < total]
    assert len(during) >= 5 and during == sorted(during)

