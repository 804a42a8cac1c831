"""Never lose the index: a source that cannot be listed is not an empty source, an edit that keeps
its mtime is still an edit, a link never takes over a real path, the WAL does not stay large, and
status tells every process the truth."""

from __future__ import annotations

import grp
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import indexer as indexer_module
from exceptions import Cancelled, SourceUnavailableError
from index_files import WriterLock, lock_path
from index_writer import IndexWriter
from indexer import RACY_WINDOW_NS, TextIndexer
from models import ScanProgress, ServerConfig
from reliability_helpers import (
    MAIN_PY,
    RelStdioServer,
    rel_corpus,
    rel_db_path,
    rel_integrity,
    rel_run_main,
    rel_token,
    rel_unprivileged,
)
from search import search
from status import read_status
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
        refused = rel_run_main("index", *args, prefix=unprivileged)  # at start: refused, naming it (#24)
        assert refused.returncode == 2 and "cannot be read" in refused.stderr and str(source) in refused.stderr, refused.stderr
        source.chmod(0o755)
        with RelStdioServer(*args, "--scan-interval", "0", prefix=unprivileged) as server:
            server.wait_for_scan()
            source.chmod(0)  # while serving: reported, and every indexed file kept
            refreshed = server.call("refresh_index")["structuredContent"]
            assert refreshed["success"] is False and "cannot list it" in refreshed["errors"][0], refreshed
            status = server.status()
            assert status["indexed_files"] == 50, status
            assert "cannot list it" in status["last_error"] and status["errors_encountered"] >= 1, status
            source.chmod(0o755)
            assert server.call("refresh_index")["structuredContent"]["success"] is True
            recovered = server.status()
            assert "last_error" not in recovered, "the error was fixed: it is not the last error any more"  # #23: left out when none
            assert recovered["errors_encountered"] >= status["errors_encountered"], "the error count never goes down"
            assert server.close() == 0
    finally:
        source.chmod(0o755)
    assert all(found(db, token) == [f"n{n}.md"] for n, token in enumerate(tokens))
    errors_before = status_of(source, index_dir)["errors_encountered"]
    assert rel_run_main("index", *args).returncode == 0
    recovered = status_of(source, index_dir)
    assert recovered["last_error"] is None, recovered
    assert recovered["errors_encountered"] >= errors_before >= 1, "the error count never goes down"


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


def test_a_source_replaced_by_a_file_or_by_another_folder_keeps_the_index(indexer: TextIndexer, config: ServerConfig, source: Path, tmp_path: Path) -> None:
    tokens = notes(source, 10)
    assert indexer.scan()["success"]
    parked = tmp_path / "parked"
    source.rename(parked)
    source.write_text("a file where the folder was")
    reply = indexer.scan()
    assert reply["success"] is False and "cannot list it" in reply["errors"][0], reply
    source.unlink()
    source.mkdir()  # an empty mount point: the drive is not mounted
    for stray in ("", ".gitkeep", "README.pdf", "other.md"):  # whatever it holds, none of the indexed files
        if stray:
            write(source, stray, "stray\n")
        reply = indexer.scan()
        assert reply["success"] is False and "holding none of the 10 indexed files" in reply["errors"][0], reply
    assert read_status(config, indexer)["indexed_files"] == 10
    assert found(config.db_path, tokens[3]) == ["n3.md"]
    shutil.rmtree(source)
    parked.rename(source)  # the drive is back
    write(source, "n3.md", "edited while away\n")
    reply = indexer.scan()
    assert reply["success"] and reply["files_processed"] == 1 and reply["files_removed"] == 0, reply
    assert found(config.db_path, "edited") == ["n3.md"]


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
    corpus = rel_corpus(source, 400, 12, seed=11)
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


# ---- the source changing under a scan -------------------------------------------------------------


def swap_source(source: Path, parked: Path) -> None:
    source.rename(parked)
    source.mkdir()


