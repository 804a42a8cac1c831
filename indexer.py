"""What changed on disk, and bringing the index up to date in bounded, crash-safe batches.

FileScanner compares the walk with what the index remembers. TextIndexer has the files that
changed loaded ahead of the writer (loader.py) and writes each batch of files in one transaction:
a kill at any instant leaves every file either fully old or fully new.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import database
import index_files
import index_writer
from exceptions import Cancelled, DocSearchError, FileSkipped, SourceUnavailableError, reason_of
from index_writer import IndexWriter
from file_utils import (
    IGNORED_DIRECTORIES,
    FileFilter,
    check_single_file,
    has_surrogates,
    ignored_by_rules,
    reading_from,
    resolve_user_path,
    walk_source,
)
from loader import load_file, load_files, reading
from models import DiskFile, LoadedFile, RefreshReply, ScanProgress, ServerConfig, Signature, WatchState, identity

logger = logging.getLogger(__name__)

#: A file whose mtime is this close to the moment it was read may have been modified again within
#: the file system's timestamp granularity; its content hash is re-checked on the next scan.
RACY_WINDOW_NS = 2_000_000_000
#: A transaction holds at most this many files or bytes of text. Large batches make the first index
#: fast: FTS5 builds a batch's terms in memory (up to index_writer.FTS_HASH_BYTES) and writes them as
#: one segment at commit, so fewer commits mean fewer, larger segments and less merging.
BATCH_FILES = 10_000
BATCH_BYTES = 64 << 20
#: Reasons that are too common to log one line per file (a summary line counts them).
QUIET_REASONS = frozenset({"excluded_extension", "excluded_directory", "hidden", "ignored", "excluded_pattern"})
#: Reasons that mean something went wrong while reading, counted as errors in status.
ERROR_REASONS = frozenset({"unreadable", "unavailable"})
#: A file skipped for these reasons may be there as it was: what the index holds for it is kept.
KEEP_REASONS = frozenset({"unreadable", "unavailable"})
#: A file skipped for what its content is stays skipped, unread, until it changes (a PDF that took
#: pdftotext its whole time limit must not cost that on every scan). Others are read again each
#: scan: "no_extractor" so that installing pdftotext is picked up, errors so they are retried.
REMEMBERED_REASONS = frozenset({"binary", "malformed", "too_large"})
#: A scan records its progress in the lock file (for status in other processes) this often.
PROGRESS_EVERY_FILES = 64
#: Bounds on what a reply or status carries about errors.
MAX_ERROR_CHARS = 1000
MAX_REPLY_ERRORS = 100


# ---- change detection ------------------------------------------------------------------------


@dataclass
class Changes:
    """What a scan must do: files to (re)read, files to re-verify by hash, paths to remove."""

    to_read: list[DiskFile] = field(default_factory=list)
    to_verify: list[DiskFile] = field(default_factory=list)
    to_remove: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    #: The folders the walk found to be file systems of their own: path ("a/b/") -> identity.
    mounts: dict[str, str] = field(default_factory=dict)


def file_filter(config: ServerConfig) -> FileFilter:
    """The walk's rules for ``config``: which files are indexed (and may be read by get_document)."""
    return FileFilter(
        included_extensions=config.included_extensions,
        excluded_extensions=config.excluded_extensions,
        max_size_bytes=config.max_file_size_bytes,
        index_directory=config.index_output_directory,
        include_hidden=config.include_hidden,
        respect_gitignore=config.respect_gitignore,
        exclude_patterns=config.exclude_patterns,
    )


class FileScanner:
    """Walks the source and compares it with the stored signature (path, mtime, size, inode, ctime)
    of each file."""

    def __init__(self, config: ServerConfig) -> None:
        self.root = config.source_directory
        self.filter = file_filter(config)

    def changes(self, signatures: Mapping[Signature, int], recorded: Mapping[str, str] | None = None) -> Changes:
        """Compare the walk with IndexWriter.file_signatures(): a file is unchanged when its whole
        signature equals a stored one. What the walk could not list or stat is not removed.

        ``recorded``: the identities the last scan found for the source ("") and the mount points
        in it. If the source is now another folder, or a mount point is not the same file system
        (unmounted before or during the walk), and the walk finds none of the files indexed under
        it, they are kept: the source then raises SourceUnavailableError, a mount point is
        reported ``unavailable``.
        """
        recorded = recorded or {}
        result = Changes()
        unmatched = dict(signatures)
        source_replaced = "" in recorded and _identity_of(self.root) != recorded[""]
        # Files indexed under the folders that may turn out replaced, to see if the walk finds any.
        folders = [folder for folder in recorded if folder] + ([""] if source_replaced else [])
        watched = {path for path, *_ in signatures if path.startswith(tuple(folders))} if folders else set()
        found_under: set[str] = set()

        def on_skip(path: str, reason: str, detail: str) -> None:
            result.skipped.append((path, reason, detail))

        for signature in walk_source(self.root, self.filter, on_skip, result.mounts.__setitem__):
            indexed_at_ns = unmatched.pop(signature, None)
            if indexed_at_ns is None:
                result.to_read.append(DiskFile._make(signature))
            elif indexed_at_ns - signature[1] < RACY_WINDOW_NS or indexed_at_ns - signature[4] < RACY_WINDOW_NS:  # its mtime, its ctime
                result.to_verify.append(DiskFile._make(signature))
            if watched and signature[0] in watched:
                found_under.update(folder for folder in folders if signature[0].startswith(folder))
        for folder in folders:
            replaced = not folder or result.mounts.get(folder) != recorded[folder]
            indexed = sum(1 for path in watched if path.startswith(folder))
            if not replaced or not indexed or folder in found_under:
                continue
            if not folder:
                raise SourceUnavailableError(
                    str(self.root), f"it is now another folder, holding none of the {indexed} indexed files (an unmounted"
                    " drive?); if that really is the new source, delete the index file to start over",
                )
            on_skip(folder, "unavailable", f"now another folder, holding none of its {indexed} indexed files (unmounted?)")
        # Left unmatched: files changed since (read again above), no longer found by the walk, or in
        # a folder (or themselves) that could not be listed or stat-ed: those are kept.
        unknown = [path for path, reason, _ in result.skipped if reason in KEEP_REASONS]
        kept_exact, kept_under = set(unknown), tuple(path.rstrip("/") + "/" for path in unknown)
        to_read = {disk.path for disk in result.to_read}
        result.to_remove = [
            path for path, *_ in unmatched
            if path not in to_read and path not in kept_exact and not path.startswith(kept_under)
        ]
        return result


