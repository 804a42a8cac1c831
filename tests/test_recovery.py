"""A damaged index is moved aside and rebuilt; a killed indexer leaves a consistent index."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
from search import search
from status import read_status
from tests.conftest import MAIN_PY, write


def damage(db: Path, how: str) -> None:
    if how == "not sqlite":
        db.write_bytes(b"this is a text file, not a database" * 100)
    elif how == "truncated":
        db.write_bytes(db.read_bytes()[:100])
    elif how == "garbage in data pages":
        # Past every table's root page: opening reads roots, so only quick_check can see this damage.
        conn = sqlite3.connect(db)
        last_root = conn.execute("SELECT max(rootpage) FROM sqlite_master").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.close()
        data = bytearray(db.read_bytes())
        start = last_root * page_size  # where page last_root + 1 begins
        assert start < len(data), "the index should have data pages past its roots"
        data[start:] = bytes((i * 37 + 11) % 256 for i in range(len(data) - start))
        db.write_bytes(bytes(data))
    elif how == "foreign":
        db.unlink()
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE customers (name TEXT)")
        conn.commit()
        conn.close()


@pytest.mark.parametrize("how", ["not sqlite", "truncated", "garbage in data pages", "foreign"])
def test_damaged_index_is_moved_aside_and_rebuilt(config: ServerConfig, source: Path, how: str, caplog: pytest.LogCaptureFixture) -> None:
    for i in range(40):
        write(source, f"n{i}.md", f"# Note {i}\n\nunique{i} " + "padding words " * 200)
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.truncate_wal()
    writer.close()
    damage(config.db_path, how)

    writer = IndexWriter(config.db_path)
    indexer = TextIndexer(config, writer)
    found_on_open = how != "garbage in data pages"  # a bad header is seen on open; damaged pages by quick_check
    assert indexer.check_integrity() is found_on_open
    assert writer.recovered_from is not None
    before = read_status(config, indexer)
    assert before["errors_encountered"] == 1 and "moved it to" in (before["last_error"] or "")
    indexer.scan()
    assert search(config.db_path, "unique7", 5)["results"][0]["path"] == "n7.md"
    moved = list(config.db_path.parent.glob("*.corrupt-*"))
    assert moved, "the damaged file is kept for inspection"
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in moved), "a moved-aside copy stays private"
    assert "moved it to" in caplog.text
    # Rebuilt: nothing is wrong any more, and the count keeps the event.
    status = read_status(config, indexer)
    assert status["errors_encountered"] == 1 and status["last_error"] is None, status
    writer.close()


def test_zero_length_file_is_simply_initialised(config: ServerConfig, source: Path) -> None:
    config.db_path.parent.mkdir(parents=True)
    config.db_path.write_bytes(b"")
    write(source, "a.md", "hello")
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    assert writer.recovered_from is None
    assert search(config.db_path, "hello", 5)["results"][0]["path"] == "a.md"
    writer.close()


def running(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside ``function`` now."""
    frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
    while frame is not None and frame.f_code.co_name != function:
        frame = frame.f_back
    return frame is not None


def test_an_index_file_deleted_while_a_writer_opens_it_is_made_again(config: ServerConfig, source: Path) -> None:
    """Someone clears the index directory while a writer is opening the index: the writer opens
    what is there then (a new index) instead of failing, which left a server refusing every call
    until it tried again. A second connection holds the file locked, so the writer's first
    statement on the file it connected to waits until the files are gone and the lock let go."""
    write(source, "a.md", "hello")
    IndexWriter(config.db_path).close()
    holder = sqlite3.connect(config.db_path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the lock; kept until closed
    opened: list[IndexWriter | Exception] = []

    def open_writer() -> None:
        try:
            opened.append(IndexWriter(config.db_path))
        except Exception as exc:  # noqa: BLE001 - what the test reports
            opened.append(exc)

    thread = threading.Thread(target=open_writer)
    thread.start()
    while not running(thread, "_prepare_schema"):  # connected: its first statement waits for the lock
        assert thread.is_alive(), f"the writer never reached its schema: {opened}"
        time.sleep(0.001)
    for path in config.db_path.parent.iterdir():
        path.unlink()
    holder.close()
    thread.join()
    writer = opened[0]
    assert isinstance(writer, IndexWriter), writer
    assert not writer.file_replaced()
    TextIndexer(config, writer).scan()
    assert search(config.db_path, "hello", 5)["results"][0]["path"] == "a.md"
    writer.close()


def test_kill_during_indexing_leaves_a_consistent_index(source: Path, tmp_path: Path) -> None:
    for i in range(3000):
        write(source, f"d{i // 100}/f{i}.md", f"# File {i}\n\ntoken{i} " + "lorem ipsum dolor " * 50)
    args = [sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(tmp_path / "idx")]
    for delay in (0.2, 0.6):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60  # killed once it writes, however slow the machine is
        while not any((tmp_path / "idx").glob("*.sqlite3")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        db = next((tmp_path / "idx").glob("*.sqlite3"), None)
        if db is None:
            continue
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        files, sections = conn.execute("SELECT count(*), coalesce(sum(section_count), 0) FROM files").fetchone()
        assert conn.execute("SELECT count(*) FROM sections").fetchone()[0] == sections
        assert conn.execute("SELECT count(*) FROM sections_fts_docsize").fetchone()[0] == sections
        conn.close()
    assert subprocess.run(args, capture_output=True, timeout=300).returncode == 0
    db = next((tmp_path / "idx").glob("*.sqlite3"))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 3000
    assert conn.execute("SELECT count(*) FROM sections_fts WHERE sections_fts MATCH 'token2999'").fetchone()[0] == 1
