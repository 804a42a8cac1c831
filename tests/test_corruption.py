"""A damaged index, an unwritable index directory, a full disk: the MCP server (a real subprocess
spoken to in raw JSON-RPC) starts or keeps running, says what happened in status and on stderr,
rebuilds where it can, and writes nothing but JSON-RPC to stdout."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from reliability_helpers import (
    RelCorpus, RelStdioServer, rel_db_path, rel_indexed, rel_integrity, rel_mount_tmpfs, rel_run_main, rel_umount, rel_unprivileged,
)


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path, Path, RelCorpus]:
    """A source of 120 files, indexed once by `main.py index`: (source, index dir, db, corpus)."""
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    return source, index_dir, rel_db_path(source, index_dir), rel_indexed(source, index_dir, 120)


def assert_every_file_found(server: RelStdioServer, corpus: RelCorpus) -> None:
    for token, rel in corpus.live_tokens().items():
        result = server.call("search", {"query": token})
        assert not result["isError"], result
        assert [hit["path"] for hit in result["structuredContent"]["results"]] == [rel]


def assert_recovered(server: RelStdioServer, corpus: RelCorpus, db: Path) -> None:
    """The index is whole again: every file found, the server exits cleanly, SQLite's check passes."""
    assert_every_file_found(server, corpus)
    assert server.close() == 0
    assert rel_integrity(db) == "ok"


def remove_files(folder: Path) -> None:
    for leftover in folder.iterdir():
        leftover.unlink()


