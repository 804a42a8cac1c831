"""The counts the index keeps and status and the server's instructions show: files and sections
(the sum of files.section_count, which must equal the sections the index really holds after every
kind of change, for the whole index and for each source's prefix), and files by extension (the
count kept in the meta, which must follow every change of the index's files, whoever makes it)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import database
import tools
from config import load_config
from index_queries import index_counts, suffix_counts
from index_writer import IndexWriter, SourceWriter
from indexer import TextIndexer
from models import ServerConfig
from tests.conftest import write


def _sources(tmp_path: Path, *names: str) -> tuple[IndexWriter, dict[str, TextIndexer], dict[str, Path]]:
    """Folders of these names under tmp_path, each indexed by its own indexer into one shared index
    (as one server with several sources): the writer (the caller closes it), indexers and folders."""
    roots = {name: tmp_path / name for name in names}
    index_dir = (tmp_path / "idx").resolve()
    writer = IndexWriter(index_dir / "shared.sqlite3")
    indexers = {}
    for name, root in roots.items():
        root.mkdir()
        config = ServerConfig(source_directory=root.resolve(), index_output_directory=index_dir)
        indexers[name] = TextIndexer(config, SourceWriter(writer, name + "/"))
    return writer, indexers, roots


# ---- files and sections -------------------------------------------------------------------------


def _real(conn, prefix: str = "") -> tuple[int, int]:
    where, values = ("WHERE substr(path, 1, length(?)) = ?", (prefix, prefix)) if prefix else ("", ())
    ids = [row[0] for row in conn.execute(f"SELECT id FROM files {where}", values)]
    sections = sum(
        conn.execute("SELECT count(*) FROM sections WHERE id BETWEEN ? AND ?",
                     (database.section_id(i, 0), database.section_id(i, database.MAX_SECTIONS_PER_FILE - 1))).fetchone()[0]
        for i in ids
    )
    return len(ids), sections


def _check(conn, *prefixes: str) -> None:
    counts = index_counts(conn)
    assert (counts["indexed_files"], counts["total_documents"]) == _real(conn)
    assert counts["total_documents"] == conn.execute("SELECT count(*) FROM sections").fetchone()[0]
    for prefix in prefixes:
        counts = index_counts(conn, prefix)
        assert (counts["indexed_files"], counts["total_documents"]) == _real(conn, prefix)


def _many_sections(n: int) -> str:
    return "".join(f"# Heading {i}\n\n" + f"paragraph {i} " * 400 + "\n\n" for i in range(n))


def _changes(indexer: TextIndexer, root: Path, check) -> None:
    write(root, "big.md", _many_sections(30))
    write(root, "small.md", "# one\n\ntext\n")
    write(root, "empty.md", "")
    write(root, "sub/keep.txt", _many_sections(5))
    assert indexer.scan()["success"]
    check()
    assert index_counts(indexer.writer.base.conn if isinstance(indexer.writer, SourceWriter) else indexer.writer.conn)["total_documents"] >= 10  # several sections a file
    write(root, "big.md", "# now short\n\nx\n")  # shrinks to one section
    write(root, "small.md", _many_sections(12))  # grows
    assert indexer.scan()["success"]
    check()
    (root / "sub" / "keep.txt").rename(root / "sub" / "moved.txt")
    (root / "empty.md").unlink()
    write(root, "small.md", b"\x00\x01binary" * 100)  # skipped: leaves the index
    assert indexer.scan()["success"]
    check()
    write(root, "fresh.md", _many_sections(7))
    indexer.refresh_file("fresh.md")
    check()
    write(root, "fresh.md", "# tiny\n")
    indexer.refresh_file("fresh.md")
    check()
    (root / "fresh.md").unlink()
    indexer.refresh_file("fresh.md")
    check()
    write(root, "small.md", _many_sections(3))
    assert indexer.scan()["success"]
    check()


def test_section_count_sum_matches_the_sections_after_every_change(indexer: TextIndexer, source: Path) -> None:
    _changes(indexer, source, lambda: _check(indexer.writer.conn))


def test_each_sources_section_count_matches_with_prefixes(tmp_path: Path) -> None:
    writer, indexers, roots = _sources(tmp_path, "a", "ab")
    try:
        write(roots["ab"], "x.md", _many_sections(4))
        assert indexers["ab"].scan()["success"]
        _changes(indexers["a"], roots["a"], lambda: _check(writer.conn, "a/", "ab/"))
        _check(writer.conn, "a/", "ab/")
    finally:
        writer.close()


def test_counts_read_an_index_of_their_own_made_for_older_indexes_too(tmp_path: Path) -> None:
    """Status reads its counts from the index files_counted (a narrow copy of three columns), not
    from the files' rows, which hold their sketches and titles (0.5 s at a million files); an index
    written before it existed gets it when a writer opens it."""
    db = tmp_path / "index.sqlite3"
    IndexWriter(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP INDEX files_counted")
    conn.close()
    IndexWriter(db).close()
    conn = sqlite3.connect(db)  # a connection that read the schema before would plan with that one
    for prefix in ("", "notes/"):
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT count(*), coalesce(sum(fallback_decoded), 0), coalesce(sum(section_count), 0)"
            " FROM files WHERE path >= ? AND path < ?", database.starting_with(prefix),
        ).fetchall()
        assert "COVERING INDEX files_counted" in plan[0][-1]
    conn.close()


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.text(alphabet=st.sampled_from("ab/\ud7ff\ue000\U0010fffe\U0010ffff"), max_size=4),
    text=st.text(alphabet=st.sampled_from("ab/\ud7ff\ue000\U0010fffe\U0010ffff"), max_size=6),
)
def test_starting_with_bounds_exactly_the_texts_with_the_prefix(prefix: str, text: str) -> None:
    """The range database.starting_with gives holds, as SQLite compares, the texts that start with
    the prefix and no other: also those going on with U+10FFFF, and every text for ""."""
    low, high = database.starting_with(prefix)
    conn = sqlite3.connect(":memory:")
    inside = conn.execute("SELECT ? >= ? AND ? < ?", (text, low, text, high)).fetchone()[0]
    conn.close()
    assert bool(inside) == text.startswith(prefix)


# ---- files by extension, kept in the meta ------------------------------------------------------


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


def _kept(writer: IndexWriter) -> dict[str, str]:
    return {key: value for key, value in writer.meta().items() if key.endswith(database.FORMATS_KEY)}


def test_a_sources_write_drops_the_others_count_and_each_next_scan_keeps_one_again(tmp_path: Path) -> None:
    """By design one source's added file drops every source's kept count; the next scan of each
    source, even one with nothing to do, must keep its own count again, and only its own files'."""
    writer, indexers, roots = _sources(tmp_path, "a", "b")
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
    writer, indexers, roots = _sources(tmp_path, "a", "b")
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
    writer, indexers, roots = _sources(tmp_path, "a", "b")
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
