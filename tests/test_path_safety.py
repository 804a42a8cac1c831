"""Path safety: refresh_index(filepath) refuses every path that leaves the source or names the
daemon's own files, through the function and through the MCP tool, and nothing outside the
source is ever indexed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reliability_helpers import RelStdioServer, rel_token

from exceptions import UnsafePathError
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
from search import search

SECRET = "zqpathsecretqz"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A source with the index directory inside it, links out, and a secret file outside."""
    source, outside = tmp_path / "src", tmp_path / "outside"
    (source / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text(f"secret {SECRET}\n")
    (source / "ok.md").write_text(f"fine {rel_token(1, 0)}\n")
    os.symlink(outside / "secret.md", source / "link.md")
    os.symlink(outside, source / "linkdir")
    index_dir = source / ".index"
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=index_dir.resolve())
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    os.symlink(config.db_path, source / "db-link.md")
    return {"source": source, "outside": outside, "index_dir": index_dir, "db": config.db_path}


def hostile_paths(tree: dict[str, Path]) -> list[str]:
    db, outside = tree["db"], tree["outside"]
    return [
        "../outside/secret.md", "sub/../../outside/secret.md", "..", "./../outside/secret.md", "../" * 40 + "etc/passwd",
        str(outside / "secret.md"), "/etc/passwd", "/", str(tree["source"].parent / "src" / ".." / "outside" / "secret.md"),
        "link.md", "linkdir/secret.md", "./linkdir/../link.md", "db-link.md",
        "ok.md\x00", "\x00", "sub/\x00/../../outside/secret.md",
        "..\\outside\\secret.md", "sub\\..\\..\\outside\\secret.md", "..\\..\\..\\etc\\passwd",
        "%2e%2e/outside/secret.md", "%2E%2E%2Foutside%2Fsecret.md", "..%2foutside%2fsecret.md", "%2e%2e%5coutside%5csecret.md",
        str(db), f".index/{db.name}", f".index/{db.name}-wal", f".index/{db.name}-shm", f"{db}-wal",
        "", " ", ".", "./", "a" * 5000, "\ud800.md",
    ]


def test_refresh_file_refuses_every_hostile_path(tree: dict[str, Path]) -> None:
    config = ServerConfig(source_directory=tree["source"].resolve(), index_output_directory=tree["index_dir"].resolve())
    writer = IndexWriter(config.db_path)
    indexer = TextIndexer(config, writer)
    try:
        for path in hostile_paths(tree):
            with pytest.raises(UnsafePathError):
                indexer.refresh_file(path)
        # Not traversal on this file system: literal names that do not exist.
        for path in ("%252e%252e/outside/secret.md", "\uff0e\uff0e/outside/secret.md", "~/secret.md"):
            reply = indexer.refresh_file(path)
            assert not reply["success"] and "no such file" in reply["errors"][0], (path, reply)
        assert indexer.refresh_file(str(tree["source"] / "ok.md"))["success"]  # absolute inside is fine
    finally:
        writer.close()
    assert search(config.db_path, SECRET, 10)["results"] == []
    assert [hit["path"] for hit in search(config.db_path, rel_token(1, 0), 10)["results"]] == ["ok.md"]


def test_refresh_index_tool_refuses_every_hostile_path_over_stdio(tree: dict[str, Path]) -> None:
    args = ("--source", str(tree["source"]), "--index-dir", str(tree["index_dir"]), "--scan-interval", "0")
    paths = [p for p in hostile_paths(tree) if "\ud800" not in p]  # not valid JSON text on the wire
    with RelStdioServer(*args) as server:
        server.wait_for_scan()
        before = server.status()["indexed_files"]
        for path in paths:
            result = server.call("refresh_index", {"filepath": path})
            reply = json.loads(result["content"][0]["text"])
            [error] = reply["errors"]
            assert result["isError"] and not reply["success"] and error.startswith("path ") and "refused" in error, (path, reply)
        assert not server.call("refresh_index", {"filepath": "ok.md"})["isError"]
        assert server.status()["indexed_files"] == before == 1
        assert server.call("search", {"query": SECRET})["structuredContent"]["results"] == []
        assert server.close() == 0
