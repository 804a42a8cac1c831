"""The writer: the one connection that writes an index (IndexWriter, and SourceWriter, one
source's view of it when an index holds several), its transactions, the schema's preparation on
opening, and recovery from a damaged index (moved aside, and an empty one made in its place).

One writer connection (the indexer's), any number of reader connections; WAL. Across processes one
writes at a time: every write holds the index's WriterLock (index_files.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from database import (
    BUSY_TIMEOUT_MS, FORMATS_KEY, MAX_SECTIONS_PER_FILE, SCHEMA, SCHEMA_VERSION, SectionDamaged, connect, decompress, indexed_text,
    is_busy, is_corruption, section_id, starting_with, stored_outline,
)
from index_files import (
    PRIVATE_FILE_MODE, WriterLock, check_index_directory, file_identity, file_problem, lock_path, make_private, mark_closed,
    prepare_index_directory, replaced, take_closed_mark,
)
from index_queries import meta_values, source_meta, stored_file, suffix_counts
from models import LoadedFile, Signature, StoredFile

logger = logging.getLogger(__name__)

#: SQLite's integers are 64-bit and signed.
_INT64 = (-(1 << 63), (1 << 63) - 1)


def storable(number: int, wrap: bool = False) -> int:
    """A file's time in nanoseconds (or with ``wrap``, its inode number) as SQLite holds it:
    64-bit, signed. A time past the year 2262 is stored as the last one SQLite holds; an inode
    past 2**63 (some network file systems) as its two's complement, still one value per file."""
    low, high = _INT64
    if low <= number <= high:
        return number
    if wrap and 0 <= number < 1 << 64:
        return number - (1 << 64)
    return max(low, min(high, number))


def _fts_row(rowid: int, title: str, heading: str, body: str) -> tuple[int, str, str, str]:
    """A section's row as sections_fts is given it: inserting (with the body's indexed_text made by
    the loader) and deleting must give the same."""
    return rowid, indexed_text(title), indexed_text(heading), indexed_text(body)


#: Tries at opening the index while its file is deleted or replaced under the opening (someone
#: clearing the index directory): each try opens what is at the path then.
OPEN_ATTEMPTS = 3
#: FTS5 builds a transaction's new terms in memory and writes them out as a segment whenever they
#: pass this size (its default is 1 MB). With the indexer's large batches, fewer, larger segments
#: mean less merging: the first index's FTS inserts take ~40% less CPU. In alternated runs on a
#: 100k-file corpus 16 MB indexed about as fast as 64 MB, with a writer peak RSS ~50 MB lower.
FTS_HASH_BYTES = 16 << 20
#: Whenever SQLite restarts the WAL it cuts the file back to this size; a scan that wrote and
#: closing the writer truncate it to nothing.
WAL_SIZE_LIMIT = 4 << 20
#: A checkpoint waits at most this long for readers still in an older snapshot (ms).
CHECKPOINT_BUSY_MS = 1000
#: Closing waits this long for the write lock a status read holds for an instant (its
#: checkpoint must be this writer's own, see _own), trying every CLOSE_LOCK_POLL_SECONDS.
CLOSE_LOCK_WAIT_SECONDS = 1.0
CLOSE_LOCK_POLL_SECONDS = 0.01

_T = TypeVar("_T")


