"""The background loop never dies and never lies: a watcher that trips over a folder changing under
it, anything else escaping a turn of the loop, a full disk (a real one: a small tmpfs), a file
written all the time, and its supervisor after a failed turn (status kept in step, one failure
counted once, a MemoryError survived). Real folders, a real SQLite file, a real Daemon thread."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from daemon import Daemon
from index_writer import IndexWriter
from indexer import TextIndexer, watched_folder
from models import ServerConfig, WatchState
from reliability_helpers import MAIN_PY, rel_mount_tmpfs, rel_umount
from search import search
from status import read_status
from tests.conftest import write
from watcher import HOT_FIRST_WAIT, HOT_MAX_WAIT, SETTLE_SECONDS, Pacing, SourceWatcher

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only"),
    pytest.mark.usefixtures("no_hang"),
]


def wait_until(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Poll ``check`` until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def found(config: ServerConfig, word: str) -> list[str]:
    return [hit["path"] for hit in search(config.db_path, word, 10)["results"]]


@pytest.fixture
def watched_config(source: Path, tmp_path: Path) -> ServerConfig:
    """A config whose periodic rescan never comes during a test: only the watcher sees edits."""
    return ServerConfig(source_directory=source.resolve(), index_output_directory=(tmp_path / "indexes").resolve(),
                        scan_interval_seconds=3600)


@pytest.fixture
def daemon_of() -> Iterator[Callable[[ServerConfig], Daemon]]:
    """Starts a Daemon on a config and waits for its first scan; every one is closed afterwards."""
    started: list[Daemon] = []

    def start(config: ServerConfig) -> Daemon:
        daemon = Daemon(config)
        started.append(daemon)
        daemon.start()
        assert daemon.first_scan_done.wait(30)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


def status_of(daemon: Daemon) -> dict:
    return dict(read_status(daemon.config, daemon.indexer, daemon.startup_error, daemon.watch_state))


def fail_the_next_batch_once(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Makes the watcher's next batch raise, once, a failure nobody foresaw: the list returned
    holds True from then on."""
    failing = SourceWatcher.next_batch
    raised: list[bool] = []

    def next_batch(self: SourceWatcher, timeout: float | None):  # noqa: ANN202
        if not raised:
            raised.append(True)
            raise RuntimeError("an unforeseen failure")
        return failing(self, timeout)

    monkeypatch.setattr(SourceWatcher, "next_batch", next_batch)
    return raised


# ---- a folder that changes while the watcher looks at it ----------------------------------------


def test_a_folder_that_changes_while_the_watcher_descends_asks_for_a_rescan(watched_config: ServerConfig, source: Path) -> None:
    """What a git checkout flipping docs/img between a folder and a link does to os.path.realpath
    in the watcher's descent (FileNotFoundError or EINVAL). The race cannot be forced, so the
    descent's rule raises what the race raises, once."""
    write(source, "docs/a.md", "a\n")
    real = watched_folder(watched_config)
    tripped: list[str] = []

    def descend(rel: str) -> bool:
        if rel == "docs/img" and not tripped:
            tripped.append(rel)
            raise FileNotFoundError(2, "No such file or directory", str(source / rel))
        return real(rel)

    watcher = SourceWatcher(watched_config.source_directory, descend)
    watcher.start()
    try:
        write(source, "docs/img/pic.md", "picture\n")
        batch = watcher.next_batch(10)
        while batch is not None and not batch.rescan:
            batch = watcher.next_batch(2)
        assert batch is not None and "docs/img" in (batch.rescan or ""), batch
        watcher.rewatch()  # what the server does after that rescan
        assert watcher.state.active
        write(source, "docs/img/later.md", "later\n")
        later = watcher.next_batch(10)
        assert later is not None and "docs/img/later.md" in later.paths
    finally:
        watcher.close()


def test_a_folder_flipping_between_link_and_folder_never_stops_the_index_following_edits(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon]
) -> None:
    """The real race, for a few seconds: the loop's thread lives on, and edits are indexed after."""
    write(source, "docs/a.md", "a\n")
    write(source, "target/t.md", "t\n")
    daemon = daemon_of(watched_config)
    img = source / "docs/img"
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline and daemon._thread.is_alive():
        img.mkdir()
        img.rmdir()
        img.symlink_to(source / "target")
        img.unlink()
    assert daemon._thread.is_alive()
    write(source, "docs/img/final.md", "zqflipfinalqz\n")
    assert wait_until(lambda: found(watched_config, "zqflipfinalqz") == ["docs/img/final.md"])
    write(source, "docs/img/final.md", "zqflipeditedqz\n")
    assert wait_until(lambda: found(watched_config, "zqflipeditedqz") == ["docs/img/final.md"])


