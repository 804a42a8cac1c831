"""An index closed cleanly and untouched since is not read whole again at the next server's start
(SQLite's quick_check took about 100 s at a million files, at every start). A writer notes what the
file was when it closed it with its WAL emptied; the next writer takes the note away and trusts it
only if the file is still exactly that. The note vouches only for a file the closing writer itself
had open and knew sound; whatever stands in the note's place, or whatever fails while writing it,
costs no more than a check at the next start. Real SQLite files, a real Daemon thread."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import index_files
import index_writer
from daemon import Daemon
from index_files import CLOSED_SUFFIX
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import write

from tests.conftest import write


def closed_index(config: ServerConfig, source: Path, notes: int = 5, filler: int = 0) -> Path:
    """An index of ``notes`` notes (``filler`` words more in each), written and closed cleanly: its path."""
    for n in range(notes):
        write(source, f"n{n}.md", f"# Note {n}\n\nwalrus {n} " + "filler " * filler + "\n")
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    return config.db_path


def mark_of(db: Path) -> Path:
    return Path(f"{db}{CLOSED_SUFFIX}")


def test_a_clean_close_is_noted_and_the_next_opening_takes_the_note(config: ServerConfig, source: Path) -> None:
    db = closed_index(config, source)
    assert mark_of(db).is_file() and mark_of(db).stat().st_mode & 0o777 == 0o600
    writer = IndexWriter(db)
    assert writer.closed_cleanly and not mark_of(db).exists()
    writer.conn.close()  # as if killed: no close()
    killed = IndexWriter(db)
    assert not killed.closed_cleanly
    killed.close()  # it never checked the file: it cannot vouch for it
    unchecked = IndexWriter(db)
    assert not unchecked.closed_cleanly
    assert unchecked.quick_check() == "ok"  # as a server does at its start
    unchecked.close()
    assert IndexWriter(db).closed_cleanly


def test_a_writer_vouches_only_for_a_file_it_knows_sound(config: ServerConfig, source: Path) -> None:
    db = closed_index(config, source)  # a new index, sound from the start: its close vouched for it
    trusted = IndexWriter(db)
    assert trusted.closed_cleanly and trusted.sound
    trusted.conn.close()  # killed: the note was taken at opening
    fresh = config.db_path.with_name("fresh.sqlite3")
    made = IndexWriter(fresh)  # a new index: sound from the start
    assert made.sound
    made.close()
    assert IndexWriter(fresh).closed_cleanly
    checked = IndexWriter(db)
    assert not checked.sound and checked.quick_check() == "ok" and checked.sound
    checked.distrust()  # a reader saw the index fail, and the server stops before the next scan
    checked.close()
    assert not IndexWriter(db).closed_cleanly


def touch_keeping_times(db: Path) -> None:
    st = db.stat()
    os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime as it was; the ctime moves


def overwrite_a_byte(db: Path) -> None:
    st = db.stat()
    with open(db, "r+b") as handle:
        handle.seek(st.st_size - 10)
        handle.write(b"\x00")
    os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))


def replace_with_a_copy(db: Path) -> None:
    copy = db.with_name("copy")
    copy.write_bytes(db.read_bytes())
    os.replace(copy, db)


def garbage_note(db: Path) -> None:
    mark_of(db).write_text("not json")


def note_is_a_link(db: Path) -> None:
    target = db.with_name("elsewhere")
    os.replace(mark_of(db), target)
    mark_of(db).symlink_to(target)


CHANGES: dict[str, Callable[[Path], None]] = {
    "touched": touch_keeping_times, "a byte overwritten": overwrite_a_byte, "replaced by a copy": replace_with_a_copy,
    "a note that is not JSON": garbage_note, "the note a link": note_is_a_link,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_anything_done_to_the_index_since_is_not_trusted(config: ServerConfig, source: Path, change: str) -> None:
    db = closed_index(config, source)
    CHANGES[change](db)
    writer = IndexWriter(db)
    assert not writer.closed_cleanly and not mark_of(db).exists()
    writer.close()


def test_an_index_whose_wal_holds_writes_is_not_trusted(config: ServerConfig, source: Path) -> None:
    db = closed_index(config, source)
    holder = sqlite3.connect(db)
    holder.execute("PRAGMA wal_autocheckpoint = 0")
    with holder:
        holder.execute("INSERT INTO meta (key, value) VALUES ('written', 'since')")
    assert Path(f"{db}-wal").stat().st_size > 0
    writer = IndexWriter(db)
    assert not writer.closed_cleanly
    writer.close()
    holder.close()


def test_a_close_that_cannot_empty_the_wal_notes_nothing(config: ServerConfig, source: Path) -> None:
    db = closed_index(config, source)
    writer = IndexWriter(db)
    with writer.transaction():
        writer.set_meta("written", "in the WAL")
    reader = sqlite3.connect(db)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM files").fetchone()  # a snapshot the checkpoint cannot pass
    with writer.transaction():
        writer.set_meta("written", "after the snapshot")
    writer.close()
    assert not mark_of(db).exists()
    reader.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_server_checks_the_index_at_start_only_when_it_was_not_closed_cleanly(
    config: ServerConfig, source: Path, monkeypatch: pytest.MonkeyPatch, clean: bool
) -> None:
    db = closed_index(config, source)
    if not clean:
        mark_of(db).unlink()
    assert checks_in_a_server_run(config, monkeypatch) == ([] if clean else [False])
    assert mark_of(db).is_file()  # the server closed it cleanly in turn


def checks_in_a_server_run(config: ServerConfig, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The integrity checks (their ``sections_too``) a Daemon on ``config`` runs through its first
    scan and one more, until it is closed."""
    checks: list[bool] = []
    real = index_writer.IndexWriter.quick_check
    monkeypatch.setattr(index_writer.IndexWriter, "quick_check", lambda self, sections_too=False: checks.append(sections_too) or real(self))
    daemon = Daemon(config)
    daemon.start()
    try:
        assert daemon.first_scan_done.wait(30)
        assert daemon.indexer is not None and daemon.indexer.scan()["success"]
    finally:
        daemon.close()
    return checks