@pytest.mark.parametrize("when", ["after the walk", "between batches"])
def test_a_source_swapped_during_a_scan_loses_nothing(indexer: TextIndexer, config: ServerConfig, source: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    tokens = notes(source, 30)
    assert indexer.scan()["success"]
    for n in range(20):
        write(source, f"n{n}.md", f"# Note {n}\n\nzqeditedqz {n}\n")
    monkeypatch.setattr(indexer_module, "BATCH_FILES", 5)
    calls = []

    def swap_once(progress: ScanProgress) -> None:
        calls.append(progress.files_done)
        if len(calls) == (1 if when == "after the walk" else 2):
            swap_source(source, tmp_path / "parked")

    reply = indexer.scan(swap_once)
    assert reply["success"] is False and "replaced or unmounted during the scan" in reply["errors"][0], reply
    assert read_status(config, indexer)["indexed_files"] == 30, "files that vanished with the source were removed"
    assert all(found(config.db_path, token) for token in tokens[20:])
    edited = len(found(config.db_path, "zqeditedqz"))
    assert edited == (0 if when == "after the walk" else 5), "only the batch written before the swap is kept"


def test_a_file_deleted_before_it_is_read_again_counts_as_removed(indexer: TextIndexer, source: Path) -> None:
    notes(source, 3)
    indexer.scan()
    write(source, "n1.md", "changed\n")
    reply = indexer.scan(after_walk(lambda: (source / "n1.md").unlink()))
    assert reply["success"] and reply["files_removed"] == 1, reply


def after_walk(action):
    done = []

    def callback(progress: ScanProgress) -> None:
        if not done:
            done.append(True)
            action()

    return callback


def test_an_unmounted_drive_inside_the_source_keeps_its_files(tmp_path: Path) -> None:
    from reliability_helpers import rel_mount_tmpfs, rel_umount

    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    drive = source / "drive"
    if not rel_mount_tmpfs(drive, "4m"):
        pytest.skip("needs root and a kernel that allows tmpfs mounts, to mount a real file system in the source")
    try:
        tokens = notes(source, 5, "drive/")
        write(source, "local.md", "first local\n")
        args = ("--source", str(source), "--index-dir", str(index_dir))
        assert rel_run_main("index", *args).returncode == 0
        rel_umount(drive)
        write(source, "drive/.mountpoint", "")  # an unmounted drive's folder is seldom quite empty
        write(source, "local.md", "second local\n")
        done = rel_run_main("index", *args)
        assert done.returncode == 0 and "drive/: unavailable" in done.stderr, done.stderr
        status = status_of(source, index_dir)
        assert status["indexed_files"] == 6 and status["skipped_files"].get("unavailable") == 1, status
        assert status["last_error"].startswith("drive/: unavailable"), status
        db = rel_db_path(source, index_dir)
        assert [found(db, token) for token in tokens] == [[f"drive/n{n}.md"] for n in range(5)]
        assert found(db, "second") == ["local.md"]
        assert rel_run_main("index", *args).returncode == 0  # still away: still kept
        assert status_of(source, index_dir)["indexed_files"] == 6
    finally:
        rel_umount(drive)


# ---- the write lock, refreshes and status across processes ----------------------------------------


def test_a_refresh_reads_the_file_once_it_holds_the_lock(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "a.md", "zqfirstqz version\n")
    indexer.scan()
    other = WriterLock(lock_path(config.db_path))
    reply: dict = {}
    with other.held():  # another process writing
        waiting = threading.Thread(target=lambda: reply.update(indexer.refresh_file("a.md")))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()
        write(source, "a.md", "zqsecondqz version\n")  # written meanwhile: the refresh must not index the old text
    waiting.join(30)
    assert reply["success"] and found(config.db_path, "zqsecondqz") == ["a.md"] and found(config.db_path, "zqfirstqz") == []


def test_refreshes_given_up_stop_waiting_and_queued_scans_are_answered_by_one(indexer: TextIndexer, config: ServerConfig,
                                                                               source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(source, "a.md", "alpha\n")
    indexer.scan()
    scans = []
    real_scan = indexer._scan
    monkeypatch.setattr(indexer, "_scan", lambda on_progress: scans.append(1) or real_scan(on_progress))
    other = WriterLock(lock_path(config.db_path))
    with other.held():
        outcomes: list[object] = []

        def given_up() -> None:
            try:
                indexer.refresh_file("a.md", cancelled=lambda: True)
            except Cancelled as exc:
                outcomes.append(exc)
            outcomes.append(indexer.scan(cancelled=lambda: True))

        giving_up = threading.Thread(target=given_up, daemon=True)
        giving_up.start()
        giving_up.join(30)
        assert not giving_up.is_alive(), "a refresh the caller gave up kept waiting for the lock"
        assert isinstance(outcomes[0], Cancelled) and outcomes[1]["success"] is False, outcomes
        replies: list[dict] = []
        queued = [threading.Thread(target=lambda: replies.append(indexer.scan())) for _ in range(6)]
        for thread in queued:
            thread.start()
        time.sleep(0.5)  # all six are waiting: one for the lock, five for the scan lock
    for thread in queued:
        thread.join(30)
    assert len(replies) == 6 and all(reply["success"] for reply in replies)
    assert len(scans) == 1, f"{len(scans)} scans ran for six requests made while none could start"


def test_the_error_count_survives_an_index_file_deleted_under_the_writer(indexer: TextIndexer, config: ServerConfig, source: Path,
                                                                          tmp_path: Path) -> None:
    notes(source, 3)
    indexer.scan()
    source.rename(tmp_path / "away")
    indexer.scan()
    indexer.scan()
    before = read_status(config, indexer)["errors_encountered"]
    assert before >= 1  # the source gone: once, however many scans meet it
    (tmp_path / "away").rename(source)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{config.db_path}{suffix}").unlink(missing_ok=True)
    assert indexer.scan()["success"]
    after = read_status(config, indexer)
    assert after["indexed_files"] == 3 and after["errors_encountered"] > before, after


def test_a_refresh_that_fixes_the_problem_clears_last_error(tmp_path: Path) -> None:
    unprivileged = rel_unprivileged()
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    path = write(source, "diary.md", "kumquat entry\n")
    path.chmod(0)
    args = ("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0")
    try:
        with RelStdioServer(*args, prefix=unprivileged) as server:
            status = server.wait_for_scan()
            assert status.get("last_error", "").startswith("diary.md: unreadable"), (status, server.stderr[-3000:])
            path.chmod(0o644)
            assert server.call("refresh_index", {"filepath": "diary.md"})["structuredContent"]["success"]
            assert "last_error" not in server.status()  # #23: left out when none
            assert server.close() == 0
    finally:
        path.chmod(0o644)


def test_status_sees_another_process_walking_and_its_progress(config: ServerConfig, source: Path) -> None:
    write(source, "a.md", "alpha\n")
    IndexWriter(config.db_path).close()
    other = WriterLock(lock_path(config.db_path))
    args = ("--source", str(source), "--index-dir", str(config.index_output_directory), "--json")
    with other.held():
        other.record("walking")
        walking = json.loads(rel_run_main("status", *args).stdout)
        other.record("indexing", 120, 500)
        indexing = json.loads(rel_run_main("status", *args).stdout)
    assert walking["state"] == "indexing" and walking["progress"]["phase"] == "walking", walking
    assert walking["writer_pid"] == os.getpid()
    assert indexing["progress"] == {"phase": "indexing", "files_done": 120, "files_total": 500}, indexing


def test_a_deleted_lock_file_never_lets_two_processes_write_at_once(config: ServerConfig, source: Path) -> None:
    write(source, "a.md", "alpha\n")
    writer = IndexWriter(config.db_path)
    args = ("--source", str(source), "--index-dir", str(config.index_output_directory))
    lock_file = lock_path(config.db_path)
    try:
        with writer.write_lock.held():
            lock_file.unlink()  # someone deletes it while this process holds it
            other = rel_run_main("index", *args)  # locks a new file: this process is not writing now
            assert other.returncode == 0 and "locked" not in other.stderr, other.stderr
            with writer.transaction():  # the next write takes the new file's lock first
                writer.set_meta("probe", "1")
            waiting = subprocess.Popen([sys.executable, str(MAIN_PY), "index", *args], stderr=subprocess.PIPE, text=True)
            assert "is writing this index; waiting" in waiting.stderr.readline()
        _, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0 and "locked" not in err, err
    finally:
        writer.close()


def test_sigterm_during_an_index_run_closes_the_index_and_truncates_its_wal(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    rel_corpus(source, 3000, 6, seed=5)
    proc = subprocess.Popen([sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(index_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while status_of(source, index_dir).get("progress", {}).get("files_done", 0) == 0:
        assert proc.poll() is None and time.monotonic() < deadline, "the index finished before it could be stopped"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert wal_size(rel_db_path(source, index_dir)) == 0
    assert rel_integrity(rel_db_path(source, index_dir)) == "ok"


def test_an_index_directory_deleted_under_a_server_is_made_again(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    write(source, "a.md", "alpha words\n")
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        server.wait_for_scan()
        shutil.rmtree(index_dir)
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"] and refreshed["structuredContent"]["success"], refreshed
        assert server.call("search", {"query": "alpha"})["structuredContent"]["results"]
        assert stat_mode(index_dir) == 0o700
        assert server.close() == 0
        assert "Traceback" not in server.stderr, server.stderr


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_one_file_refresh_under_a_swapped_source_changes_nothing(indexer: TextIndexer, config: ServerConfig, source: Path,
                                                                    tmp_path: Path) -> None:
    notes(source, 3)
    indexer.scan()
    swap_source(source, tmp_path / "parked")
    write(source, "other.md", "a stray note\n")
    failed = indexer.scan()
    assert failed["success"] is False
    with pytest.raises(SourceUnavailableError, match="not the folder the index was made from"):
        indexer.refresh_file("n1.md")
    status = read_status(config, indexer)
    assert status["indexed_files"] == 3 and "holding none of the 3 indexed files" in status["last_error"], status


def test_the_error_count_survives_a_damaged_index_rebuilt_by_another_process(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    write(source, "a.md", "alpha\n")
    args = ("--source", str(source), "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    swap_source(source, tmp_path / "away")  # an empty folder in its place: each scan fails
    for _ in range(3):
        assert rel_run_main("index", *args).returncode == 1
    before = status_of(source, index_dir)["errors_encountered"]
    source.rmdir()
    (tmp_path / "away").rename(source)
    db = rel_db_path(source, index_dir)
    db.write_bytes(b"this is no longer an index" * 100)
    assert rel_run_main("index", *args).returncode == 0  # moves it aside, rebuilds: one more error
    after = status_of(source, index_dir)
    assert after["indexed_files"] == 1 and after["errors_encountered"] >= before + 1, (before, after)


def test_an_index_directory_a_group_may_write_to_is_refused(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    write(source, "a.md", "alpha\n")
    index_dir.mkdir()
    index_dir.chmod(0o770)
    other_group = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != os.getegid()), None)
    if other_group is None:
        pytest.skip("no group other than this user's own to give the folder to")
    os.chown(index_dir, -1, other_group)
    done = rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir))
    assert done.returncode == 1 and "may write to it" in done.stderr, done.stderr
    index_dir.chmod(0o750)
    assert rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir)).returncode == 0
