"""Review of files_signed (issue #25): the covering index the first scan reads signatures from,
made at the first opening of an index written before it existed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import database
from database import IndexWriter, _mark_closed
from indexer import TextIndexer
from models import ServerConfig
from tests.conftest import write


def _as_before_files_signed(db_path: Path, note: bool) -> None:
    """Make a closed index look like one an older checkout wrote (and, with ``note``, closed cleanly)."""
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("DROP INDEX files_signed")
    conn.execute("PRAGMA incremental_vacuum")  # as an older checkout left it: no free pages for the index
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    if note:
        _mark_closed(db_path)


def test_signatures_from_files_signed_equal_the_rows_for_odd_paths(source: Path, config: ServerConfig) -> None:
    names = ["a b.md", "ünï/cödé.md", "e\u0301.md", "\u00e9.md", "x\ny.md", "Z.md", "z.md", "%_\\.md", "~/.md", "d/😀.md"]
    for n, name in enumerate(names):
        write(source, name, f"# N{n}\n\nw{n}\n")
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer._signatures = None
    rows = writer.conn.execute("SELECT path, mtime_ns, size, inode, ctime_ns, indexed_at_ns FROM files NOT INDEXED")
    assert dict(writer.file_signatures()) == {row[:5]: row[5] for row in rows}
    assert len(writer.file_signatures()) >= len(names) - 2  # the indexer may skip a name or two
    writer.close()


def test_an_index_closed_cleanly_before_files_signed_stays_trusted_after_it_is_made(source: Path, config: ServerConfig) -> None:
    """The note is taken before the index is made: that opening and the next one both trust it,
    and the file is sound."""
    write(source, "a.md", "# A\n\nalpha\n")
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    _as_before_files_signed(config.db_path, note=True)
    writer = IndexWriter(config.db_path)
    assert writer.closed_cleanly
    assert writer.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'files_signed'").fetchone()
    writer.close()
    writer = IndexWriter(config.db_path)
    assert writer.closed_cleanly
    assert writer.quick_check() == "ok"
    writer.close()


def test_a_full_disk_at_the_first_opening_does_not_keep_the_writer_from_opening(
    source: Path, config: ServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before files_signed, an existing index opened on a full disk (nothing is written at
    opening): the writer, the watcher and the first scan ran, and only writes failed. Now the
    CREATE INDEX fails with SQLITE_FULL and the writer does not open at all (the server retries
    every 30 s, no watcher, searches say indexing)."""
    for n in range(200):
        write(source, f"d/n{n}.md", f"# N{n}\n\nw{n}\n")
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    _as_before_files_signed(config.db_path, note=False)

    real_connect = database.connect

    def full_disk(db_path: Path) -> sqlite3.Connection:  # the file may not grow by a page
        conn = real_connect(db_path)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(database, "connect", full_disk)
    writer = IndexWriter(config.db_path)
    assert len(writer.file_signatures()) == 200
    writer.close()