def watched_folder(config: ServerConfig) -> Callable[[str], bool]:
    """Whether the watcher watches a folder (a source key, "a/b"): every folder the walk may
    descend into (links are never followed)."""
    index_dir = os.path.realpath(config.index_output_directory)
    root, rules = config.source_directory, file_filter(config)

    def watched(rel: str) -> bool:
        parts = rel.split("/")
        name = parts[-1]
        if name in IGNORED_DIRECTORIES or (name.startswith(".") and not config.include_hidden):
            return False
        return os.path.realpath(root / rel) != index_dir and ignored_by_rules(root, parts, rules, is_dir=True) is None

    return watched


# ---- writing ---------------------------------------------------------------------------------


class TextIndexer:
    """Owns the writer and the scan state; every index change goes through here.

    Every change is made holding the index's write lock (index_files.WriterLock), so that one
    process writes at a time; a scan holds it throughout and records in the lock file how far it
    got, and what a scan found (its time, skipped files, errors) goes into the index's meta table,
    so every process reads the same status.
    """

    def __init__(
        self, config: ServerConfig, writer: IndexWriter, stop: threading.Event | None = None, scan_lock: threading.Lock | None = None
    ) -> None:
        self.config = config
        self.writer = writer
        self.scanner = FileScanner(config)
        self.progress = ScanProgress()
        #: One scan at a time: with several sources, their indexers share it (each scan has its own loaders).
        self.scan_lock = scan_lock or threading.Lock()
        #: The writer's openings (IndexWriter.openings) the last scan saw: a file opened anew since needs a scan.
        self.openings_seen = writer.openings
        #: After the phase in the lock file's record, with several sources: which one scans.
        self._label = f"@{config.source.name}" if config.several else ""
        #: Set when the process is stopping: a scan ends after the file being written, and waits
        #: for another process's lock end.
        self.stop = stop or threading.Event()
        #: This process's count of errors, and the latest; the index's meta holds every process's.
        #: The count the meta held when last read stays here too: a rebuilt index starts from it.
        self.errors_encountered = 0
        self.last_error: str | None = None
        self.unsaved_errors = 0
        self.saved_errors = 0
        self._logged_skips: set[tuple[str, str]] = set()
        #: The last scan's reply and when it started: a refresh asked for before then is answered by it.
        self._last_scan: tuple[float, RefreshReply] | None = None
        #: The identities of the source ("") and its mount points, as the scan running now found them.
        self._expected: dict[str, str] = {}
        #: Set when a reader saw the index fail; the next scan checks the file and rebuilds it if damaged.
        self.damage_suspected = False
        #: While a scan runs: the paths a refresh between its steps wrote (see _Outcome.refreshed).
        self._refreshed_in_scan: set[str] | None = None
        #: What this process's watcher reports; each scan records it in the meta (see record_watching).
        self.watching: WatchState | None = None
        #: Why the last write to the index failed (SQLite's message: a full disk, say): status says
        #: "error" until a write succeeds again. The lock file's record says it to other processes.
        self.write_failure: str | None = None
        #: Why the last scan could not read the source (gone, unmounted): counted once until a scan
        #: succeeds again, however many scans meet it.
        self.source_failure: str | None = None
        first = not config.several or config.source.name == config.sources[0].name
        last = writer.write_lock.last_record()
        if last is not None and self._takes_recorded_count(last.phase, first):
            self.saved_errors = last.errors  # the count survives an index that had to be rebuilt
        if writer.recovered_from and first:  # one rebuild, one error, however many sources share the file
            self._record_error(f"the index was damaged; moved it to {writer.recovered_from} and rebuilt it")

    def _takes_recorded_count(self, phase: str, first: bool) -> bool:
        """Whether the error count in the lock file's record (``phase`` its phase) is this source's.
        With several sources sharing the file it is one source's: the one it names; when it names
        none (a holder of the lock rewrote it), the first source's, if that one's own count went
        with the index (rebuilt)."""
        _, labelled, source = phase.partition("@")
        if labelled or not self.config.several:
            return source == self._label[1:]
        try:
            return first and "errors_encountered" not in self.writer.meta()
        except sqlite3.Error:
            return first

    def _record_error(self, message: str, exc: BaseException | None = None) -> None:
        self.errors_encountered += 1
        self.unsaved_errors += 1
        self.last_error = message[:MAX_ERROR_CHARS]
        logger.error("%s", message, exc_info=exc)

    def record_problem(self, message: str, exc: BaseException) -> None:
        """A failure outside the index's own work (the watcher's, the loop's): counted, logged with
        its traceback and shown in status as the last error."""
        self._record_error(message, exc)

    def _write_failed(self, exc: Exception) -> None:
        """The index could not be written: status says so (counted once until a write succeeds,
        however often it is retried), here and, through the lock file, in other processes."""
        problem = database.problem_of(exc, self.writer.db_path)
        if problem != self.write_failure:
            self._record_error(write_problem(self.writer.db_path, problem))
        self.write_failure = problem
        self._record_progress()

    def _write_succeeded(self) -> None:
        if self.write_failure is not None:
            logger.info("the index %s can be written again", self.writer.db_path)
            self.write_failure = None
            self._record_progress()

    def _error_meta(self, new_errors: int, last_error: str | None) -> dict[str, str]:
        """Meta values that add this process's unsaved errors and ``new_errors`` to the index's
        count (read inside the caller's transaction, so no process's errors are lost; never below
        what this process saw, so a rebuilt index does not count from zero)."""
        saved = max(int(self.writer.meta().get("errors_encountered") or 0), self.saved_errors)
        self.saved_errors = saved + self.unsaved_errors + new_errors
        self.unsaved_errors = 0
        return {"errors_encountered": str(self.saved_errors), "last_error": (last_error or "")[:MAX_ERROR_CHARS]}

    def _log_skip(self, path: str, reason: str, detail: str) -> None:
        if reason in QUIET_REASONS or (path, reason) in self._logged_skips:
            return
        self._logged_skips.add((path, reason))
        logger.warning("skipped %r: %s%s", path, reason, f" ({detail})" if detail else "")

    def _waiting_for(self, pid: int | None) -> None:
        logger.info("another process (pid %s) is writing the index %s; waiting for it to finish", pid or "?", self.writer.db_path)

    def _stop_check(self, cancelled: Callable[[], bool] | None) -> Callable[[], bool]:
        """Whether to stop waiting: the process is stopping, or the caller gave up."""
        return lambda: self.stop.is_set() or (cancelled is not None and cancelled())

    def check_integrity(self, sections_too: bool = False) -> bool:
        """Run SQLite's quick_check (with ``sections_too``, the whole check: IndexWriter.quick_check);
        move a damaged index aside and start empty. True if it was ok. A check that could not run
        (another program holds SQLite's write lock, which FTS5's check needs) is no verdict: the
        index is kept, not vouched for, and checked at the next scan."""
        with self.writer.write_lock.held(self._waiting_for, self.stop.is_set):
            try:
                verdict = self.writer.quick_check(sections_too)
            except sqlite3.DatabaseError as exc:
                if database.is_busy(exc):
                    self.damage_suspected = True
                    logger.warning("%s could not be checked now (%s); the next scan tries again", self.writer.db_path, exc)
                    return False
                verdict = str(exc)
            if verdict == "ok":
                return True
            self._carry_error_count()
            self.writer.rebuild_after_corruption(f"integrity check failed: {verdict[:200]}")
        self._record_error(f"the index failed its integrity check; moved it to {self.writer.recovered_from} and rebuilt it")
        return False

    def _carry_error_count(self) -> None:
        """Before the index is replaced: remember its error count, which the new one starts from."""
        try:
            self.saved_errors = max(self.saved_errors, int(self.writer.meta().get("errors_encountered") or 0))
        except sqlite3.Error:
            pass  # unreadable: the count this process last saw stands

    def scan(self, on_progress: Callable[[ScanProgress], None] | None = None, cancelled: Callable[[], bool] | None = None) -> RefreshReply:
        """Bring the whole index up to date with the disk now. One scan runs at a time; it waits
        while another process writes the index. A scan asked for while another one runs waits for
        it, then scans again, unless a scan that started after it was asked for has finished:
        that one answers it. ``cancelled``: the caller gave up (it stops waiting, not a scan)."""
        asked_at = time.monotonic()
        stop = self._stop_check(cancelled)
        while not self.scan_lock.acquire(timeout=index_files.LOCK_POLL_SECONDS):
            if stop():
                return _stopped("the scan was cancelled before it started")
        try:
            if self._last_scan is not None and self._last_scan[0] > asked_at:
                return self._last_scan[1]
            with self.writer.write_lock.held(self._waiting_for, stop):
                started = time.monotonic()
                reply = self._scan_with_recovery(on_progress)
            self._last_scan = (started, reply)
            return reply
        except Cancelled as exc:
            return _stopped(str(exc), self.progress.files_done)
        finally:
            self.progress.state, self.progress.phase = "idle", "done"
            self.progress.finished_at = time.time()
            self.scan_lock.release()

    def _scan_with_recovery(self, on_progress: Callable[[ScanProgress], None] | None) -> RefreshReply:
        try:
            self._check_index_file()
            return self._scan(on_progress)
        except sqlite3.DatabaseError as exc:
            if not database.is_corruption(exc):
                return self._scan_failed(exc)
            self._record_error(f"the index became unreadable ({exc}); rebuilding it")
            self.writer.rebuild_after_corruption(str(exc))
            try:
                return self._scan(on_progress)
            except sqlite3.DatabaseError as again:
                return self._scan_failed(again)
        except (OSError, SourceUnavailableError) as exc:
            # The source is gone, unlisted or unmounted: nothing is removed; the next scan retries.
            return self._scan_failed(exc)

    def suspect_damage(self) -> None:
        """A reader saw the index fail: the next scan checks it, and until then it is not vouched for."""
        self.damage_suspected = True
        self.writer.distrust()

    def _check_index_file(self) -> None:
        """Reopen an index file deleted or replaced under the writer (one stat per scan), and check
        its integrity then, when a reader saw the index fail, or when another program wrote it in
        place (IndexWriter.changed_outside: the writer's page cache would not see that); such a
        file that passes is opened again, for the same reason."""
        replaced = self.writer.file_replaced()
        if replaced:
            self._carry_error_count()
            self._record_error(f"the index file {self.writer.db_path} was deleted or replaced while in use; reopening it")
            self.writer.reopen()
        outside = not replaced and self.writer.changed_outside()
        if replaced or outside or self.damage_suspected:
            self.damage_suspected = False
            sound = self.check_integrity(sections_too=not replaced)  # a reader saw damage: look everywhere
            if sound and outside:
                logger.warning("%s was written by another program; it passed its integrity check: reopening it", self.writer.db_path)
                self.writer.reopen()

    def _scan_failed(self, exc: Exception) -> RefreshReply:
        if isinstance(exc, (OSError, SourceUnavailableError)):
            problem = f"scan stopped: {reason_of(exc)}; the index is kept as it was"
            if problem != self.source_failure:
                self._record_error(problem)
            else:  # counted already; still the problem status names, and still said on stderr
                self.last_error = problem[:MAX_ERROR_CHARS]
                logger.error("%s", problem)
            self.source_failure = problem
        else:
            problem = write_problem(self.writer.db_path, database.problem_of(exc, self.writer.db_path))
            self._write_failed(exc)
        try:
            with self.writer.transaction():
                self.writer.set_meta_values({**self._error_meta(0, self.last_error), "last_error_of": "scan"})
        except sqlite3.Error:
            pass  # the index cannot be written now (disk full, read-only): the error stays unsaved
        self.progress.phase = "done"
        self._record_progress()
        return {"success": False, "files_processed": self.progress.files_done, "files_removed": 0, "errors": [problem[:MAX_ERROR_CHARS]]}

    def _scan(self, on_progress: Callable[[ScanProgress], None] | None) -> RefreshReply:
        self._refreshed_in_scan = set()
        self.progress.files_done = 0  # a scan that stops before its walk processed nothing
        try:
            self._expected = {"": self._folder_to_read()}
            with reading_from(self._expected[""]):
                return self._scan_steps(on_progress)
        finally:
            self._refreshed_in_scan = None

    def _folder_to_read(self) -> str:
        """The identity of the folder this scan reads: every file is read from it (reading_from),
        and nothing is committed once the source's path leads elsewhere (_check_source). It is the
        folder the server was started on: one put in its place while the server runs (renamed away
        and replaced by a link or another folder) is never read, however alike the two look."""
        try:
            now = identity(os.stat(self.config.source_directory))
        except OSError as exc:
            raise SourceUnavailableError(str(self.config.source_directory), f"it cannot be opened ({exc.strerror or exc})") from None
        started_on = self.config.source.identity
        if started_on is not None and now != started_on:
            raise SourceUnavailableError(
                str(self.config.source_directory), "it is not the folder this server was started on (replaced, or a link put in"
                " its place?); nothing was read from it: restart the server to index the folder there now",
            )
        return now

    def _scan_steps(self, on_progress: Callable[[ScanProgress], None] | None) -> RefreshReply:
        self.openings_seen = self.writer.openings
        self._start_progress()
        stored = self._stored_state()
        walked = self._walk(stored)
        self._announce(walked.changes, on_progress)
        changes = walked.changes
        removed = self._remove(changes.to_remove, on_progress)
        indexed = {path for path, *_ in stored.signatures} if changes.to_read or changes.to_verify else frozenset()
        outcome = self._index_files(changes.to_read + changes.to_verify, on_progress, indexed)
        skipped = changes.skipped + outcome.skipped
        problems = [(path, reason, detail) for path, reason, detail in skipped if reason in ERROR_REASONS]
        new_problems = sum(1 for path, reason, _ in problems if (path, reason) not in stored.known_problems)
        self._record_scan(walked, skipped, problems, new_problems)
        removed += outcome.vanished
        self._compact(bool(outcome.written or removed))
        changed = outcome.written or removed or outcome.skipped
        logger.log(
            logging.INFO if changed else logging.DEBUG,
            "scan done: %d files read, %d removed, %d unchanged verified, skipped %s, %.1fs",
            outcome.written, removed, outcome.verified, self.progress.skipped or "none", time.time() - (self.progress.started_at or 0),
        )
        errors = [f"{path}: {reason}{': ' + detail if detail else ''}"[:MAX_ERROR_CHARS] for path, reason, detail in problems]
        self.source_failure = None  # the source was read: its next failure counts again
        return {"success": True, "files_processed": outcome.written, "files_removed": removed, "errors": errors[:MAX_REPLY_ERRORS]}

    def _start_progress(self) -> None:
        progress = self.progress
        progress.state, progress.phase = "indexing", "walking"
        progress.files_done = progress.files_total = 0
        progress.started_at = time.time()
        self._record_progress()

    def _stored_state(self) -> _Stored:
        """What the index remembers of the files, read in one go before the walk."""
        with self.writer.lock:
            signatures = self.writer.file_signatures()
            meta = self.writer.meta()
            known_problems = {(path, reason) for path, reason, _ in self.writer.skipped_entries(ERROR_REASONS)}
            remembered = self.writer.remembered_skips()
        recorded: dict[str, str] = json.loads(meta.get("mounts") or "{}")
        return _Stored(signatures, recorded, known_problems, remembered)

    def _walk(self, stored: _Stored) -> _Walked:
        """Walk the source and compare it with what the index remembers; raises SourceUnavailableError
        if the source or a mount point in it was swapped or unmounted while it was walked."""
        recorded = stored.recorded_mounts
        changes = self.scanner.changes(stored.signatures, recorded)
        signature_of = {disk.path: _skip_signature(disk) for disk in changes.to_read}
        changes.to_read, still_skipped = _unless_skipped_as_they_are(changes.to_read, stored.remembered_skips)
        changes.skipped += still_skipped
        self._expected.update(changes.mounts)
        self._check_source()  # a source swapped or unmounted while it was walked
        unavailable = {path for path, reason, _ in changes.skipped if reason == "unavailable"}
        mounts = {**changes.mounts, **{folder: recorded[folder] for folder in unavailable}, "": self._expected[""]}
        return _Walked(changes, mounts, signature_of)

    def _announce(self, changes: Changes, on_progress: Callable[[ScanProgress], None] | None) -> None:
        """Log what the walk skipped, and start the indexing phase with the number of files to do."""
        progress = self.progress
        for path, reason, detail in changes.skipped:
            self._log_skip(path, reason, detail)
        progress.skipped = dict(Counter(reason for _, reason, _ in changes.skipped))
        progress.files_total = len(changes.to_read) + len(changes.to_verify) + len(changes.to_remove)
        progress.phase = "indexing"
        self._record_progress()
        if on_progress:
            on_progress(progress)

    def _record_scan(
        self, walked: _Walked, skipped: list[tuple[str, str, str]], problems: list[tuple[str, str, str]], new_problems: int
    ) -> None:
        """Keep what the scan found (skipped files, mount points, errors) in the index, for status in
        any process, and finish this process's progress. The count of files by extension is kept
        too when there is none (adding or removing a file drops it: IndexWriter.transaction), for
        the next server's instructions (see tools.server_instructions)."""
        signature_of = walked.skip_signatures
        with self.writer.transaction():
            if database.FORMATS_KEY not in self.writer.meta():
                self.writer.set_meta(database.FORMATS_KEY, json.dumps(self.writer.suffix_counts(), ensure_ascii=False))
            self.writer.replace_skipped(
                (path, reason, detail, signature_of.get(path) if reason in REMEMBERED_REASONS else None)
                for path, reason, detail in skipped if reason not in QUIET_REASONS
            )
            self.last_error = _describe_problems(problems)
            self.writer.set_meta_values({
                "last_scan": _now(), "mounts": json.dumps(walked.mounts),
                "skipped_counts": json.dumps(dict(Counter(reason for _, reason, _ in skipped))),
                "settings": json.dumps(self.config.index_settings), "last_error_of": "files",
                **({"watching": self._watching_record()} if self.watching is not None else {}),
                **self._error_meta(new_problems, self.last_error),
            })
        self._write_succeeded()
        self.errors_encountered += new_problems
        self.progress.skipped = dict(Counter(reason for _, reason, _ in skipped))
        self.progress.phase = "done"
        self._record_progress()

    def _compact(self, wrote: bool) -> None:
        """After a scan that wrote (or a WAL past its limit): give free pages back and fold the WAL
        into the index. Everything is committed by then: a failure here (a full disk) is logged."""
        try:
            if wrote:
                self.writer.release_free_pages()
            if wrote or self.writer.wal_bytes() > index_writer.WAL_SIZE_LIMIT:
                self.writer.truncate_wal()
        except sqlite3.Error as exc:  # all is committed: the scan did its work (the WAL may fill a full disk)
            if database.is_corruption(exc):
                raise
            logger.warning("the index %s is up to date, but its WAL could not be folded into it (%s); the next scan"
                           " that writes tries again", self.writer.db_path, exc)

    def _check_source(self) -> None:
        """Raise SourceUnavailableError if the source, or a mount point in it, is no longer the
        folder this scan walked (replaced, or a drive unmounted): a file missing now may not be
        deleted, so nothing more is written. Called before each commit."""
        changed = self._changed_folder(self._expected)
        if changed is not None:
            raise self._unavailable(changed, "it was replaced or unmounted during the scan; what was not yet written is left as it was")

    def _changed_folder(self, identities: Mapping[str, str], holding: str = "") -> str | None:
        """The first of the source's folders in ``identities`` (its path in the source, "" for the
        source itself -> identity) that holds ``holding`` and is no longer that folder, or None."""
        root = self.config.source_directory
        return next(
            (folder for folder, was in identities.items() if holding.startswith(folder) and _identity_of(root / folder) != was),
            None,
        )

    def _unavailable(self, folder: str, reason: str) -> SourceUnavailableError:
        """The error for the source, or a folder in it (named by its path in the source, never its
        absolute one), that is no longer the one indexed."""
        if not folder:
            return SourceUnavailableError(str(self.config.source_directory), reason)
        return SourceUnavailableError(folder, reason, "the mount point")

    def _record_progress(self) -> None:
        progress = self.progress
        errors = self.saved_errors + self.unsaved_errors
        if self.write_failure is not None and progress.phase not in ("walking", "indexing"):  # status elsewhere says "error"
            self.writer.write_lock.record("failed" + self._label, 0, 0, errors, self.write_failure)
        else:
            self.writer.write_lock.record(progress.phase + self._label, progress.files_done, progress.files_total, errors)

    def _remove(self, to_remove: list[str], on_progress: Callable[[ScanProgress], None] | None) -> int:
        for start in range(0, len(to_remove), BATCH_FILES):
            batch = to_remove[start:start + BATCH_FILES]
            with self.writer.transaction():
                for path in batch:
                    current = self.writer.stored_file(path)
                    if current is not None:
                        self.writer.remove_file(current.file_id)
                self._check_source()
            self.progress.files_done += len(batch)
            self._record_progress()
            if on_progress:
                on_progress(self.progress)
        return len(to_remove)

    def _index_files(
        self, files: list[DiskFile], on_progress: Callable[[ScanProgress], None] | None, indexed: Container[str]
    ) -> _Outcome:
        outcome = _Outcome(indexed, self._refreshed_in_scan if self._refreshed_in_scan is not None else set())
        loaded = load_files(self.config.source_directory, files, reading(self.config))
        try:
            for first in loaded:
                self._write_batch(first, loaded, outcome, on_progress)
                if on_progress:
                    on_progress(self.progress)
                if self.stop.is_set():
                    raise Cancelled("the scan stopped before it finished: the server is stopping")
        finally:
            loaded.close()  # stops the loader processes at once when the scan ends early
        return outcome

    def _write_batch(
        self, first: LoadedFile | FileSkipped, rest: Iterator[LoadedFile | FileSkipped], outcome: _Outcome,
        on_progress: Callable[[ScanProgress], None] | None = None,
    ) -> None:
        """Write ``first`` and then files from ``rest`` in one transaction, up to BATCH_FILES files or
        BATCH_BYTES of text (less if the process is stopping). Files are written as they arrive, so a
        batch is never all in memory; ``on_progress`` hears of them every PROGRESS_EVERY_FILES."""
        skipped: list[FileSkipped] = []
        count = size = 0
        item: LoadedFile | FileSkipped | None = first
        with self.writer.transaction():
            while item is not None:
                if isinstance(item, FileSkipped):
                    skipped.append(item)
                self._write_one(item, outcome)
                count += 1
                size += item.size if isinstance(item, LoadedFile) else 0
                if count % PROGRESS_EVERY_FILES == 0:
                    self.progress.files_done += PROGRESS_EVERY_FILES
                    self._record_progress()
                    if on_progress:  # a first index is often one batch: counted per batch, it sat at 0 until done
                        on_progress(self.progress)
                full = count >= BATCH_FILES or size >= BATCH_BYTES or self.stop.is_set()
                item = None if full else next(rest, None)
            self._check_source()
        for missing in skipped:
            self._log_skip(missing.path, missing.reason, missing.detail)
        self.progress.files_done += count % PROGRESS_EVERY_FILES
        self._record_progress()

    def _write_one(self, item: LoadedFile | FileSkipped, outcome: _Outcome) -> None:
        known = item.path in outcome.indexed or item.path in outcome.refreshed
        current = self.writer.stored_file(item.path) if known else None
        if isinstance(item, FileSkipped):
            if current is not None and item.reason not in KEEP_REASONS:
                self.writer.remove_file(current.file_id)
                outcome.vanished += item.reason == "vanished"
            if item.reason != "vanished":
                outcome.skipped.append((item.path, item.reason, item.detail))
                self.writer.set_skipped(item.path, item.reason, item.detail)
        elif current is not None and current.content_hash == item.content_hash and current.size == item.size:
            self.writer.mark_verified(current.file_id, item.read_at_ns, item.mtime_ns, item.inode, item.ctime_ns)
            outcome.verified += 1
        else:
            self.writer.upsert_file(item, current.file_id if current else None)
            self.writer.clear_skipped(item.path)
            outcome.written += 1

    def refresh_file(self, user_path: str, cancelled: Callable[[], bool] | None = None) -> RefreshReply:
        """Index one file now (or remove it if it is gone). Raises UnsafePathError for unsafe paths.
        The file is read holding the write lock: what is written is what the disk holds then."""
        rel = resolve_user_path(self.config.source_directory, user_path, self.config.index_output_directory)
        return self.refresh_files([rel], cancelled)

    def refresh_files(self, rels: Sequence[str], cancelled: Callable[[], bool] | None = None) -> RefreshReply:
        """Index these files (source keys) now, or remove the ones that are gone, in one transaction."""
        with self.writer.write_lock.held(self._waiting_for, self._stop_check(cancelled)):
            if self._refreshed_in_scan is not None:  # between a scan's steps: it must look these up
                self._refreshed_in_scan.update(rels)
            for rel in rels:
                self._check_recorded_folders(rel)
            folders = self._indexed_folders()
            with reading_from(folders.get(""), folders):
                loaded = [self._read_now(rel) for rel in rels]
            try:
                with self.writer.transaction():
                    replies = [self._write_refreshed(rel, item) for rel, item in zip(rels, loaded)]
                    if self.writer.meta().get("last_error_of") != "scan":  # a failed scan's error stands till a scan passes
                        self.last_error = _describe_problems(self.writer.skipped_entries(ERROR_REASONS))
                        self.writer.set_meta("last_error", (self.last_error or "")[:MAX_ERROR_CHARS])
            except sqlite3.Error as exc:
                self._write_failed(exc)
                raise
            self._write_succeeded()
        return {
            "success": all(reply["success"] for reply in replies),
            "files_processed": sum(reply["files_processed"] for reply in replies),
            "files_removed": sum(reply["files_removed"] for reply in replies),
            "errors": [error for reply in replies for error in reply["errors"]],
        }

    def refresh_if_free(self, rels: Sequence[str], seconds: float) -> bool:
        """refresh_files, if no scan of this process runs and no other process writes the index
        for ``seconds``; True if it was done (files that could not be read are skipped as a scan
        would skip them), False if it would have had to wait longer or failed."""
        if not self.scan_lock.acquire(timeout=seconds):
            return False
        deadline = time.monotonic() + seconds
        try:
            self.refresh_files(rels, lambda: time.monotonic() > deadline)
        except (Cancelled, DocSearchError, OSError, sqlite3.Error) as exc:
            logger.info("files found changed by a search were not indexed again: %s", exc)
            return False
        finally:
            self.scan_lock.release()
        return True

    def refresh_changed(self, rels: Sequence[str]) -> None:
        """Index again the files the watcher saw change (see refresh_files), those whose names the
        walk would take; waits for a scan running in this process, then goes ahead."""
        accepts = self.scanner.filter.accepts_name
        wanted = [rel for rel in rels if accepts(rel.rsplit("/", 1)[-1]) and not has_surrogates(rel)]
        if not wanted:
            return
        with self.scan_lock:
            reply = self.refresh_files(wanted, self.stop.is_set)
        logger.debug("changed files indexed again: %s", reply)

    def record_watching(self, state: WatchState) -> None:
        """Keep what the watcher reports in the index's meta now, for status in other processes
        (watching stopped between scans; a scan records it anyway)."""
        self.watching = state
        try:
            with self.writer.transaction():
                self.writer.set_meta("watching", self._watching_record())
        except (sqlite3.Error, Cancelled) as exc:
            logger.debug("watching state not recorded: %s", exc)

    def _watching_record(self) -> str:
        state = self.watching or WatchState()
        return json.dumps({"pid": os.getpid(), "active": state.active, "folders": state.folders, "problem": state.problem})

    def _read_now(self, rel: str) -> LoadedFile | FileSkipped | None:
        """A file read for refresh_files; None if it no longer exists."""
        try:
            disk = check_single_file(self.config.source_directory, rel, self.scanner.filter)
            return load_file(self.config.source_directory, rel, reading(self.config)) if disk else None
        except FileSkipped as skipped:
            return skipped

    def _indexed_folders(self) -> dict[str, str]:
        """The identities of the folders the index was made from ("" for the source, "a/b/" for a
        mount point in it): as its last scan recorded them, the source's else as it was when the
        server started."""
        recorded: dict[str, str] = json.loads(self.writer.meta().get("mounts") or "{}")
        if "" not in recorded and self.config.source.identity is not None:
            recorded[""] = self.config.source.identity
        return recorded

    def _check_recorded_folders(self, rel: str) -> None:
        """Refuse a one-file refresh under the source, or a mount point in it, that is no longer the
        folder the last scan recorded: the file may be missing only because a drive is unmounted."""
        changed = self._changed_folder(json.loads(self.writer.meta().get("mounts") or "{}"), rel)
        if changed is not None:
            raise self._unavailable(changed, "it is not the folder the index was made from (replaced or unmounted?); nothing was"
                                    " changed: refresh everything to check it")

    def _write_refreshed(self, rel: str, loaded: LoadedFile | FileSkipped | None) -> RefreshReply:
        current = self.writer.stored_file(rel)
        if isinstance(loaded, LoadedFile):
            if current is not None and current.content_hash == loaded.content_hash and current.size == loaded.size:
                self.writer.mark_verified(current.file_id, loaded.read_at_ns, loaded.mtime_ns, loaded.inode, loaded.ctime_ns)
            else:
                self.writer.upsert_file(loaded, current.file_id if current else None)
            self.writer.clear_skipped(rel)
            return {"success": True, "files_processed": 1, "files_removed": 0, "errors": []}
        if loaded is None:
            self.writer.clear_skipped(rel)
            if current is None:
                return {"success": False, "files_processed": 0, "files_removed": 0,
                        "errors": [f"{rel}: no such file in the source directory, and not in the index"]}
            self.writer.remove_file(current.file_id)
            return {"success": True, "files_processed": 0, "files_removed": 1, "errors": []}
        removed = current is not None and loaded.reason not in KEEP_REASONS
        if removed:
            self.writer.remove_file(current.file_id)  # type: ignore[union-attr]
        if loaded.reason != "vanished" and loaded.reason not in QUIET_REASONS:
            self.writer.set_skipped(rel, loaded.reason, loaded.detail)
        return {"success": False, "files_processed": 0, "files_removed": int(removed), "errors": [str(loaded)]}


