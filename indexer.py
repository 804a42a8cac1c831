"""What changed on disk, and bringing the index up to date in bounded, crash-safe batches.

FileScanner compares the walk with what the index remembers. TextIndexer reads, decodes, splits
and compresses files on a worker thread ahead of the writer (they overlap only where each side
releases the GIL: file reads, zlib, SQLite's inserts) and writes each batch of files in one
transaction: a kill at any instant leaves every file either fully old or fully new.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import database
from database import IndexWriter
from exceptions import FileSkipped, IndexUnavailableError
from file_utils import FileFilter, check_single_file, decode_text, read_regular_file, resolve_user_path, walk_source
from models import DiskFile, LoadedFile, RefreshReply, ScanProgress, Section, ServerConfig, Signature, StatusReply

logger = logging.getLogger(__name__)

#: A file whose mtime is this close to the moment it was read may have been modified again within
#: the file system's timestamp granularity; its content hash is re-checked on the next scan.
RACY_WINDOW_NS = 2_000_000_000
BATCH_FILES = 500
BATCH_BYTES = 32 << 20
READ_AHEAD = BATCH_FILES  # a whole batch, so reading continues while the writer commits one
READ_AHEAD_BYTES = BATCH_BYTES
#: Sections aim for TARGET_SECTION_CHARS, cut at a blank line, and never exceed MAX_SECTION_CHARS;
#: a heading starts a new one once the current one has MIN_SECTION_CHARS.
TARGET_SECTION_CHARS = 8000
MIN_SECTION_CHARS = TARGET_SECTION_CHARS // 2
MAX_SECTION_CHARS = 16000
MAX_TITLE_CHARS = 200
MARKDOWN_EXTENSIONS = (".md", ".markdown", ".mdx")
RST_EXTENSIONS = (".rst", ".rest")
#: Reasons that are too common to log one line per file (a summary line counts them).
QUIET_REASONS = frozenset({"excluded_extension", "excluded_directory"})
#: Reasons that mean something went wrong while reading, counted as errors in status.
ERROR_REASONS = frozenset({"unreadable"})

_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_MARKDOWN_CANDIDATE = re.compile(r"\n {0,3}(?:#|```|~~~)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RST_UNDERLINE = re.compile(r"^([=\-`:'\"~^_*+#<>.])\1{2,}\s*$")


# ---- sections --------------------------------------------------------------------------------


def split_sections(text: str, name: str) -> tuple[str, list[Section]]:
    """Return (title, sections): at headings for Markdown and reST, else at blank lines; bounded."""
    lines = text.split("\n")
    lowered = name.lower()
    if lowered.endswith(MARKDOWN_EXTENSIONS):
        headings, title = _markdown_headings(text, lines)
    elif lowered.endswith(RST_EXTENSIONS):
        headings, title = _rst_headings(lines)
    else:
        headings, title = [], ""
    if not title:
        title = next((line.strip().lstrip("#").strip() for line in lines if line.strip()), "")
        if len(title) > 120 and not headings:
            title = ""  # a long first line is prose, not a title
    sections: list[Section] = []
    max_chars = max(MAX_SECTION_CHARS, len(text) // (database.MAX_SECTIONS_PER_FILE // 2))
    path: list[tuple[int, str]] = []
    # A heading starts a new section once the current one holds MIN_SECTION_CHARS, or when its own
    # block would push the current one past the target. Reference pages with a heading every few
    # lines (one per parameter) would otherwise make an FTS row per few lines, and every row costs
    # index time, index size and query time.
    ends = [line for line, _, _ in headings[1:]] + [len(lines)]
    start, start_heading = 0, ""
    for (line_no, level, heading), block_end in zip(headings, ends):
        path = [entry for entry in path if entry[0] < level] + [(level, heading)]
        heading_path = " > ".join(h for _, h in path)[:MAX_TITLE_CHARS]
        current = _chars(lines, start, line_no)
        if current >= MIN_SECTION_CHARS or (current and current + _chars(lines, line_no, block_end) > TARGET_SECTION_CHARS):
            sections.extend(_bounded_sections(lines, start, line_no, start_heading, max_chars))
            start, start_heading = line_no, heading_path
        elif not start_heading:
            start_heading = heading_path  # a short preamble goes with the first heading
    sections.extend(_bounded_sections(lines, start, len(lines), start_heading, max_chars))
    return title[:MAX_TITLE_CHARS], sections


def _markdown_headings(text: str, lines: list[str]) -> tuple[list[tuple[int, int, str]], str]:
    headings: list[tuple[int, int, str]] = []
    title = ""
    fence = ""
    start = 0
    if lines and lines[0].strip() == "---":  # YAML front matter
        for i in range(1, min(len(lines), 200)):
            if lines[i].strip() in ("---", "..."):
                start = i + 1
                break
            key, _, value = lines[i].partition(":")
            if key.strip().lower() == "title" and value.strip():
                title = value.strip().strip("'\"")
    # Only lines starting with '#', ``` or ~~~ can matter. The pattern starts with a newline (one is
    # put before the text for line 1), so the regex engine jumps between newlines instead of trying
    # every character.
    shifted = "\n" + text
    i = last = 0
    for candidate in _MARKDOWN_CANDIDATE.finditer(shifted):
        i += shifted.count("\n", last, candidate.start())  # newlines before this line: its index
        last = candidate.start()
        if i < start:
            continue
        line = lines[i]
        fence_match = _FENCE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if not fence:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = ""
            continue
        if fence:
            continue
        match = _ATX_HEADING.match(line)
        if match:
            level, heading = len(match.group(1)), match.group(2).strip()
            headings.append((i, level, heading))
            if not title and level == 1:
                title = heading
    if not title and headings:
        title = headings[0][2]
    return headings, title


def _rst_headings(lines: list[str]) -> tuple[list[tuple[int, int, str]], str]:
    headings: list[tuple[int, int, str]] = []
    styles: list[tuple[str, bool]] = []
    i = 0
    while i + 1 < len(lines):
        text, under = lines[i].rstrip(), lines[i + 1].rstrip()
        match = _RST_UNDERLINE.match(under)
        if text.strip() and not _RST_UNDERLINE.match(text) and match and len(under) >= len(text.strip()):
            overlined = i > 0 and lines[i - 1].rstrip() == under
            style = (match.group(1), overlined)
            if style not in styles:
                styles.append(style)
            start = i - 1 if overlined else i
            headings.append((start, styles.index(style) + 1, text.strip()))
            i += 2
            continue
        i += 1
    title = headings[0][2] if headings else ""
    return headings, title


def _bounded_sections(lines: list[str], start: int, end: int, heading: str, max_chars: int) -> Iterator[Section]:
    """Cut lines[start:end] into sections near TARGET_SECTION_CHARS, at blank lines where possible."""
    if _chars(lines, start, end) <= TARGET_SECTION_CHARS:
        yield from _section_if_text(lines, start, end, heading)  # the common case: nothing to cut
        return
    chunk_start = start
    size = 0
    for i in range(start, end):
        line = lines[i]
        if len(line) > max_chars:
            yield from _section_if_text(lines, chunk_start, i, heading)
            for offset in range(0, len(line), max_chars):
                yield Section(i + 1, i + 1, heading, line[offset:offset + max_chars])
            chunk_start, size = i + 1, 0
            continue
        if size and (size + len(line) > max_chars or (size >= TARGET_SECTION_CHARS and not line.strip())):
            yield from _section_if_text(lines, chunk_start, i, heading)
            chunk_start, size = i, 0
        size += len(line) + 1
    yield from _section_if_text(lines, chunk_start, end, heading)


def _chars(lines: list[str], start: int, end: int) -> int:
    """Characters in lines[start:end], newlines included."""
    return sum(map(len, lines[start:end])) + end - start


def _section_if_text(lines: list[str], start: int, end: int, heading: str) -> Iterator[Section]:
    body = "\n".join(lines[start:end])
    if body.strip():
        yield Section(start + 1, end, heading, body)


# ---- reading ---------------------------------------------------------------------------------


def load_file(root: Path, rel: str, max_bytes: int) -> LoadedFile:
    """Read, decode and split one file; raise FileSkipped when it cannot or must not be indexed."""
    raw = read_regular_file(root, rel, max_bytes)
    text, encoding, fallback = decode_text(rel, raw.data)
    title, sections = split_sections(text, rel)
    return LoadedFile(
        path=rel, mtime_ns=raw.mtime_ns, size=raw.size, inode=raw.inode, content_hash=raw.content_hash,
        read_at_ns=raw.read_at_ns, encoding=encoding, fallback_decoded=fallback, title=title, sections=sections,
        compressed_bodies=[database.compress(section.body) for section in sections],
    )


# ---- change detection ------------------------------------------------------------------------


@dataclass
class Changes:
    """What a scan must do: files to (re)read, files to re-verify by hash, paths to remove."""

    to_read: list[DiskFile] = field(default_factory=list)
    to_verify: list[DiskFile] = field(default_factory=list)
    to_remove: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


class FileScanner:
    """Walks the source and compares it with the stored mtime (ns), size and inode of each file."""

    def __init__(self, config: ServerConfig) -> None:
        self.root = config.source_directory
        self.filter = FileFilter(
            included_extensions=config.included_extensions,
            excluded_extensions=config.excluded_extensions,
            max_size_bytes=config.max_file_size_bytes,
            index_directory=config.index_output_directory,
        )

    def changes(self, signatures: Mapping[Signature, int]) -> Changes:
        """Compare the walk with IndexWriter.file_signatures(): a file is unchanged when its path,
        mtime, size and inode all equal a stored signature."""
        result = Changes()
        unmatched = dict(signatures)

        def on_skip(path: str, reason: str, detail: str) -> None:
            result.skipped.append((path, reason, detail))

        for signature in walk_source(self.root, self.filter, on_skip):
            indexed_at_ns = unmatched.pop(signature, None)
            if indexed_at_ns is None:
                result.to_read.append(DiskFile._make(signature))
            elif indexed_at_ns - signature[1] < RACY_WINDOW_NS:  # signature[1]: its mtime_ns
                result.to_verify.append(DiskFile._make(signature))
        # Left unmatched: files changed since (read again above) or no longer found by the walk.
        to_read = {disk.path for disk in result.to_read}
        result.to_remove = [path for path, _, _, _ in unmatched if path not in to_read]
        return result


# ---- writing ---------------------------------------------------------------------------------


class TextIndexer:
    """Owns the writer and the scan state; every index change goes through here."""

    def __init__(self, config: ServerConfig, writer: IndexWriter) -> None:
        self.config = config
        self.writer = writer
        self.scanner = FileScanner(config)
        self.progress = ScanProgress()
        self.scan_lock = threading.Lock()
        self.errors_encountered = 0
        self.last_error: str | None = None
        self._logged_skips: set[tuple[str, str]] = set()
        #: Set when a reader saw the index fail; the next scan checks the file and rebuilds it if damaged.
        self.damage_suspected = False
        if writer.recovered_from:
            self._record_error(f"the index was damaged; moved it to {writer.recovered_from} and rebuilt it")

    def _record_error(self, message: str) -> None:
        self.errors_encountered += 1
        self.last_error = message
        logger.error("%s", message)

    def _log_skip(self, path: str, reason: str, detail: str) -> None:
        if reason in QUIET_REASONS or (path, reason) in self._logged_skips:
            return
        self._logged_skips.add((path, reason))
        logger.warning("skipped %s: %s%s", path, reason, f" ({detail})" if detail else "")

    def check_integrity(self) -> bool:
        """Run SQLite's quick_check; move a damaged index aside and start empty. True if it was ok."""
        try:
            verdict = self.writer.quick_check()
        except sqlite3.DatabaseError as exc:
            verdict = str(exc)
        if verdict == "ok":
            return True
        self.writer.rebuild_after_corruption(f"integrity check failed: {verdict[:200]}")
        self._record_error(f"the index failed its integrity check; moved it to {self.writer.recovered_from} and rebuilt it")
        return False

    def scan(self, on_progress: Callable[[ScanProgress], None] | None = None) -> RefreshReply:
        """Bring the whole index up to date with the disk now. One scan runs at a time."""
        with self.scan_lock:
            try:
                self._check_if_suspected()
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
            except OSError as exc:  # e.g. the source directory is gone (unmounted, renamed): retry next scan
                return self._scan_failed(exc)
            finally:
                self.progress.state, self.progress.phase = "idle", "done"
                self.progress.finished_at = time.time()

    def _check_if_suspected(self) -> None:
        if not self.damage_suspected:
            return
        self.damage_suspected = False
        if self.writer.file_replaced():
            self._record_error(f"the index file {self.writer.db_path} was deleted or replaced while in use; reopening it")
            self.writer.reopen()
        self.check_integrity()

    def _scan_failed(self, exc: Exception) -> RefreshReply:
        problem = exc if isinstance(exc, OSError) else f"cannot write the index {self.writer.db_path}: {exc}"
        self._record_error(f"scan stopped: {problem}")
        return {"success": False, "files_processed": self.progress.files_done, "files_removed": 0, "errors": [self.last_error or ""]}

    def _scan(self, on_progress: Callable[[ScanProgress], None] | None) -> RefreshReply:
        progress = self.progress
        progress.state, progress.phase = "indexing", "walking"
        progress.files_done = progress.files_total = 0
        progress.started_at = time.time()
        with self.writer.lock:
            signatures = self.writer.file_signatures()
        changes = self.scanner.changes(signatures)
        for path, reason, detail in changes.skipped:
            self._log_skip(path, reason, detail)
        progress.skipped = dict(Counter(reason for _, reason, _ in changes.skipped))
        progress.files_total = len(changes.to_read) + len(changes.to_verify) + len(changes.to_remove)
        progress.phase = "indexing"
        if on_progress:
            on_progress(progress)
        removed = self._remove(changes.to_remove, on_progress)
        outcome = self._index_files(changes.to_read + changes.to_verify, on_progress)
        skipped = changes.skipped + outcome.skipped
        with self.writer.transaction():
            self.writer.replace_skipped(
                (path, reason, detail) for path, reason, detail in skipped if reason not in QUIET_REASONS
            )
            self.writer.set_meta("last_scan", datetime.now(timezone.utc).isoformat(timespec="seconds"))
            self.writer.set_meta("skipped_counts", json.dumps(dict(Counter(reason for _, reason, _ in skipped))))
        progress.skipped = dict(Counter(reason for _, reason, _ in skipped))
        changed = outcome.written or removed or outcome.skipped
        logger.log(
            logging.INFO if changed else logging.DEBUG,
            "scan done: %d files read, %d removed, %d unchanged verified, skipped %s, %.1fs",
            outcome.written, removed, outcome.verified, progress.skipped or "none", time.time() - (progress.started_at or 0),
        )
        errors = [f"{path}: {reason}{': ' + detail if detail else ''}" for path, reason, detail in outcome.skipped if reason in ERROR_REASONS]
        return {"success": True, "files_processed": outcome.written, "files_removed": removed, "errors": errors[:100]}

    def _remove(self, to_remove: list[str], on_progress: Callable[[ScanProgress], None] | None) -> int:
        for start in range(0, len(to_remove), BATCH_FILES):
            with self.writer.transaction():
                for path in to_remove[start:start + BATCH_FILES]:
                    current = self.writer.stored_file(path)
                    if current is not None:
                        self.writer.remove_file(current.file_id)
            self.progress.files_done += len(to_remove[start:start + BATCH_FILES])
            if on_progress:
                on_progress(self.progress)
        return len(to_remove)

    def _index_files(self, files: list[DiskFile], on_progress: Callable[[ScanProgress], None] | None) -> _Outcome:
        outcome = _Outcome()
        batch: list[LoadedFile | FileSkipped] = []
        batch_bytes = 0
        for result in self._load_ahead(files):
            batch.append(result)
            batch_bytes += result.size if isinstance(result, LoadedFile) else 0
            if len(batch) >= BATCH_FILES or batch_bytes >= BATCH_BYTES:
                self._write_batch(batch, outcome)
                batch, batch_bytes = [], 0
                if on_progress:
                    on_progress(self.progress)
        if batch:
            self._write_batch(batch, outcome)
            if on_progress:
                on_progress(self.progress)
        return outcome

    def _load_ahead(self, files: list[DiskFile]) -> Iterator[LoadedFile | FileSkipped]:
        """Load files on a worker thread, in order, at most READ_AHEAD files or READ_AHEAD_BYTES
        ahead of the writer (a bound by bytes too, so a run of large files cannot fill memory)."""
        root, max_bytes = self.config.source_directory, self.config.max_file_size_bytes

        def load(disk: DiskFile) -> LoadedFile | FileSkipped:
            try:
                return load_file(root, disk.path, max_bytes)
            except FileSkipped as skipped:
                return skipped

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reader") as pool:
            pending: deque[tuple[Future[LoadedFile | FileSkipped], int]] = deque()
            pending_bytes = 0
            for disk in files:
                pending.append((pool.submit(load, disk), disk.size))
                pending_bytes += disk.size
                while len(pending) >= READ_AHEAD or pending_bytes > READ_AHEAD_BYTES:
                    future, size = pending.popleft()
                    pending_bytes -= size
                    yield future.result()
            while pending:
                yield pending.popleft()[0].result()

    def _write_batch(self, batch: list[LoadedFile | FileSkipped], outcome: _Outcome) -> None:
        with self.writer.transaction():
            for item in batch:
                current = self.writer.stored_file(item.path)
                if isinstance(item, FileSkipped):
                    if current is not None:
                        self.writer.remove_file(current.file_id)
                    if item.reason != "vanished":
                        outcome.skipped.append((item.path, item.reason, item.detail))
                        self.writer.set_skipped(item.path, item.reason, item.detail)
                elif current is not None and current.content_hash == item.content_hash and current.size == item.size:
                    self.writer.mark_verified(current.file_id, item.read_at_ns, item.mtime_ns, item.inode)
                    outcome.verified += 1
                else:
                    self.writer.upsert_file(item, current.file_id if current else None)
                    self.writer.clear_skipped(item.path)
                    outcome.written += 1
        for item in batch:
            if isinstance(item, FileSkipped):
                self._log_skip(item.path, item.reason, item.detail)
        self.progress.files_done += len(batch)

    def refresh_file(self, user_path: str) -> RefreshReply:
        """Index one file now (or remove it if it is gone). Raises UnsafePathError for unsafe paths."""
        rel = resolve_user_path(self.config.source_directory, user_path, self.config.index_output_directory)
        try:
            disk = check_single_file(self.config.source_directory, rel, self.scanner.filter)
            loaded: LoadedFile | FileSkipped | None = (
                load_file(self.config.source_directory, rel, self.config.max_file_size_bytes) if disk else None
            )
        except FileSkipped as skipped:
            loaded = skipped
        with self.writer.transaction():
            current = self.writer.stored_file(rel)
            if isinstance(loaded, LoadedFile):
                self.writer.upsert_file(loaded, current.file_id if current else None)
                self.writer.clear_skipped(rel)
                return {"success": True, "files_processed": 1, "files_removed": 0, "errors": []}
            if current is not None:
                self.writer.remove_file(current.file_id)
            if loaded is None:
                if current is None:
                    return {"success": False, "files_processed": 0, "files_removed": 0,
                            "errors": [f"{rel}: no such file in the source directory, and not in the index"]}
                return {"success": True, "files_processed": 0, "files_removed": 1, "errors": []}
            if loaded.reason != "vanished":
                self.writer.set_skipped(rel, loaded.reason, loaded.detail)
        return {"success": False, "files_processed": 0, "files_removed": int(current is not None), "errors": [str(loaded)]}


