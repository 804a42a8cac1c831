"""What a server's status says before its own first scan has finished: "starting" while another
process holds the write lock (whatever an earlier run left), then that first scan's verdict, per
source; "error" at once when it cannot open its index to write. From a hostile review (attack18,
a0e7ed5) of 0.9.3's status change; real servers, real files."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.reliability_helpers import rel_notes, rel_serving, rel_db_path, rel_indexed, rel_run_main, rel_short, rel_unprivileged


@contextmanager
def write_lock_held(db: Path) -> Iterator[None]:
    """Another process's hold on the index's write lock (an flock on <index>.lock), as a
    `main.py index` run or a second server holds it while it writes."""
    fd = os.open(f"{db}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_a_server_behind_another_writer_says_starting_then_its_first_scans_verdict(tmp_path: Path) -> None:
    """While another process holds the write lock (not scanning), the server says starting,
    with a writer_pid, whatever the earlier run left (idle); the source renamed
    away meanwhile makes the first scan fail, and the server says error (not starting) once the
    lock is free; with two sources, only the broken one's part says error; the wait_for_scan idiom
    ends."""
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    rel_notes(alpha)
    rel_notes(beta)
    index_dir = tmp_path / "idx"
    done = rel_run_main("index", "--source", str(alpha), "--source", str(beta), "--index-dir", str(index_dir))
    assert done.returncode == 0, done.stderr
    db = next(index_dir.glob("*.sqlite3"))
    held = write_lock_held(db)
    held.__enter__()
    try:
        with rel_serving(alpha, beta, index_dir=index_dir) as server:
            waiting = server.status()
            assert waiting["state"] == "starting" and waiting.get("writer_pid") is not None, rel_short(waiting)
            assert {part["state"] for part in waiting["sources"]} == {"starting"}
            beta.rename(tmp_path / "beta.old")
            again = server.status()
            assert again["state"] == "starting" and again.get("writer_pid") is not None, rel_short(again)
            held.__exit__(None, None, None)
            held = None
            verdict = server.wait_for_scan()
            states = {part["name"]: part["state"] for part in verdict["sources"]}
            assert verdict["state"] == "error" and states == {"alpha": "idle", "beta": "error"}, (rel_short(verdict), states)
            assert "source directory" in verdict["last_error"] and verdict["errors_encountered"] >= 1, rel_short(verdict)
    finally:
        if held is not None:
            held.__exit__(None, None, None)


def test_a_server_that_cannot_open_its_index_says_error_at_once(tmp_path: Path) -> None:
    """The index file cannot be opened to write (a read-only file) or made (the index
    directory is a file): error from the first status call, not starting; wait_for_scan ends."""
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    rel_indexed(source, index_dir, 5)
    db = rel_db_path(source, index_dir)
    db.chmod(0o400)
    try:
        with rel_serving(source, index_dir=index_dir, prefix=rel_unprivileged()) as server:
            status = server.wait_for_scan()
            assert status["state"] == "error" and "cannot open or create the index" in status["last_error"], rel_short(status)
    finally:
        db.chmod(0o600)
    other = tmp_path / "other"
    rel_notes(other)
    (tmp_path / "idx-file").write_text("not a folder\n")
    with rel_serving(other, index_dir=tmp_path / "idx-file") as server:
        status = server.status()
        assert status["state"] == "error" and status["errors_encountered"] == 1, rel_short(status)
