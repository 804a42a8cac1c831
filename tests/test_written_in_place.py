"""An index file written in place by another program under a running server (the same inode, no
lock taken: truncated, pages overwritten, an older copy copied over it): status does not say all is
well, one refresh_index mends it, and looking at the file never drops the locks SQLite holds on it
in the server's process (closing any descriptor of a file does: another process's client would
then delete the server's WAL). From a hostile review of 0.9.1's first fix; real servers, real files.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reliability_helpers import RelCorpus, RelStdioServer, rel_db_path, rel_indexed, rel_run_main, rel_short, rel_verdict


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path, Path, RelCorpus]:
    """A source of 120 files, indexed once by `main.py index`: (source, index dir, db, corpus)."""
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    corpus = rel_indexed(source, index_dir, 120)
    return source, index_dir, rel_db_path(source, index_dir), corpus


def serving(source: Path, index_dir: Path) -> RelStdioServer:
    return RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0")


def not_found(server: RelStdioServer, corpus: RelCorpus) -> list[str]:
    """The files a search for their own token does not find (an error counts as not found)."""
    lost = []
    for token, rel in corpus.live_tokens().items():
        result = server.call("search", {"query": token})
        if result["isError"] or [hit["path"] for hit in result["structuredContent"]["results"]] != [rel]:
            lost.append(rel)
    return lost


def garble_past_first_page(db: Path) -> None:
    """Random bytes over the middle half of the file: its first page (the SQLite header) intact."""
    size = db.stat().st_size
    with open(db, "r+b") as handle:
        handle.seek(size // 4)
        handle.write(random.Random(1).randbytes(size // 2))


def truncate(db: Path) -> None:
    os.truncate(db, 0)


def leaf_pages(db: Path, table: str) -> list[int]:
    """The leaf pages of ``table``'s b-tree, read through a read-only connection (dbstat)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [no for (no,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,))]
    finally:
        conn.close()