class IndexWriter:
    """The single writing connection. Every method that writes must run inside ``transaction()``.

    ``file_signatures()`` is kept between calls, so a rescan that finds nothing changed does not
    read every row again. It always equals the committed ``files`` table as this connection sees
    it: it is kept only when loaded outside a transaction; every method that writes to ``files``
    drops it; it belongs to the connection it was loaded on (a rebuild or reopen opens a new one);
    and it is reloaded when ``PRAGMA data_version`` says another connection committed since.
    """

    def __init__(
        self, db_path: Path, on_wait: Callable[[int | None], None] | None = None, stop: Callable[[], bool] | None = None
    ) -> None:
        """Open (creating or repairing it) the index at ``db_path``, holding the write lock to do so:
        ``on_wait`` and ``stop`` are as for WriterLock.held."""
        self.db_path = db_path
        self.lock = threading.RLock()
        self.recovered_from: str | None = None
        #: Another program wrote the file since a writer of the index last said what it left it as
        #: (WriterLock.left_by_another): found on opening it or before a write; cleared by a check.
        self.written_outside = False
        self._depth = 0  # of _writing, nested
        #: How often the file was opened anew (reopened, rebuilt): each source's loop scans again then.
        self.openings = 0
        prepare_index_directory(db_path.parent)
        self.write_lock = WriterLock(lock_path(db_path))
        with self.write_lock.held(on_wait, stop):
            #: The index is as a writer left it when it last closed it cleanly (index_files.CLOSED_SUFFIX).
            self.closed_cleanly = take_closed_mark(db_path)
            self._open_sound()
            self.closed_cleanly &= self.recovered_from is None
            if self.closed_cleanly and self.written_outside:
                # The file is exactly as a writer closed it cleanly (the mark says so, to its change
                # time): whatever the lock file says (an older version writes no note there).
                self.written_outside = False
                self._note_left()
            self.sound |= self.closed_cleanly
        self._signatures: tuple[sqlite3.Connection, int, dict[Signature, int]] | None = None
        self._files_added_or_removed = False

    def _open(self) -> tuple[sqlite3.Connection, int]:
        """A connection to a usable index at db_path (a damaged one is moved aside first) and the
        inode it opened, so a later deletion or replacement of the file can be noticed."""
        check_index_directory(self.db_path.parent)  # again at each reopen: it may have been replaced
        problem = file_problem(self.db_path)
        if problem is None:
            try:
                return self._connect()
            except sqlite3.DatabaseError as exc:
                if not is_corruption(exc) and "schema" not in str(exc):
                    raise
                problem = str(exc)
        self.recovered_from = self.move_aside(problem)
        return self._connect()

    def _connect(self) -> tuple[sqlite3.Connection, int]:
        """A connection to the file at db_path (created if missing) with the schema ready, and the
        file's inode. Tried again if the file was deleted or replaced meanwhile and that failed it
        (SQLite finds no database where it opens the WAL, say); one replaced after it succeeded is
        reopened by the next scan (see file_replaced)."""
        attempts = OPEN_ATTEMPTS
        while True:
            inode = make_private(self.db_path)
            conn = connect(self.db_path)
            try:
                _prepare_schema(conn)
                return conn, inode
            except sqlite3.Error:
                conn.close()
                attempts -= 1
                if not attempts or not replaced(self.db_path, inode):
                    raise

    def move_aside(self, problem: str) -> str:
        """Rename a damaged database (and its WAL) out of the way, private; return the new name."""
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{time.time_ns() % 1_000_000:06d}"
        target = self.db_path.with_name(f"{self.db_path.name}.corrupt-{stamp}")
        logger.warning("index %s is unusable (%s); moved it to %s and rebuilding", self.db_path, problem, target.name)
        for suffix in ("", "-wal", "-shm"):
            side, moved = Path(f"{self.db_path}{suffix}"), Path(f"{target}{suffix}")
            try:
                os.replace(side, moved)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(os.lstat(moved).st_mode):
                os.chmod(moved, PRIVATE_FILE_MODE)
        return target.name

    def rebuild_after_corruption(self, problem: str) -> None:
        """Close, move the damaged file aside and start an empty index in its place."""
        with self._writing():
            try:
                self.conn.close()
            except sqlite3.Error:
                pass
            self.recovered_from = self.move_aside(problem)
            self._open_sound()
            self.openings += 1

    def file_replaced(self) -> bool:
        """True if the database file was deleted or replaced since this writer opened it."""
        return replaced(self.db_path, self.inode)

    def reopen(self) -> None:
        """Open whatever is at the database path now: a new empty index if the file was deleted."""
        with self._writing():
            self._own(self.conn.close)  # the last connection to close copies the WAL into the file
            self._open_sound()
            self.openings += 1

    def _open_sound(self) -> None:
        """_open, knowing the file sound (``sound``) only if it is new: none or empty before, or a
        damaged one moved aside. Whether a writer knows its file sound decides if its close may
        vouch for it (index_files.CLOSED_SUFFIX); a check that passes (quick_check) makes it known sound, and
        damage a reader suspects (distrust) unknown again."""
        before = file_identity(self.db_path)
        outside = self._left_by_another()  # before this writer touches it
        moved = self.recovered_from
        self.conn, self.inode = self._open()
        self.written_outside = outside and self.recovered_from == moved
        self.sound = (before is None or before[2] == 0 or self.recovered_from != moved) and not self.written_outside
        self._note_left()

    def _note_left(self) -> None:
        """Keep what the file is as this writer leaves it, and say it in the lock file for every
        process (WriterLock.note_left), with whether something else wrote it since a writer last
        said (``written_outside``): status says so until a check passes. Said holding the write
        lock; while another process holds it, that one says."""
        if self.write_lock.try_hold():
            try:
                self._left = self.write_lock.note_left(self.db_path, self.written_outside)
            finally:
                self.write_lock.release()
        else:
            self._left = file_identity(self.db_path)

    def changed_outside(self) -> bool:
        """Whether another program wrote the file in place since a writer of the index last left it
        (WriterLock.left_by_another), as this writer found on opening it or before a write, or finds
        now; ask holding the write lock."""
        return self.written_outside or self._left_by_another()

    def _left_by_another(self) -> bool:
        """Whether the lock file says the file was changed outside since a writer left it, or that
        a writer died inside its own step (WriterLock.left_by_another)."""
        return self.write_lock.left_by_another(self.db_path) is not None

    def distrust(self) -> None:
        """A reader saw the index fail: this writer no longer knows it sound, until a check passes."""
        self.sound = False

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the write lock and this writer's lock; the file as it is after is what this writer
        left (see close). Written by another program before (WriterLock.left_by_another), or while it
        is held but by this writer's own steps that change the file (_own), it is not this writer's
        to vouch for: ``written_outside`` until a check passes."""
        with self.write_lock.held(), self.lock:
            if not self._depth:
                if self._left_by_another():
                    self.written_outside, self.sound = True, False
                else:  # as this writer, or a writer in another process, left it
                    self._left = file_identity(self.db_path)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                self._changed_since_left()
                self._note_left()

    def _own(self, step: Callable[[], _T]) -> _T:
        """Run ``step``, a step of this writer that may change the file itself (a commit's or a
        closing's checkpoint copies the WAL into it): a change found before it was not this
        writer's (_changed_since_left), the one after it is."""
        self._changed_since_left()
        self.write_lock.note_left(self.db_path, self.written_outside, own_step=True)  # if it dies inside the step
        try:
            return step()
        finally:
            self._left = self.write_lock.note_left(self.db_path, self.written_outside)

    def _changed_since_left(self) -> None:
        """Note ``written_outside`` if the file changed since this writer last saw it as it left it
        (while it holds the write lock, nothing else may)."""
        if file_identity(self.db_path) != self._left:
            self.written_outside, self.sound = True, False

    def close(self) -> None:
        """Truncate the WAL (unless another process is writing: it will), then close. The index is
        noted as closed cleanly (index_files.CLOSED_SUFFIX) if its WAL was emptied, this writer knows it sound
        (``sound``), and its file is still the one this writer left after its last write: not
        replaced, not written by anyone else meanwhile."""
        with self.lock:
            held = self._hold_briefly()
            try:
                untouched = held and self.sound and file_identity(self.db_path) == self._left
                emptied = held and self._truncate_on_closing()
                if held:
                    self._own(self.conn.close)
                else:
                    self.conn.close()  # another process writes: its connection is open, so this one copies nothing
                if emptied and untouched and not self.written_outside:
                    mark_closed(self.db_path)
            finally:
                if held:
                    self.write_lock.release()

    def _hold_briefly(self) -> bool:
        """Take the write lock for closing if it is free within CLOSE_LOCK_WAIT_SECONDS: a status
        read from any process takes it shared for an instant."""
        deadline = time.monotonic() + CLOSE_LOCK_WAIT_SECONDS
        while not self.write_lock.try_hold():
            if time.monotonic() > deadline:
                return False
            time.sleep(CLOSE_LOCK_POLL_SECONDS)
        return True

    def _truncate_on_closing(self) -> bool:
        try:
            return self.truncate_wal()
        except sqlite3.Error as exc:
            logger.warning("could not truncate the WAL of %s on closing: %s", self.db_path, exc)
            return False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction, holding the write lock; if it changed anything, it also gives the
        index a new generation()."""
        with self._writing():
            self.conn.execute("BEGIN IMMEDIATE")
            changes = self.conn.total_changes
            self._files_added_or_removed = False
            try:
                yield
                if self._files_added_or_removed:
                    _forget_kept_counts(self.conn)
                if self.conn.total_changes != changes:
                    # Unique across index files too: readers of a replaced file see another value.
                    self.set_meta("generation", f"{time.time_ns()}-{os.getpid()}")
                self._own(partial(self.conn.execute, "COMMIT"))
            except BaseException:
                self._roll_back()
                raise

    def _roll_back(self) -> None:
        """End a failed transaction, keeping the error that failed it: after some errors (a full
        disk) SQLite has rolled back already, and a ROLLBACK would fail with an error of its own."""
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            logger.warning("could not roll back a failed transaction on %s: %s", self.db_path, exc)

    def file_signatures(self) -> Mapping[Signature, int]:
        """The Signature of every indexed file -> when it was indexed (ns).

        Shared with later calls: do not change it.
        """
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        cached = self._signatures
        if cached is not None and cached[0] is self.conn and cached[1] == version:
            return cached[2]
        rows = self.conn.execute("SELECT path, mtime_ns, size, inode, ctime_ns, indexed_at_ns FROM files")
        signatures = {row[:5]: row[5] for row in rows}
        if not self.conn.in_transaction:  # rows read inside one may still be rolled back
            self._signatures = (self.conn, version, signatures)
        return signatures

    def stored_file(self, path: str) -> StoredFile | None:
        return stored_file(self.conn, path)

    def upsert_file(self, loaded: LoadedFile, file_id: int | None) -> None:
        """Replace a file's sections and metadata (call inside a transaction)."""
        self._signatures = None
        if file_id is not None:
            self._delete_sections(file_id)
        values = (
            loaded.path, storable(loaded.mtime_ns), loaded.size, storable(loaded.inode, wrap=True), storable(loaded.ctime_ns), loaded.content_hash,
            loaded.read_at_ns, loaded.encoding, int(loaded.fallback_decoded), loaded.title, len(loaded.sections), loaded.sketch,
            json.dumps(loaded.tags, ensure_ascii=False) if loaded.tags else "",
        )
        if file_id is None:
            self._files_added_or_removed = True
            file_id = self.conn.execute(
                "INSERT INTO files (path, mtime_ns, size, inode, ctime_ns, content_hash, indexed_at_ns, encoding,"
                " fallback_decoded, title, section_count, sketch, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            ).lastrowid
        else:
            self.conn.execute(
                "UPDATE files SET path = ?, mtime_ns = ?, size = ?, inode = ?, ctime_ns = ?, content_hash = ?,"
                " indexed_at_ns = ?, encoding = ?, fallback_decoded = ?, title = ?, section_count = ?, sketch = ?, tags = ? WHERE id = ?",
                (*values, file_id),
            )
            self.conn.execute("DELETE FROM file_tags WHERE file_id = ?", (file_id,))
        self._insert_sections(file_id, loaded)
        if loaded.tags:
            self.conn.executemany("INSERT OR IGNORE INTO file_tags (tag, file_id) VALUES (?, ?)", ((tag.lower(), file_id) for tag in loaded.tags))

    def _insert_sections(self, file_id: int, loaded: LoadedFile) -> None:
        title, first = indexed_text(loaded.title), section_id(file_id, 0)
        self.conn.executemany(
            "INSERT INTO sections (id, start_line, end_line, heading, body, said, outline) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(first + n, start, end, heading, stored, said, outline) for n, (start, end, heading, _, stored, said, outline) in enumerate(loaded.sections)],
        )
        self.conn.executemany(
            "INSERT INTO sections_fts (rowid, title, heading, body) VALUES (?, ?, ?, ?)",
            [(first + n, title, indexed_text(section[2]), section[3]) for n, section in enumerate(loaded.sections)],
        )

    def _delete_sections(self, file_id: int) -> None:
        # A contentless FTS5 table forgets a row only when given the exact values it indexed.
        title_row = self.conn.execute("SELECT title FROM files WHERE id = ?", (file_id,)).fetchone()
        title = title_row[0] if title_row else ""
        low, high = section_id(file_id, 0), section_id(file_id, MAX_SECTIONS_PER_FILE - 1)
        old = self.conn.execute(
            "SELECT id, heading, body FROM sections WHERE id BETWEEN ? AND ?", (low, high)
        ).fetchall()
        self.conn.executemany(
            "INSERT INTO sections_fts (sections_fts, rowid, title, heading, body) VALUES ('delete', ?, ?, ?, ?)",
            [_fts_row(rowid, title, heading, decompress(body)) for rowid, heading, body in old],
        )
        self.conn.execute("DELETE FROM sections WHERE id BETWEEN ? AND ?", (low, high))

    def remove_file(self, file_id: int) -> None:
        self._signatures = None
        self._files_added_or_removed = True
        self._delete_sections(file_id)
        self.conn.execute("DELETE FROM file_tags WHERE file_id = ?", (file_id,))
        self.conn.execute("DELETE FROM files WHERE id = ?", (file_id,))

    def mark_verified(self, file_id: int, indexed_at_ns: int, mtime_ns: int, inode: int, ctime_ns: int) -> None:
        """Record that an unchanged file was re-checked (its content hash matched) at a later time."""
        self._signatures = None
        self.conn.execute(
            "UPDATE files SET indexed_at_ns = ?, mtime_ns = ?, inode = ?, ctime_ns = ? WHERE id = ?",
            (indexed_at_ns, storable(mtime_ns), storable(inode, wrap=True), storable(ctime_ns), file_id),
        )

    def replace_skipped(self, skipped: Iterable[tuple[str, str, str, str | None]]) -> None:
        """The skipped files a scan found: (path, reason, detail, the signature a skip stands for
        until the file changes, or None)."""
        self.conn.execute("DELETE FROM skipped")
        self.conn.executemany("INSERT OR REPLACE INTO skipped (path, reason, detail, signature) VALUES (?, ?, ?, ?)", skipped)

    def remembered_skips(self) -> dict[str, tuple[str, str, str]]:
        """path -> (signature, reason, detail) of the skips that stand until the file changes."""
        rows = self.conn.execute("SELECT path, signature, reason, detail FROM skipped WHERE signature IS NOT NULL")
        return {path: (signature, reason, detail) for path, signature, reason, detail in rows}

    def set_skipped(self, path: str, reason: str, detail: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO skipped (path, reason, detail) VALUES (?, ?, ?)", (path, reason, detail)
        )

    def clear_skipped(self, path: str) -> None:
        self.conn.execute("DELETE FROM skipped WHERE path = ?", (path,))

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def set_meta_values(self, values: Mapping[str, str]) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", values.items())

    def meta(self) -> dict[str, str]:
        return meta_values(self.conn)

    def suffix_counts(self) -> dict[str, int]:
        return suffix_counts(self.conn)

    def skipped_entries(self, reasons: Iterable[str]) -> list[tuple[str, str, str]]:
        """(path, reason, detail) of the files last skipped for one of ``reasons``, by path."""
        return self.conn.execute(
            "SELECT path, reason, detail FROM skipped WHERE reason IN (SELECT value FROM json_each(?)) ORDER BY path",
            (json.dumps(list(reasons)),),
        ).fetchall()

    def wal_bytes(self) -> int:
        try:
            return os.stat(f"{self.db_path}-wal").st_size
        except OSError:
            return 0

    def optimize(self) -> None:
        """Merge the FTS index into one segment: smaller and faster to query after a bulk load."""
        with self._writing():
            self._own(partial(self.conn.execute, "INSERT INTO sections_fts (sections_fts) VALUES ('optimize')"))

    def release_free_pages(self) -> None:
        """Give pages left free by FTS5's segment merges back to the file system, when they are more
        than 1/16 of the file (indexes are created with incremental auto-vacuum)."""
        with self._writing():
            free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
            if free * 16 > self.conn.execute("PRAGMA page_count").fetchone()[0]:
                self._own(partial(self.conn.executescript, "PRAGMA incremental_vacuum;"))  # a plain execute frees one page only

    def quick_check(self, sections_too: bool = False) -> str:
        """PRAGMA quick_check on a fresh connection (the writer's page cache can hide damage on
        disk), and with ``sections_too`` that every section's text decompresses and its outline
        reads, and FTS5's own check of its index (most of the file, which quick_check does not
        read as an index): "ok" or the fault. Only that whole check vouches for a file another
        program wrote (``written_outside``)."""
        conn = connect(self.db_path, read_only=True)  # closing it copies nothing into the file
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
            if verdict == "ok" and sections_too:
                for body, outline in conn.execute("SELECT body, outline FROM sections"):
                    decompress(body)
                    stored_outline(outline)
                verdict = _fts_check(self.db_path)
            if verdict == "ok" and not self.file_replaced():
                self.written_outside &= not sections_too
                self.sound = not self.written_outside
                self._note_left()  # as it is now, checked
            return verdict
        except SectionDamaged as exc:
            return str(exc)
        finally:
            conn.close()

    def truncate_wal(self) -> bool:
        """Copy the WAL into the database and cut it to zero bytes; False if a reader still in an
        older snapshot kept it from finishing (the next call does)."""
        with self._writing():
            self.conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_BUSY_MS}")
            try:
                busy, _, _ = self._own(partial(self.conn.execute, "PRAGMA wal_checkpoint(TRUNCATE)")).fetchone()
            finally:
                self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return not busy


class SourceWriter:
    """An IndexWriter as one source's indexer sees it, when one index holds several sources: its
    files' paths are keys after ``prefix`` (``notes/``), and its meta values and skipped files are
    its own. Everything else (the connection, locks, transactions) is the shared writer's."""

    def __init__(self, writer: IndexWriter, prefix: str) -> None:
        self.base, self.prefix = writer, prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def _mine(self, path: str) -> bool:
        return path.startswith(self.prefix)

    def file_signatures(self) -> Mapping[Signature, int]:
        cut = len(self.prefix)
        return {(path[cut:], *rest): at for (path, *rest), at in self.base.file_signatures().items() if self._mine(path)}

    def stored_file(self, path: str) -> StoredFile | None:
        return self.base.stored_file(self.prefix + path)

    def upsert_file(self, loaded: LoadedFile, file_id: int | None) -> None:
        self.base.upsert_file(dataclasses.replace(loaded, path=self.prefix + loaded.path), file_id)

    def replace_skipped(self, skipped: Iterable[tuple[str, str, str, str | None]]) -> None:
        self.base.conn.execute("DELETE FROM skipped WHERE path >= ? AND path < ?", starting_with(self.prefix))
        self.base.conn.executemany(
            "INSERT OR REPLACE INTO skipped (path, reason, detail, signature) VALUES (?, ?, ?, ?)",
            ((self.prefix + path, *rest) for path, *rest in skipped),
        )

    def remembered_skips(self) -> dict[str, tuple[str, str, str]]:
        cut = len(self.prefix)
        return {path[cut:]: skip for path, skip in self.base.remembered_skips().items() if self._mine(path)}

    def skipped_entries(self, reasons: Iterable[str]) -> list[tuple[str, str, str]]:
        cut = len(self.prefix)
        return [(path[cut:], *rest) for path, *rest in self.base.skipped_entries(reasons) if self._mine(path)]

    def set_skipped(self, path: str, reason: str, detail: str) -> None:
        self.base.set_skipped(self.prefix + path, reason, detail)

    def clear_skipped(self, path: str) -> None:
        self.base.clear_skipped(self.prefix + path)

    def set_meta(self, key: str, value: str) -> None:
        self.base.set_meta(self.prefix + key, value)

    def set_meta_values(self, values: Mapping[str, str]) -> None:
        self.base.set_meta_values({self.prefix + key: value for key, value in values.items()})

    def meta(self) -> dict[str, str]:
        return source_meta(self.base.meta(), self.prefix)

    def suffix_counts(self) -> dict[str, int]:
        return suffix_counts(self.base.conn, self.prefix)


def _fts_check(db_path: Path) -> str:
    """FTS5's check of the index's own structure, "ok" or the fault. A command written as an
    INSERT, so on a connection that may write; it changes nothing, and the writer's connection
    stays open, so this one's closing copies nothing into the file."""
    conn = connect(db_path)
    try:
        conn.execute("INSERT INTO sections_fts (sections_fts) VALUES ('integrity-check')")
        return "ok"
    except sqlite3.DatabaseError as exc:
        if is_busy(exc):
            raise  # no verdict: the write lock it needs is another program's now
        return f"the full-text index: {exc}"
    finally:
        conn.close()


def _prepare_schema(conn: sqlite3.Connection) -> None:
    # Takes effect only on a new, empty file, and only before journal_mode: lets a large scan give
    # back the pages FTS5 merges free (see release_free_pages).
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version != SCHEMA_VERSION or not {"files", "sections", "sections_fts", "file_tags", "skipped", "meta"} <= tables:
        if tables:
            raise sqlite3.DatabaseError(f"schema version {version} with tables {sorted(tables)[:5]} is not this daemon's schema")
        conn.executescript(f"BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
    # Status counts files and sections from this index (index_counts); made for an existing index too.
    _make_index(conn, "files_counted ON files(path, section_count, fallback_decoded)")
    # The first scan after opening reads every file's signature (file_signatures) from this index,
    # not from the files' rows, whose pages lie among the sections' all over the file: at a million
    # files 33 s from a cold cache, 2 s from this. Made for an existing index too (once).
    _make_index(conn, "files_signed ON files(path, mtime_ns, size, inode, ctime_ns, indexed_at_ns)")
    # FTS5 merges 4 segments of a level at a time (automerge): 16 took 0.7-0.85 s less writer CPU
    # in a full index of 8 copies of the PowerShell docs, but made an edit searchable ~30 ms later at
    # p99 with the watcher (bench/watch.py, removed since c69fcb1; 120 edits: 193-210 ms against 166-177 ms).
    hashsize = conn.execute("SELECT v FROM sections_fts_config WHERE k = 'hashsize'").fetchone()
    if hashsize is None or hashsize[0] != FTS_HASH_BYTES:  # FTS5 keeps its settings in the index
        conn.execute("INSERT INTO sections_fts (sections_fts, rank) VALUES ('hashsize', ?)", (FTS_HASH_BYTES,))


def _make_index(conn: sqlite3.Connection, definition: str) -> None:
    """CREATE INDEX IF NOT EXISTS ``definition`` (a constant of this module), for an index written
    before it existed too. Such an index only speeds reads up: one that cannot be made now (a full
    disk) is made at a later opening, and the index is opened without it."""
    try:
        conn.execute(f"CREATE INDEX IF NOT EXISTS {definition}")
    except sqlite3.OperationalError as exc:
        if is_corruption(exc):
            raise
        logger.warning("could not make the index %s now (%s); reading without it", definition.split()[0], exc)


def _forget_kept_counts(conn: sqlite3.Connection) -> None:
    """A file was added or removed: every source's kept count of files by extension may be wrong
    now. Without one, the next server counts at start, and the next scan keeps a count again."""
    conn.execute("DELETE FROM meta WHERE key = ? OR key GLOB ?", (FORMATS_KEY, "*/" + FORMATS_KEY))
