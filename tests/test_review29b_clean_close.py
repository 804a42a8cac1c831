"""Review of #25 (44feabd): the `.closed` note must vouch only for the file the closing writer itself
had open, and whatever stands in the note's place, or whatever fails while writing it, must cost
no more than a check at the next start. Real SQLite files, a real Daemon thread."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import database
from database import CLOSED_SUFFIX, IndexWriter
from models import ServerConfig
from search import search
from tests import test_clean_close as clean_close
from tests.test_clean_close import mark_of


def closed_index(config: ServerConfig, source: Path) -> Path:
    """An index of a few notes (a few pages each), written and closed cleanly: its path."""
    return clean_close.closed_index(config, source, notes=20, filler=400)


def damaged_copy(db: Path, target: Path) -> Path:
    """A byte copy of the index with a b-tree page overwritten: quick_check fails on it."""
    data = bytearray(db.read_bytes())
    page = 4096 * 3
    data[page : page + 256] = bytes(range(256))
    target.write_bytes(bytes(data))
    check = sqlite3.connect(target)
    try:
        assert check.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    except sqlite3.DatabaseError:
        pass
    finally:
        check.close()
    return target


def test_a_file_put_in_the_index_s_place_while_a_writer_has_it_open_is_not_noted_as_closed_cleanly(
    config: ServerConfig, source: Path, tmp_path: Path
) -> None:
    """The writer's close checkpoints into the file it opened; the note must not vouch for another
    file that was renamed over the path meanwhile (a backup restored under a running server, then
    the server restarted to pick it up). The scan would have checked it (file_replaced); a close
    before that scan must not let the next start skip the check instead."""
    db = closed_index(config, source)
    foreign = damaged_copy(db, tmp_path / "restored.sqlite3")
    writer = IndexWriter(db)
    os.replace(foreign, db)
    assert writer.file_replaced()
    writer.close()
    nxt = IndexWriter(db)
    try:
        assert not nxt.closed_cleanly, "the note vouched for a file the closing writer never opened"
    finally:
        nxt.close()


def test_a_server_checks_an_index_that_was_replaced_while_the_last_server_ran(
    config: ServerConfig, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = closed_index(config, source)
    foreign = damaged_copy(db, tmp_path / "restored.sqlite3")
    last = IndexWriter(db)  # the last server, closed before its next scan noticed the replacement
    os.replace(foreign, db)
    last.close()
    assert clean_close.checks_in_a_server_run(config, monkeypatch), "a replaced, damaged index was served with no integrity check at start"


def test_damage_done_while_a_writer_has_the_index_open_is_not_noted_as_closed_cleanly(
    config: ServerConfig, source: Path
) -> None:
    """The next start's check must find it, as before #25: the close sees the file is not as this writer left it."""
    db = closed_index(config, source)
    writer = IndexWriter(db)
    with open(db, "r+b") as handle:  # another process, a bug, a bad sector: not this writer's write
        handle.seek(4096 * 3)
        handle.write(bytes(range(256)))
    writer.close()
    nxt = IndexWriter(db)
    try:
        assert not nxt.closed_cleanly
    finally:
        nxt.close()


def fifo(mark: Path) -> None:
    os.mkfifo(mark)


def folder(mark: Path) -> None:
    mark.mkdir()
    (mark / "inside").write_text("x")


def huge(mark: Path) -> None:
    with open(mark, "wb") as handle:
        handle.truncate(50 * 1024 * 1024)


def other_shape(mark: Path) -> None:
    mark.write_text('{"inode": 1, "size": 2, "mtime_ns": 3, "ctime_ns": 4}')


def empty(mark: Path) -> None:
    mark.write_bytes(b"")


def hard_link_to_the_index(mark: Path) -> None:
    os.link(Path(str(mark)[: -len(CLOSED_SUFFIX)]), mark)


def dangling_link(mark: Path) -> None:
    mark.symlink_to(mark.with_name("nowhere"))


HOSTILE: dict[str, Callable[[Path], None]] = {
    "a FIFO": fifo, "a folder": folder, "a huge sparse file": huge, "JSON of another shape": other_shape,
    "empty": empty, "a hard link to the index": hard_link_to_the_index, "a dangling link": dangling_link,
}


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_whatever_stands_in_the_note_s_place_is_not_trusted_and_the_index_keeps_its_data(
    config: ServerConfig, source: Path, kind: str
) -> None:
    db = closed_index(config, source)
    mark = mark_of(db)
    mark.unlink()
    HOSTILE[kind](mark)
    writer = IndexWriter(db)
    assert not writer.closed_cleanly
    assert writer.quick_check() == "ok"  # as a server does at its start: then its close may vouch
    writer.close()  # never raises, whatever is there
    assert [hit["path"] for hit in search(db, "walrus", 30)["results"]]
    assert sqlite3.connect(db).execute("PRAGMA quick_check").fetchone()[0] == "ok"
    if kind == "a folder":
        assert mark.is_dir()
        return
    assert mark.is_file() and IndexWriter(db).closed_cleanly  # the next clean close noted it again


def test_a_note_that_cannot_be_written_costs_a_check_only(
    config: ServerConfig, source: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = closed_index(config, source)
    writer = IndexWriter(db)
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        if data.startswith(b"["):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(database.os, "write", full_disk)
    with caplog.at_level(logging.WARNING, logger="database"):
        writer.close()
    monkeypatch.undo()
    assert any("could not note" in record.getMessage() for record in caplog.records)
    again = IndexWriter(db)  # an empty note was left: not trusted, and taken away
    assert not again.closed_cleanly and not mark_of(db).exists()
    again.close()
    assert [hit["path"] for hit in search(db, "walrus", 30)["results"]]


def test_a_second_writer_s_writes_after_the_first_s_close_are_never_vouched_for(config: ServerConfig, source: Path) -> None:
    """Two servers on one index: the first closes cleanly and notes it, the second writes and is
    killed (its writes only in the WAL, or checkpointed into the file): the note holds for neither."""
    db = closed_index(config, source)
    first, second = IndexWriter(db), IndexWriter(db)
    first.close()
    assert mark_of(db).is_file()
    with second.transaction():
        second.set_meta("written", "after the first closed")
    second.conn.close()  # killed
    third = IndexWriter(db)
    assert not third.closed_cleanly
    assert third.quick_check() == "ok"  # as a server does at its start: then its close may vouch
    with third.transaction():
        third.set_meta("written", "and checkpointed")
    assert third.truncate_wal()
    fourth = IndexWriter(db)  # opened while the third runs: the third wrote no note, so nothing to take
    third.close()
    with fourth.transaction():
        fourth.set_meta("written", "by the fourth, checkpointed, then killed")
    assert fourth.truncate_wal()
    fourth.conn.close()  # killed: the third's note is still there
    assert mark_of(db).is_file()
    fifth = IndexWriter(db)
    assert not fifth.closed_cleanly
    fifth.close()


def test_a_hard_link_made_since_the_close_is_not_trusted(config: ServerConfig, source: Path, tmp_path: Path) -> None:
    db = closed_index(config, source)
    other = tmp_path / "other-name"
    os.link(db, other)
    st = db.stat()
    with open(other, "r+b") as handle:
        handle.seek(4096 * 3)
        handle.write(b"\x00" * 64)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    writer = IndexWriter(db)
    assert not writer.closed_cleanly
    writer.close()
