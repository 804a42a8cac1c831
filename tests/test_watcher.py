"""Edits visible at once: the inotify watcher on real folders, and a real server that finds an edit
with no rescan due (scan interval one hour)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp import Client

from indexer import watched_folder
from models import ServerConfig
from tests.conftest import PROJECT_DIR, write
from tests.mcp_client import call, server_params, wait_for
from watcher import Batch, SourceWatcher, WatchUnavailable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")


def gathered(watcher: SourceWatcher, seconds: float = 5.0) -> Batch:
    """Every change reported until none comes for a moment (the kernel may split them in batches)."""
    total = Batch()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = watcher.next_batch(0.5 if total.paths or total.rescan else deadline - time.monotonic())
        if batch is None:
            break
        total.paths |= batch.paths
        if batch.rescan:
            total.need_rescan(batch.rescan)
    return total


@contextmanager
def watching(config: ServerConfig) -> Iterator[SourceWatcher]:
    """A watcher on the source, as the server starts one, closed afterwards."""
    found = SourceWatcher(config.source_directory, watched_folder(config))
    found.start()
    try:
        yield found
    finally:
        found.close()


@pytest.fixture
def watcher(config: ServerConfig, source: Path) -> Iterator[SourceWatcher]:
    write(source, "notes/a.md", "a\n")
    write(source, "node_modules/pkg/readme.md", "dependency\n")
    write(source, ".obsidian/workspace.md", "editor state\n")
    with watching(config) as found:
        yield found


def test_file_edits_creations_deletions_and_renames_are_reported(watcher: SourceWatcher, source: Path) -> None:
    assert watcher.state.active and watcher.state.folders == 2  # the source and notes/
    (source / "notes/a.md").write_text("a changed\n")
    write(source, "b.md", "new\n")
    assert gathered(watcher).paths == {"notes/a.md", "b.md"}
    (source / "b.md").unlink()
    os.rename(source / "notes/a.md", source / "notes/c.md")
    batch = gathered(watcher)
    assert batch.paths == {"b.md", "notes/a.md", "notes/c.md"} and batch.rescan is None


def test_skipped_folders_are_not_watched(watcher: SourceWatcher, source: Path) -> None:
    write(source, "node_modules/pkg/other.md", "x\n")
    write(source, ".obsidian/workspace.md", "changed\n")
    write(source, "notes/seen.md", "x\n")
    assert gathered(watcher).paths == {"notes/seen.md"}


def test_a_new_folder_is_watched_and_files_written_before_its_watch_are_reported(watcher: SourceWatcher, source: Path) -> None:
    write(source, "new/deep/er/first.md", "written at once\n")
    assert "new/deep/er/first.md" in gathered(watcher).paths
    write(source, "new/deep/er/second.md", "written later\n")
    assert gathered(watcher).paths == {"new/deep/er/second.md"}
    assert watcher.state.folders == 5


def test_a_folder_renamed_or_deleted_or_an_ignore_file_edited_asks_for_a_rescan(watcher: SourceWatcher, source: Path) -> None:
    os.rename(source / "notes", source / "moved")
    assert "notes" in (gathered(watcher).rescan or "")
    write(source, "moved/.gitignore", "*.md\n")
    assert "gitignore" in (gathered(watcher).rescan or "")


def test_wake_ends_a_wait_at_once(watcher: SourceWatcher) -> None:
    timer = threading.Timer(0.2, watcher.wake)
    timer.start()
    started = time.monotonic()
    assert watcher.next_batch(30) is None
    assert time.monotonic() - started < 20


def test_running_out_of_inotify_instances_or_files_is_a_clear_refusal(config: ServerConfig, source: Path) -> None:
    """A real limit: this process may open no more files, so inotify_init1 fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    opened: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        with pytest.raises(OSError):
            while True:
                opened.append(os.open(os.devnull, os.O_RDONLY))
        with pytest.raises(WatchUnavailable, match="max_user_instances"):
            SourceWatcher(source, watched_folder(config)).start()
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


pytest_anyio = pytest.mark.anyio


@pytest_anyio
async def test_a_server_finds_edits_new_files_and_renames_without_a_rescan(source: Path, tmp_path: Path) -> None:
    write(source, "notes/plan.md", "# Plan\n\nThe first draft mentions apples.\n")
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "3600")) as client:
        async def indexed() -> bool:
            return (await call(client, "get_index_status"))["indexed_files"] == 1

        await wait_for(indexed)
        status = await call(client, "get_index_status")
        assert status["watching"] == {"active": True, "folders": 2}  # #23: no problem, no field

        async def found(query: str, path: str | None) -> bool:
            hits = (await call(client, "search", {"query": query}))["results"]
            return [hit["path"] for hit in hits][:1] == ([path] if path else [])

        (source / "notes/plan.md").write_text("# Plan\n\nThe second draft mentions quinces.\n")
        await wait_for(lambda: found("quinces", "notes/plan.md"), 20)
        write(source, "later/idea.md", "# Idea\n\nkumquats everywhere\n")
        await wait_for(lambda: found("kumquats", "later/idea.md"), 20)
        os.rename(source / "later/idea.md", source / "later/renamed.md")
        await wait_for(lambda: found("kumquats", "later/renamed.md"), 20)
        (source / "later/renamed.md").unlink()
        await wait_for(lambda: found("kumquats", None), 20)


def test_status_from_another_process_says_whether_a_server_watches(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "a\n")
    run = [sys.executable, str(PROJECT_DIR / "main.py")]
    args = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    subprocess.run([*run, "index", *args], check=True, capture_output=True)
    status = subprocess.run([*run, "status", *args, "--json"], check=True, capture_output=True, text=True).stdout
    assert '"active": false' in status and "no server is running" in status


def test_a_folder_let_in_by_a_changed_rule_is_watched_after_the_rescan(config: ServerConfig, source: Path) -> None:
    write(source, ".gitignore", "ign/\n")
    write(source, "ign/x.md", "x\n")
    with watching(config) as found:
        write(source, "ign/x.md", "ignored edit\n")
        assert gathered(found, 1.0).paths == set()
        (source / ".gitignore").write_text("")
        assert ".gitignore" in (gathered(found).rescan or "")
        found.rewatch()  # what the server does after that rescan
        write(source, "ign/x.md", "now seen\n")
        assert gathered(found).paths == {"ign/x.md"}


def test_an_edited_git_info_exclude_asks_for_a_rescan(config: ServerConfig, source: Path) -> None:
    write(source, ".git/info/exclude", "# nothing yet\n")
    with watching(config) as found:
        (source / ".git/info/exclude").write_text("notes/\n")
        assert "exclude" in (gathered(found).rescan or "")


def test_a_deleted_source_ends_watching_with_a_reason(config: ServerConfig, source: Path) -> None:
    write(source, "a.md", "a\n")
    with watching(config) as found:
        (source / "a.md").unlink()
        source.rmdir()
        batch = gathered(found)
        assert batch.rescan and not found.state.active and "deleted or moved" in (found.state.problem or "")
