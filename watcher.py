"""Edits visible at once: the source watched with Linux inotify, through ctypes (standard library only).

SourceWatcher puts a watch on every folder the walk descends into and turns the kernel's events
into batches: the files that changed (written, created, deleted, renamed, their attributes
changed), or the reason a whole rescan is needed instead (a folder renamed or deleted, the
kernel's queue overflowed, an ignore file edited). The periodic rescan stays as the safety net:
for other operating systems, file systems that send no events (network mounts), and a watch limit
reached, where the watcher stops and says why (see WatchState).

Nothing here reads file contents or writes the index; main.Daemon applies each batch.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from file_utils import listed_in_source
from models import WatchState

logger = logging.getLogger(__name__)

# From <sys/inotify.h>.
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
#: What a folder's watch reports: any change to a file's content, name or metadata in it, and the
#: folder itself going away. IN_MODIFY as well as IN_CLOSE_WRITE, for a file kept open while written.
WATCH_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK
)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
_READ_BYTES = 256 * 1024

#: After the first event of a batch, events are gathered until the source has been quiet this
#: long (an editor's save is several events: write a temporary file, rename it over the file),
#: and for at most MAX_GATHER_SECONDS, so that a steady stream of writes still gets indexed.
QUIET_SECONDS = 0.1
MAX_GATHER_SECONDS = 0.5
#: A batch with more changed files than this (a git checkout, an unpacked archive) is handed over
#: as a rescan: the scan reads files in loader processes, a file-by-file refresh does not.
MAX_BATCH_FILES = 1000
#: Files whose change means the rules of what is indexed changed: every file may be affected.
RULE_FILES = frozenset({".gitignore", ".ignore"})
#: The folder (under the source) of git's own exclude file, a rule file too; watched on its own,
#: as .git is never indexed. Its watch stands in _folders under a name no folder has.
GIT_INFO = ".git/info"
_GIT_INFO_KEY = "\0git-info"
#: A file that changes again within HOT_SECONDS of being indexed (a log written to all the time)
#: is hot: it is indexed again HOT_FIRST_WAIT seconds after its last indexing, the wait doubling
#: while it stays hot, up to HOT_MAX_WAIT. Once it has been quiet for a quarter of its wait (at
#: least SETTLE_SECONDS) it is indexed at once: its final text is searchable soon after the writing
#: stops. A file edited now and then is indexed at once, as before.
HOT_SECONDS = 2.0
HOT_FIRST_WAIT = 0.5
HOT_MAX_WAIT = 8.0
SETTLE_SECONDS = 0.5
#: poll() takes milliseconds as a C int: a longer wait (a scan interval of a year) returns early,
#: with nothing, and the caller waits again.
MAX_WAIT_SECONDS = 86_400.0


class WatchUnavailable(Exception):
    """The source cannot be watched (not Linux, no inotify, or a kernel limit reached)."""


@dataclass
class Batch:
    """Changes gathered from events: source keys of files to index again or drop, or a rescan."""

    paths: set[str] = field(default_factory=set)
    #: Why the whole source must be scanned again instead; None if ``paths`` says it all.
    rescan: str | None = None
    #: Of ``paths``, those whose last event took them away (deleted, or renamed to another name).
    gone: set[str] = field(default_factory=set)

    def need_rescan(self, why: str) -> None:
        self.rescan = self.rescan or why


class Pacing:
    """When to index again the files the watcher reports changed: at once, unless a file is hot
    (see HOT_SECONDS); a hot file waits, and no change is lost: whatever it held last is indexed
    when its wait ends. A file gone (Batch.gone) is for the caller to drop at once: that is cheap,
    and a renamed file must not show under its old name. Times are time.monotonic() values."""

    def __init__(self) -> None:
        self._indexed: dict[str, tuple[float, float]] = {}  # path -> (when last indexed, its wait)
        self._waiting: dict[str, float] = {}  # path -> when its last change was seen

    def changed(self, paths: Iterable[str], now: float) -> set[str]:
        """Of the files that changed, those to index now; the others wait (see due)."""
        self._forget(now)
        ready: set[str] = set()
        for path in paths:
            if path in self._waiting:
                self._waiting[path] = now
                continue
            known = self._indexed.get(path)
            if known is None or now - known[0] >= max(HOT_SECONDS, known[1]):
                self._indexed[path] = (now, 0.0)
                ready.add(path)
            else:
                self._indexed[path] = (known[0], min(max(2 * known[1], HOT_FIRST_WAIT), HOT_MAX_WAIT))
                self._waiting[path] = now
        return ready | self.due(now)

    def due(self, now: float) -> set[str]:
        """The waiting files whose wait has ended, taken as indexed now."""
        ready = {path for path, changed in self._waiting.items() if self._time_of(path, changed) <= now}
        for path in ready:
            del self._waiting[path]
            self._indexed[path] = (now, self._indexed[path][1])
        return ready

    def next_due(self) -> float | None:
        """When the next waiting file is due; None if none waits."""
        return min((self._time_of(path, changed) for path, changed in self._waiting.items()), default=None)

    def _time_of(self, path: str, changed: float) -> float:
        last, wait = self._indexed[path]
        return min(last + wait, changed + max(SETTLE_SECONDS, wait / 4))

    def _forget(self, now: float) -> None:
        """Drop what is known of files indexed too long ago to be hot still (memory stays bounded)."""
        horizon = now - max(HOT_SECONDS, HOT_MAX_WAIT)
        for path in [path for path, (last, _) in self._indexed.items() if last < horizon and path not in self._waiting]:
            del self._indexed[path]


class _Inotify:
    """The three libc calls, bound once. CDLL(None) is the libc this process already runs on:
    looking a library up by name (ctypes.util.find_library) may run programs found on PATH."""

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise WatchUnavailable(f"inotify is Linux only (this is {sys.platform})")
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            self.init1 = libc.inotify_init1
            self.add_watch = libc.inotify_add_watch
            self.rm_watch = libc.inotify_rm_watch
        except AttributeError:
            raise WatchUnavailable("this C library has no inotify") from None
        self.init1.argtypes, self.init1.restype = [ctypes.c_int], ctypes.c_int
        self.add_watch.argtypes, self.add_watch.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
        self.rm_watch.argtypes, self.rm_watch.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int


def _limit_problem(code: int) -> str:
    if code == errno.ENOSPC:
        limit = _read_limit("max_user_watches")
        return (
            f"the kernel's inotify watch limit is reached (fs.inotify.max_user_watches = {limit}); edits are picked up"
            " by the periodic rescan only. Raise it with: sysctl fs.inotify.max_user_watches=524288"
        )
    if code == errno.EMFILE:
        limit = _read_limit("max_user_instances")
        return (
            f"the kernel's inotify instance limit is reached (fs.inotify.max_user_instances = {limit}); edits are picked"
            " up by the periodic rescan only. Raise it with: sysctl fs.inotify.max_user_instances=512"
        )
    return f"inotify failed: {os.strerror(code)}; edits are picked up by the periodic rescan only"


def _read_limit(name: str) -> str:
    try:
        return Path(f"/proc/sys/fs/inotify/{name}").read_text().strip()
    except OSError:
        return "unknown"


class SourceWatcher:
    """Watches every folder under ``root`` that ``descend(rel_folder)`` accepts ("a/b", no
    trailing slash; links are never followed), and reports the changes under them in batches.

    ``start()`` raises WatchUnavailable when watching cannot start or the watch limit is reached
    while adding the first watches; a limit reached later (new folders) ends watching and sets
    ``state.problem``. ``next_batch()`` blocks until changes are there or ``wake()`` is called.
    """

    def __init__(self, root: Path, descend: Callable[[str], bool]) -> None:
        self.root = root
        self.descend = descend
        self.state = WatchState()
        self._calls = _Inotify()
        self._fd = -1
        self._folders: dict[int, str] = {}  # watch descriptor -> folder ("" for the root)
        self._wake_read, self._wake_write = -1, -1
        self._lock = threading.Lock()

    def start(self) -> None:
        fd = self._calls.init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise WatchUnavailable(_limit_problem(ctypes.get_errno()))
        self._fd = fd
        try:
            self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            self._watch_tree("", Batch())
            self._watch_git_info()
        except BaseException:  # no descriptor may outlive a start that failed
            self.close()
            raise
        self.state = WatchState(True, len(self._folders), None)

    def rewatch(self) -> None:
        """Watch the folders a rescan may now index that no event announced (an ignore rule
        removed, say); a watch already there is kept as it is."""
        if self._fd >= 0:
            self._watch_tree("", Batch())
            self.state.folders = len(self._folders)

    def _watch_git_info(self) -> None:
        path = os.path.join(self.root, GIT_INFO)
        if os.path.realpath(path) != os.path.join(os.path.realpath(self.root), GIT_INFO):
            return  # absent, or a link: the rescan reads no rules through it either
        wd = self._calls.add_watch(self._fd, os.fsencode(path), WATCH_MASK & ~IN_MODIFY)
        if wd >= 0:
            self._folders[wd] = _GIT_INFO_KEY

    def wake(self) -> None:
        """Make a waiting next_batch() return (the server is stopping)."""
        with self._lock:
            if self._wake_write >= 0:
                try:
                    os.write(self._wake_write, b"x")
                except OSError:
                    pass  # the pipe is full: a wake-up is already pending

    def close(self) -> None:
        with self._lock:
            for fd in (self._fd, self._wake_read, self._wake_write):
                if fd >= 0:
                    os.close(fd)
            self._fd = self._wake_read = self._wake_write = -1
        self._folders.clear()
        self.state.active = False

    def next_batch(self, timeout: float | None) -> Batch | None:
        """The changes gathered from the next events: waits up to ``timeout`` seconds (None: for
        ever) for the first one, then QUIET_SECONDS of quiet; None if nothing happened, on wake(),
        or once watching stopped."""
        if self._fd < 0:
            return None
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_read, select.POLLIN)
        ready = poller.poll(None if timeout is None else max(0, int(min(timeout, MAX_WAIT_SECONDS) * 1000)))
        if not ready or any(fd == self._wake_read for fd, _ in ready):
            self._drain_wake()
            return None
        batch = Batch()
        first = time.monotonic()
        while True:
            self._read_events(batch)
            left = MAX_GATHER_SECONDS - (time.monotonic() - first)
            if left <= 0 or not poller.poll(int(min(QUIET_SECONDS, left) * 1000)):
                break
            if self._fd < 0 or _readable(self._wake_read):
                break  # watching stopped (a limit reached), or the server is stopping
        if self._fd >= 0 and "" not in self._folders.values():
            self._stop_watching("the source folder was deleted or moved; watching again after the next rescan finds it", batch)
        self.state.folders = len(self._folders)
        if len(batch.paths) > MAX_BATCH_FILES:
            batch.need_rescan(f"{len(batch.paths)} files changed at once")
        return batch

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except OSError:
            pass

    def _read_events(self, batch: Batch) -> None:
        if self._fd < 0:
            return
        try:
            data = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:
            return
        offset = 0
        while offset + _EVENT.size <= len(data) and self._fd >= 0:
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size:offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            self._apply_event(wd, mask, os.fsdecode(name), batch)

    def _apply_event(self, wd: int, mask: int, name: str, batch: Batch) -> None:
        if mask & IN_Q_OVERFLOW:
            batch.need_rescan("the kernel's event queue overflowed")
            return
        if mask & IN_IGNORED:
            self._folders.pop(wd, None)
            return
        folder = self._folders.get(wd)
        if folder is None:
            return  # a watch removed a moment ago
        if folder == _GIT_INFO_KEY:
            if name == "exclude" or mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                batch.need_rescan(f"{GIT_INFO}/exclude changed")
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT):
            if mask & IN_UNMOUNT or not folder:
                batch.need_rescan("the source folder was moved, deleted or unmounted")
            return  # a subfolder's own event: its parent reports the same change by name
        rel = f"{folder}/{name}" if folder else name
        if mask & IN_ISDIR:
            if mask & (IN_DELETE | IN_MOVED_FROM):
                batch.need_rescan(f"folder {rel} was deleted or moved")
            elif mask & (IN_CREATE | IN_MOVED_TO) and self._descends(rel, batch):
                if mask & IN_MOVED_TO:
                    batch.need_rescan(f"folder {rel} was moved in")
                self._watch_tree(rel, batch)
            return
        if name in RULE_FILES:
            batch.need_rescan(f"{rel} changed")
        batch.paths.add(rel)
        if mask & (IN_DELETE | IN_MOVED_FROM):
            batch.gone.add(rel)
        else:
            batch.gone.discard(rel)

    def _watch_tree(self, top: str, batch: Batch) -> None:
        """Watch ``top`` and the folders under it that descend() accepts; the files found in them
        join ``batch`` (a new folder's files may have been written before its watch was added)."""
        stack = [top]
        while stack:
            rel = stack.pop()
            path = os.path.join(self.root, rel) if rel else str(self.root)
            wd = self._calls.add_watch(self._fd, os.fsencode(path), WATCH_MASK)
            if wd < 0:
                code = ctypes.get_errno()
                if code in (errno.ENOSPC, errno.EMFILE):
                    problem = _limit_problem(code)
                    if not self.state.active:
                        raise WatchUnavailable(problem)
                    self._stop_watching(problem, batch)
                    return
                if not rel:
                    raise WatchUnavailable(f"cannot watch {path}: {os.strerror(code)}")
                continue  # gone, or not a folder any more, or not readable: the rescan reports it
            self._folders[wd] = rel
            try:
                with listed_in_source(self.root, rel) as entries:  # no link followed: not a folder outside
                    for entry in entries:
                        child = f"{rel}/{entry.name}" if rel else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            if self._descends(child, batch):
                                stack.append(child)
                        elif top and entry.is_file(follow_symlinks=False):
                            batch.paths.add(child)
            except OSError:
                continue

    def _descends(self, rel: str, batch: Batch) -> bool:
        """descend(rel); a folder that changes while it is looked at (a git checkout turning it into
        a link and back) may make that fail: it is not watched now, and the batch asks for a rescan,
        after which rewatch() looks at it again."""
        try:
            return self.descend(rel)
        except OSError as exc:
            batch.need_rescan(f"folder {rel} changed while it was being looked at ({exc})")
            return False

    def _stop_watching(self, problem: str, batch: Batch) -> None:
        """A watch limit reached while watching: stop, and leave changes to the periodic rescan."""
        logger.warning("%s", problem)
        batch.need_rescan("watching stopped")
        self.close()
        self.state = WatchState(False, 0, problem)


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
