"""The file system for content: walking a source, opening safely inside it, reading and decoding.

Nothing here writes. Every name under the source is opened, stat-ed or listed below the source's
folder with no link followed (open_in_source), so a name swapped for a link between the walk and
the read cannot lead outside; a file is read only if the open descriptor is a regular file, and it
is opened non-blocking so that a FIFO swapped in cannot hang the daemon.

The walk decides what it skips (filters, self-exclusion, links) but for the ignore rules' verdict,
which is ignore_rules' pure logic; the rule files themselves are read here.
"""

from __future__ import annotations

import bisect
import codecs
import contextlib
import contextvars
import ctypes
import errno
import hashlib
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

from exceptions import FileSkipped, SourceUnavailableError, UnsafePathError
from ignore_rules import Matcher, RuleSet, Rules, bytewise, compile_exclude_patterns, parse_rules, warn_once
from models import DB_SUFFIX, DiskFile, Signature, identity

#: Why a file is not indexed. Status counts files by these names.
SKIP_REASONS = (
    "excluded_extension",  # not in included_extensions, or in excluded_extensions
    "excluded_directory",  # inside a version-control, dependency or trash folder (IGNORED_DIRECTORIES)
    "hidden",  # its name, or a folder's it is in, starts with a dot (include_hidden: false)
    "too_large",  # larger than max_file_size_mb
    "binary",  # NUL bytes or many control bytes in the content sample
    "not_regular_file",  # FIFO, socket, device; or a folder, asked for as a file
    "symlink_outside_source",  # a link whose target leaves the source directory
    "duplicate_link",  # a link to a file or folder inside the source, indexed under its real path
    "duplicate_directory",  # a folder reached a second time without a link (a bind mount)
    "ignored",  # a rule of a .gitignore or .ignore in its folder or above, or of .git/info/exclude
    # (respect_gitignore: true, the default); a folder matched is not entered
    "excluded_pattern",  # a rule of exclude_patterns; a folder matched is not entered
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
#: A path a client gives (refresh_index, get_document) is refused past this length.
MAX_USER_PATH_CHARS = 4096
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
    respect_gitignore: skip what the ``.gitignore`` and ``.ignore`` files of the source and its
        folders, and the source's ``.git/info/exclude``, exclude, as git does (``ignored``). Only
        files inside the source are read: never one above it, nor the user's global git config
        (``core.excludesFile``). True by default.
    exclude_patterns: more rules, in .gitignore syntax as if in a .gitignore at the source's top
        (``drafts/**``, ``**/*.tmp``, ``build/``, ``!keep.md``); they take precedence over every
        rule file, like git's ``--exclude``. Skipped as ``excluded_pattern``. A pattern that can
        never match raises PatternError (a ValueError).
    """

    included_extensions: tuple[str, ...]
    excluded_extensions: tuple[str, ...]
    max_size_bytes: int
    index_directory: Path
    include_hidden: bool = False
    respect_gitignore: bool = True
    exclude_patterns: tuple[str, ...] = ()
    #: exclude_patterns compiled (None: there are none).
    exclude_rules: RuleSet | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # str.endswith takes a tuple: one C call per name instead of a loop per extension.
        object.__setattr__(self, "included_extensions", tuple(self.included_extensions))
        object.__setattr__(self, "excluded_extensions", tuple(self.excluded_extensions))
        object.__setattr__(self, "exclude_patterns", tuple(self.exclude_patterns))
        object.__setattr__(self, "exclude_rules", compile_exclude_patterns(self.exclude_patterns))

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


#: The identity the source folder must have wherever this thread opens it (see reading_from).
_EXPECTED_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("expected_source", default=None)
#: The mount points in it the index recorded ("a/b/" -> identity), checked likewise for what is below them.
_EXPECTED_MOUNTS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("expected_mounts", default={})
#: Why a source folder that is not the one expected is not read.
NOT_THE_INDEXED_FOLDER = "it is not the folder the index was made from (replaced or unmounted?); nothing was read from it"


@contextlib.contextmanager
def reading_from(expected: str | None, mounts: Mapping[str, str] | None = None) -> Iterator[None]:
    """Within the block, this thread reads below a source folder only if it is the folder of
    identity ``expected``: every opening of the source (open_in_source, lstat_in_source, the walk,
    disk_signatures, the ignore rules) checks the descriptor it opened and raises
    SourceUnavailableError if it is another folder (the source renamed away and a link or another
    folder put in its place, a drive unmounted). The check is on the descriptor that is then used,
    so nothing swapped in between is read. None: not checked. ``mounts``: the mount points in the
    source the index recorded ("a/b/" -> identity); opening what is below one first checks that
    it is still that file system (a drive unmounted, or another mounted over it, is not read)."""
    token = _EXPECTED_SOURCE.set(expected)
    mounted = _EXPECTED_MOUNTS.set({folder: found for folder, found in (mounts or {}).items() if folder})
    try:
        yield
    finally:
        _EXPECTED_MOUNTS.reset(mounted)
        _EXPECTED_SOURCE.reset(token)


def _check_mounts(root_fd: int, rel: str) -> None:
    """Raise SourceUnavailableError if a mount point the index recorded on the way to ``rel``
    (reading_from's ``mounts``) is no longer that file system."""
    for folder, expected in _EXPECTED_MOUNTS.get().items():
        if not (rel + "/").startswith(folder):
            continue
        try:
            fd = _open_beneath(root_fd, folder.rstrip("/"), _PATH_FLAGS)
        except OSError:
            raise SourceUnavailableError(folder, NOT_THE_INDEXED_FOLDER, "the mount point") from None
        try:
            same = identity(os.fstat(fd)) == expected
        finally:
            os.close(fd)
        if not same:
            raise SourceUnavailableError(folder, NOT_THE_INDEXED_FOLDER, "the mount point")


def expected_source() -> str | None:
    """The identity reading_from set for this thread, to pass on to a loader process."""
    return _EXPECTED_SOURCE.get()


def _open_source(root: Path | str, flags: int) -> int:
    """Open the source folder ``root`` (a link to it followed: the path was resolved when the
    server started) and check that it is the folder expected (reading_from)."""
    fd = os.open(root, flags)
    expected = _EXPECTED_SOURCE.get()
    if expected is not None:
        try:
            same = identity(os.fstat(fd)) == expected
        except OSError:
            os.close(fd)
            raise
        if not same:
            os.close(fd)
            raise SourceUnavailableError(str(root), NOT_THE_INDEXED_FOLDER)
    return fd


class _Walk(NamedTuple):
    """What the folders of one walk share."""

    root_real: str
    index_real: str
    #: The device and inode of every folder entered: one reached again (a bind mount) is a duplicate.
    visited: set[tuple[int, int]]
    file_filter: FileFilter
    on_skip: SkipCallback
    on_mount: MountCallback | None


class _Pending(NamedTuple):
    """A folder still to walk: its real path, its key prefix ("" or ending in "/"), its device, and
    the rules in force in the folder it is in (None: no rule applies there)."""

    path: str
    prefix: str
    device: int
    rules: Rules | None


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

    Ignore rules (FileFilter.respect_gitignore, exclude_patterns) are compiled once per folder
    that has rule files; a folder they exclude is reported once and not entered, so nothing in it
    can be re-included (as in git). Rule files are found in the folder's listing, no extra call.
    """
    root_real = os.path.realpath(root)
    index_real = os.path.realpath(file_filter.index_directory)
    root_stat = os.stat(root_real)
    walk = _Walk(root_real, index_real, {(root_stat.st_dev, root_stat.st_ino)}, file_filter, on_skip, on_mount)
    stack = [_Pending(root_real, "", root_stat.st_dev, None)]
    while stack:
        folder = stack.pop()
        listing = _list_or_report(walk, folder.prefix)
        if listing is None:
            continue
        dir_fd, listed = listing
        try:
            listed.sort(key=_NAME)
            rules = _rules_in_folder(dir_fd, folder.prefix, listed, folder.rules, file_filter)
            yield from _walk_entries(walk, folder, listed, rules, stack)
        finally:
            os.close(dir_fd)


def _list_or_report(walk: _Walk, prefix: str) -> tuple[int, list[os.DirEntry[str]]] | None:
    """_list_directory of the folder ``prefix``, or None if it cannot be listed: reported as
    ``unreadable`` unless it is gone. SourceUnavailableError if the source itself cannot be."""
    try:
        return _list_directory(walk.root_real, prefix)
    except OSError as exc:
        if not prefix:
            raise SourceUnavailableError(walk.root_real, f"cannot list it: {exc.strerror or exc}") from None
        # A folder that is a link now is not the folder found: gone, and the next walk reports the link.
        if exc.errno not in _GONE_ERRNOS and exc.errno not in _LINKED_ERRNOS:
            walk.on_skip(prefix, "unreadable", f"cannot list the folder: {exc.strerror or exc}")
        return None


def _walk_entries(
    walk: _Walk, folder: _Pending, listed: list[os.DirEntry[str]], rules: Rules | None, stack: list[_Pending]
) -> Iterator[Signature]:
    """Yield the eligible files among the entries of one folder (sorted by name), report the others
    to on_skip, and push the folders to enter onto ``stack``, last name first so that they are
    walked in name order."""
    file_filter, on_skip, prefix = walk.file_filter, walk.on_skip, folder.prefix
    included, excluded, max_size = file_filter.included_extensions, file_filter.excluded_extensions, file_filter.max_size_bytes
    skip_hidden = not file_filter.include_hidden
    skip_own_files = folder.path == walk.index_real
    matcher = rules.matcher(prefix) if rules is not None else None
    pre = matcher.files if matcher is not None else None
    check_rules = pre is not None
    f_names, f_ends, f_starts, f_contains, f_slow = (
        (pre.names, pre.ends, pre.starts, pre.contains, pre.slow) if pre is not None
        else (frozenset(), {}, {}, None, None)
    )
    for entry in reversed(listed):
        name = entry.name
        rel = prefix + name
        try:
            # The common case first, since a rescan meets it for every file: a regular file
            # with an ASCII name the filter accepts (FileFilter.accepts_name, inline), and no
            # ignore rule that could match it (ignore_rules._Prefilter.maybe, its C-level tests
            # inline), needs only its stat. Whatever
            # this does not accept goes through _classify_entry, which runs every check and
            # reports why.
            if (
                entry.is_file(follow_symlinks=False) and name.isascii() and not skip_own_files
                and (lowered := name.lower()).endswith(included) and not lowered.endswith(excluded)
                and not (skip_hidden and name[0] == ".")
                and not (check_rules and (
                    name in f_names
                    or (f_ends and (ends := f_ends.get(name[-1])) is not None and name.endswith(ends))
                    or (f_starts and (starts := f_starts.get(name[0])) is not None and name.startswith(starts))
                    or (f_contains is not None and f_contains(name)) or (f_slow is not None and f_slow(name, rel))
                ))
            ):
                st = entry.stat()
                if st.st_size <= max_size and stat.S_ISREG(st.st_mode):
                    yield (rel, st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
                    continue
            found = _classify_entry(
                entry, folder.path, rel, walk.root_real, walk.index_real, walk.visited, file_filter, on_skip, matcher
            )
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                continue  # gone between listing and stat: nothing to index, nothing to count
            on_skip(rel, "unreadable", exc.strerror or str(exc))
            continue
        if found is None:
            continue
        if isinstance(found, _Folder):
            if found.device != folder.device and walk.on_mount is not None:
                walk.on_mount(rel + "/", f"{found.device}:{found.inode}")
            stack.append(_Pending(found.path, rel + "/", found.device, rules))
        elif not (skip_own_files and DB_SUFFIX in name):
            yield found


def _list_directory(root: str, prefix: str) -> tuple[int, list[os.DirEntry[str]]]:
    """Open the folder ``prefix`` ("" or ending in "/") of the source ``root`` with no link followed
    (open_in_source: one swapped in since it was found is not entered) and list it; the caller
    closes the returned descriptor. Listed through the descriptor, an entry's stat() resolves just
    its name instead of its whole path again, which takes a fifth off the kernel's time per file."""
    dir_fd = open_in_source(root, prefix[:-1] or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(dir_fd) as entries:
            return dir_fd, list(entries)
    except BaseException:
        os.close(dir_fd)
        raise


@contextlib.contextmanager
def listed_in_source(root: Path | str, rel: str) -> Iterator[list[os.DirEntry[str]]]:
    """The entries of the folder ``rel`` ("" for the source itself), listed as the walk lists a
    folder (no link followed), for a ``with`` block: their descriptor is closed at its end."""
    dir_fd, listed = _list_directory(str(root), rel + "/" if rel else "")
    try:
        yield listed
    finally:
        os.close(dir_fd)


def _classify_entry(
    entry: os.DirEntry[str],
    dir_path: str,
    rel: str,
    root_real: str,
    index_real: str,
    visited: set[tuple[int, int]],
    file_filter: FileFilter,
    on_skip: SkipCallback,
    matcher: Matcher | None = None,
) -> Signature | _Folder | None:
    """Return the Signature of an eligible file, a real folder to descend into, or None.

    ``entry`` was listed from ``dir_path`` through a descriptor, so its own ``path`` is just its name.
    ``matcher``: the ignore rules of the folder, if any.
    """
    if not entry.name.isascii() and has_surrogates(entry.name):
        on_skip(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "undecodable_name", "")
        return None
    path = os.path.join(dir_path, entry.name)  # a non-link child of a real folder is real
    if entry.is_symlink():
        # An ignored link is reported as ignored (a link is never a folder to git's rules).
        reason = matcher.decide(entry.name, rel, False) if matcher is not None else None
        if reason:
            on_skip(rel, reason, "")
        else:
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
        reason = matcher.decide(entry.name, rel, True) if matcher is not None else None
        if reason:
            on_skip(rel + "/", reason, "")
            return None
        st = entry.stat(follow_symlinks=False)
        key = (st.st_dev, st.st_ino)
        if key in visited:
            on_skip(rel + "/", "duplicate_directory", "folder already indexed under another path")
            return None
        visited.add(key)
        return _Folder(path, st.st_dev, st.st_ino)
    return _eligible_file(entry, rel, file_filter, on_skip, matcher)


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


def _eligible_file(
    entry: os.DirEntry[str], rel: str, file_filter: FileFilter, on_skip: SkipCallback, matcher: Matcher | None = None
) -> Signature | None:
    """The file's Signature if its name, ignore rules, type and size pass the filter."""
    if not file_filter.accepts_name(entry.name):
        on_skip(rel, "excluded_extension", "")
        return None
    if entry.name[0] == "." and not file_filter.include_hidden:
        on_skip(rel, "hidden", "")
        return None
    reason = matcher.decide(entry.name, rel, False) if matcher is not None else None
    if reason:
        on_skip(rel, reason, "")
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
    """Apply the walk's rules to one file given by a safe key; None if it no longer exists.

    It is looked at with no link followed (lstat_in_source): a link there is skipped for what it
    points to, as the walk skips it, and a folder is "not_regular_file" (a folder, not a file). The
    ignore rules are those the walk would meet on the way to it: the rule files of each folder from
    the source down to the file's, read as the walk reads them.
    """
    try:
        st = lstat_in_source(root, rel)
    except OSError as exc:
        if exc.errno in _GONE_ERRNOS:
            return None
        raise _open_failed(rel, exc) from None
    if stat.S_ISDIR(st.st_mode):
        raise FileSkipped(rel, "not_regular_file", "it is a folder, not a file")
    parts = rel.split("/")
    if any(part in IGNORED_DIRECTORIES for part in parts[:-1]):
        raise FileSkipped(rel, "excluded_directory")
    if not file_filter.include_hidden and any(part.startswith(".") for part in parts):
        raise FileSkipped(rel, "hidden")
    if not file_filter.accepts_name(parts[-1]):
        raise FileSkipped(rel, "excluded_extension")
    reason = ignored_by_rules(root, parts, file_filter)
    if reason:
        raise FileSkipped(rel, reason)
    if stat.S_ISLNK(st.st_mode):
        try:
            _skip_link(os.path.join(root, rel), rel, os.path.realpath(root), _raise_skip)
        except OSError as exc:
            raise FileSkipped(rel, "unreadable", exc.strerror or str(exc)) from None
    verdict = _size_and_type_verdict(st, file_filter)
    if verdict:
        raise FileSkipped(rel, *verdict)
    return DiskFile(path=rel, mtime_ns=st.st_mtime_ns, size=st.st_size, inode=st.st_ino, ctime_ns=st.st_ctime_ns)


def _raise_skip(rel: str, reason: str, detail: str) -> None:
    raise FileSkipped(rel, reason, detail)


def whitespace_twin(root: Path, rel: str) -> str | None:
    """The key of the entry that ``rel`` (which names nothing) names but for white space at the
    ends of its names ("doc.md" for "doc.md "), if there is one; else None."""
    stripped = "/".join(part.strip() for part in rel.split("/"))
    if stripped == rel or not all(stripped.split("/")):
        return None
    try:
        lstat_in_source(root, stripped)
    except OSError:
        return None
    return stripped


def ignored_by_rules(root: Path, parts: list[str], file_filter: FileFilter, is_dir: bool = False) -> str | None:
    """The reason (``ignored``, ``excluded_pattern``) the ignore rules skip the file (or with
    ``is_dir``, the folder) at the path ``parts`` (its names from the source down), or one of the
    folders it is in; else None. Reads the rule files of each folder on the way, as the walk does,
    opening each folder with O_NOFOLLOW: a path through a link reads no rules past it."""
    if file_filter.exclude_rules is None and not file_filter.respect_gitignore:
        return None
    try:
        fd = _open_source(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        rules: Rules | None = None
        prefix = ""
        for depth, name in enumerate(parts):
            last = depth == len(parts) - 1
            rules = _rules_in_folder(fd, prefix, None, rules, file_filter)
            if rules is None:
                return None
            matcher = rules.matcher(prefix)
            reason = matcher.decide(name, prefix + name, is_dir or not last) if matcher is not None else None
            if reason or last:
                return reason
            try:
                next_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                return None
            os.close(fd)
            fd = next_fd
            prefix += name + "/"
        return None
    finally:
        os.close(fd)


#: disk_signatures' answer for a file that is there but cannot be looked at now (a folder on its
#: way that cannot be entered): not known to be gone, nor to be as it was.
UNREADABLE: Signature = ("", -1, -1, -1, -1)


def disk_signatures(root: Path, rels: Iterable[str]) -> dict[str, Signature | None]:
    """The Signature the walk would record now for each file ``rels`` names below ``root`` (an
    lstat with no link followed on the way), None where there is no regular file any more, or
    UNREADABLE where a folder on its way cannot be entered. The source and each folder are opened
    once, however many of the files are in it. Raises SourceUnavailableError if the source itself
    cannot be opened or entered, or is not the folder expected (reading_from)."""
    by_folder: dict[str, list[str]] = {}
    for rel in rels:
        by_folder.setdefault(rel.rpartition("/")[0], []).append(rel)
    found: dict[str, Signature | None] = {rel: None for in_folder in by_folder.values() for rel in in_folder}
    try:
        root_fd = _open_source(root, _PATH_FLAGS & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise SourceUnavailableError(str(root), f"it cannot be opened ({exc.strerror or exc})") from None
    try:
        for folder, in_folder in by_folder.items():
            try:
                _check_mounts(root_fd, folder)
            except SourceUnavailableError:
                found.update((rel, UNREADABLE) for rel in in_folder)
                continue
            try:
                fd = _open_beneath(root_fd, folder or ".", _PATH_FLAGS)
            except OSError as exc:
                if exc.errno in _GONE_ERRNOS or exc.errno in _LINKED_ERRNOS:
                    continue
                if not folder:
                    raise SourceUnavailableError(str(root), f"it cannot be read ({exc.strerror or exc})") from None
                found.update((rel, UNREADABLE) for rel in in_folder)
                continue
            try:
                found.update((rel, _signature_in(fd, rel)) for rel in in_folder)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return found


def _signature_in(dir_fd: int, rel: str) -> Signature | None:
    """disk_signatures of one file, by its name in the open folder ``dir_fd``."""
    try:
        _refuse_climbing(rel)
        st = os.stat(rel.rpartition("/")[2], dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        return None if exc.errno in _GONE_ERRNOS or exc.errno in _LINKED_ERRNOS else UNREADABLE
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
    """Read a file that must still be a regular file of at most ``max_bytes``; else FileSkipped.
    It is opened below the source with no link followed (open_in_source), and checked on the open
    descriptor: nothing else is ever opened, whatever the name has become since the walk."""
    read_at_ns = time.time_ns()
    try:
        fd = open_in_source(root, rel, _READ_FLAGS)
    except OSError as exc:
        raise _open_failed(rel, exc) from None
    try:
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


def _open_failed(rel: str, exc: OSError) -> FileSkipped:
    """Why the file at ``rel`` could not be opened or stat-ed below the source, for its skip."""
    if exc.errno in _GONE_ERRNOS:
        return FileSkipped(rel, "vanished")
    if exc.errno in _LINKED_ERRNOS:
        return FileSkipped(rel, "vanished", CHANGED_TO_LINK)
    return FileSkipped(rel, "unreadable", exc.strerror or str(exc))


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


# ---- opening below the source: no link followed, never above it ---------------------------------

#: A file to read: no link followed at its end; O_NONBLOCK so that a FIFO put in its place neither
#: blocks nor waits for a writer, O_NOCTTY so that a terminal does not become the process's own.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: A folder on the way: O_PATH (Linux) opens nothing, and passes folders one may enter but not list.
_PATH_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: What opening below the source raises where a name on the way is a link now, or leads out.
_LINKED_ERRNOS = frozenset({errno.ELOOP, errno.EXDEV})
CHANGED_TO_LINK = "changed while being read: it, or a folder on its path, is a link now"
#: openat2(2)'s number on the architectures that share the unified system call table (Linux 5.6+).
_OPENAT2_NUMBER = 437
_OPENAT2_MACHINES = frozenset({"x86_64", "aarch64", "armv7l", "armv8l", "i686", "ppc64le", "s390x", "riscv64"})
#: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS: not above the folder, no link at all.
_RESOLVE_STRICT = 0x08 | 0x04 | 0x02


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> Callable[[int, str, int], int] | None:
    """openat2 with _RESOLVE_STRICT, if this kernel has it and lets it be called (a seccomp filter
    may not); None otherwise, and names are then opened one at a time."""
    if sys.platform != "linux" or os.uname().machine not in _OPENAT2_MACHINES:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)

    def openat2(dir_fd: int, rel: str, flags: int) -> int:
        how = _OpenHow(flags, 0, _RESOLVE_STRICT)
        fd = syscall(_OPENAT2_NUMBER, dir_fd, os.fsencode(rel), ctypes.addressof(how), ctypes.sizeof(how))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return fd

    try:
        probe = os.open("/", _PATH_FLAGS)
        try:
            os.close(openat2(probe, ".", _PATH_FLAGS))
        finally:
            os.close(probe)
    except OSError:
        return None
    return openat2


_openat2 = _load_openat2()


def open_in_source(root: Path | str, rel: str, flags: int) -> int:
    """Open ``rel`` (names joined by "/"; "." for the source itself) below the source folder
    ``root`` with ``flags``, following no link, on the way or at its end, and never going above
    it. Raises OSError as os.open does: ELOOP (or EXDEV) where a name on the way is a link or "..".
    """
    root_fd = _open_source(root, _PATH_FLAGS & ~os.O_NOFOLLOW)
    try:
        _check_mounts(root_fd, rel)
        return _open_beneath(root_fd, rel, flags)
    finally:
        os.close(root_fd)


def lstat_in_source(root: Path | str, rel: str) -> os.stat_result:
    """os.lstat of ``rel`` below the source folder ``root``, following no link on the way (OSError
    as open_in_source raises it)."""
    _refuse_climbing(rel)
    folder, _, name = rel.rpartition("/")
    fd = open_in_source(root, folder, _PATH_FLAGS) if folder else _open_source(root, _PATH_FLAGS & ~os.O_NOFOLLOW)
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def _refuse_climbing(rel: str) -> None:
    if ".." in rel.split("/") or "\x00" in rel:
        raise OSError(errno.EXDEV, "the path leads out of the source", rel)


def _open_beneath(dir_fd: int, rel: str, flags: int) -> int:
    """open_in_source below the open folder ``dir_fd``: with openat2 where there is one, else one
    name at a time with O_NOFOLLOW from the folder before it."""
    _refuse_climbing(rel)
    if _openat2 is not None:
        # RESOLVE_NO_SYMLINKS refuses a link at the end too (ELOOP) unless O_PATH | O_NOFOLLOW ask for it.
        return _openat2(dir_fd, rel, flags & ~os.O_NOFOLLOW)
    names = rel.split("/")
    fd = dir_fd
    try:
        for name in names[:-1]:
            next_fd = _open_name(fd, name, _PATH_FLAGS, rel)
            if fd != dir_fd:
                os.close(fd)
            fd = next_fd
        return _open_name(fd, names[-1], flags | os.O_NOFOLLOW, rel)
    finally:
        if fd != dir_fd:
            os.close(fd)


def _open_name(dir_fd: int, name: str, flags: int, rel: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR; openat2 says ELOOP: say it as openat2 does.
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), rel) from None
        raise


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


# ---- rule files: read from the source's folders; ignore_rules parses and applies them -----------

#: Rule files read in every folder of the source when respect_gitignore is true, in rising
#: precedence: ripgrep's ``.ignore`` wins over ``.gitignore`` in the same folder.
IGNORE_FILE_NAMES = (".gitignore", ".ignore")
#: A rule file is read up to this many bytes; the rules after that are left out (logged).
MAX_IGNORE_FILE_BYTES = 1 << 20


def _read_rules_file(dir_fd: int, name: str, shown: str) -> bytes | None:
    """The first MAX_IGNORE_FILE_BYTES of a regular file ``name`` in the open folder; None if there
    is none. A link is not followed (as git does not), a FIFO or device is never read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            warn_once(shown, f"cannot read it: {exc.strerror or exc}")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data = _read_to_end(fd, min(st.st_size, MAX_IGNORE_FILE_BYTES), MAX_IGNORE_FILE_BYTES)
    except OSError as exc:
        warn_once(shown, f"cannot read it: {exc.strerror or exc}")
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_IGNORE_FILE_BYTES:
        warn_once(shown, f"larger than {MAX_IGNORE_FILE_BYTES} bytes; only the rules before that are applied")
        data = data[:data.rfind(b"\n", 0, MAX_IGNORE_FILE_BYTES) + 1]
    return data


def _info_exclude(root_fd: int) -> bytes | None:
    """The source's own ``.git/info/exclude``, if the source is a repository's top folder."""
    fds = []
    try:
        fd = root_fd
        for name in (".git", "info"):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            fds.append(fd)
        return _read_rules_file(fd, "exclude", ".git/info/exclude")
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)



def _rules_in_folder(
    dir_fd: int, prefix: str, listed: list[os.DirEntry[str]] | None, above: Rules | None, file_filter: FileFilter
) -> Rules | None:
    """The rules in force in the open folder ``prefix``: ``above``, those of the folder it is in (at
    the source's top, exclude_patterns and .git/info/exclude instead), and its own rule files. None
    when no rule can apply. ``listed``: as for _own_rules."""
    rules = above if prefix else _root_rules(dir_fd, file_filter)
    if rules is None:
        return None
    own = _own_rules(dir_fd, prefix, listed) if file_filter.respect_gitignore else []
    if own or rules.live:
        rules = rules.entered(prefix, own)
    return rules


def _own_rules(dir_fd: int, prefix: str, listed: list[os.DirEntry[str]] | None) -> list[RuleSet]:
    """The rule files of one folder, lowest precedence first. ``listed``: the folder's entries
    sorted by name, to find them in without a system call (None: try to open them)."""
    own = []
    for name in IGNORE_FILE_NAMES:
        if listed is not None:
            at = bisect.bisect_left(listed, name, key=_NAME)
            if at == len(listed) or listed[at].name != name or not listed[at].is_file(follow_symlinks=False):
                continue
        data = _read_rules_file(dir_fd, name, prefix + name)
        if data:
            own.append(parse_rules(data, bytewise(prefix), "ignored", prefix + name))
    return own


def _root_rules(root_fd: int, file_filter: FileFilter) -> Rules | None:
    """The rules at the top of the source before its own rule files: exclude_patterns and
    .git/info/exclude. None when no rule of any kind can apply."""
    top = file_filter.exclude_rules
    live = top.path_refs if top is not None else ()
    if not file_filter.respect_gitignore:
        return Rules(top, (), live) if top is not None else None
    data = _info_exclude(root_fd)
    if not data:
        return Rules(top, (), live)
    info = parse_rules(data, "", "ignored", ".git/info/exclude")
    return Rules(top, (info,), live + info.path_refs)


#: The names an index's files take (database, WAL, shared memory, lock, a moved-aside copy), wherever
#: they are; a name merely holding ".sqlite3" (backup.sqlite3.md) is an ordinary file.
_INDEX_FILE_NAME = re.compile(re.escape(DB_SUFFIX) + r"(?:-wal|-shm|-journal|\.lock|\.closed|\.corrupt-.*)?$", re.S)


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
    if len(user_path) > MAX_USER_PATH_CHARS:
        raise UnsafePathError(user_path[:80] + "...", f"the path is longer than {MAX_USER_PATH_CHARS} characters")
    for candidate in (user_path, unquote(user_path)):
        if ".." in candidate.replace("\\", "/").split("/"):
            raise UnsafePathError(user_path, "'..' is not allowed; give a path inside the source directory")
    if has_surrogates(user_path):
        raise UnsafePathError(user_path, "the path is not valid UTF-8")
    root_real = os.path.realpath(root)
    lexical = os.path.normpath(os.path.join(root_real, user_path))
    if not is_inside(lexical, root_real):
        raise UnsafePathError(user_path, "it is outside the source directory")
    try:
        real = os.path.realpath(lexical)  # once: what is checked is what is returned
    except OSError:  # a link on the way became something else while it was read (os.readlink: EINVAL)
        raise UnsafePathError(user_path, "it changed while it was looked up (a link replaced?); try again") from None
    if not is_inside(real, root_real):
        raise UnsafePathError(user_path, "it is a link that points outside the source directory")
    if real == root_real:
        raise UnsafePathError(user_path, "it is the source directory itself; call refresh_index without a path")
    index_real = os.path.realpath(index_directory)
    if is_inside(real, index_real) and index_real != root_real or _INDEX_FILE_NAME.search(os.path.basename(real)):
        raise UnsafePathError(user_path, "it is one of the daemon's own index files")
    return os.path.relpath(real, root_real).replace(os.sep, "/")