def zero_pages(db: Path, pages: list[int]) -> None:
    """Another program writes zeros over these pages in place (same inode, same size, no lock)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    with open(db, "r+b") as handle:
        for no in pages:
            handle.seek((no - 1) * page_size)
            handle.write(bytes(page_size))


def damage_sections(db: Path) -> None:
    """Zeros over the second half of the sections table's leaf pages (the files and meta tables
    intact): status's counts still read, 61 of 120 searches fail."""
    pages = leaf_pages(db, "sections")
    zero_pages(db, pages[len(pages) // 2:])


def token_of(corpus: RelCorpus, rel: str) -> str:
    return next(token for token, path in corpus.live_tokens().items() if path == rel)


@pytest.mark.parametrize("write", [truncate, garble_past_first_page])
def test_status_of_an_index_written_in_place_under_a_server_is_error(indexed, write) -> None:
    """The reader's page cache answered as before (idle, every file counted) while every search failed."""
    source, index_dir, db, corpus = indexed
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        inode = db.stat().st_ino
        write(db)
        assert db.stat().st_ino == inode
        status = server.status()
        assert status["state"] == "error" and status["errors_encountered"] >= 1 and "refresh_index" in status["last_error"], rel_short(status)


def test_a_server_is_not_idle_on_an_earlier_runs_index_before_its_own_first_scan(indexed) -> None:
    """Status said idle from what `main.py index` left before the server's writer had opened it,
    then "starting" once it had (an index emptied in that window read as "not initialised yet", no
    error: the test above failed so in CI). Another process holding the write lock keeps the
    server's writer from opening."""
    from index_files import WriterLock, lock_path

    source, index_dir, db, _ = indexed
    other = WriterLock(lock_path(db))
    assert other.try_hold()
    with serving(source, index_dir) as server:
        try:
            assert server.status()["state"] == "starting"
        finally:
            other.release()
        assert server.wait_for_scan()["state"] == "idle"


def test_an_index_emptied_before_a_servers_first_scan_is_named_while_it_is_starting(indexed) -> None:
    """Status asked before the server's writer opened said "error" (the file changed outside), then
    "indexing", then "idle": a client taking that first "error" for its first scan's verdict saw 0
    files (test_corruption's zero_length case failed so). A server's Daemons, not started yet: what
    a status call meets in its first instants."""
    from daemon import Daemons
    from models import ServerConfig
    from status import server_status

    source, index_dir, db, _ = indexed
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=index_dir.resolve())
    daemons = Daemons(config)
    assert server_status(config, daemons)["state"] == "starting"
    truncate(db)
    status = server_status(config, daemons)
    assert status["state"] == "starting" and status["errors_encountered"] == 1 and "changed outside" in status["last_error"], rel_short(status)


def test_a_hard_link_of_the_index_is_not_an_error(tmp_path: Path) -> None:
    """A hard link made to the index file (a backup by links: `cp -al`, rsnapshot) moves only its
    change time: status says the file changed outside until a scan checks it, and a check that
    passes takes that back (e3ee6c7 counted it as an error for ever; attack19, 512db97)."""
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    rel_indexed(source, index_dir, 10)
    db = rel_db_path(source, index_dir)
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        os.link(db, tmp_path / "backup.sqlite3")
        server.call("refresh_index")
        after = server.status()
        server.close()
    assert after["state"] == "idle" and after["errors_encountered"] == 0, rel_short(after)


@pytest.mark.parametrize("write", [truncate, garble_past_first_page])
def test_one_refresh_mends_an_index_written_in_place_before_anything_reads_it(indexed, write) -> None:
    """The scan's own connection answered from its cache too: it reported success with 0 files."""
    source, index_dir, db, corpus = indexed
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        write(db)
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"], refreshed
        status = server.status()
        assert status["state"] == "idle" and status["indexed_files"] == len(corpus.versions), (refreshed["structuredContent"], rel_short(status))
        assert not not_found(server, corpus)
        assert server.close() == 0
    assert rel_verdict(db) == "ok"


def test_an_older_copy_copied_over_the_index_under_a_server_is_seen_and_mended(tmp_path: Path) -> None:
    """`cp backup.sqlite3 index.sqlite3` (same inode, SQLite's header): the refresh succeeded with 0
    files, 71 of 120 searches failed after, and the server's clean close vouched for the file."""
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    corpus = rel_indexed(source, index_dir, 60)
    args = ("--source", str(source), "--index-dir", str(index_dir))
    db = rel_db_path(source, index_dir)
    backup = tmp_path / "backup.sqlite3"
    shutil.copyfile(db, backup)
    for _ in range(60):
        corpus.add()
    for rel in sorted(corpus.versions)[:20]:
        corpus.edit(rel)
    assert rel_run_main("index", *args).returncode == 0
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["indexed_files"] == 120
        inode = db.stat().st_ino
        shutil.copyfile(backup, db)  # the existing file opened with O_TRUNC: the same inode
        assert db.stat().st_ino == inode
        assert server.status()["state"] == "error"
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"], refreshed
        status = server.status()
        assert status["state"] == "idle" and status["indexed_files"] == len(corpus.versions), rel_short(status)
        assert not not_found(server, corpus)
        assert server.close() == 0
    assert rel_verdict(db) == "ok"


def _in_another_process(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def look_with_an_sqlite_client(db: Path) -> None:
    """What a user looking at the index does: open it in any SQLite client, read, close."""
    _in_another_process(f"import sqlite3; c = sqlite3.connect({str(db)!r}); c.execute('SELECT count(*) FROM files').fetchone(); c.close()")


@pytest.mark.parametrize("touched", [False, True], ids=["as_started", "after_a_touch_was_checked"])
def test_an_sqlite_client_looking_at_the_index_does_not_cut_a_running_server_off(indexed, touched) -> None:
    """The first fix read the file's header with open()/close() in the server at each scan, which
    dropped the locks of its SQLite connections: a client closing after it deleted the server's WAL
    and -shm, and from then on the server did not see what other processes wrote (a `main.py index`
    run). ``touched``: the file's time changed by another program, which the scan checks and reopens."""
    source, index_dir, db, _ = indexed
    args = ("--source", str(source), "--index-dir", str(index_dir))
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        if touched:
            os.utime(db, ns=(time.time_ns(), time.time_ns() + 10**9))
            assert server.status()["state"] == "error"
            assert not server.call("refresh_index")["isError"]
            assert server.call("search", {"query": "river"})["isError"] is False
            assert server.status()["state"] == "idle"
        look_with_an_sqlite_client(db)
        assert Path(f"{db}-wal").exists() and Path(f"{db}-shm").exists(), sorted(os.listdir(index_dir))
        time.sleep(1.1)  # last_scan is to the second: let the next scan's differ (not a timing assertion)
        assert rel_run_main("index", *args).returncode == 0
        theirs = json.loads(rel_run_main("status", *args, "--json").stdout)["last_scan"]
        assert server.status()["last_scan"] == theirs


def test_a_writer_in_another_process_is_not_taken_for_another_program(indexed) -> None:
    """Every writer of the index says in its lock file what it left the file as: a `main.py index`
    run beside a server is no reason for an error."""
    source, index_dir, db, corpus = indexed
    args = ("--source", str(source), "--index-dir", str(index_dir))
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        corpus.add()
        assert rel_run_main("index", *args).returncode == 0
        status = server.status()
        assert status["state"] == "idle" and status["indexed_files"] == len(corpus.versions), rel_short(status)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    conn.close()


# From a hostile review of the second fix: every write noted the file as its own, damaged or not.


def test_a_one_file_refresh_after_an_in_place_write_does_not_hide_it(indexed) -> None:
    """refresh_index of one file (as the watcher, a search that finds a file changed, or a client
    does) commits and notes the damaged file as what this writer left: status said idle, the next
    full refresh_index reported success with 0 files and checked nothing, and 61 of 120 searches
    failed ("database disk image is malformed") with status idle and 0 errors throughout."""
    source, index_dir, db, corpus = indexed
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        damage_sections(db)
        rel = sorted(corpus.versions)[0]
        corpus.edit(rel)
        assert not server.call("refresh_index", {"filepath": rel})["isError"]
        after_one = rel_short(server.status())
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"], refreshed
        lost = not_found(server, corpus)
        assert not lost, (len(lost), after_one, refreshed["structuredContent"], rel_short(server.status()))
        assert server.close() == 0
    assert rel_verdict(db) == "ok"


def test_a_live_refresh_after_an_in_place_write_is_not_vouched_for_by_the_clean_close(indexed) -> None:
    """The watcher's refresh of an edited file noted the damaged file as left by this writer; the
    clean close then wrote the .closed mark, the next start skipped its integrity check, and after a
    restart and a full refresh_index 61 of 120 searches still failed, status idle with 0 errors."""
    source, index_dir, db, corpus = indexed
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        damage_sections(db)
        rel = sorted(corpus.versions)[0]
        corpus.edit(rel)
        token = token_of(corpus, rel)
        for _ in range(600):  # wait for the watcher (or the search's own refresh) to index the edit
            result = server.call("search", {"query": token})
            if not result["isError"] and result["structuredContent"]["results"]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the edit was never indexed")
        assert server.close() == 0
    closed_mark = Path(f"{db}.closed").exists()
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] in ("idle", "error")
        assert not server.call("refresh_index")["isError"]
        lost = not_found(server, corpus)
        assert not lost, (len(lost), {"closed mark written": closed_mark}, rel_short(server.status()))
        assert server.close() == 0
    assert rel_verdict(db) == "ok"


def test_main_py_index_checks_an_index_written_in_place_as_status_says_it_will(indexed) -> None:
    """`main.py status` says "another program wrote the index file ...; the next scan
    (refresh_index) checks it": `main.py index` then opened the writer (noting the damaged file as
    what it left), checked nothing, reported 0 files indexed; status went back to idle with 0 errors
    and the file stayed malformed."""
    source, index_dir, db, corpus = indexed
    args = ("--source", str(source), "--index-dir", str(index_dir))
    damage_sections(db)
    before = json.loads(rel_run_main("status", *args, "--json").stdout)
    assert before["state"] == "error" and "next scan" in before["last_error"], rel_short(before)
    done = rel_run_main("index", *args)
    assert done.returncode == 0, done.stderr
    after = json.loads(rel_run_main("status", *args, "--json").stdout)
    assert rel_verdict(db) == "ok", (rel_short(after), done.stderr[-300:])


def test_main_py_index_beside_a_server_does_not_hide_an_in_place_write_from_it(indexed) -> None:
    """The same through a second process: the server said error, a `main.py index` run beside it
    noted the damaged file as left by a writer, and the server's status and refresh_index took the
    file as sound from then on."""
    source, index_dir, db, corpus = indexed
    args = ("--source", str(source), "--index-dir", str(index_dir))
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        damage_sections(db)
        assert rel_run_main("index", *args).returncode == 0
        status = rel_short(server.status())
        assert not server.call("refresh_index")["isError"]
        lost = not_found(server, corpus)
        assert not lost, (len(lost), status, rel_short(server.status()))
        assert server.close() == 0
    assert rel_verdict(db) == "ok"


def test_an_in_place_write_that_restores_the_file_time_is_seen(indexed) -> None:
    """The record holds the file's ctime, but left_changed compares only size and mtime: pages
    zeroed in place and the mtime put back (`touch -r`, rsync/cp -p of a same-size copy) went
    unseen; status idle, refresh_index checked nothing, 61 of 120 searches failed."""
    source, index_dir, db, corpus = indexed
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        before = db.stat()
        damage_sections(db)
        os.utime(db, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert db.stat().st_size == before.st_size and db.stat().st_ctime_ns != before.st_ctime_ns
        status = rel_short(server.status())
        assert not server.call("refresh_index")["isError"]
        lost = not_found(server, corpus)
        assert not lost, (len(lost), status)
        assert server.close() == 0


def test_a_read_only_look_after_a_server_was_killed_is_not_an_error(indexed) -> None:
    """A server killed (SIGKILL: an MCP host gone, the OOM killer) leaves committed frames in the WAL.
    A client that only reads closes as the last connection, so SQLite copies them into the file and
    deletes the WAL: status said the file was changed outside, for a SELECT, over a sound index."""
    source, index_dir, db, corpus = indexed
    args = ("--source", str(source), "--index-dir", str(index_dir))
    with serving(source, index_dir) as server:
        assert server.wait_for_scan()["state"] == "idle"
        rel = sorted(corpus.versions)[0]
        corpus.edit(rel)
        assert not server.call("refresh_index", {"filepath": rel})["isError"]
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
    assert Path(f"{db}-wal").stat().st_size > 0
    assert json.loads(rel_run_main("status", *args, "--json").stdout)["state"] == "idle"
    look_with_an_sqlite_client(db)
    status = json.loads(rel_run_main("status", *args, "--json").stdout)
    assert status["state"] == "idle" and status["errors_encountered"] == 0, rel_short(status)
    assert rel_verdict(db) == "ok"