# ---- a file the closing writer did not leave as it was -------------------------------------------


def closed_index_of_pages(config: ServerConfig, source: Path) -> Path:
    """An index of a few notes (a few pages each), written and closed cleanly: its path."""
    return closed_index(config, source, notes=20, filler=400)


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
    db = closed_index_of_pages(config, source)
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
    db = closed_index_of_pages(config, source)
    foreign = damaged_copy(db, tmp_path / "restored.sqlite3")
    last = IndexWriter(db)  # the last server, closed before its next scan noticed the replacement
    os.replace(foreign, db)
    last.close()
    assert checks_in_a_server_run(config, monkeypatch), "a replaced, damaged index was served with no integrity check at start"


def test_damage_done_while_a_writer_has_the_index_open_is_not_noted_as_closed_cleanly(
    config: ServerConfig, source: Path
) -> None:
    """The next start's check must find it, as before #25: the close sees the file is not as this writer left it."""
    db = closed_index_of_pages(config, source)
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
    db = closed_index_of_pages(config, source)
    mark = mark_of(db)
    mark.unlink()
    HOSTILE[kind](mark)
    writer = IndexWriter(db)
    assert not writer.closed_cleanly
    # As a server's start and first scan check it (a link made to the file moves its change time:
    # the whole check then): its close may vouch.
    assert writer.quick_check(sections_too=writer.changed_outside()) == "ok"
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
    db = closed_index_of_pages(config, source)
    writer = IndexWriter(db)
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        if data.startswith(b"["):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(index_files.os, "write", full_disk)
    with caplog.at_level(logging.WARNING, logger="index_files"):
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
    db = closed_index_of_pages(config, source)
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
    db = closed_index_of_pages(config, source)
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


def test_a_file_damaged_while_closed_is_not_vouched_for_by_a_run_that_never_checked_it(
    config: ServerConfig, source: Path
) -> None:
    """A writer that opened a file nobody vouched for (damaged while no server ran, or left by a
    kill) and closes before its start check ran or finished must not write the note: else one short
    run (an MCP client opened and closed within the ~100 s check at a million files) launders the damage."""
    db = closed_index(config, source)
    st = db.stat()
    with open(db, "r+b") as handle:  # damaged while no server ran: a tool, a sync client, a bad restore
        handle.seek(st.st_size - 64)
        handle.write(bytes(range(64)))
    short = IndexWriter(db)
    assert not short.closed_cleanly  # so this server would check it at start...
    short.close()  # ...but it is stopped before its check ran
    nxt = IndexWriter(db)
    try:
        assert not nxt.closed_cleanly, "a file never checked since its damage is trusted at the next start"
    finally:
        nxt.close()
