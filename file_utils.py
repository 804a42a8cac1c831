"""Everything that touches the file system for content: walking, filters, reading, decoding, paths.

Nothing here writes. Only regular files are ever opened, and they are opened non-blocking so a
file swapped for a FIFO between the walk and the read cannot hang the daemon.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

from exceptions import FileSkipped, SourceUnavailableError, UnsafePathError
from models import DB_SUFFIX, DiskFile, Signature

logger = logging.getLogger(__name__)

#: Why a file is not indexed. Status counts files by these names.
SKIP_REASONS = (
    "excluded_extension",  # not in included_extensions, or in excluded_extensions
    "excluded_directory",  # inside a version-control, dependency or trash folder (IGNORED_DIRECTORIES)
    "hidden",  # its name, or a folder's it is in, starts with a dot (include_hidden: false)
    "too_large",  # larger than max_file_size_mb
    "binary",  # NUL bytes or many control bytes in the content sample
    "not_regular_file",  # FIFO, socket, device
    "symlink_outside_source",  # a link whose target leaves the source directory
    "duplicate_link",  # a link to a file or folder inside the source, indexed under its real path
    "duplicate_directory",  # a folder reached a second time without a link (a bind mount)
    "symlink_loop",  # a link that resolves to itself
    "broken_symlink",  # a link whose target does not exist
    "undecodable_name",  # a name that is not valid UTF-8 cannot be stored or returned
    "unreadable",  # permission denied or another OS error while listing or reading; what the
    # index holds for it (a file, or every file under a folder) is kept until it can be read
    "unavailable",  # a folder that was a file system of its own (a mounted drive) and is now
    # another, holding none of the indexed files: unmounted, say. Its indexed files are kept
    "vanished",  # deleted between the walk and the read
)
#: A folder that cannot be listed with one of these errors is gone, not unreadable.
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR})

#: Folders never descended into, hidden files included or not: their files are tooling state,
#: installed packages or deleted notes, not a person's text.
IGNORED_DIRECTORIES = frozenset({".git", ".hg", ".svn", ".bzr", "node_modules", "__pycache__", ".venv", "venv", ".trash", ".Trash"})

SNIFF_BYTES = 8192
#: A sample with more than this share of control bytes (other than tab, newlines, form feed,
#: backspace and escape) is binary.
MAX_CONTROL_SHARE = 0.10
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\b\x1b")
#: Bytes that are not UTF-8 are decoded as Windows-1252 (printable Latin-1 plus curly quotes,
#: dashes and the euro sign); its five unassigned bytes become U+FFFD. The file is flagged.
FALLBACK_ENCODING = "cp1252"
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class FileFilter:
    """Which files the walk hands to the indexer.

    included_extensions: lower-case suffixes with their dot; a file's name must end in one.
    excluded_extensions: suffixes that are never indexed; they win over included ones.
    max_size_bytes: larger files are skipped as ``too_large`` without being opened.
    index_directory: the daemon's own output folder, never indexed even inside the source.
    include_hidden: index files and folders whose name starts with a dot (``.obsidian``,
        ``.notes.md``); skipped as ``hidden`` when false, the default.
    """

    included_extensions: tuple[str, ...]
    excluded_extensions: tuple[str, ...]
    max_size_bytes: int
    index_directory: Path
    include_hidden: bool = False

    def __post_init__(self) -> None:
        # str.endswith takes a tuple: one C call per name instead of a loop per extension.
        object.__setattr__(self, "included_extensions", tuple(self.included_extensions))
        object.__setattr__(self, "excluded_extensions", tuple(self.excluded_extensions))

    def accepts_name(self, name: str) -> bool:
        lowered = name.lower()
        return lowered.endswith(self.included_extensions) and not lowered.endswith(self.excluded_extensions)


SkipCallback = Callable[[str, str, str], None]
MountCallback = Callable[[str, str], None]
_NAME = attrgetter("name")


class _Folder(NamedTuple):
    """A real folder the walk descends into: its path, and its device and inode."""

    path: str
    device: int
    inode: int


def identity(st: os.stat_result) -> str:
    """A folder's device and inode: they change when a file system is mounted over it or unmounted
    from it, or the folder is replaced by another."""
    return f"{st.st_dev}:{st.st_ino}"


def walk_source(
    root: Path, file_filter: FileFilter, on_skip: SkipCallback, on_mount: MountCallback | None = None
) -> Iterator[Signature]:
    """Yield the Signature of every eligible file under ``root`` (already resolved); report others
    to ``on_skip``, and each folder that is another file system (a mount point) to ``on_mount``,
    with its identity.

    A folder or file that exists but cannot be listed or stat-ed is reported as ``unreadable``
    (a folder's path ends in "/"): it is not known to be gone. If the source itself cannot be
    listed, SourceUnavailableError is raised. Links are never followed: one to a place inside the
    source is a duplicate of that place's own path, which the walk reaches anyway; one to outside
    is not the source. Iterative, so 300-deep trees do not hit the recursion limit.
    """
    root_real = os.path.realpath(root)
    index_real = os.path.realpath(file_filter.index_directory)
    visited: set[tuple[int, int]] = set()
    root_stat = os.stat(root_real)
    visited.add((root_stat.st_dev, root_stat.st_ino))
    accepts_name, max_size = file_filter.accepts_name, file_filter.max_size_bytes
    skip_hidden = not file_filter.include_hidden
    stack: list[tuple[str, str, int]] = [(root_real, "", root_stat.st_dev)]
    while stack:
        dir_path, prefix, device = stack.pop()
        try:
            dir_fd, listed = _list_directory(dir_path)
        except OSError as exc:
            if not prefix:
                raise SourceUnavailableError(root_real, f"cannot list it: {exc.strerror or exc}") from None
            if exc.errno not in _GONE_ERRNOS:
                on_skip(prefix, "unreadable", f"cannot list the folder: {exc.strerror or exc}")
            continue
        skip_own_files = dir_path == index_real
        try:
            for entry in sorted(listed, key=_NAME, reverse=True):
                name = entry.name
                rel = prefix + name
                try:
                    # The common case first, since a rescan meets it for every file: a regular file
                    # with an ASCII name the filter accepts needs only its stat. Whatever this does not
                    # accept goes through _classify_entry, which runs every check and reports why.
                    if (
                        entry.is_file(follow_symlinks=False) and name.isascii() and accepts_name(name) and not skip_own_files
                        and not (skip_hidden and name[0] == ".")
                    ):
                        st = entry.stat()
                        if st.st_size <= max_size and stat.S_ISREG(st.st_mode):
                            yield (rel, st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
                            continue
                    found = _classify_entry(entry, dir_path, rel, root_real, index_real, visited, file_filter, on_skip)
                except OSError as exc:
                    if isinstance(exc, FileNotFoundError):
                        continue  # gone between listing and stat: nothing to index, nothing to count
                    on_skip(rel, "unreadable", exc.strerror or str(exc))
                    continue
                if found is None:
                    continue
                if isinstance(found, _Folder):
                    if found.device != device and on_mount is not None:
                        on_mount(rel + "/", f"{found.device}:{found.inode}")
                    stack.append((found.path, rel + "/", found.device))
                elif not (skip_own_files and DB_SUFFIX in name):
                    yield found
        finally:
            os.close(dir_fd)


def _list_directory(dir_path: str) -> tuple[int, list[os.DirEntry[str]]]:
    """Open a directory and list it; the caller closes the returned descriptor. Listed through the
    descriptor, an entry's stat() resolves just its name instead of its whole path again, which
    takes a fifth off the kernel's time per file."""
    dir_fd = os.open(dir_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(dir_fd) as entries:
            return dir_fd, list(entries)
    except BaseException:
        os.close(dir_fd)
        raise


def _classify_entry(
    entry: os.DirEntry[str],
    dir_path: str,
    rel: str,
    root_real: str,
    index_real: str,
    visited: set[tuple[int, int]],
    file_filter: FileFilter,
    on_skip: SkipCallback,
) -> Signature | _Folder | None:
    """Return the Signature of an eligible file, a real folder to descend into, or None.

    ``entry`` was listed from ``dir_path`` through a descriptor, so its own ``path`` is just its name.
    """
    if not entry.name.isascii() and has_surrogates(entry.name):
        on_skip(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "undecodable_name", "")
        return None
    path = os.path.join(dir_path, entry.name)  # a non-link child of a real folder is real
    if entry.is_symlink():
        _skip_link(path, rel, root_real, on_skip)
        return None
    if entry.is_dir(follow_symlinks=False):
        if entry.name in IGNORED_DIRECTORIES:
            on_skip(rel + "/", "excluded_directory", "")
            return None
        if path == index_real and index_real != root_real:
            return None  # the daemon's own output: not the user's content, not counted
        if entry.name[0] == "." and not file_filter.include_hidden:
            on_skip(rel + "/", "hidden", "")
            return None
        st = entry.stat(follow_symlinks=False)
        key = (st.st_dev, st.st_ino)
        if key in visited:
            on_skip(rel + "/", "duplicate_directory", "folder already indexed under another path")
            return None
        visited.add(key)
        return _Folder(path, st.st_dev, st.st_ino)
    return _eligible_file(entry, rel, file_filter, on_skip)


def _skip_link(path: str, rel: str, root_real: str, on_skip: SkipCallback) -> None:
    """Report why a link is not followed: the real path of what it points to wins."""
    target = os.path.realpath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        on_skip(rel, "broken_symlink", "")
        return
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        on_skip(rel, "symlink_loop", "the link resolves to itself")
        return
    shown = rel + "/" if stat.S_ISDIR(st.st_mode) else rel
    if not is_inside(target, root_real):
        on_skip(shown, "symlink_outside_source", "")
    else:
        on_skip(shown, "duplicate_link", f"indexed as {os.path.relpath(target, root_real)}")


def _eligible_file(entry: os.DirEntry[str], rel: str, file_filter: FileFilter, on_skip: SkipCallback) -> Signature | None:
    """The file's Signature if its name, type and size pass the filter."""
    if not file_filter.accepts_name(entry.name):
        on_skip(rel, "excluded_extension", "")
        return None
    if entry.name[0] == "." and not file_filter.include_hidden:
        on_skip(rel, "hidden", "")
        return None
    st = entry.stat(follow_symlinks=False)
    verdict = _size_and_type_verdict(st, file_filter)
    if verdict:
        on_skip(rel, *verdict)
        return None
    return (rel, st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def _size_and_type_verdict(st: os.stat_result, file_filter: FileFilter) -> tuple[str, str] | None:
    if not stat.S_ISREG(st.st_mode):
        return ("not_regular_file", "")
    if st.st_size > file_filter.max_size_bytes:
        return ("too_large", f"{st.st_size} bytes")
    return None


def check_single_file(root: Path, rel: str, file_filter: FileFilter) -> DiskFile | None:
    """Apply the walk's rules to one file given by a safe key; None if it no longer exists."""
    parts = rel.split("/")
    if any(part in IGNORED_DIRECTORIES for part in parts[:-1]):
        raise FileSkipped(rel, "excluded_directory")
    if not file_filter.include_hidden and any(part.startswith(".") for part in parts):
        raise FileSkipped(rel, "hidden")
    if not file_filter.accepts_name(parts[-1]):
        raise FileSkipped(rel, "excluded_extension")
    try:
        st = os.stat(os.path.join(root, rel))
    except FileNotFoundError:
        if os.path.islink(os.path.join(root, rel)):
            raise FileSkipped(rel, "broken_symlink") from None
        return None
    except OSError as exc:
        raise FileSkipped(rel, "unreadable", exc.strerror or str(exc)) from None
    verdict = _size_and_type_verdict(st, file_filter)
    if verdict:
        raise FileSkipped(rel, *verdict)
    return DiskFile(path=rel, mtime_ns=st.st_mtime_ns, size=st.st_size, inode=st.st_ino, ctime_ns=st.st_ctime_ns)


def disk_signature(root: Path, rel: str) -> Signature | None:
    """The Signature the walk would record for the file at ``rel`` now (one lstat), or None if
    there is no regular file there any more."""
    try:
        st = os.lstat(os.path.join(root, rel))
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (rel, st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def has_surrogates(name: str) -> bool:
    """True for text holding a lone surrogate (a name that was not UTF-8), which SQLite cannot be given."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def is_inside(path: str, root: str) -> bool:
    """True if the already-resolved ``path`` is ``root`` or below it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class RawFile:
    """A regular file's bytes and the stat taken on the same open descriptor."""

    data: bytes
    mtime_ns: int
    size: int
    inode: int
    ctime_ns: int
    read_at_ns: int
    content_hash: str


def read_regular_file(root: Path, rel: str, max_bytes: int) -> RawFile:
    """Read a file that must still be a regular file of at most ``max_bytes``; else FileSkipped."""
    path = os.path.join(root, rel)
    read_at_ns = time.time_ns()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileSkipped(rel, "vanished") from None
    except OSError as exc:
        raise FileSkipped(rel, "unreadable", exc.strerror or str(exc)) from None
    try:
        # The walk checked links, but the name may have become a link out of the source since.
        if not _opened_inside(fd, path, root):
            raise FileSkipped(rel, "symlink_outside_source", "became a link out of the source before it was read")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileSkipped(rel, "not_regular_file")
        if st.st_size > max_bytes:
            raise FileSkipped(rel, "too_large", f"{st.st_size} bytes")
        data = _read_to_end(fd, st.st_size, max_bytes)
    except OSError as exc:
        raise FileSkipped(rel, "unreadable", exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise FileSkipped(rel, "too_large", "grew while being read")
    return RawFile(
        data=data,
        mtime_ns=st.st_mtime_ns,
        size=len(data),
        inode=st.st_ino,
        ctime_ns=st.st_ctime_ns,
        read_at_ns=read_at_ns,
        content_hash=content_hash(data),
    )


def _read_to_end(fd: int, expected: int, max_bytes: int) -> bytes:
    """Read until end of file or just past ``max_bytes``. The first read asks for the expected size
    plus one byte, so an unchanged file is read in one call into a buffer of the right size (a
    fixed large buffer costs an allocation of that size for every small file)."""
    chunks = []
    remaining = max_bytes + 1
    want = expected + 1
    while remaining > 0:
        chunk = os.read(fd, min(remaining, want))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
        want = 1 << 16
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _opened_inside(fd: int, path: str, root: Path) -> bool:
    """True if the open descriptor's file lies inside ``root`` (Linux: asked of /proc; elsewhere the
    path is resolved again, which leaves a smaller window)."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        opened = os.path.realpath(path)
    return is_inside(opened, str(root)) or is_inside(opened, os.path.realpath(root))


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def decode_text(rel: str, data: bytes) -> tuple[str, str, bool]:
    """Return (text, encoding, fallback_used) or raise FileSkipped(binary).

    UTF-8 (with or without BOM) and UTF-16/32 with a BOM are decoded exactly; UTF-16 without a BOM
    is recognised by its pattern of NUL bytes; anything else falls back to FALLBACK_ENCODING.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(encoding.replace("-sig", "")), encoding, False
            except UnicodeDecodeError:
                raise FileSkipped(rel, "binary", f"invalid {encoding} after its byte-order mark") from None
    sample = data[:SNIFF_BYTES]
    if b"\x00" in sample:
        bomless = _bomless_utf16(sample)
        if bomless:
            try:
                return data.decode(bomless), bomless, False
            except UnicodeDecodeError:
                pass
        raise FileSkipped(rel, "binary", "NUL bytes in content")
    if sample and len(sample) - len(sample.translate(None, _CONTROL_BYTES)) > MAX_CONTROL_SHARE * len(sample):
        raise FileSkipped(rel, "binary", "many control bytes in content")
    try:
        return data.decode("utf-8"), "utf-8", False
    except UnicodeDecodeError:
        return data.decode(FALLBACK_ENCODING, errors="replace"), FALLBACK_ENCODING, True


def _bomless_utf16(sample: bytes) -> str | None:
    """Guess UTF-16 without a BOM: mostly-ASCII text has NULs in every other byte."""
    even, odd = sample[0::2], sample[1::2]
    if len(sample) < 4:
        return None
    if odd.count(0) > 0.9 * len(odd) and even.count(0) == 0:
        return "utf-16-le"
    if even.count(0) > 0.9 * len(even) and odd.count(0) == 0:
        return "utf-16-be"
    return None


#: The names an index's files take (database, WAL, shared memory, lock, a moved-aside copy), wherever
#: they are; a name merely holding ".sqlite3" (backup.sqlite3.md) is an ordinary file.
_INDEX_FILE_NAME = re.compile(re.escape(DB_SUFFIX) + r"(?:-wal|-shm|-journal|\.lock|\.corrupt-.*)?$", re.S)


def resolve_user_path(root: Path, user_path: str, index_directory: Path) -> str:
    """Turn a path from a client (relative to the source, or absolute inside it) into a source key:
    the real path, as the walk names it, also when the client named it through a link.

    Refuses, without reading anything: NUL bytes, traversal (also backslash- or percent-encoded),
    absolute paths elsewhere, links whose target leaves the source, and the daemon's own files.
    """
    if not isinstance(user_path, str) or not user_path.strip():
        raise UnsafePathError(str(user_path), "the path is empty")
    if "\x00" in user_path:
        raise UnsafePathError(user_path, "the path contains a NUL byte")
    if len(user_path) > 4096:
        raise UnsafePathError(user_path[:80] + "...", "the path is longer than 4096 characters")
    for candidate in (user_path, unquote(user_path)):
        if ".." in candidate.replace("\\", "/").split("/"):
            raise UnsafePathError(user_path, "'..' is not allowed; give a path inside the source directory")
    if has_surrogates(user_path):
        raise UnsafePathError(user_path, "the path is not valid UTF-8")
    root_real = os.path.realpath(root)
    lexical = os.path.normpath(os.path.join(root_real, user_path))
    if not is_inside(lexical, root_real):
        raise UnsafePathError(user_path, f"it is outside the source directory {root_real}")
    if lexical == root_real:
        raise UnsafePathError(user_path, "it is the source directory itself; call refresh_index without a path")
    if not is_inside(os.path.realpath(lexical), root_real):
        raise UnsafePathError(user_path, "it is a link that points outside the source directory")
    real = os.path.realpath(lexical)
    if real == root_real:
        raise UnsafePathError(user_path, "it is the source directory itself; call refresh_index without a path")
    index_real = os.path.realpath(index_directory)
    if is_inside(real, index_real) and index_real != root_real or _INDEX_FILE_NAME.search(os.path.basename(real)):
        raise UnsafePathError(user_path, "it is one of the daemon's own index files")
    return os.path.relpath(real, root_real).replace(os.sep, "/")
