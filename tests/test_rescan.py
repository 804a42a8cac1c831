"""The writer keeps the index's file signatures between scans. Each way the files table can change
under that copy (this indexer's writes, a rolled-back batch, another connection, an index deleted
or replaced) must leave the next scan seeing the index as it really is. The first scan reads the
signatures from a covering index (files_signed), made at the first opening of an index written
before it existed."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

import index_writer
import indexer as indexer_module
from index_files import mark_closed
from index_writer import IndexWriter
from indexer import RACY_WINDOW_NS, TextIndexer
from models import ServerConfig
from search import search
from status import read_status
from tests.conftest import write



@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file's ctime cannot be dated back like its mtime, so a freshly written file would be
    re-checked by hash until RACY_WINDOW_NS has passed; these tests count scans' work, so the window
    is closed (tests/test_indexer.py covers it)."""
    monkeypatch.setattr(indexer_module, "RACY_WINDOW_NS", 0)


def found(config: ServerConfig, query: str) -> list[str]:
    return [hit["path"] for hit in search(config.db_path, query, 20)["results"]]


def settled(path: Path, age_s: int = 60) -> Path:
    """Date the file well before now, so a scan trusts its signature without re-checking the hash."""
    stamp = time.time_ns() - age_s * 1_000_000_000 - 10 * RACY_WINDOW_NS
    os.utime(path, ns=(stamp, stamp))
    return path


def scan_work(indexer: TextIndexer) -> int:
    """Scan; return how many files it found to read, re-verify or remove."""
    assert indexer.scan()["success"]
    return indexer.progress.files_total


def scanned_twice(indexer: TextIndexer) -> None:
    """Index, then scan again so the signatures are the kept ones."""
    indexer.scan()
    assert scan_work(indexer) == 0


def test_signatures_are_kept_until_the_files_table_changes(indexer: TextIndexer, source: Path) -> None:
    settled(write(source, "a.md", "alpha"))
    scanned_twice(indexer)
    writer = indexer.writer
    kept = writer.file_signatures()
    assert writer.file_signatures() is kept
    with writer.transaction():
        writer.set_meta("unrelated", "value")
    assert writer.file_signatures() is kept
    stored = writer.stored_file("a.md")
    assert stored is not None
    with writer.transaction():
        writer.mark_verified(stored.file_id, time.time_ns(), stored.mtime_ns, stored.inode, stored.ctime_ns)
    assert writer.file_signatures() is not kept


def test_signatures_read_inside_a_transaction_are_not_kept(indexer: TextIndexer, source: Path) -> None:
    settled(write(source, "a.md", "alpha"))
    scanned_twice(indexer)
    writer = indexer.writer
    stored = writer.stored_file("a.md")
    assert stored is not None
    with pytest.raises(RuntimeError), writer.transaction():
        writer.remove_file(stored.file_id)
        assert [signature[0] for signature in writer.file_signatures()] == []
        raise RuntimeError("roll back")
    assert [signature[0] for signature in writer.file_signatures()] == ["a.md"]
    assert scan_work(indexer) == 0


