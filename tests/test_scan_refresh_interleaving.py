"""A scan writes the files the index did not hold when it began without looking up
their rows. The write lock is re-entrant and shared by the process's threads, so a
refresh_file (the MCP refresh tool does not take the scan lock) goes ahead between a scan's
batches: a file the scan still has to write may be in the index by then."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import indexer as indexer_module
from index_queries import index_counts
from indexer import TextIndexer
from models import RefreshReply
from tests.conftest import write


def _stored_paths(indexer: TextIndexer) -> list[str]:
    return sorted(path for (path, *_) in indexer.writer.file_signatures())


def _scan_refreshing_once(
    indexer: TextIndexer, monkeypatch: pytest.MonkeyPatch, batch_files: int, refresh: Callable[[], None]
) -> RefreshReply:
    """A scan writing ``batch_files`` files per batch, with ``refresh`` run once between two of its
    batches (what another thread's refresh_file does while the scan waits); it must succeed."""
    monkeypatch.setattr(indexer_module, "BATCH_FILES", batch_files)
    done: list[bool] = []

    def between_batches(_progress: object) -> None:
        if not done:
            done.append(True)
            refresh()

    reply = indexer.scan(between_batches)
    assert reply["success"], reply
    return reply


def test_refresh_between_batches_of_a_first_scan_does_not_fail_it(
    indexer: TextIndexer, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"n{i:02}.md" for i in range(12)]
    for name in names:
        write(source, name, f"# {name}\n\nword{name[1:3]} common text\n")

    def refresh_all() -> None:
        for name in names:
            indexer.refresh_file(name)

    reply = _scan_refreshing_once(indexer, monkeypatch, 2, refresh_all)
    assert not reply["errors"]
    assert _stored_paths(indexer) == names
    assert index_counts(indexer.writer.conn)["indexed_files"] == len(names)


def test_a_new_file_refreshed_during_a_rescan_does_not_fail_it(
    indexer: TextIndexer, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(source, "old.md", "# old\n\nkept\n")
    assert indexer.scan()["success"]
    names = [f"m{i:02}.md" for i in range(8)]
    for name in names:
        write(source, name, f"# {name}\n\nfirst\n")

    def edit_and_refresh_last() -> None:
        write(source, names[-1], f"# {names[-1]}\n\nsecond\n")
        indexer.refresh_file(names[-1])

    _scan_refreshing_once(indexer, monkeypatch, 1, edit_and_refresh_last)
    assert _stored_paths(indexer) == sorted(["old.md", *names])
