"""An index closed cleanly and untouched since is not read whole again at the next server's start
(#25: SQLite's quick_check took about 100 s at a million files, at every start). A writer notes
what the file was when it closed it with its WAL emptied; the next writer takes the note away and
trusts it only if the file is still exactly that. Real SQLite files, a real Daemon thread."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import database
from daemon import Daemon
from database import CLOSED_SUFFIX, IndexWriter
from indexer import TextIndexer
from models import ServerConfig
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
    real = database.IndexWriter.quick_check
    monkeypatch.setattr(database.IndexWriter, "quick_check", lambda self, sections_too=False: checks.append(sections_too) or real(self))
    daemon = Daemon(config)
    daemon.start()
    try:
        assert daemon.first_scan_done.wait(30)
        assert daemon.indexer is not None and daemon.indexer.scan()["success"]
    finally:
        daemon.close()
    return checks