def _skip_signature(disk: DiskFile) -> str | None:
    """What a skip of this file stands for: its signature, unless it changed so recently that it
    may change again within the file system's timestamp granularity (see RACY_WINDOW_NS)."""
    if time.time_ns() - max(disk.mtime_ns, disk.ctime_ns) < RACY_WINDOW_NS:
        return None
    return f"{disk.mtime_ns}:{disk.size}:{disk.inode}:{disk.ctime_ns}"


def _unless_skipped_as_they_are(
    files: list[DiskFile], remembered: Mapping[str, tuple[str, str, str]]
) -> tuple[list[DiskFile], list[tuple[str, str, str]]]:
    """(the files to read, the skips that stand): a file skipped for its content and unchanged since
    is not read again."""
    to_read: list[DiskFile] = []
    standing: list[tuple[str, str, str]] = []
    for disk in files:
        signature, reason, detail = remembered.get(disk.path, (None, "", ""))
        if signature is not None and signature == _skip_signature(disk):
            standing.append((disk.path, reason, detail))
        else:
            to_read.append(disk)
    return to_read, standing


class _Stored(NamedTuple):
    """What the index remembers at the start of a scan."""

    signatures: Mapping[Signature, int]
    #: The identities of the source ("") and its mount points, as the last scan found them.
    recorded_mounts: dict[str, str]
    #: (path, reason) of the files the index holds as unreadable or unavailable.
    known_problems: set[tuple[str, str]]
    remembered_skips: dict[str, tuple[str, str, str]]