def test_a_file_changed_between_scans_is_read_again(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    settled(write(source, "a.md", "original words"))
    settled(write(source, "b.md", "steady words"))
    scanned_twice(indexer)
    settled(write(source, "a.md", "replaced words"), age_s=30)  # same size, other mtime
    assert scan_work(indexer) == 1
    assert found(config, "replaced") == ["a.md"]
    assert found(config, "original") == []
    assert scan_work(indexer) == 0


def test_refresh_of_single_files_then_a_scan_neither_reads_them_again_nor_loses_them(
    indexer: TextIndexer, config: ServerConfig, source: Path
) -> None:
    settled(write(source, "a.md", "alpha before"))
    settled(write(source, "b.md", "bravo words"))
    scanned_twice(indexer)
    (source / "b.md").unlink()
    assert indexer.refresh_file("b.md")["files_removed"] == 1
    assert scan_work(indexer) == 0
    settled(write(source, "a.md", "alpha edited"), age_s=30)
    settled(write(source, "c.md", "charlie added"))
    assert indexer.refresh_file("a.md")["files_processed"] == 1
    assert indexer.refresh_file("c.md")["files_processed"] == 1
    assert scan_work(indexer) == 0
    assert found(config, "edited") == ["a.md"]
    assert found(config, "charlie") == ["c.md"]
    assert found(config, "bravo") == []


def test_a_rolled_back_batch_leaves_its_files_to_be_read_again(
    indexer: TextIndexer, config: ServerConfig, source: Path
) -> None:
    settled(write(source, "a.md", "alpha stale"))
    scanned_twice(indexer)
    settled(write(source, "a.md", "alpha fresh"), age_s=30)
    settled(write(source, "b.md", "bravo new"))
    # A trigger in the writer's own temp schema fails the batch at b.md, after a.md was rewritten
    # in the same transaction; no other connection sees it.
    indexer.writer.conn.execute(
        "CREATE TEMP TRIGGER fail_b BEFORE INSERT ON files WHEN NEW.path = 'b.md'"
        " BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
    )
    assert indexer.scan()["success"] is False
    indexer.writer.conn.execute("DROP TRIGGER temp.fail_b")
    assert found(config, "fresh") == [] and found(config, "stale") == ["a.md"]
    assert indexer.scan()["files_processed"] == 2
    assert found(config, "fresh") == ["a.md"]
    assert found(config, "bravo") == ["b.md"]
    assert scan_work(indexer) == 0


def test_a_commit_by_another_connection_is_seen_by_the_next_scan(
    indexer: TextIndexer, config: ServerConfig, source: Path
) -> None:
    settled(write(source, "a.md", "alpha words"))
    settled(write(source, "b.md", "bravo words"))
    scanned_twice(indexer)
    other = IndexWriter(config.db_path)
    stored = other.stored_file("a.md")
    assert stored is not None
    with other.transaction():
        other.remove_file(stored.file_id)
    other.close()
    assert found(config, "alpha") == []
    assert scan_work(indexer) == 1
    assert found(config, "alpha") == ["a.md"]
    assert scan_work(indexer) == 0


@pytest.mark.parametrize("seen_by_a_reader", [True, False])
@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_an_index_deleted_or_replaced_under_the_indexer_is_filled_again(
    indexer: TextIndexer, config: ServerConfig, source: Path, how: str, seen_by_a_reader: bool
) -> None:
    for i in range(3):
        settled(write(source, f"n{i}.md", f"note{i} words"))
    scanned_twice(indexer)
    for leftover in config.db_path.parent.iterdir():
        leftover.unlink()
    if how == "replaced":
        config.db_path.write_bytes(b"not an index at all\n" * 100)
    if seen_by_a_reader:
        assert read_status(config, indexer)["indexed_files"] == 0  # a reader fails, as a search would
        assert indexer.damage_suspected
    assert indexer.scan()["files_processed"] == 3
    assert [found(config, f"note{i}") for i in range(3)] == [["n0.md"], ["n1.md"], ["n2.md"]]
    assert scan_work(indexer) == 0


def test_the_first_scan_reads_signatures_from_an_index_of_their_own_made_for_older_indexes_too(
    indexer: TextIndexer, source: Path, config: ServerConfig
) -> None:
    """file_signatures reads the covering index files_signed, not the files' rows (whose pages lie
    among the sections': 33 s against 2 s from a cold cache at a million files); an index written
    before it existed gets it when a writer opens it."""
    for n in range(30):
        write(source, f"d{n % 3}/n{n}.md", f"# Note {n}\n\nword{n}\n")
    indexer.scan()
    indexer.writer.close()
    conn = sqlite3.connect(config.db_path)
    with conn:
        conn.execute("DROP INDEX files_signed")
    expected = {row[:5]: row[5] for row in conn.execute("SELECT path, mtime_ns, size, inode, ctime_ns, indexed_at_ns FROM files NOT INDEXED")}
    conn.close()
    writer = IndexWriter(config.db_path)
    statements: list[str] = []
    writer.conn.set_trace_callback(statements.append)
    assert dict(writer.file_signatures()) == expected and len(expected) == 30
    writer.conn.set_trace_callback(None)
    (read,) = [sql for sql in statements if "FROM files" in sql]
    plan = sqlite3.connect(config.db_path).execute(f"EXPLAIN QUERY PLAN {read}").fetchall()
    assert "COVERING INDEX files_signed" in plan[0][-1]
    writer.close()


# ---- files_signed, the covering index the signatures are read from ------------------------------


def _as_before_files_signed(db_path: Path, note: bool) -> None:
    """Make a closed index look like one an older checkout wrote (and, with ``note``, closed cleanly)."""
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("DROP INDEX files_signed")
    conn.execute("PRAGMA incremental_vacuum")  # as an older checkout left it: no free pages for the index
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    if note:
        mark_closed(db_path)


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

    real_connect = index_writer.connect

    def full_disk(db_path: Path) -> sqlite3.Connection:  # the file may not grow by a page
        conn = real_connect(db_path)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(index_writer, "connect", full_disk)
    writer = IndexWriter(config.db_path)
    assert len(writer.file_signatures()) == 200
    writer.close()
