"""A writer's own changes of the index file are never taken for another program's (see
tests/test_written_in_place.py): its connection's checkpoint on closing when it reopens the file
(every scan checked the whole file again, and with several sources in a loop), its close while a
status read holds the lock for an instant; and in-place damage while one of its transactions is
open is not noted as its own. From a hostile review of the third fix; real servers, real files.
"""

from __future__ import annotations

import fcntl
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import index_files
from reliability_helpers import (
    MAIN_PY, RelCorpus, RelStdioServer, rel_db_path, rel_indexed, rel_run_main, rel_short, rel_status, rel_verdict, rel_wait_for_log,
)

REOPENED = "passed its integrity check: reopening it"


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[tuple[str, ...], Path, RelCorpus]:
    """40 files indexed once by `main.py index`: (the source's arguments, db, corpus)."""
    src, index_dir = tmp_path / "src", tmp_path / "idx"
    corpus = rel_indexed(src, index_dir, 40)
    return ("--source", str(src), "--index-dir", str(index_dir)), rel_db_path(src, index_dir), corpus


def test_one_harmless_outside_change_is_checked_once_not_at_every_scan(indexed) -> None:
    """chmod (a backup tool, `chmod 600`) moves the file's ctime: status says error, the next
    refresh_index checks it and reopens; that reopen's close folds the WAL into the file and the
    writer takes its own fold for another program's write. Seen: every refresh_index ran the full
    integrity check and reopened (4 of 4), status stayed "changed outside" after each."""
    args, db, corpus = indexed
    with RelStdioServer(*args, "--scan-interval", "0") as server:
        rel_wait_for_log(server, "first scan finished")
        os.chmod(db, 0o600)  # same mode: only the ctime moves
        assert rel_status(*args)["state"] == "error"
        statuses = []
        for _ in range(3):
            assert not server.call("refresh_index")["isError"]
            statuses.append(rel_short(rel_status(*args)))
        checks = server.stderr.count(REOPENED)
        assert server.close() == 0
    assert checks == 1 and statuses[-1]["state"] == "idle", (checks, statuses)


def test_several_sources_do_not_check_and_reopen_in_a_loop_after_one_outside_change(tmp_path: Path) -> None:
    """Two sources share one writer: source a's check reopens (openings + 1, and the fold sets
    written_outside again), so source b's loop scans, checks and reopens, so a's does, ... Seen:
    14 integrity checks + reopens in 5 s after one refresh_index, with no client call, going on."""
    a, b, index_dir = tmp_path / "a", tmp_path / "b", tmp_path / "idx"
    a.mkdir()
    b.mkdir()
    for folder, seed in ((a, 7), (b, 8)):
        corpus = RelCorpus(folder, random.Random(seed))
        for _ in range(30):
            corpus.add()
    args = ("--source", f"a={a}", "--source", f"b={b}", "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    db = next(path for path in index_dir.iterdir() if path.suffix == ".sqlite3")
    with RelStdioServer(*args, "--scan-interval", "0") as server:
        rel_wait_for_log(server, "first scan finished", 2)
        os.chmod(db, 0o600)
        assert not server.call("refresh_index")["isError"]
        deadline = time.monotonic() + 5  # a window to watch, not a timing assertion: one check is right
        while time.monotonic() < deadline and server.stderr.count(REOPENED) <= 2:
            time.sleep(0.1)
        checks = server.stderr.count(REOPENED)
        assert server.close() == 0
    assert checks <= 2, f"{checks} integrity checks and reopens after one outside change"


def test_a_server_closing_while_a_status_poll_holds_its_shared_lock_leaves_no_error(indexed) -> None:
    """WriterLock.holder() (every `main.py status`, every status of another server) takes a shared
    flock on the lock file for a moment; a server closing then fails try_hold, skips its note and
    its WAL truncation, and its last conn.close() folds the WAL into the file. Seen: after a clean
    shutdown status said "changed outside this program" (and the next writer checks the file)."""
    args, db, corpus = indexed
    with RelStdioServer(*args, "--scan-interval", "0") as server:
        rel_wait_for_log(server, "first scan finished")
        rel = sorted(corpus.versions)[0]
        corpus.edit(rel)
        assert not server.call("refresh_index", {"filepath": rel})["isError"]
        fd = os.open(index_files.lock_path(db), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # as holder() does, at the moment the server closes
            assert server.close() == 0
        finally:
            os.close(fd)
    status = rel_status(*args)
    assert status["state"] == "idle", rel_short(status)


def test_in_place_damage_while_a_scan_transaction_is_open_is_not_noted_as_the_writers_own(tmp_path: Path) -> None:
    """_writing asks left_changed once, at the start of the outermost write, and notes the file as
    its own at the end: pages zeroed by another program while a scan's batch (one transaction of
    up to 10,000 files) is being written are noted as this writer's. Seen: status idle, a second
    `main.py index` checked nothing, the file stayed "database disk image is malformed"."""
    src, index_dir = tmp_path / "src", tmp_path / "idx"
    corpus = rel_indexed(src, index_dir, 120)
    args = ("--source", str(src), "--index-dir", str(index_dir))
    db = rel_db_path(src, index_dir)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        old_leaves = [no for (no,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'sections' AND pagetype = 'leaf'")]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    for _ in range(2000):
        corpus.add()
    scan = subprocess.Popen([sys.executable, str(MAIN_PY), "index", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = index_files.lock_path(db)
    while True:  # the record says "indexing <done> <total>": written inside the batch's transaction
        fields = lock.read_bytes()[:100].split()
        if len(fields) > 3 and fields[1] == b"indexing" and 0 < int(fields[2]) < int(fields[3]) - 200:
            break
        assert scan.poll() is None, scan.communicate()
        time.sleep(0.005)
    with open(db, "r+b") as handle:  # another program zeroes old pages in place (same inode, no lock)
        for no in old_leaves[len(old_leaves) // 2:-1]:
            handle.seek((no - 1) * page_size)
            handle.write(bytes(page_size))
    _, err = scan.communicate(timeout=120)
    assert scan.returncode == 0, err
    after_scan = rel_short(rel_status(*args))
    assert rel_run_main("index", *args).returncode == 0
    verdict = rel_verdict(db)
    assert after_scan["state"] == "error" or verdict == "ok", (after_scan, verdict[:100], rel_short(rel_status(*args)))
