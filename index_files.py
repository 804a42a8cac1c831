"""The index's files on disk: its private folder and file permissions, the checks before SQLite
opens a file, the writer lock across processes (WriterLock, ``<index>.lock``), and the mark a clean
close leaves (``<index>.closed``). No SQL: database.py and index_writer.py open the files this
module has made safe.

Across processes, one writes at a time: a write holds WriterLock, an flock on ``<index>.lock``.
Readers never need it, nor SQLite's write lock. Index files are private to their owner: the
directory is created 0700, every file in it 0600.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import json
import logging
import os
import pwd
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from exceptions import Cancelled
from models import DB_SUFFIX

logger = logging.getLogger(__name__)

#: The index's files (database, WAL, shared memory, lock, moved-aside copies) and its directory.
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIRECTORY_MODE = 0o700
#: Beside each index: the flock that one writing process holds (see WriterLock).
LOCK_SUFFIX = ".lock"
#: Beside a closed index, what its file was (device, inode, size, mtime, ctime) when a writer last
#: closed it with its WAL emptied, if that writer knew it sound (IndexWriter.sound) and nothing else
#: had changed the file while it had it open. A server finding the index still exactly so skips the
#: integrity check at its start, a read of the whole file (26.5 s warm, 240 s cold at a million
#: files); any write, touch, copy or rename since moves the ctime, and the check runs. Taken away
#: when a writer opens the index: a kill leaves none.
CLOSED_SUFFIX = ".closed"
#: While another process holds the write lock, try for it again this often (seconds).
LOCK_POLL_SECONDS = 0.05


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + LOCK_SUFFIX)


def file_identity(db_path: Path) -> list[int] | None:
    """The index file's device, inode, size, mtime and ctime; None if no file is there."""
    try:
        st = os.lstat(db_path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns] if stat.S_ISREG(st.st_mode) else None


def _closed_identity(db_path: Path) -> list[int] | None:
    """file_identity, when the WAL holds nothing (as a clean close leaves it); else None."""
    try:
        wal = os.lstat(f"{db_path}-wal").st_size
    except FileNotFoundError:
        wal = 0
    except OSError:
        return None
    return None if wal else file_identity(db_path)