def truncate_half(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def random_middle(db: Path) -> None:
    size = db.stat().st_size
    with open(db, "r+b") as handle:
        handle.seek(size // 4)
        handle.write(random.Random(1).randbytes(size // 2))


def zero_length(db: Path) -> None:
    os.truncate(db, 0)


def not_sqlite(db: Path) -> None:
    db.write_bytes(b"# my notes\n" + b"not a database at all\n" * 500)


def damage_header_page_count(db: Path) -> None:
    with open(db, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff" * 400)  # the sqlite_master b-tree page header and cell pointers


DAMAGE = {
    "truncated": (truncate_half, True),
    "random_bytes_over_middle": (random_middle, True),
    "zero_length": (zero_length, False),  # an empty file is a valid, empty SQLite database
    "not_an_sqlite_file": (not_sqlite, True),
    "damaged_schema_page": (damage_header_page_count, True),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_database_is_moved_aside_and_rebuilt(indexed, damage: str) -> None:
    source, index_dir, db, corpus = indexed
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    damage_fn, reported = DAMAGE[damage]
    damage_fn(db)
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        status = server.wait_for_scan()
        assert status["indexed_files"] == len(corpus.versions), status
        assert_every_file_found(server, corpus)
        moved = sorted(p.name for p in index_dir.glob("*.corrupt-*") if not p.name.endswith(("-wal", "-shm")))
        if reported:
            assert moved, f"the damaged file was not moved aside: {sorted(os.listdir(index_dir))}"
            # Rebuilt: the event is counted and logged; nothing is wrong any more.
            assert status["errors_encountered"] >= 1 and "last_error" not in status, status  # #23: left out when none
            assert moved[0] in server.stderr and "unusable" in server.stderr
        assert server.close() == 0
    assert rel_integrity(db) == "ok"


def test_garbage_wal_file_does_not_stop_the_server(indexed) -> None:
    source, index_dir, db, corpus = indexed
    Path(f"{db}-shm").unlink(missing_ok=True)
    Path(f"{db}-wal").write_bytes(random.Random(2).randbytes(64 * 1024))
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        status = server.wait_for_scan()
        assert status["indexed_files"] == len(corpus.versions), status
        assert_recovered(server, corpus, db)


def test_random_bytes_over_the_database_while_running_do_not_stop_the_server(indexed) -> None:
    source, index_dir, db, corpus = indexed
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        server.wait_for_scan()
        random_middle(db)
        searched = server.call("search", {"query": "river"})
        assert searched["isError"] or searched["structuredContent"]["results"], searched
        corpus.edit(sorted(corpus.versions)[0])
        corpus.add()
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"], refreshed
        status = server.status()
        assert status["indexed_files"] == len(corpus.versions), status
        assert_recovered(server, corpus, db)


def test_status_says_error_while_the_index_cannot_be_read_and_idle_once_rebuilt(indexed) -> None:
    """Damaged under a server that scans only when asked: its status is not idle ("all is well")
    while the index cannot be read; a refresh rebuilds it and the error is gone."""
    source, index_dir, db, corpus = indexed
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        assert server.wait_for_scan()["state"] == "idle"
        not_sqlite(db)
        assert server.call("search", {"query": "river"})["isError"]
        status = server.status()
        assert status["state"] == "error" and "refresh_index" in status["last_error"] and status["errors_encountered"] >= 1, status
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"], refreshed
        status = server.status()
        assert status["state"] == "idle" and "last_error" not in status and status["indexed_files"] == len(corpus.versions), status
        assert_recovered(server, corpus, db)


def test_an_index_overwritten_in_place_under_a_server_is_error_and_one_refresh_rebuilds_it(indexed) -> None:
    """From a hostile review: garbage written over the file (same inode, no lock) was not seen, the
    server's reader answering from its page cache: status said idle, and the first refresh_index
    succeeded with 0 files (only a second one rebuilt)."""
    source, index_dir, db, corpus = indexed
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        assert server.wait_for_scan()["state"] == "idle"
        inode = db.stat().st_ino
        not_sqlite(db)
        assert db.stat().st_ino == inode
        status = server.status()
        assert status["state"] == "error" and "moves it aside and rebuilds it" in status["last_error"], status
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"], refreshed
        status = server.status()
        assert status["state"] == "idle" and status["indexed_files"] == len(corpus.versions), status
        assert_recovered(server, corpus, db)


def test_one_refresh_rebuilds_an_index_overwritten_in_place_before_anything_reads_it(indexed) -> None:
    """The scan itself sees a file that no longer starts as a database (nothing suspected damage)."""
    source, index_dir, db, corpus = indexed
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        assert server.wait_for_scan()["state"] == "idle"
        not_sqlite(db)
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"] and refreshed["structuredContent"]["files_processed"] == len(corpus.versions), refreshed
        assert_recovered(server, corpus, db)


def test_several_sources_count_one_unreadable_index_once(tmp_path: Path) -> None:
    """From a hostile review: the sources share one index file, which was counted once per source."""
    a, b, index_dir = tmp_path / "a", tmp_path / "b", tmp_path / "idx"
    for folder in (a, b):
        folder.mkdir()
        (folder / "n.md").write_text("# n\nriver\n")
    args = ("--source", f"a={a}", "--source", f"b={b}", "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    db = Path(json.loads(rel_run_main("status", *args, "--json").stdout)["index_path"])
    not_sqlite(db)
    status = json.loads(rel_run_main("status", *args, "--json").stdout)
    assert status["state"] == "error" and status["errors_encountered"] == 1, status
    assert [part["state"] for part in status["sources"]] == ["error", "error"], status


def test_status_of_an_index_it_may_not_read_names_that_and_promises_no_rebuild(indexed) -> None:
    """From a hostile review: a permission problem was said to be mended by the next scan, which
    rebuilds only a damaged file."""
    source, index_dir, db, _ = indexed
    prefix = rel_unprivileged()
    os.chmod(db, 0)
    try:
        done = rel_run_main("status", "--source", str(source), "--index-dir", str(index_dir), "--json", prefix=prefix)
    finally:
        os.chmod(db, 0o600)
    status = json.loads(done.stdout)
    assert done.returncode == 1 and status["state"] == "error", status
    assert "cannot be read" in status["last_error"] and "rebuild" not in status["last_error"], status


def test_status_of_an_index_folder_it_cannot_enter_is_error_not_a_traceback(indexed) -> None:
    """From a hostile review: the index's size was read with Path.exists, which raised."""
    source, index_dir, _, _ = indexed
    prefix = rel_unprivileged()
    os.chmod(index_dir, 0)
    try:
        done = rel_run_main("status", "--source", str(source), "--index-dir", str(index_dir), "--json", prefix=prefix)
    finally:
        os.chmod(index_dir, 0o700)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and json.loads(done.stdout)["state"] == "error"


def test_status_of_an_index_of_another_format_is_error_naming_it(indexed) -> None:
    """From a hostile review: any other schema version was "not initialised yet" (starting, exit 0);
    only a file whose schema is not written yet is."""
    source, index_dir, db, _ = indexed
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 999")
    conn.close()
    done = rel_run_main("status", "--source", str(source), "--index-dir", str(index_dir), "--json")
    status = json.loads(done.stdout)
    assert done.returncode == 1 and status["state"] == "error" and "its format (999)" in status["last_error"], status


@pytest.fixture
def tmpfs(tmp_path: Path):
    """A size-limited tmpfs mount (root only), unmounted afterwards."""
    mount = Path(f"/tmp/rel-mnt-{os.getpid()}-{tmp_path.name}")
    if not rel_mount_tmpfs(mount, "256k"):
        pytest.skip("needs root and a kernel that allows tmpfs mounts, to make a real full or read-only file system")
    yield mount
    rel_umount(mount)
    mount.rmdir()


def remount(mount: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


def test_read_only_index_directory_is_reported_and_retried(tmp_path: Path, tmpfs: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    corpus = RelCorpus(source, random.Random(3))
    for _ in range(20):
        corpus.add()
    index_dir = tmpfs / "idx"
    index_dir.mkdir()
    remount(tmpfs, "ro")
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        status = server.wait_for_scan()
        assert status["state"] == "error" and "cannot open or create the index" in status["last_error"], status
        assert "cannot open or create the index" in server.stderr
        searched = server.call("search", {"query": "river"})
        assert searched["isError"] and searched["content"][0]["text"].startswith("Error executing tool search: "), searched
        refreshed = server.call("refresh_index")
        assert refreshed["isError"] and "cannot open or create the index" in refreshed["content"][0]["text"]
        assert server.close() == 0


def test_full_disk_fails_the_scan_cleanly_and_recovers_when_space_returns(tmp_path: Path, tmpfs: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    corpus = RelCorpus(source, random.Random(4))
    for _ in range(400):
        corpus.add(paragraphs=6)  # ~1.5 MB of text: far more than the 256 KiB file system holds
    index_dir = tmpfs / "idx"
    db = rel_db_path(source, index_dir)
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        status = server.wait_for_scan()
        assert status["errors_encountered"] >= 1 and "full" in (status["last_error"] or ""), status
        assert "full" in server.stderr
        assert server.call("get_index_status")["isError"] is False
        remount(tmpfs, "size=64m")
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"] and refreshed["structuredContent"]["success"], refreshed
        assert server.status()["indexed_files"] == len(corpus.versions)
        assert_recovered(server, corpus, db)


def test_index_files_deleted_while_running_are_recreated(indexed) -> None:
    """Someone clears the index directory to 'reset' it while the server runs."""
    source, index_dir, db, corpus = indexed
    # The server makes its own index first: until a server has opened an index, its status is what
    # the index records (here `index`'s scan: idle), so waiting for a scan would not wait for it.
    remove_files(index_dir)
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        server.wait_for_scan()
        remove_files(index_dir)
        searched = server.call("search", {"query": "river"})
        assert searched["isError"] and "index" in searched["content"][0]["text"], searched
        corpus.add()
        refreshed = server.call("refresh_index")
        assert not refreshed["isError"] and refreshed["structuredContent"]["success"], refreshed
        assert server.status()["indexed_files"] == len(corpus.versions)
        assert_recovered(server, corpus, db)


def test_a_stale_wal_without_its_database_is_not_replayed_into_a_new_index(indexed) -> None:
    """The state a kill between move_aside's renames can leave: the database gone, its WAL
    (full of committed frames) still beside the path where the new index will be created."""
    import sqlite3

    source, index_dir, db, corpus = indexed
    holder = sqlite3.connect(db)
    holder.execute("PRAGMA wal_autocheckpoint = 0")
    holder.execute("INSERT INTO meta (key, value) VALUES ('filler', ?)", ("x" * 200_000,))
    stale_wal = Path(f"{db}-wal").read_bytes()
    holder.close()
    for leftover in index_dir.iterdir():
        leftover.unlink()
    Path(f"{db}-wal").write_bytes(stale_wal)
    with RelStdioServer("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0") as server:
        status = server.wait_for_scan()
        assert status["indexed_files"] == len(corpus.versions), status
        assert_recovered(server, corpus, db)


def test_the_command_line_says_a_damaged_index_is_damaged_when_listing(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for n in range(200):
        (source / f"d{n}.md").write_text(f"# Doc {n}\n\n" + random.Random(n).randbytes(3000).hex() + "\n")
    index = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    main = [sys.executable, str(Path(__file__).resolve().parent.parent / "main.py")]
    assert subprocess.run([*main, "index", *index], capture_output=True, timeout=120).returncode == 0
    [db] = (tmp_path / "idx").glob("*.sqlite3")
    with db.open("r+b") as damaged:
        damaged.seek(8192)
        damaged.write(b"\xff" * 200_000)
    listed = subprocess.run([*main, "list", *index], capture_output=True, text=True, timeout=120)
    assert listed.returncode != 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "listing failed: " in listed.stderr and "malformed" in listed.stderr, listed.stderr