class _Walked(NamedTuple):
    """What a scan's walk found: the changes, the mount points to record, and the skip signature
    (see _skip_signature) of each file to read."""

    changes: Changes
    mounts: dict[str, str]
    skip_signatures: dict[str, str | None]


@dataclass
class _Outcome:
    #: The paths the index held when the scan began (it holds the write lock, which a refresh in
    #: this process may still take between its steps: those paths are in ``refreshed``). A file in
    #: neither is new, and is written without looking for its row first.
    indexed: Container[str] = field(default_factory=frozenset)
    refreshed: Container[str] = field(default_factory=frozenset)
    written: int = 0
    verified: int = 0
    #: Indexed files found deleted when they were to be read again: removed.
    vanished: int = 0
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def _stopped(why: str, files_done: int = 0) -> RefreshReply:
    return {"success": False, "files_processed": files_done, "files_removed": 0, "errors": [why]}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _identity_of(folder: Path) -> str | None:
    """file_utils.identity of a folder, or None if there is none there now."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return identity(st) if stat.S_ISDIR(st.st_mode) else None


def write_problem(db_path: Path, detail: str) -> str:
    """What status says while the index cannot be written; ``detail``: SQLite's message."""
    return f"cannot write the index {db_path}: {detail}; what changed is indexed once it can be written again"


def _describe_problems(problems: Sequence[tuple[str, str, str]]) -> str | None:
    """One line for status's last_error about what a scan could not read, or None."""
    if not problems:
        return None
    path, reason, detail = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{path}: {reason}{': ' + detail if detail else ''}{more}; what the index held for it is kept"

