"""A source that cannot be read counted once, and path filters ending in "." or "/": the hostile
review attack17 of attack16's fixes (ef43f63), each test failing on the code it reviewed (7618ca4)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from exceptions import ArgumentError
from filters import read_filters
from indexer import TextIndexer
from models import ServerConfig
from search import search
from status import read_status
from tests.conftest import write


@pytest.mark.parametrize("path", ["docs/*/.", "docs/**/.", "**/."])
def test_a_glob_ending_in_a_dot_segment_is_not_silently_nothing(
    indexer: TextIndexer, config: ServerConfig, source: Path, path: str
) -> None:
    """12fa60a: a '.' segment is the folder it is in, so ``docs/.`` is now ``docs/`` (the folder's
    files). But a glob ending in '/.' becomes a glob ending in '/' (``docs/*/``, ``**/``), whose
    pattern only a path ending in '/' could match: no file ever does, and the reply says nothing
    (files_matched 0, no warning), the very silence the fix was for. ``docs/*/.`` = the folders in
    docs. Expected: the files under them (``docs/**/.``, ``**/.``: all of docs, all files), or an
    ArgumentError naming ``path``, or a warning. Got: 0 results, no warning."""
    write(source, "docs/x/a.md", "# A\n\nalpha apples\n")
    write(source, "docs/y/b.md", "# B\n\nalpha bananas, a second text\n")
    indexer.scan()
    try:
        reply = search(config.db_path, "alpha", 10, filters=read_filters(path))
    except ArgumentError as refused:
        assert refused.name == "path"
        return
    paths = sorted(hit["path"] for hit in reply["results"])
    assert paths == ["docs/x/a.md", "docs/y/b.md"] or reply["warnings"], reply


def _corruption(folder: Path) -> sqlite3.DatabaseError:
    """A real SQLITE_NOTADB error, as a scan meets an index damaged under it."""
    garbage = folder / "not-a-database"
    garbage.write_bytes(b"x" * 4096)
    try:
        sqlite3.connect(garbage).execute("SELECT * FROM sqlite_master")
    except sqlite3.DatabaseError as exc:
        return exc
    raise AssertionError("no corruption error")


def test_a_source_gone_again_after_a_scan_that_rebuilt_the_index_counts_again(
    indexer: TextIndexer, config: ServerConfig, source: Path, tmp_path: Path
) -> None:
    """ba8832f: a source that cannot be read counts once "until a scan succeeds again". A scan
    that meets a damaged index rebuilds it and scans again (_scan_with_recovery's corruption
    branch): that scan succeeds, but only the first branch clears ``source_failure``. So the
    source gone, back (the index damaged meanwhile: rebuilt, the scan succeeds), then gone again
    with the same message is not counted. Expected errors_encountered 3 (gone, rebuilt, gone
    again). Got 2."""
    write(source, "a.md", "# A\n\nalpha\n")
    indexer.scan()
    shutil.move(source, tmp_path / "away")
    assert not indexer.scan()["success"]
    assert read_status(config, indexer)["errors_encountered"] == 1
    shutil.move(tmp_path / "away", source)
    damage, signatures = _corruption(tmp_path), indexer.writer.file_signatures
    calls = []

    def damaged_once() -> object:
        calls.append(1)
        if len(calls) == 1:
            raise damage
        return signatures()

    indexer.writer.file_signatures = damaged_once  # type: ignore[method-assign]
    assert indexer.scan()["success"]  # rebuilt and scanned: the source is back and was read
    assert read_status(config, indexer)["errors_encountered"] == 2
    shutil.move(source, tmp_path / "away")
    assert not indexer.scan()["success"]
    assert read_status(config, indexer)["errors_encountered"] == 3


def test_status_names_the_source_gone_after_another_error_while_it_stays_gone(
    indexer: TextIndexer, config: ServerConfig, source: Path
) -> None:
    """ba8832f: a repeated source failure is no longer recorded (_record_error), and that is also
    what set ``last_error``: _scan_failed then saves whatever last_error was before. With another
    error between two scans of a missing source (the background loop's record_problem, a failed
    write), status says state "error" (last_error_of "scan") with last_error the other error, not
    that the source cannot be opened, for as long as the source stays gone. Before the fix each
    scan set it. Expected: last_error names the scan's problem. Got: the other error's message."""
    write(source, "a.md", "# A\n\nalpha\n")
    indexer.scan()
    shutil.rmtree(source)
    failed = indexer.scan()
    indexer.record_problem("the background indexing failed (RuntimeError: x); it goes on", RuntimeError("x"))
    again = indexer.scan()
    assert not failed["success"] and not again["success"]
    status = read_status(config, indexer)
    assert status["state"] == "error"
    assert status["last_error"] == again["errors"][0], status
