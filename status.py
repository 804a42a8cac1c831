"""get_index_status: what the index and its writer record, read the same way by any process.

The index's meta table holds what the last scan found, the lock file what the writing process is
doing now; a process that scans adds its own progress and problems, and its watcher's state.
"""

from __future__ import annotations

import json
from collections import Counter
import os
import sqlite3
from typing import TYPE_CHECKING, cast

import database
import index_files
import index_queries
from exceptions import IndexUnavailableError
from indexer import TextIndexer, write_problem
from models import ServerConfig, Source, SourceStatus, StatusReply, WatchingReply, WatchState

if TYPE_CHECKING:
    from daemon import Daemons


def read_status(
    config: ServerConfig, indexer: TextIndexer | None, startup_error: str | None = None, watching: WatchState | None = None
) -> StatusReply:
    """Status as the index and its writer record it (any process reads the same), with this
    process's own scan progress when it is the one scanning, and its own problems (an index it
    cannot open); ``watching``: this process's watcher, else what a server recorded."""
    return _status_and_reading(config, indexer, startup_error, watching)[0]


def _status_and_reading(
    config: ServerConfig, indexer: TextIndexer | None, startup_error: str | None, watching: WatchState | None,
    daemon: bool = False,
) -> tuple[StatusReply, bool]:
    """read_status, and whether the index is there and cannot be read or trusted now (counted as
    one error): it cannot be read, or something else wrote it since a writer of the index left it
    (what was read may be what this process read before). ``daemon``: this process keeps the index
    (a server): until its own first scan has finished it is "starting" (or "indexing"), whatever
    an earlier run left, unless it cannot open the index to write; problems found meanwhile are
    still counted and named."""
    db_path = config.db_path
    prefix = config.key_prefix(config.source.name)
    counts: dict = {"indexed_files": 0, "total_documents": 0, "fallback_decoded_files": 0, "meta": {}}
    problem = startup_error
    unreadable = False
    lock = indexer.writer.write_lock if indexer else index_files.WriterLock(index_files.lock_path(db_path))
    try:
        counts = index_queries.index_counts(database.reader(db_path), prefix)
        read = True
    except (IndexUnavailableError, sqlite3.Error) as exc:
        database.drop_reader(db_path)
        read = False
        unreadable = not getattr(exc, "not_made_yet", False)
        problem = problem or (_unreadable_problem(exc) if unreadable else str(exc))
    writer = lock.holder()
    found = lock.left_by_another(db_path) if not unreadable and writer is None else None
    if found is not None:
        read, unreadable, problem = False, True, startup_error or UNTRUSTED[found]
    if not read and indexer is not None:
        indexer.suspect_damage()  # not read, or not to be trusted: the next scan looks
    meta = index_queries.source_meta(counts["meta"], prefix)
    own = indexer.progress if indexer else None
    failed = lock.last_record() if indexer is None and writer is None else None
    if failed is not None and _phase_of(failed.phase, config) != "failed":
        failed = None
    detail = indexer.write_failure if indexer else failed.problem if failed else None
    failure = write_problem(db_path, detail) if detail is not None else None
    skipped = json.loads(meta.get("skipped_counts") or "{}")
    if own is not None and own.state == "indexing":
        state, phase, done, total, skipped = "indexing", own.phase, own.files_done, own.files_total, own.skipped
    elif writer is not None and _phase_of(writer.phase, config) in ("walking", "indexing"):  # another process scans it now
        state, phase, done, total = "indexing", _phase_of(writer.phase, config), writer.files_done, writer.files_total
    elif daemon and not startup_error and not (own is not None and own.finished_at):
        state, phase, done, total = "starting", "", 0, 0  # its first scan checks what is found wrong now
    elif (indexer is None and startup_error) or failure or unreadable:
        state, phase, done, total = "error", "", 0, 0
    elif own.finished_at if own is not None else meta.get("last_scan"):
        state, phase, done, total = "idle", "done", 0, 0
    else:
        state, phase, done, total = "starting", "", 0, 0
    if state == "idle" and own is not None:
        done, total = own.files_done, own.files_total
    unsaved = indexer.unsaved_errors if indexer else 0
    if problem or failure:
        last_error: str | None = problem or failure
    elif unsaved:
        last_error = indexer.last_error if indexer else None
    else:
        last_error = meta.get("last_error") or None
    if state == "idle" and last_error and meta.get("last_error_of") == "scan":
        state = "error"  # the last scan could not list the source (gone, unreadable): it is not up to date
    saved = max(int(meta.get("errors_encountered") or 0), indexer.saved_errors if indexer else failed.errors if failed else 0)
    size = index_files.index_bytes(db_path)
    reply: StatusReply = {
        "source_directory": str(config.source_directory),
        "index_path": str(db_path),
        "state": state,
        "progress": {"phase": phase, "files_done": done, "files_total": total},
        "indexed_files": counts["indexed_files"],
        "total_documents": counts["total_documents"],
        "index_size_mb": round(size / (1024 * 1024), 3),
        "last_scan": meta.get("last_scan"),
        "errors_encountered": saved + unsaved + (1 if startup_error or unreadable else 0),
        "last_error": last_error,
        "skipped_files": skipped,
        "fallback_decoded_files": counts["fallback_decoded_files"],
        "writer_pid": writer.pid if writer is not None else None,
        "watching": _watching_reply(watching, meta.get("watching")),
    }
    return reply, unreadable


