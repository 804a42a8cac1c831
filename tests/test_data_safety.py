"""Never lose the index: a source that cannot be listed is not an empty source, an edit that keeps
its mtime is still an edit, a link never takes over a real path, the WAL does not stay large, and
status tells every process the truth."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import indexer as indexer_module
from database import IndexWriter
from indexer import RACY_WINDOW_NS, TextIndexer, read_status
from models import ScanProgress, ServerConfig
from reliability_helpers import MAIN_PY, RelCorpus, RelStdioServer, rel_db_path, rel_run_main, rel_token, rel_unprivileged
from search import search
from tests.conftest import write


def notes(source: Path, count: int, folder: str = "") -> list[str]:
    """``count`` notes, each holding its own token; returns the tokens."""
    tokens = []
    for n in range(count):
        token = rel_token(n + (1000 if folder else 0), 0)
        write(source, f"{folder}n{n}.md", f"# Note {n}\n\n{token} words\n")
        tokens.append(token)
    return tokens


def found(db: Path, query: str) -> list[str]:
    return [hit["path"] for hit in search(db, query, 100)["results"]]


def status_of(source: Path, index_dir: Path) -> dict:
    return json.loads(rel_run_main("status", "--source", str(source), "--index-dir", str(index_dir), "--json").stdout)


# ---- a source that cannot be listed is not an empty source ------------------------------------


def test_an_unreadable_source_folder_keeps_every_indexed_file(tmp_path: Path) -> None:
    unprivileged = rel_unprivileged()
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    tokens = notes(source, 50)
    args = ("--source", str(source), "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    db = rel_db_path(source, index_dir)
    source.chmod(0)
    try:
        done = rel_run_main("index", *args, prefix=unprivileged)
        assert done.returncode == 1, done.stderr
        assert "cannot list it" in done.stderr and "Permission denied" in done.stderr, done.stderr
        with RelStdioServer(*args, "--scan-interval", "0", prefix=unprivileged) as server:
            server.wait_for_scan()
            refreshed = server.call("refresh_index")["structuredContent"]
            assert refreshed["success"] is False and "cannot list it" in refreshed["errors"][0], refreshed
            status = server.status()
            assert status["indexed_files"] == 50, status
            assert "cannot list it" in status["last_error"] and status["errors_encountered"] >= 2, status
            source.chmod(0o755)
            assert server.call("refresh_index")["structuredContent"]["success"] is True
            recovered = server.status()
            assert recovered["last_error"] is None, "the error was fixed: it is not the last error any more"
            assert recovered["errors_encountered"] >= status["errors_encountered"], "the error count never goes down"
            assert server.close() == 0
    finally:
        source.chmod(0o755)
    assert all(found(db, token) == [f"n{n}.md"] for n, token in enumerate(tokens))
    errors_before = status_of(source, index_dir)["errors_encountered"]
    assert rel_run_main("index", *args).returncode == 0
    recovered = status_of(source, index_dir)
    assert recovered["last_error"] is None, recovered
    assert recovered["errors_encountered"] >= errors_before >= 2, "the error count never goes down"


def test_a_folder_that_cannot_be_listed_keeps_its_files_and_others_are_updated(tmp_path: Path) -> None:
    unprivileged = rel_unprivileged()
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    kept = notes(source, 5, "private/")
    write(source, "open.md", "first version\n")
    args = ("--source", str(source), "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    db = rel_db_path(source, index_dir)
    write(source, "open.md", "second version\n")
    (source / "private").chmod(0)
    try:
        done = rel_run_main("index", *args, prefix=unprivileged)
        assert done.returncode == 0, done.stderr
        assert "private/: unreadable: cannot list the folder: Permission denied" in done.stderr, done.stderr
        status = status_of(source, index_dir)
        assert status["indexed_files"] == 6 and status["skipped_files"] == {"unreadable": 1}, status
        assert status["last_error"].startswith("private/: unreadable"), status
    finally:
        (source / "private").chmod(0o755)
    assert found(db, "second") == ["open.md"] and found(db, "first") == []
    assert [found(db, token) for token in kept] == [[f"private/n{n}.md"] for n in range(5)]


def test_an_indexed_file_that_becomes_unreadable_is_kept_not_dropped(tmp_path: Path) -> None:
    unprivileged = rel_unprivileged()
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    path = write(source, "diary.md", "kumquat entry\n")
    args = ("--source", str(source), "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    path.chmod(0)  # also changes its ctime: the next scan tries to read it
    try:
        done = rel_run_main("index", *args, prefix=unprivileged)
        assert "diary.md: unreadable" in done.stderr, done.stderr
    finally:
        path.chmod(0o644)
    assert found(rel_db_path(source, index_dir), "kumquat") == ["diary.md"]


def test_a_source_replaced_by_a_file_or_by_another_empty_folder_keeps_the_index(indexer: TextIndexer, config: ServerConfig, source: Path, tmp_path: Path) -> None:
    tokens = notes(source, 10)
    assert indexer.scan()["success"]
    parked = tmp_path / "parked"
    source.rename(parked)
    source.write_text("a file where the folder was")
    reply = indexer.scan()
    assert reply["success"] is False and "cannot list it" in reply["errors"][0], reply
    source.unlink()
    source.mkdir()  # an empty mount point: the drive is not mounted
    reply = indexer.scan()
    assert reply["success"] is False and "an empty folder other than the one indexed" in reply["errors"][0], reply
    assert read_status(config, indexer)["indexed_files"] == 10
    assert found(config.db_path, tokens[3]) == ["n3.md"]
    write(source, "fresh.md", "a new start\n")  # a folder with files in it is taken as it is
    reply = indexer.scan()
    assert reply["success"] and reply["files_removed"] == 10 and reply["files_processed"] == 1, reply
    source.rename(tmp_path / "replaced")
    parked.rename(source)
    assert indexer.scan()["files_processed"] == 10  # the original comes back: read again


def test_deleting_every_file_in_the_same_folder_empties_the_index(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    notes(source, 4)
    indexer.scan()
    for path in source.iterdir():
        path.unlink()
    reply = indexer.scan()
    assert reply["success"] and reply["files_removed"] == 4
    assert read_status(config, indexer)["indexed_files"] == 0


# ---- edits that keep the mtime -------------------------------------------------------------------


def old_stamp(path: Path) -> tuple[int, int]:
    stamp = time.time_ns() - 3600 * 1_000_000_000 - 10 * RACY_WINDOW_NS
    os.utime(path, ns=(stamp, stamp))
    return stamp, stamp


@pytest.mark.parametrize("how", ["touch -r", "cp -p"])
def test_a_same_size_edit_that_keeps_the_old_mtime_is_picked_up(indexer: TextIndexer, config: ServerConfig, source: Path, tmp_path: Path, how: str) -> None:
    path = write(source, "a.md", "first version of the note\n")
    times = old_stamp(path)  # outside the racy window: only the signature can tell
    assert indexer.scan()["files_processed"] == 1
    inode = path.stat().st_ino
    if how == "touch -r":
        path.write_text("other version of the note\n")
        os.utime(path, ns=times)
    else:
        copy = write(tmp_path, "copy.md", "other version of the note\n")
        os.utime(copy, ns=times)
        shutil.copy2(copy, path)  # writes in place and copies the mtime, as cp -p does
    assert path.stat().st_ino == inode and path.stat().st_mtime_ns == times[1]
    assert indexer.scan()["files_processed"] == 1
    assert found(config.db_path, "other") == ["a.md"] and found(config.db_path, "first") == []


# ---- links never take over a real path -----------------------------------------------------------


def test_a_link_to_a_folder_never_replaces_its_real_path(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "sub/target.md", "zqlinkedqz words\n")
    (source / "sublink").symlink_to("sub")
    reply = indexer.scan()
    assert reply["success"] and reply["files_processed"] == 1
    assert found(config.db_path, "zqlinkedqz") == ["sub/target.md"]
    assert read_status(config, indexer)["skipped_files"] == {"duplicate_link": 1}
    write(source, "sub/target.md", "zqeditedqz words\n")
    assert indexer.refresh_file("sublink/target.md")["success"]  # named through the link: the real path
    assert found(config.db_path, "zqeditedqz") == ["sub/target.md"] and found(config.db_path, "zqlinkedqz") == []


# ---- the WAL is trimmed --------------------------------------------------------------------------


def wal_size(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_the_wal_is_truncated_after_a_scan_that_wrote_and_on_exit(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    source.mkdir()
    corpus = RelCorpus(source, random.Random(11))
    for _ in range(400):
        corpus.add(paragraphs=12)
    args = ("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0.5")
    db = rel_db_path(source, index_dir)
    with RelStdioServer(*args) as server:
        server.wait_for_scan()
        assert db.stat().st_size > 1 << 20
        assert wal_size(db) == 0, "the WAL is left at the size of the largest batch"
        write(source, "late.md", "a late note\n")
        deadline = time.monotonic() + 30
        while not server.call("search", {"query": "late"})["structuredContent"]["results"]:
            assert time.monotonic() < deadline, "the rescan never picked the late note up"
            time.sleep(0.1)
        corpus.edit(sorted(corpus.versions)[0])
        refreshed = server.call("refresh_index", {"filepath": sorted(corpus.versions)[0]})["structuredContent"]
        assert refreshed["files_processed"] == 1 and wal_size(db) > 0  # one file's refresh leaves it to the exit
        assert server.close() == 0
    assert wal_size(db) == 0
    assert rel_run_main("index", *args).returncode == 0
    assert wal_size(db) == 0


# ---- status is what the writer records -------------------------------------------------------------


def test_status_from_another_process_sees_a_scan_in_progress(config: ServerConfig, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(150):
        write(source, f"n{n}.md", f"note {n}\n")
    monkeypatch.setattr(indexer_module, "BATCH_FILES", 40)
    writer = IndexWriter(config.db_path)
    seen: list[dict] = []

    def look(progress: ScanProgress) -> None:
        if progress.files_done == 80 and not seen:  # after two of four batches
            command = [sys.executable, str(MAIN_PY), "status", "--source", str(source),
                       "--index-dir", str(config.index_output_directory), "--json"]
            seen.append(json.loads(subprocess.run(command, capture_output=True, text=True, timeout=60).stdout))

    try:
        assert TextIndexer(config, writer).scan(look)["success"]
    finally:
        writer.close()
    assert seen, "the callback never ran after the second batch"
    assert seen[0]["state"] == "indexing" and seen[0]["writer_pid"] == os.getpid(), seen[0]
    assert seen[0]["progress"] == {"phase": "indexing", "files_done": 80, "files_total": 150}, seen[0]
    after = json.loads(rel_run_main("status", "--source", str(source), "--index-dir", str(config.index_output_directory), "--json").stdout)
    assert after["state"] == "idle" and after["writer_pid"] is None and after["indexed_files"] == 150, after


def test_a_scan_killed_midway_is_not_reported_as_running(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    for n in range(3000):
        write(source, f"d{n % 30}/n{n}.md", f"# Note {n}\n\n" + "filler words " * 200)
    proc = subprocess.Popen([sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(index_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while status_of(source, index_dir).get("state") != "indexing":
        assert proc.poll() is None and time.monotonic() < deadline, "the index finished before it could be seen running"
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    status = status_of(source, index_dir)
    assert status["state"] != "indexing" and status["writer_pid"] is None, status


def test_status_of_a_process_waiting_for_its_first_scan_says_starting(config: ServerConfig, source: Path) -> None:
    write(source, "a.md", "alpha\n")
    writer = IndexWriter(config.db_path)
    first = TextIndexer(config, writer)
    first.scan()
    second = TextIndexer(config, writer)  # a new daemon over an index an earlier run made
    assert read_status(config, second)["state"] == "starting"
    assert read_status(config, None)["state"] == "idle"
    writer.close()
