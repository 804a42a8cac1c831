"""Hostile file systems: every odd entry is indexed correctly or skipped with a reason, nothing
outside the source is read, and nothing hangs (scans run in a subprocess or a thread with a
deadline)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from reliability_helpers import RelCorpus, rel_db_path, rel_run_main, rel_token, rel_unprivileged

import database
import index_queries
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ScanProgress, ServerConfig
from search import search

HANG_TIMEOUT = 120
SECRET = "zqsecretoutsideqz"


def skipped_by_path(db: Path) -> dict[str, str]:
    return {path: reason for path, reason, _ in index_queries.skipped_files(database.reader(db))}


def found(db: Path, token: str) -> list[str]:
    return [hit["path"] for hit in search(db, token, 100)["results"]]


def index_cli(source: Path, index_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    done = rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir), *extra, timeout=HANG_TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done


def test_hostile_tree_is_indexed_or_skipped_with_reasons(tmp_path: Path) -> None:
    source, index_dir, outside = tmp_path / "src", tmp_path / "idx", tmp_path / "outside"
    source.mkdir()
    outside.mkdir()
    (outside / "secret.md").write_text(f"do not index {SECRET}\n")
    (source / "plain.md").write_text(f"plain {rel_token(1, 0)}\n")
    os.mkfifo(source / "fifo.md")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(source / "sock.md"))
    (source / "loop").mkdir()
    os.symlink("..", source / "loop" / "up")  # directory loop
    os.symlink("self.md", source / "self.md")  # a link to itself
    os.symlink(outside / "secret.md", source / "leak.md")
    os.symlink(outside, source / "leakdir")
    os.symlink("missing.md", source / "broken.md")
    (source / "new\nline.md").write_text(f"newline name {rel_token(2, 0)}\n")
    (source / os.fsdecode(b"bad\xffname.md")).write_text("undecodable name\n")
    with open(source / "sparse.md", "wb") as handle:
        handle.truncate(8 << 30)  # 8 GiB, all hole
    deep = source
    for _ in range(300):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom.md").write_text(f"three hundred deep {rel_token(3, 0)}\n")
    (source / "blob.md").write_bytes(b"\x00\x01\x02binary" * 100)

    try:
        done = index_cli(source, index_dir, "--max-file-size-mb", "1")
    finally:
        sock.close()
    db = rel_db_path(source, index_dir, max_file_size_mb=1.0)
    assert found(db, rel_token(1, 0)) == ["plain.md"]
    assert found(db, rel_token(2, 0)) == ["new\nline.md"]
    assert found(db, rel_token(3, 0)) == ["d/" * 300 + "bottom.md"]
    assert found(db, SECRET) == []
    skipped = skipped_by_path(db)
    expected = {
        "fifo.md": "not_regular_file",
        "sock.md": "not_regular_file",
        "loop/up/": "duplicate_link",
        "leak.md": "symlink_outside_source",
        "leakdir/": "symlink_outside_source",
        "broken.md": "broken_symlink",
        "bad\ufffdname.md": "undecodable_name",
        "sparse.md": "too_large",
        "blob.md": "binary",
    }
    assert {path: skipped.get(path) for path in expected} == expected, skipped
    assert skipped.get("self.md") in ("symlink_loop", "broken_symlink"), skipped
    status = json.loads(rel_run_main(
        "status", "--source", str(source), "--index-dir", str(index_dir), "--max-file-size-mb", "1", "--json"
    ).stdout)
    assert status["indexed_files"] == 3 and status["errors_encountered"] == 0, status
    assert "undecodable_name" in done.stderr and "fifo.md" in done.stderr


def test_directory_of_50k_files(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    big = source / "big"
    big.mkdir(parents=True)
    for n in range(50_000):
        (big / f"f{n}.txt").write_text(f"file {rel_token(n, 0)}\n")
    index_cli(source, index_dir)
    db = rel_db_path(source, index_dir)
    status = json.loads(rel_run_main("status", "--source", str(source), "--index-dir", str(index_dir), "--json").stdout)
    assert status["indexed_files"] == 50_000, status
    for n in random.Random(5).sample(range(50_000), 50):
        assert found(db, rel_token(n, 0)) == [f"big/f{n}.txt"]


# ---- races between the walk and the read -------------------------------------------------------


@pytest.fixture
def live(tmp_path: Path):
    """An in-process indexer over tmp_path/src: (source, indexer, db path, outside dir)."""
    source, outside = tmp_path / "src", tmp_path / "outside"
    source.mkdir()
    outside.mkdir()
    (outside / "secret.md").write_text(f"do not index {SECRET}\n")
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=(tmp_path / "idx").resolve())
    writer = IndexWriter(config.db_path)
    yield source, TextIndexer(config, writer), config.db_path, outside
    writer.close()


def scan_with_deadline(indexer: TextIndexer, on_progress=None) -> dict:
    """Run a scan on a thread; fail (instead of hanging the suite) if it does not finish."""
    reply: dict = {}
    thread = threading.Thread(target=lambda: reply.update(indexer.scan(on_progress)), daemon=True)
    thread.start()
    thread.join(HANG_TIMEOUT)
    assert not thread.is_alive(), "scan hung"
    return reply


def after_walk(action):
    """An on_progress callback that runs ``action`` once, after the walk and before any read."""
    state = {"done": False}

    def callback(progress: ScanProgress) -> None:
        if progress.phase == "indexing" and not state["done"]:
            state["done"] = True
            action()

    return callback


def test_file_deleted_between_walk_and_read(live) -> None:
    source, indexer, db, _ = live
    (source / "gone.md").write_text(f"gone {rel_token(1, 0)}\n")
    (source / "kept.md").write_text(f"kept {rel_token(2, 0)}\n")
    reply = scan_with_deadline(indexer, after_walk(lambda: (source / "gone.md").unlink()))
    assert reply["success"] and reply["errors"] == []
    assert found(db, rel_token(1, 0)) == [] and found(db, rel_token(2, 0)) == ["kept.md"]
    assert indexer.errors_encountered == 0


def test_file_swapped_for_a_link_outside_between_walk_and_read(live) -> None:
    source, indexer, db, outside = live
    (source / "note.md").write_text(f"harmless {rel_token(1, 0)}\n")

    def swap() -> None:
        (source / "note.md").unlink()
        os.symlink(outside / "secret.md", source / "note.md")

    scan_with_deadline(indexer, after_walk(swap))
    assert found(db, SECRET) == [], "a file outside the source was indexed"


def test_file_swapped_for_a_fifo_between_walk_and_read(live) -> None:
    source, indexer, db, _ = live
    (source / "pipe.md").write_text("soon a pipe\n")

    def swap() -> None:
        (source / "pipe.md").unlink()
        os.mkfifo(source / "pipe.md")

    reply = scan_with_deadline(indexer, after_walk(swap))
    assert reply["success"]
    assert skipped_by_path(db) == {"pipe.md": "not_regular_file"}


def test_files_growing_and_replaced_while_read_end_up_current(live) -> None:
    source, indexer, db, _ = live
    corpus = RelCorpus(source, random.Random(9))
    for _ in range(200):
        corpus.add()
    growing = source / "growing.md"
    growing.write_text("start\n")
    stop = threading.Event()

    def churn() -> None:
        rng = random.Random(10)
        while not stop.is_set():
            with open(growing, "a") as handle:
                handle.write("more words appended while the indexer reads " * 20 + "\n")
            rel = rng.choice(sorted(corpus.versions))
            no, version = corpus.versions[rel]
            tmp = source / f".tmp-{no}.part"
            tmp.write_text(f"replaced {rel_token(no, version + 1)}\n")
            os.replace(tmp, source / rel)  # atomic replace: a new inode under the same name
            corpus.dead[rel_token(no, version)] = rel
            corpus.versions[rel] = (no, version + 1)

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    for _ in range(5):
        assert scan_with_deadline(indexer)["success"]
    stop.set()
    churner.join(HANG_TIMEOUT)
    growing.write_text(f"final {rel_token(99999, 0)}\n")
    assert scan_with_deadline(indexer)["success"]
    assert found(db, rel_token(99999, 0)) == ["growing.md"]
    for token, rel in corpus.live_tokens().items():
        assert found(db, token) == [rel], rel
    for token in corpus.dead:
        assert found(db, token) == []


# ---- an unreadable file, honestly ---------------------------------------------------------------


def test_unreadable_file_is_skipped_as_unreadable(tmp_path: Path) -> None:
    """Root reads a chmod 000 file anyway, so the index runs without the capabilities that allow it."""
    unprivileged = rel_unprivileged()
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    source.mkdir()
    (source / "open.md").write_text(f"readable {rel_token(1, 0)}\n")
    (source / "closed.md").write_text(f"private {rel_token(2, 0)}\n")
    (source / "closed.md").chmod(0)
    (source / "shut").mkdir()
    (source / "shut" / "inner.md").write_text(f"inner {rel_token(3, 0)}\n")
    (source / "shut").chmod(0)
    try:
        done = rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir), prefix=unprivileged)
        assert "Permission denied" in done.stderr, done.stderr
    finally:
        (source / "shut").chmod(0o755)
    db = rel_db_path(source, index_dir)
    assert found(db, rel_token(1, 0)) == ["open.md"]
    assert found(db, rel_token(2, 0)) == [] and found(db, rel_token(3, 0)) == []
    assert skipped_by_path(db) == {"closed.md": "unreadable", "shut/": "unreadable"}
    status = json.loads(rel_run_main("status", "--source", str(source), "--index-dir", str(index_dir), "--json").stdout)
    assert status["skipped_files"].get("unreadable") == 2 and status["errors_encountered"] >= 2, status


def test_source_directory_gone_for_a_while_does_not_stop_rescans(tmp_path: Path) -> None:
    """An unmounted drive or a renamed folder: scans fail with a reason, then resume when it is back."""
    from reliability_helpers import RelStdioServer

    source, index_dir, parked = tmp_path / "src", tmp_path / "idx", tmp_path / "parked"
    source.mkdir()
    (source / "a.md").write_text(f"first {rel_token(1, 0)}\n")
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0.2") as server:
        server.wait_for_scan()
        source.rename(parked)
        refreshed = server.call("refresh_index")
        assert refreshed["isError"] or not refreshed["structuredContent"]["success"], refreshed
        status = server.status()
        assert str(source) in (status["last_error"] or "") and status["errors_encountered"] >= 1, status
        parked.rename(source)
        (source / "b.md").write_text(f"second {rel_token(2, 0)}\n")
        for _ in range(600):  # the rescan loop must pick the new file up by itself
            result = server.call("search", {"query": rel_token(2, 0)})
            if not result["isError"] and result["structuredContent"]["results"]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the rescan loop stopped: b.md never indexed; stderr: {server.stderr[-2000:]}")
        assert server.close() == 0


def test_a_file_dated_past_2262_is_indexed_and_stops_nothing(source: Path, tmp_path: Path) -> None:
    """Its time in nanoseconds is past what SQLite's integers hold: stored as the last one they do."""
    import sys

    from tests.conftest import MAIN_PY, write

    write(source, "a.md", "# A\n\nkiwi normal\n")
    future = write(source, "b.md", "# B\n\nkiwi future\n")
    os.utime(future, ns=(10**19, 10**19))  # the year 2286
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    done = subprocess.run([sys.executable, str(MAIN_PY), "index", *idx], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "indexed 2 files" in done.stderr, done.stderr
    found = subprocess.run([sys.executable, str(MAIN_PY), "search", "kiwi", "--json", *idx], capture_output=True, text=True, timeout=120)
    hits = {hit["path"]: hit["last_modified"] for hit in json.loads(found.stdout)["results"]}
    assert hits["b.md"].startswith("2262-04-11") and set(hits) == {"a.md", "b.md"}, hits