def test_whatever_escapes_a_turn_of_the_loop_is_shown_and_the_loop_goes_on(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A failure nobody foresaw (made here by a watcher whose next batch raises, once): logged
    with its traceback, status's last error, a rescan, and a new watcher that sees later edits."""
    write(source, "a.md", "a\n")
    raised = fail_the_next_batch_once(monkeypatch)
    daemon = daemon_of(watched_config)
    assert wait_until(lambda: bool(raised))
    assert wait_until(lambda: "an unforeseen failure" in (status_of(daemon)["last_error"] or ""))
    status = status_of(daemon)
    assert status["errors_encountered"] >= 1, status
    assert wait_until(lambda: any(record.exc_info and "an unforeseen failure" in record.getMessage() for record in caplog.records))
    assert wait_until(lambda: status_of(daemon)["watching"]["active"])
    write(source, "a.md", "zqaftercrashqz\n")
    assert wait_until(lambda: found(watched_config, "zqaftercrashqz") == ["a.md"])
    assert daemon._thread.is_alive()


# ---- a full disk -----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only), unmounted afterwards."""
    mount = Path(f"/tmp/loop-mnt-{os.getpid()}-{tmp_path.name}")
    if not rel_mount_tmpfs(mount, "2m"):
        pytest.skip("needs root and a kernel that allows tmpfs mounts, to fill a file system for real")
    yield mount
    rel_umount(mount)
    mount.rmdir()


def fill(disk: Path) -> Path:
    """Fill the file system with one file, returned (delete it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def test_a_transaction_that_fills_the_disk_reports_the_full_disk_not_the_rollback(source: Path, small_disk: Path) -> None:
    """A batch larger than SQLite's page cache spills to the WAL before its commit; on a full disk
    SQLite rolls it back itself, and a ROLLBACK after that fails with an error of its own."""
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=small_disk / "idx")
    writer = IndexWriter(config.db_path)
    try:
        indexer = TextIndexer(config, writer)
        for number in range(12):
            write(source, f"big{number}.txt", " ".join(f"w{number}x{word}" for word in range(60_000)) + "\n")
        reply = indexer.scan()
        assert not reply["success"]
        assert "disk is full" in reply["errors"][0] and "rollback" not in reply["errors"][0], reply
        status = read_status(config, indexer)
        assert status["state"] == "error" and "disk is full" in (status["last_error"] or ""), status
        for number in range(12):
            (source / f"big{number}.txt").unlink()
        write(source, "small.md", "zqsmallqz\n")
        assert indexer.scan()["success"]
        status = read_status(config, indexer)
        assert status["state"] == "idle" and status["indexed_files"] == 1, status
    finally:
        writer.close()


def test_a_full_disk_is_shown_and_the_edits_made_meanwhile_are_indexed_when_space_returns(
    source: Path, small_disk: Path, daemon_of: Callable[[ServerConfig], Daemon]
) -> None:
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=small_disk / "idx", scan_interval_seconds=3600)
    write(source, "a.md", "# A\n\nzqbeforeqz\n")
    daemon = daemon_of(config)
    assert found(config, "zqbeforeqz") == ["a.md"]
    filler = fill(small_disk)
    write(source, "a.md", "# A\n\nzqwhilefullqz " + "filler words " * 20_000 + "\n")
    assert wait_until(lambda: status_of(daemon)["state"] == "error"), status_of(daemon)
    status = status_of(daemon)
    assert "disk is full" in (status["last_error"] or ""), status
    assert status["errors_encountered"] >= 1, status
    shown = subprocess.run(
        [sys.executable, str(MAIN_PY), "status", "--source", str(source), "--index-dir", str(config.index_output_directory)],
        capture_output=True, text=True, timeout=60,
    ).stdout
    assert "error" in shown and "disk is full" in shown, shown
    time.sleep(2)  # retries come and fail meanwhile: still one error, the same one
    assert status_of(daemon)["errors_encountered"] == status["errors_encountered"]
    filler.unlink()
    assert wait_until(lambda: found(config, "zqwhilefullqz") == ["a.md"], 60), status_of(daemon)
    status = status_of(daemon)
    assert status["state"] == "idle" and status["last_error"] is None, status
    assert daemon._thread.is_alive()


# ---- a file written all the time -------------------------------------------------------------------


def test_a_file_changed_once_is_indexed_at_once_and_a_hot_one_waits_longer_each_time() -> None:
    pacing = Pacing()
    assert pacing.changed({"note.md"}, 100.0) == {"note.md"}
    assert pacing.changed({"note.md"}, 200.0) == {"note.md"}  # edited again much later: at once
    assert pacing.changed({"log.txt"}, 300.0) == {"log.txt"}
    now, indexed = 300.0, [300.0]
    while now < 360.0:  # written every 0.2 s for a minute
        now = round(now + 0.2, 1)
        if pacing.changed({"log.txt"}, now):
            indexed.append(now)
        due = pacing.next_due()
        assert due is None or due > now
    waits = [later - earlier for earlier, later in zip(indexed, indexed[1:])]
    assert waits[0] == pytest.approx(HOT_FIRST_WAIT, abs=0.25)
    assert all(later >= earlier - 0.25 for earlier, later in zip(waits, waits[1:])), waits
    assert max(waits) == pytest.approx(HOT_MAX_WAIT, abs=0.25), waits
    assert len(indexed) < 15, indexed  # not 300
    # Writing stops: the last change is indexed once the file has settled, not lost.
    last = pacing.next_due()
    assert last is not None and last <= now + max(SETTLE_SECONDS, HOT_MAX_WAIT / 4)
    assert pacing.due(last) == {"log.txt"} and pacing.next_due() is None


def test_a_batch_says_which_files_are_gone_so_that_they_are_dropped_without_waiting(watched_config: ServerConfig, source: Path) -> None:
    """A file deleted or renamed away is no hot file: its old name must not stay searchable while
    the file 'cools down' (the loop drops Batch.gone at once)."""
    write(source, "old.md", "first\n")
    write(source, "doomed.md", "first\n")
    write(source, "back.md", "first\n")
    watcher = SourceWatcher(watched_config.source_directory, watched_folder(watched_config))
    watcher.start()
    try:
        os.rename(source / "old.md", source / "new.md")
        (source / "doomed.md").unlink()
        (source / "back.md").unlink()
        write(source, "back.md", "again\n")
        batch = watcher.next_batch(10)
        while batch is not None and not {"old.md", "new.md", "doomed.md", "back.md"} <= batch.paths:
            more = watcher.next_batch(2)
            if more is None:
                break
            batch.paths |= more.paths
            batch.gone = (batch.gone - more.paths) | more.gone
        assert batch is not None and batch.gone == {"old.md", "doomed.md"}, batch
    finally:
        watcher.close()


def test_what_pacing_remembers_stays_bounded() -> None:
    pacing = Pacing()
    for number in range(10_000):
        pacing.changed({f"f{number}.md"}, float(number))
    assert len(pacing._indexed) < 100


def test_a_file_written_all_the_time_is_indexed_a_few_times_and_its_last_text_is_found(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(source, "app.txt", "start\n")
    refreshed: list[str] = []
    refresh = TextIndexer.refresh_changed

    def counted(self: TextIndexer, rels: list[str]) -> None:
        refreshed.extend(rels)
        refresh(self, rels)

    monkeypatch.setattr(TextIndexer, "refresh_changed", counted)
    daemon_of(watched_config)
    writes = 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(source / "app.txt", "a", encoding="utf-8") as out:
            out.write(f"line {writes} of the log\n")
        writes += 1
        time.sleep(0.05)
    with open(source / "app.txt", "a", encoding="utf-8") as out:
        out.write("zqlastlineqz\n")
    assert wait_until(lambda: found(watched_config, "zqlastlineqz") == ["app.txt"])
    # Without pacing, a batch at least every watcher.MAX_GATHER_SECONDS: 10 or more in 5 s.
    assert refreshed.count("app.txt") <= 6, (refreshed.count("app.txt"), writes)


@pytest.mark.anyio
async def test_a_search_on_a_full_disk_says_the_disk_is_full_not_disk_io_error(source: Path, small_disk: Path) -> None:
    """A reader must make the index's shared-memory file; on a full disk SQLite says only "disk I/O
    error". The reply, the status and list_files say the disk is full, and where."""
    from mcp import Client

    from tests.mcp_client import call, server_params, wait_for

    write(source, "a.md", "# A\n\nzqfullqz\n")
    index_dir = small_disk / "idx"
    async with Client(server_params(source, index_dir, "--scan-interval", "0")) as client:
        async def idle() -> bool:
            return (await call(client, "get_index_status"))["state"] == "idle"

        await wait_for(idle)
    for leftover in [*index_dir.glob("*-shm"), *index_dir.glob("*-wal")]:
        leftover.unlink()
    fill(small_disk)
    async with Client(server_params(source, index_dir, "--scan-interval", "0")) as client:
        found = await client.call_tool("search", {"query": "zqfullqz"})
        assert found.is_error and "disk is full" in found.content[0].text and "I/O" not in found.content[0].text, found.content[0].text
        listed = await call(client, "list_files")
        assert listed["files"] == [] and "disk is full" in listed["warnings"][0], listed
        status = await call(client, "get_index_status")
        assert status["state"] == "error" and "disk is full" in status["last_error"], status


@pytest.mark.anyio
async def test_a_search_while_the_index_cannot_be_written_says_changes_are_missing(source: Path, small_disk: Path) -> None:
    from mcp import Client

    from tests.mcp_client import call, server_params, wait_for

    write(source, "a.md", "# A\n\nzqbeforeqz\n")
    async with Client(server_params(source, small_disk / "idx", "--scan-interval", "0")) as client:
        async def state_is(wanted: str) -> bool:
            return (await call(client, "get_index_status"))["state"] == wanted

        await wait_for(lambda: state_is("idle"))
        assert "warnings" not in await call(client, "search", {"query": "zqbeforeqz"})
        fill(small_disk)
        write(source, "a.md", "# A\n\nzqwhilefullqz " + "filler words " * 20_000 + "\n")
        await wait_for(lambda: state_is("error"))
        found = await call(client, "search", {"query": "zqbeforeqz"})
        assert any("the index cannot be written now" in w and "disk is full" in w for w in found["warnings"]), found


# ---- the supervisor of the rescan loop ------------------------------------------------------------


def test_after_a_failed_turn_status_says_watching_stopped_and_counts_the_failure_once(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon], monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(source, "a.md", "a\n")
    fail_the_next_batch_once(monkeypatch)
    recording = TextIndexer.record_watching
    recorded: list[WatchState] = []

    def record_watching(self: TextIndexer, state: WatchState) -> None:
        recorded.append(replace(state))  # a copy: a watcher's state changes when it closes
        recording(self, state)

    monkeypatch.setattr(TextIndexer, "record_watching", record_watching)
    daemon = daemon_of(watched_config)
    assert wait_until(lambda: bool(recorded))
    # what status shows in this process and, through the index, in others
    assert not recorded[0].active and "stopped by a failure" in (recorded[0].problem or ""), recorded
    write(source, "a.md", "zqafterfailureqz\n")
    assert wait_until(lambda: found(watched_config, "zqafterfailureqz") == ["a.md"])
    for status in (status_of(daemon), dict(read_status(watched_config, None))):
        assert status["watching"]["active"], status
        assert status["errors_encountered"] == 1, status


def test_a_memory_error_while_reporting_a_failed_turn_does_not_end_the_loop(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of memory in a turn, and again while its traceback is formatted (made here by raising
    MemoryError, which cannot be caused for real without starving the machine)."""
    write(source, "a.md", "a\n")
    failing, reporting = SourceWatcher.next_batch, TextIndexer.record_problem
    held: list[weakref.ref] = []
    freed: list[bool] = []

    class Huge:
        """Stands for the large tree a turn held when memory ran out."""

    def next_batch(self: SourceWatcher, timeout: float | None):  # noqa: ANN202
        if not held:
            tree = Huge()
            held.append(weakref.ref(tree))
            raise MemoryError
        return failing(self, timeout)

    def record_problem(self: TextIndexer, message: str, exc: BaseException) -> None:
        reporting(self, message, exc)
        if not freed:
            freed.append(held[0]() is None)
            raise MemoryError  # as if formatting the traceback ran out of memory

    monkeypatch.setattr(SourceWatcher, "next_batch", next_batch)
    monkeypatch.setattr(TextIndexer, "record_problem", record_problem)
    daemon = daemon_of(watched_config)
    assert wait_until(lambda: bool(freed))
    assert freed == [True]  # the failed turn's locals were let go before its report
    write(source, "a.md", "zqaftermemoryqz\n")
    assert wait_until(lambda: found(watched_config, "zqaftermemoryqz") == ["a.md"])
    assert daemon._thread.is_alive()
    assert status_of(daemon)["errors_encountered"] == 1