#: What status says of an index file the writers' note does not vouch for (WriterLock.left_by_another).
#: "Changed outside" is said also when an SQLite client, closing last, folds into the file what a
#: server killed left in its WAL: nothing tells that apart from damage, and the check costs one
#: scan's time. A writer killed while it copied its WAL into the file (SQLite completes that at the
#: next opening): what else happened to the file since cannot be told.
UNTRUSTED = {
    index_files.CHANGED_OUTSIDE: "the index file was changed outside this program since it last wrote it;"
    " the next scan (refresh_index) checks it, and rebuilds it if damaged",
    index_files.STOPPED_INSIDE_STEP: "a writer of the index stopped while writing the file; the next scan"
    " (refresh_index) checks it, and rebuilds it if damaged",
}


def _unreadable_problem(exc: BaseException) -> str:
    """What status says of an index that is there and cannot be read: what the next scan does about
    it, where it does something (a damaged file is moved aside and rebuilt; a lack of permission
    is the user's to mend)."""
    if getattr(exc, "damaged", False) or database.is_corruption(exc):
        return f"the index cannot be read ({exc}); the next scan (refresh_index) moves it aside and rebuilds it"
    return f"the index cannot be read ({exc})"


def _phase_of(recorded: str, config: ServerConfig) -> str | None:
    """The phase of a lock file's record (TextIndexer._record_progress) if it is about this
    config's source (with several, the record names the one scanning); else None."""
    phase, _, source = recorded.partition("@")
    return phase if source in ("", config.source.name) or not config.several else None


def server_status(config: ServerConfig, daemons: Daemons | None) -> StatusReply:
    """Status of the server's index: read_status (advised) with one source; with several, the
    totals and, in ``sources``, each source's own (its name, folder, files, state, errors, watching)."""
    loops = daemons.loops if daemons is not None else {}

    def of(source: Source) -> tuple[StatusReply, bool]:
        loop = loops.get(source.name)
        own = (loop.indexer, loop.startup_error, loop.watch_state) if loop is not None else (None, None, None)
        reply, unreadable = _status_and_reading(config.for_source(source), *own, daemon=loop is not None)
        return advised(reply), unreadable

    if not config.several:
        return of(config.sources[0])[0]
    parts, unreadable = zip(*map(of, config.sources))
    states = {part["state"] for part in parts}
    state = next((s for s in ("error", "indexing", "starting") if s in states), "idle")
    first = parts[0]
    watching: WatchingReply = {
        "active": all(part["watching"]["active"] for part in parts),
        "folders": sum(part["watching"]["folders"] for part in parts),
        "problem": next((f"{source.name}: {part['watching']['problem']}" for source, part in zip(config.sources, parts)
                         if part["watching"].get("problem")), None),
    }
    scanning = next((part["progress"] for part in parts if part["state"] == "indexing"), first["progress"])
    reply: StatusReply = {
        "index_path": first["index_path"], "state": state, "progress": scanning,
        "indexed_files": sum(part["indexed_files"] for part in parts),
        "total_documents": sum(part["total_documents"] for part in parts),
        "index_size_mb": first["index_size_mb"],
        # The sources share one index file: one that cannot be read is one error, however many read it.
        "errors_encountered": sum(part["errors_encountered"] for part in parts) - max(0, sum(unreadable) - 1),
        "last_scan": max((part["last_scan"] for part in parts if part["last_scan"]), default=None),
        "skipped_files": dict(sum((Counter(part["skipped_files"]) for part in parts), Counter())),
        "fallback_decoded_files": sum(part["fallback_decoded_files"] for part in parts),
        "last_error": next((f"{source.name}: {part['last_error']}" for source, part in zip(config.sources, parts) if part["last_error"]), None),
        "writer_pid": first["writer_pid"], "watching": watching,
        "sources": [_source_part(source, part) for source, part in zip(config.sources, parts)],
    }
    return reply


def _source_part(source: Source, part: StatusReply) -> SourceStatus:
    """One source's status, inside a server's (without what the whole index shares)."""
    shared = ("index_path", "index_size_mb", "writer_pid", "total_documents")
    return cast(SourceStatus, {"name": source.name, **{key: value for key, value in part.items() if key not in shared}})


def _watching_reply(own: WatchState | None, recorded: str | None) -> WatchingReply:
    """This process's watching state; else the one a server recorded, if that server still runs."""
    if own is not None:
        return {"active": own.active, "folders": own.folders, "problem": own.problem}
    try:
        record = json.loads(recorded or "{}")
        pid = int(record.get("pid") or 0)
        if pid > 0:
            os.kill(pid, 0)
            return {"active": bool(record.get("active")), "folders": int(record.get("folders") or 0),
                    "problem": str(record["problem"]) if record.get("problem") else None}
    except (ValueError, TypeError, AttributeError, ProcessLookupError, PermissionError):
        pass
    return {"active": False, "folders": 0, "problem": "no server is running on this index: changes are indexed when one starts"}


def advised(status: StatusReply) -> StatusReply:
    """``status`` with a ``hint`` when it shows something the user can fix: PDFs skipped because
    pdftotext is missing."""
    pdfs = status["skipped_files"].get("no_extractor", 0)
    if pdfs:
        status["hint"] = (
            f"{pdfs:,} PDF{'s' if pdfs > 1 else ''} not indexed: pdftotext is missing or could not run. Install"
            f" poppler-utils (or put pdftotext in a folder on PATH); the next scan reads {'them' if pdfs > 1 else 'it'}."
        )
    return status
