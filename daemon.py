"""The background loop: owns the index's writer, scans, applies the watcher's changes, and never dies."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import database
from exceptions import Cancelled, DocSearchError, reason_of
from index_writer import IndexWriter, SourceWriter
from indexer import TextIndexer, watched_folder
from models import ServerConfig, Source, WatchState
from watcher import MAX_BATCH_FILES, Batch, Pacing, SourceWatcher, WatchUnavailable

logger = logging.getLogger("docsearch")

#: While the index directory cannot be written, retry opening it this often (seconds).
WRITER_RETRY_SECONDS = 30.0
#: On exit, how long the rescan loop may take to finish the file it is writing (seconds).
STOP_WAIT_SECONDS = 5.0
#: What a failed write left (a full disk) is tried again after RETRY_FIRST_SECONDS, the wait
#: doubling while it keeps failing, up to RETRY_MAX_SECONDS; so is the loop after a failure.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
#: A search or get_document that finds files changed since they were indexed indexes them again
#: first when the index's writer is free within this time and they are at most this many; else
#: they are returned marked stale (and the next rescan catches up).
FRESHNESS_WAIT_SECONDS = 0.25
#: With several sources, how often a waiting loop looks whether another one opened the index anew (seconds).
REOPEN_CHECK_SECONDS = 1.0
MAX_FRESHNESS_FILES = 20




class Backoff:
    """A wait that doubles with each failure in a row, from RETRY_FIRST_SECONDS to RETRY_MAX_SECONDS."""

    def __init__(self) -> None:
        self.failures = 0

    def delay(self) -> float:
        """The wait after one more failure."""
        self.failures += 1
        return min(RETRY_FIRST_SECONDS * 2 ** min(self.failures - 1, 30), RETRY_MAX_SECONDS)

    def reset(self) -> None:
        self.failures = 0


class Daemon:
    """Owns the writer and the background rescan loop; the MCP tools call into it.

    Nothing here touches the index before the loop thread runs: opening it may wait for another
    process that is writing it, and the MCP handshake must not wait for that.
    """

    def __init__(self, config: ServerConfig, shared: SharedWriter | None = None) -> None:
        self.config = config
        self.shared = shared or SharedWriter(config.db_path)
        self.indexer: TextIndexer | None = None
        self.startup_error: str | None = None
        self.first_scan_done = threading.Event()
        self.stopping = threading.Event()
        self.watcher: SourceWatcher | None = None
        self.watch_state = WatchState(False, 0, "the index is not open yet")
        self._thread = threading.Thread(target=self._loop, name="rescan", daemon=True)
        self._pacing = Pacing()
        #: Files the watcher reported that a failed write left unindexed, a rescan a failed write
        #: left to do, and when to try again (see RETRY_FIRST_SECONDS).
        self._pending: set[str] = set()
        self._rescan_wanted = False
        self._retry_at: float | None = None
        self._write_backoff = Backoff()
        self._loop_backoff = Backoff()

    def _open_writer(self) -> None:
        def waiting(pid: int | None) -> None:
            logger.info("another process (pid %s) is writing %s; serving searches from it meanwhile", pid or "?", self.config.db_path)

        try:
            writer = self.shared.open(waiting, self.stopping.is_set)
        except Cancelled:
            return
        except Exception as exc:  # noqa: BLE001 - the server must keep answering whatever happened
            self.startup_error = f"cannot open or create the index {self.config.db_path}: {database.problem_of(exc, self.config.db_path)}"
            logger.error("%s; retrying every %.0fs", self.startup_error, WRITER_RETRY_SECONDS)
            return
        prefix = self.config.key_prefix(self.config.source.name)
        self.indexer = TextIndexer(self.config, SourceWriter(writer, prefix) if prefix else writer, self.stopping, self.shared.scan_lock)
        self.startup_error = None

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        """The rescan thread. Whatever escapes a turn is logged with its traceback and shown in
        status, the watcher is dropped, and after a pause (longer while failures repeat) the loop
        goes on with a rescan and a new watcher: it ends only when the server stops."""
        while not self.stopping.is_set():
            try:
                self._turn()
                self._loop_backoff.reset()
            except Cancelled:
                break
            except Exception as exc:  # noqa: BLE001 - the one place nothing may get past
                self._turn_failed(exc)
        if self.watcher is not None:
            self.watcher.close()

    def _turn(self) -> None:
        """Open the index if it is not open, scan, then index what the watcher reports until the
        next rescan is due."""
        if self.indexer is None:
            self._open_writer()
        indexer = self.indexer
        if indexer is None:
            self._wait_for_changes(min(self.config.scan_interval_seconds or WRITER_RETRY_SECONDS, WRITER_RETRY_SECONDS))
            return
        try:
            if self.shared.first_check():  # the index's integrity, once per run, whichever source's loop opens it
                indexer.check_integrity()
            if self.watcher is None:
                self._start_watching()  # before the scan: edits made during it are caught too
                indexer.watching = self.watch_state  # the scan records it
            self._scan(indexer)
        finally:
            self.first_scan_done.set()  # searches stop saying "indexing" even if the first scan failed
        self._wait_for_changes(self.config.scan_interval_seconds or None)

    def _turn_failed(self, exc: Exception) -> None:
        """Report what escaped a turn, counted once, and drop the watcher (status says so). Nothing
        escapes from here, not even a MemoryError: the failed turn's locals (a huge tree, say) are
        let go before anything is formatted, and a report that fails is made again plainly."""
        traceback.clear_frames(exc.__traceback__)  # the traceback keeps its lines, not its locals
        indexer = self.indexer
        counted = indexer.errors_encountered if indexer is not None else 0
        try:
            self._report_failure(f"{type(exc).__name__}: {reason_of(exc)}", exc)
        except Exception:  # noqa: BLE001 - out of memory while formatting it, say
            try:
                if indexer is not None and indexer.errors_encountered == counted:
                    self._report_failure(type(exc).__name__, exc.with_traceback(None))
                else:
                    logger.error("the background indexing failed (%s); it goes on with a rescan and a new watcher", type(exc).__name__)
            except Exception:  # noqa: BLE001 - nothing more can be said; the loop must go on
                pass
        try:
            self._drop_watcher()
        except Exception:  # noqa: BLE001 - dropped all the same (see _drop_watcher); the loop must go on
            pass
        self.stopping.wait(self._loop_backoff.delay())

    def _report_failure(self, what: str, exc: Exception) -> None:
        message = f"the background indexing failed ({what}); it goes on with a rescan and a new watcher"
        if self.indexer is not None:
            self.indexer.record_problem(message, exc)
        else:
            logger.error("%s", message, exc_info=exc)

    def _drop_watcher(self) -> None:
        """Close the watcher after a failure; status (here, and in other processes through the
        index) says watching stopped until the next rescan starts a new one."""
        if self.watcher is None:
            return
        watcher, self.watcher = self.watcher, None
        self.watch_state = WatchState(False, 0, "stopped by a failure (see last_error); watching again after the next rescan")
        try:
            watcher.close()
        finally:
            if self.indexer is not None:
                self.indexer.record_watching(self.watch_state)

    def _scan(self, indexer: TextIndexer, why: str | None = None) -> None:
        """A full scan; it also covers the files a failed write left pending. If it could not
        write the index, it is tried again later (see _retry_later)."""
        if why:
            logger.info("rescanning: %s", why)
        reply = indexer.scan()
        self._rescan_wanted = False
        if indexer.write_failure is not None:
            self._retry_later(rescan=True)
            return
        if reply["success"] or not self._pending:
            self._caught_up()
        if not self.first_scan_done.is_set():
            logger.info("first scan finished: %d files read, %d removed; serving %s",
                        reply["files_processed"], reply["files_removed"], self.config.source_directory)

    def _start_watching(self) -> None:
        try:
            self.watcher = SourceWatcher(self.config.source_directory, watched_folder(self.config))
            self.watcher.start()
        except (WatchUnavailable, OSError) as exc:
            if str(exc) != self.watch_state.problem:
                logger.warning("not watching %s for changes: %s", self.config.source_directory, exc)
            self.watch_state = WatchState(False, 0, str(exc))
            self.watcher = None  # tried again after the next rescan
        else:
            self.watch_state = self.watcher.state
            logger.info("watching %d folders for changes", self.watcher.state.folders)

    def _wait_for_changes(self, seconds: float | None) -> None:
        """Until the next periodic rescan (``seconds``; None: none), index what the watcher reports
        as it comes (a hot file when its wait ends, see watcher.Pacing), and retry what a failed
        write left when its time comes; return early for a rescan that is to be retried. Without
        a watcher, just wait (the rescan that follows catches up)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self.stopping.is_set():
            now = time.monotonic()
            retry_due = self._retry_at is not None and self._retry_at <= now
            if (deadline is not None and deadline <= now) or (self._rescan_wanted and retry_due) or self._opened_anew():
                return
            timers = [at for at in (deadline, self._retry_at) if at is not None]
            if self.config.several:  # another source's loop may open the index anew: look again soon
                timers.append(now + REOPEN_CHECK_SECONDS)
            watcher, indexer = self.watcher, self.indexer
            if watcher is None or indexer is None or not watcher.state.active:
                self.stopping.wait(max(0.0, min(timers) - now) if timers else None)
                if self.config.several:
                    continue
                return
            hot = self._pacing.next_due()
            wake = timers + ([hot] if hot is not None else [])
            batch = watcher.next_batch(max(0.0, min(wake) - now) if wake else None)
            if self.stopping.is_set():
                return
            if batch is not None and batch.rescan:
                self._scan(indexer, batch.rescan)
                if self.watcher is not None:
                    self.watcher.rewatch()  # folders a changed rule lets in now
            else:
                self._index_changed(indexer, batch or Batch())
            if not watcher.state.active:  # a watch limit reached: the periodic rescan takes over
                self.watch_state, self.watcher = watcher.state, None
                indexer.record_watching(self.watch_state)

    def _opened_anew(self) -> bool:
        """Whether the index file was opened anew (deleted, replaced or rebuilt: by another
        source's loop) since this source's last scan, which must then run again."""
        indexer = self.indexer
        return indexer is not None and indexer.openings_seen != indexer.writer.openings

    def _index_changed(self, indexer: TextIndexer, batch: Batch) -> None:
        """Index the files that changed, unless they are hot (they wait, see watcher.Pacing), with
        the hot files whose wait ended and, when it is time, the ones a failed write left."""
        now = time.monotonic()
        todo = self._pacing.changed(batch.paths - batch.gone, now) | batch.gone
        retry_due = self._retry_at is not None and self._retry_at <= now
        if todo or retry_due:
            todo |= self._pending
        if not todo:
            if retry_due:
                self._caught_up()  # nothing was left to retry
            return
        try:
            indexer.refresh_changed(sorted(todo))
        except Cancelled:
            return
        except Exception as exc:  # noqa: BLE001 - nothing the watcher reported may be lost
            self._pending |= todo
            if indexer.write_failure is not None:  # the index cannot be written (a full disk): status says so
                self._retry_later()
            else:  # the source or a file in a state nobody foresaw: a rescan sorts it out
                indexer.record_problem(f"indexing {len(todo)} changed files failed ({type(exc).__name__}: {reason_of(exc)}); rescanning", exc)
                self._retry_later(rescan=True)
        else:
            self._caught_up()

    def _retry_later(self, rescan: bool = False) -> None:
        """Try again what a failed write left (the pending files; a rescan if asked, or if they
        are too many to refresh one by one), later and later while it keeps failing."""
        self._rescan_wanted = self._rescan_wanted or rescan or len(self._pending) > MAX_BATCH_FILES
        if self._rescan_wanted:
            self._pending.clear()  # the rescan reads them all
        delay = self._write_backoff.delay()
        self._retry_at = time.monotonic() + delay
        logger.info("trying again in %.0fs to %s", delay, "rescan" if self._rescan_wanted else f"index {len(self._pending)} changed files")

    def _caught_up(self) -> None:
        """What failed before is written now (or there was nothing left): no retry is due, unless
        a rescan still is."""
        self._pending.clear()
        if not self._rescan_wanted:
            self._retry_at = None
            self._write_backoff.reset()

    def refresh_found(self, paths: list[str]) -> bool:
        """Index again files a search or get_document found changed, if that can be done now (see
        FRESHNESS_WAIT_SECONDS); True if it was."""
        indexer = self.indexer
        if indexer is None or len(paths) > MAX_FRESHNESS_FILES:
            return False
        return indexer.refresh_if_free(paths, FRESHNESS_WAIT_SECONDS)

    def wait_for_indexer(self, cancelled: threading.Event) -> TextIndexer:
        """The indexer, once the loop has opened the index (it may be waiting for another process
        that is writing it); raises if it cannot be opened or the caller gives up."""
        while self.indexer is None:
            if self.startup_error:
                raise DocSearchError(self.startup_error)
            if cancelled.wait(0.05) or self.stopping.is_set():
                raise Cancelled("cancelled while waiting for the index to open")
        return self.indexer

    def stop(self) -> None:
        """Ask the rescan loop to stop (a scan ends after the file it is writing)."""
        self.stopping.set()
        if self.watcher is not None:
            self.watcher.wake()

    def join(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the rescan loop to end; whether it has."""
        if self._thread.is_alive():
            self._thread.join(seconds)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop the rescan loop and close the index, truncating its WAL."""
        self.stop()
        if self.join(STOP_WAIT_SECONDS):
            self.shared.close()


class SharedWriter:
    """The index's one writer, opened by whichever source's loop needs it first, and shared by all."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._lock = threading.Lock()
        self._writer: IndexWriter | None = None
        #: The sources' scans run one at a time (each starts its own loader processes).
        self.scan_lock = threading.Lock()
        self._checked = False

    def first_check(self) -> bool:
        """True the first time only: the one loop that checks the index's integrity this run. Not
        even then when the index is as a writer left it when it last closed it cleanly: nothing
        since could have damaged it but the disk, and the check reads all of it (at a million files
        12 s warm, about 3 minutes cold). Damage a search meets is still checked
        (Daemons.suspect_damage)."""
        with self._lock:
            first, self._checked = not self._checked, True
            if first and self._writer is not None and self._writer.closed_cleanly:
                logger.info("%s is as it was last closed cleanly: no integrity check at start", self.db_path)
                return False
            return first

    def open(self, on_wait: Callable[[int | None], None], stop: Callable[[], bool]) -> IndexWriter:
        with self._lock:
            if self._writer is None:
                self._writer = IndexWriter(self.db_path, on_wait=on_wait, stop=stop)
            return self._writer

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


class Daemons:
    """The server's background work: a Daemon per source, sharing one index and its writer."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        shared = SharedWriter(config.db_path)
        self.loops = {source.name: Daemon(config.for_source(source), shared) for source in config.sources}
        self._shared = shared

    def start(self) -> None:
        for loop in self.loops.values():
            loop.start()

    def close(self) -> None:
        """Stop every source's loop, then close the index once none runs."""
        for loop in self.loops.values():
            loop.stop()
        if all(loop.join(STOP_WAIT_SECONDS) for loop in self.loops.values()):
            self._shared.close()

    def first_scans_done(self) -> bool:
        return all(loop.first_scan_done.is_set() for loop in self.loops.values())

    def loop_of(self, source: Source) -> Daemon:
        return self.loops[source.name]

    def refresh_found(self, keys: list[str]) -> bool:
        """Daemon.refresh_found for index keys of any source: True if every source did."""
        by_source: dict[str, list[str]] = {}
        for key in keys:
            name, path = self.config.split_key(key)
            by_source.setdefault(name, []).append(path)
        return all(self.loops[name].refresh_found(paths) for name, paths in by_source.items() if name in self.loops)

    def write_problem(self) -> str | None:
        """Why the index cannot take what changed now (a full disk, a read-only index), if so: a
        search's results then miss those changes, and its reply says so."""
        for loop in self.loops.values():
            failure = loop.indexer.write_failure if loop.indexer is not None else None
            if failure is not None:
                return f"the index cannot be written now ({failure}): files changed since are searched as they were"
        return None

    def suspect_damage(self) -> None:
        """A reader saw the index fail: the next scan checks it."""
        for loop in self.loops.values():
            if loop.indexer is not None:
                loop.indexer.suspect_damage()