def mark_closed(db_path: Path) -> None:
    """Note beside the index, just closed with its WAL emptied, what its file is now (CLOSED_SUFFIX)."""
    identity = _closed_identity(db_path)
    if identity is None:
        return
    try:
        fd = _open_private_file(Path(f"{db_path}{CLOSED_SUFFIX}"), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, json.dumps(identity).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        logger.warning("could not note that %s was closed cleanly: %s", db_path, exc)


def take_closed_mark(db_path: Path) -> bool:
    """Whether the index is exactly as a writer left it when it last closed it cleanly; the note
    saying so is removed either way, whatever is in its place (CLOSED_SUFFIX)."""
    mark = Path(f"{db_path}{CLOSED_SUFFIX}")
    text = b""
    try:
        fd = os.open(mark, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            text = os.read(fd, 200)
        finally:
            os.close(fd)
    except OSError:
        pass  # none, or not a file of ours: not trusted
    try:
        os.unlink(mark)
    except FileNotFoundError:
        return False
    except OSError as exc:  # a note that stays could outlive a kill: never trusted
        logger.warning("could not remove %s, so the index is checked at every start: %s", mark, exc)
        return False
    try:
        recorded = json.loads(text)
    except ValueError:
        return False
    now = _closed_identity(db_path)
    return now is not None and recorded == now


def prepare_index_directory(directory: Path) -> None:
    """Create the index directory, and any missing folder above it, private to its owner (0700);
    then check it (check_index_directory)."""
    missing = []
    folder = directory
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_DIRECTORY_MODE)
            os.chmod(folder, PRIVATE_DIRECTORY_MODE)  # mkdir's mode is narrowed by the umask only
        except FileExistsError:
            pass
    check_index_directory(directory)
    mode = os.stat(directory).st_mode
    if mode & 0o077:
        logger.warning(
            "index directory %s is mode %o: other users can see the names of its index files (their"
            " contents are private, mode 600); chmod 700 it to hide them", directory, mode & 0o777,
        )


def check_index_directory(directory: Path) -> None:
    """Raise unless ``directory`` is safe to keep the index in: a directory owned by this user (or
    root) that no other user may write to. Another user who could write there could replace the
    index with theirs, or put links where its WAL or lock go."""
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{directory} is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise PermissionError(f"{directory} belongs to another user (uid {st.st_uid}); choose a directory of your own")
    if st.st_mode & stat.S_IWOTH:
        raise PermissionError(f"any user may write to {directory}; choose a directory only you can write to")
    if st.st_mode & stat.S_IWGRP and not _own_private_group(st.st_gid):
        raise PermissionError(
            f"the group of {directory} (gid {st.st_gid}) may write to it; choose a directory only you can write to,"
            " or chmod g-w it"
        )


def _own_private_group(gid: int) -> bool:
    """True for this user's own group (the user's primary group, named after the user, with no
    other members listed), as many systems give each user: its write permission is the user's."""
    try:
        group, user = grp.getgrgid(gid), pwd.getpwuid(os.geteuid())
    except KeyError:
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and not [m for m in group.gr_mem if m != user.pw_name]


def index_file_problem(st: os.stat_result) -> str | None:
    """Why a file at the index's path (lstat-ed) must not be used as the index, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link, not an index file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"a file of another user (uid {st.st_uid})"
    return None


def index_bytes(db_path: Path) -> int:
    """The bytes of the index at ``db_path`` and its WAL; a file that is not there or cannot be
    seen (a folder not ours to enter) counts 0."""
    total = 0
    for path in (db_path, Path(f"{db_path}-wal")):
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def other_settings_indexes(db_path: Path) -> list[Path]:
    """Index files of the same source built with other settings (see ServerConfig.db_path)."""
    prefix = db_path.name[: -len(DB_SUFFIX)].rsplit("-", 1)[0] + "-"
    try:
        names = os.listdir(db_path.parent)
    except OSError:
        return []
    return sorted(
        db_path.parent / name for name in names
        if name.startswith(prefix) and name.endswith(DB_SUFFIX) and name != db_path.name
    )


def _open_private_file(path: Path, flags: int) -> int:
    """Open (creating it 0600 if missing) a regular file of the index; never through a link, and
    never blocking on a FIFO. A link, FIFO or socket in its place is removed first (the index
    directory holds none of its own); a folder there is an error."""
    flags |= os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, PRIVATE_FILE_MODE)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        fd = None
    if fd is not None:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if st.st_mode & 0o077:
                os.fchmod(fd, PRIVATE_FILE_MODE)
            return fd
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{path} is a folder where the index keeps a file of its own; remove it")
    logger.warning("removing %s: not a file, where the index keeps a file of its own", path)
    os.unlink(path)
    return os.open(path, flags | os.O_EXCL, PRIVATE_FILE_MODE)


def _wal_bytes(db_path: Path) -> int:
    try:
        return os.lstat(f"{db_path}-wal").st_size
    except OSError:
        return 0


def make_private(path: Path) -> int:
    """Create the database file 0600 if missing (SQLite gives its WAL and shared-memory files the
    database's mode), narrow the mode of files an older version left readable by others, and
    remove a link or other non-file where SQLite would open its WAL, shared memory or journal:
    SQLite could otherwise write through a link planted there, or fail on it forever. Returns the
    database file's inode. A database file that is there is not opened (see file_problem)."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        if st.st_mode & 0o077:
            os.chmod(path, PRIVATE_FILE_MODE)
        inode = st.st_ino
    else:
        fd = _open_private_file(path, os.O_RDONLY)
        try:
            inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
    for side in (Path(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal")):
        try:
            st = os.lstat(side)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{side} is a folder where the index keeps a file of its own; remove it")
        if not stat.S_ISREG(st.st_mode):
            logger.warning("removing %s: not a file, where the index keeps a file of its own", side)
            os.unlink(side)
        elif st.st_mode & 0o077:
            os.chmod(side, PRIVATE_FILE_MODE)
    return inode


class LockHolder(NamedTuple):
    """What the process holding an index's write lock says it is doing (see WriterLock.record),
    and the index's error count as it knew it (which outlives a damaged index's meta table)."""

    pid: int | None
    phase: str = ""
    files_done: int = 0
    files_total: int = 0
    errors: int = 0
    #: With phase "failed": why the holder could not write the index (SQLite's message).
    problem: str = ""


#: The lock file holds one record of this many bytes, always rewritten whole in one write, so that
#: a reader never sees it half written.
LOCK_RECORD_BYTES = 96
#: The state note_left gives a file its holder is changing itself.
OWN_STEP = 2
#: What WriterLock.left_by_another finds.
CHANGED_OUTSIDE = "changed outside"
STOPPED_INSIDE_STEP = "stopped inside its own step"


class WriterLock:
    """The write lock of one index across processes: an flock on ``<index>.lock``.

    One process writes an index at a time: it holds this lock for a whole scan, or for one
    file's refresh. Other processes answer searches from the same file meanwhile (readers never
    wait, WAL) and write when it is free; the kernel frees it when its holder exits or dies.
    Within a process it is re-entrant and shared by threads, so a refresh during the process's own
    scan goes ahead between the scan's batches (IndexWriter.lock orders the transactions).

    The holder writes what it is doing into the file (record), which holder() reads: status from
    any process sees a scan as it goes. A lock file deleted or replaced under its holder would let
    a second process in: each entry checks that the file at the path is still the one locked, and
    locks the new one (waiting for its holder) if not.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mutex = threading.Lock()  # held while waiting for the flock, so threads wait in turn
        self._fd: int | None = None
        self._depth = 0

    @contextmanager
    def held(self, on_wait: Callable[[int | None], None] | None = None, stop: Callable[[], bool] | None = None) -> Iterator[None]:
        """Hold the lock inside; ``on_wait(pid of the holder)`` is called once if another process
        has it. Raises Cancelled if ``stop()`` turns true while waiting."""
        with self._mutex:
            if self._depth == 0:
                self._fd = self._take(on_wait, stop)
            elif not self._still_ours():
                fresh = self._take(on_wait, stop)
                os.close(self._fd)  # type: ignore[arg-type]
                self._fd = fresh
            self._depth += 1
        try:
            yield
        finally:
            self._release()

    def try_hold(self) -> bool:
        """Take the lock if nobody else has it (release with ``release``); False otherwise."""
        with self._mutex:
            if self._depth == 0:
                fd = self._open()
                if not self._locked(fd):
                    os.close(fd)
                    return False
                self._fd = fd
            self._depth += 1
            return True

    def release(self) -> None:
        self._release()

    def _release(self) -> None:
        with self._mutex:
            self._depth -= 1
            if self._depth == 0 and self._fd is not None:
                os.close(self._fd)  # closing the only descriptor releases the flock
                self._fd = None

    def _open(self) -> int:
        try:
            return _open_private_file(self.path, os.O_RDWR)
        except FileNotFoundError:  # the index directory was deleted: make it again
            prepare_index_directory(self.path.parent)
            return _open_private_file(self.path, os.O_RDWR)

    def _locked(self, fd: int) -> bool:
        """Lock ``fd``; True if locked and it is still the file at the path (then stamped)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if not _same_file(fd, self.path):
            return False  # deleted or replaced after it was opened: the caller opens the new one
        self._write(fd, f"holding 0 0 {_read_holder(fd).errors}")
        return True

    def _take(self, on_wait: Callable[[int | None], None] | None, stop: Callable[[], bool] | None) -> int:
        told = False
        while True:
            fd = self._open()
            try:
                if self._locked(fd):
                    return fd
                if on_wait is not None and not told:
                    on_wait(_read_holder(fd).pid)
                    told = True
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            if stop is not None and stop():
                raise Cancelled("stopped while waiting for another process to finish writing the index")
            time.sleep(LOCK_POLL_SECONDS)

    def _still_ours(self) -> bool:
        return self._fd is not None and _same_file(self._fd, self.path)

    @staticmethod
    def _write(fd: int, note: str) -> None:
        record = f"{os.getpid()} {note}".encode("ascii", "replace")[: LOCK_RECORD_BYTES - 1]
        os.pwrite(fd, record.ljust(LOCK_RECORD_BYTES - 1) + b"\n", 0)

    def record(self, phase: str, files_done: int = 0, files_total: int = 0, errors: int = 0, problem: str = "") -> None:
        """Say what the holder is doing, and the error count, for holder() in any process (held only);
        ``problem``: with phase "failed", why (cut to what the record holds)."""
        if self._fd is not None:
            self._write(self._fd, f"{phase} {files_done} {files_total} {errors} {problem}".rstrip())

    def note_left(self, db_path: Path, outside: bool = False, own_step: bool = False) -> list[int] | None:
        """Say what the index file is as the holder leaves it (held only), and return it: its
        file_identity, whether its WAL holds frames, and ``outside``: the holder found it changed
        by something else (left_by_another), and does not vouch for it until a check passes; or
        ``own_step``: the holder is about to change it itself (copy its WAL into it), a step that
        SQLite completes at the next opening if the holder dies inside it."""
        identity = file_identity(db_path)
        if self._fd is not None:
            state = 1 if outside else OWN_STEP if own_step else 0
            note = " ".join(map(str, [*identity, _wal_bytes(db_path), state])) if identity is not None else "none"
            os.pwrite(self._fd, f"left {note}".encode("ascii")[: LOCK_RECORD_BYTES - 1].ljust(LOCK_RECORD_BYTES - 1) + b"\n", LOCK_RECORD_BYTES)
        return identity

    def left_by_another(self, db_path: Path) -> str | None:
        """What the last writer's note (note_left) says of the index file as it is now, when that
        is not "as a writer left it": CHANGED_OUTSIDE, written since by something else (the same
        file, device and inode, with another size, modification or change time: a file written
        with its time put back still has a new change time, a chmod moves it too), or the writer
        found it so; STOPPED_INSIDE_STEP, a writer said it was changing it itself and, while no
        writer holds the lock, died doing so (what happened to the file since cannot be told).
        Not when the WAL held frames then and holds none now: the last connection to close (an
        SQLite client after a server was killed) copied them into the file and deleted it. None
        too when no writer said, or the file is gone or another one (a scan reopens it). Ask while
        no writer holds the lock: one writing changes the file before it says so."""
        left, wal, state = self._left_note()
        now = file_identity(db_path)
        if not left or now is None or left[:2] != now[:2]:
            return None
        if state == OWN_STEP:
            return STOPPED_INSIDE_STEP
        # (SQLite deletes the WAL of a file it finds empty: an emptied file is always a change. A
        # read-only connection makes the WAL again, empty.)
        folded = wal and now[2] and not _wal_bytes(db_path)
        return CHANGED_OUTSIDE if state or (left[2:] != now[2:] and not folded) else None

    def _left_note(self) -> tuple[list[int], int, int]:
        """The last note_left: (device, inode, size, mtime, ctime), WAL bytes, state; ([], 0, 0)
        if there is none (an older version's lock file) or it does not parse."""
        fd = self._open_to_read()
        if fd is None:
            return [], 0, 0
        try:
            fields = os.pread(fd, LOCK_RECORD_BYTES, LOCK_RECORD_BYTES).decode("ascii", "replace").split()
        except OSError:
            return [], 0, 0
        finally:
            os.close(fd)
        if len(fields) != 8 or fields[0] != "left" or not all(field.isdigit() for field in fields[1:]):
            return [], 0, 0
        *left, wal, state = map(int, fields[1:])
        return left, wal, state

    def _open_to_read(self) -> int | None:
        """A descriptor of the lock file if it is a regular file (never a link, never a FIFO's wait)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        return None

    def last_record(self) -> LockHolder | None:
        """What the last holder recorded, whether or not anyone holds the lock now."""
        fd = self._open_to_read()
        if fd is None:
            return None
        try:
            return _read_holder(fd)
        finally:
            os.close(fd)

    def holder(self) -> LockHolder | None:
        """Who holds the lock now (this process included) and what it recorded, or None."""
        fd = self._open_to_read()
        if fd is None:
            return LockHolder(os.getpid()) if self._depth else None
        try:
            if not self._depth:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    return _read_holder(fd)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
            return _read_holder(fd)
        finally:
            os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino)


def _read_holder(fd: int) -> LockHolder:
    """Parse what WriterLock._write put in the lock file; a torn or foreign text gives what it can."""
    try:
        fields = os.pread(fd, LOCK_RECORD_BYTES, 0).decode("ascii", "replace").split()
    except OSError:
        return LockHolder(None)
    numbers = [int(field) if field.isdigit() else 0 for field in fields[2:5]]
    pid = int(fields[0]) if fields and fields[0].isdigit() else None
    return LockHolder(pid, fields[1] if len(fields) > 1 else "", *numbers, problem=" ".join(fields[5:]))


def file_problem(db_path: Path) -> str | None:
    """Cheap checks before SQLite sees the file: it must be a regular file of this user, not a
    link. Its bytes are SQLite's to judge (a file that is not a database fails to open, and is
    moved aside): this process never opens the index but through SQLite, since closing any
    descriptor of a file drops the locks SQLite holds on it (https://www.sqlite.org/howtocorrupt.html,
    2.2), and searches may have it open already."""
    try:
        st = os.lstat(db_path)
    except FileNotFoundError:
        return None
    return index_file_problem(st)


def replaced(db_path: Path, inode: int) -> bool:
    """True if no file is at ``db_path`` now, or another one than ``inode``."""
    try:
        return os.stat(db_path).st_ino != inode
    except FileNotFoundError:
        return True