@dataclass
class _Outcome:
    written: int = 0
    verified: int = 0
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def read_status(config: ServerConfig, indexer: TextIndexer | None, startup_error: str | None = None) -> StatusReply:
    """Status from the index file plus, when a daemon is running, its live scan progress."""
    db_path = config.db_path
    counts: dict = {"indexed_files": 0, "total_documents": 0, "fallback_decoded_files": 0, "meta": {}}
    problem = startup_error
    try:
        counts = database.index_counts(database.reader(db_path))
    except (IndexUnavailableError, sqlite3.Error) as exc:
        database.drop_reader(db_path)
        problem = problem or str(exc)
        if indexer is not None:
            indexer.damage_suspected = True
    meta = counts["meta"]
    progress = indexer.progress if indexer else ScanProgress(state="idle")
    skipped = progress.skipped if indexer and progress.started_at else json.loads(meta.get("skipped_counts", "{}"))
    size = sum(p.stat().st_size for p in (db_path, Path(f"{db_path}-wal")) if p.exists())
    errors = indexer.errors_encountered if indexer else 0
    last_error = (indexer.last_error if indexer else None) or problem
    return {
        "source_directory": str(config.source_directory),
        "index_path": str(db_path),
        "state": "error" if indexer is None and startup_error else progress.state,
        "progress": {"phase": progress.phase, "files_done": progress.files_done, "files_total": progress.files_total},
        "indexed_files": counts["indexed_files"],
        "total_documents": counts["total_documents"],
        "index_size_mb": round(size / (1024 * 1024), 3),
        "last_scan": meta.get("last_scan"),
        "errors_encountered": errors + skipped.get("unreadable", 0) + (1 if startup_error else 0),
        "last_error": last_error,
        "skipped_files": skipped,
        "fallback_decoded_files": counts["fallback_decoded_files"],
    }
