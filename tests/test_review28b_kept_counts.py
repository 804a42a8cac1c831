"""Review 28b of c15eb71 (kept counts of files by extension dropped when a file is added or
removed; whole-index counts from U+10FFFF): what the change must keep, and a source's counts of
keys starting with U+10FFFF after its prefix (database.starting_with)."""

from __future__ import annotations

from pathlib import Path

import pytest

import database
from database import IndexWriter, SourceWriter, index_counts, suffix_counts
from indexer import TextIndexer
from models import ServerConfig
from tests.conftest import write


def _two_sources(tmp_path: Path) -> tuple[IndexWriter, dict[str, TextIndexer], dict[str, Path]]:
    roots = {name: tmp_path / name for name in ("a", "b")}
    index_dir = (tmp_path / "idx").resolve()
    writer = IndexWriter(index_dir / "shared.sqlite3")
    indexers = {}
    for name, root in roots.items():
        root.mkdir()
        config = ServerConfig(source_directory=root.resolve(), index_output_directory=index_dir)
        indexers[name] = TextIndexer(config, SourceWriter(writer, name + "/"))
    return writer, indexers, roots


def _kept(writer: IndexWriter) -> dict[str, str]:
    return {key: value for key, value in writer.meta().items() if key.endswith(database.FORMATS_KEY)}


def test_a_sources_write_drops_the_others_count_and_each_next_scan_keeps_one_again(tmp_path: Path) -> None:
    """By design one source's added file drops every source's kept count; the next scan of each
    source, even one with nothing to do, must keep its own count again, and only its own files'."""
    writer, indexers, roots = _two_sources(tmp_path)
    try:
        write(roots["a"], "x.md", "# X\n")
        write(roots["b"], "y.txt", "y\n")
        assert indexers["a"].scan()["success"] and indexers["b"].scan()["success"]
        write(roots["a"], "new.md", "# New\n")
        indexers["a"].refresh_files(["new.md"])
        assert _kept(writer) == {}
        assert indexers["b"].scan()["files_processed"] == 0
        assert _kept(writer) == {"b/formats": '{".txt": 1}'}
        assert indexers["a"].scan()["files_processed"] == 0
        assert _kept(writer) == {"b/formats": '{".txt": 1}', "a/formats": '{".md": 2}'}
    finally:
        writer.close()


def test_a_failed_transaction_drops_no_count_and_leaves_nothing_for_the_next(tmp_path: Path) -> None:
    """A transaction that removed a file and then failed is rolled back whole, the kept counts with
    it; the flag it left set must not make the next (unrelated) transaction drop them."""
    writer, indexers, roots = _two_sources(tmp_path)
    try:
        write(roots["a"], "x.md", "# X\n")
        assert indexers["a"].scan()["success"]
        kept = _kept(writer)
        assert kept == {"a/formats": '{".md": 1}'}
        with pytest.raises(RuntimeError):
            with writer.transaction():
                writer.remove_file(writer.stored_file("a/x.md").file_id)
                raise RuntimeError("fails after the flag was set")
        assert writer.stored_file("a/x.md") is not None and _kept(writer) == kept
        with writer.transaction():
            writer.set_meta("unrelated", "1")
        assert _kept(writer) == kept
    finally:
        writer.close()


def test_one_sources_counts_include_a_name_starting_with_the_last_code_point(tmp_path: Path) -> None:
    """A source's own counts (its status, and the instructions' count of its files by extension)
    include its files whose names start with U+10FFFF: the per-source sums make the whole index's."""
    writer, indexers, roots = _two_sources(tmp_path)
    try:
        write(roots["b"], "y.txt", "y\n")
        write(roots["b"], "\U0010ffffz.md", "# Z\n")
        assert indexers["b"].scan()["success"]
        real = writer.conn.execute("SELECT count(*) FROM files WHERE substr(path, 1, 2) = 'b/'").fetchone()[0]
        assert real == 2 == index_counts(writer.conn)["indexed_files"]
        assert suffix_counts(writer.conn, "b/") == {".txt": 1, ".md": 1}
        assert index_counts(writer.conn, "b/")["indexed_files"] == real
    finally:
        writer.close()
