"""Status counts sections as the sum of files.section_count. It must equal
the sections the index really holds after every kind of change, for the whole index and for each
source's prefix."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import database
from database import IndexWriter, SourceWriter, index_counts
from indexer import TextIndexer
from models import ServerConfig
from tests.conftest import write


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
    roots = {name: tmp_path / name for name in ("a", "ab")}
    index_dir = tmp_path / "idx"
    writer = IndexWriter(index_dir / "shared.sqlite3")
    try:
        indexers = {}
        for name, root in roots.items():
            root.mkdir()
            config = ServerConfig(source_directory=root.resolve(), index_output_directory=index_dir.resolve())
            indexers[name] = TextIndexer(config, SourceWriter(writer, name + "/"))
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
