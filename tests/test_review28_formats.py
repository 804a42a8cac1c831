"""Review 28: the count of files by extension kept in the meta ("formats", 33e136b) must follow
every change of the index's files, and status counts (fac88cd) must count every file."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import tools
from config import load_config
from database import IndexWriter, index_counts
from indexer import TextIndexer
from models import ServerConfig
from tests.conftest import write


@contextmanager
def indexed(source: Path, tmp_path: Path) -> Iterator[tuple[ServerConfig, IndexWriter, TextIndexer]]:
    """A source whose one text file is indexed, and three Markdown files written since (not indexed
    yet): its config, writer (closed at the end) and indexer."""
    write(source, "notes/todo.txt", "milk\n")
    config = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")})
    writer = IndexWriter(config.db_path)
    try:
        indexer = TextIndexer(config, writer)
        assert indexer.scan()["success"]
        for n in range(3):
            write(source, f"docs/page{n}.md", f"# Page {n}\n")
        yield config, writer, indexer
    finally:
        writer.close()


def test_instructions_follow_files_the_watcher_indexed_between_scans(source: Path, tmp_path: Path) -> None:
    """The watcher (refresh_files) writes and removes files one at a time, outside scans; the next
    server's instructions, and the count a later scan that finds nothing to do keeps, must know of them."""
    with indexed(source, tmp_path) as (config, _, indexer):
        (source / "notes" / "todo.txt").unlink()
        indexer.refresh_files([f"docs/page{n}.md" for n in range(3)] + ["notes/todo.txt"])
        assert indexer.scan()["files_processed"] == 0  # nothing left for a scan to do
    held = tools.server_instructions(config)
    assert "3 Markdown files" in held and "text file" not in held, held


def test_whole_index_status_counts_a_file_whose_name_starts_with_the_last_code_point(source: Path, tmp_path: Path) -> None:
    write(source, "\U0010ffff.md", "# Odd\n\nname\n")
    write(source, "plain.md", "# Plain\n")
    config = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")})
    writer = IndexWriter(config.db_path)
    try:
        assert TextIndexer(config, writer).scan()["success"]
        real = writer.conn.execute("SELECT count(*) FROM files").fetchone()[0]
        assert index_counts(writer.conn)["indexed_files"] == real == 2
    finally:
        writer.close()


def test_instructions_follow_files_a_stopped_scan_wrote(source: Path, tmp_path: Path) -> None:
    """A scan stopped (the server stopping) after it wrote its last batch keeps no new count; the
    next scan has nothing to write: the count must still come to know of those files."""
    with indexed(source, tmp_path) as (config, writer, indexer):
        reply = indexer.scan(on_progress=lambda progress: indexer.stop.set() if progress.files_done >= 3 else None)
        assert not reply["success"] and writer.conn.execute("SELECT count(*) FROM files").fetchone()[0] == 4
        indexer.stop.clear()  # the next run of the server
        assert indexer.scan()["files_processed"] == 0
    held = tools.server_instructions(config)
    assert "3 Markdown files" in held and "1 text file" in held, held


def test_instructions_do_not_fail_on_a_kept_count_that_does_not_parse(source: Path, tmp_path: Path) -> None:
    """A kept count that does not read as one is counted anew (33e136b): nested past Python's
    recursion limit it must not raise out of server_instructions (the server's start)."""
    write(source, "a.md", "# A\n")
    config = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")})
    writer = IndexWriter(config.db_path)
    try:
        assert TextIndexer(config, writer).scan()["success"]
    finally:
        writer.close()
    conn = sqlite3.connect(config.db_path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'formats'", ("[" * 100_000 + "]" * 100_000,))
    conn.close()
    assert "1 Markdown file" in tools.server_instructions(config)


def test_a_reader_counts_an_old_index_without_files_counted_and_after_a_writer_makes_it(source: Path, tmp_path: Path) -> None:
    """Status in another process (a read-only connection) on an index written before files_counted
    counts right through the path index; a writer making files_counted meanwhile changes nothing."""
    import database

    for n in range(5):
        write(source, f"a/page{n}.md", f"# Page {n}\n\n## Part\n\ntext\n")
    write(source, "b/other.txt", "x\n")
    config = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")})
    writer = IndexWriter(config.db_path)
    try:
        assert TextIndexer(config, writer).scan()["success"]
        real = {prefix: writer.conn.execute(
            "SELECT count(*), sum(section_count) FROM files WHERE substr(path, 1, length(?)) = ?", (prefix, prefix)).fetchone()
            for prefix in ("", "a/", "b/")}
        writer.conn.execute("DROP INDEX files_counted")
    finally:
        writer.close()
    try:
        conn = database.reader(config.db_path)
        for prefix, (files, sections) in real.items():
            counts = index_counts(conn, prefix)
            assert (counts["indexed_files"], counts["total_documents"]) == (files, sections)
        IndexWriter(config.db_path).close()  # makes files_counted under the reader
        for prefix, (files, sections) in real.items():
            counts = index_counts(conn, prefix)
            assert (counts["indexed_files"], counts["total_documents"]) == (files, sections)
    finally:
        database.drop_reader(config.db_path)
