"""get_index_status: what the index and its writer record, read the same way by any process.

The index's meta table holds what the last scan found, the lock file what the writing process is
doing now; a process that scans adds its own progress and problems, and its watcher's state.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import database
from exceptions import IndexUnavailableError
from indexer import TextIndexer, write_problem
from models import ServerConfig, StatusReply, WatchingReply, WatchState


def read_status(
    config: ServerConfig, indexer: TextIndexer | None, startup_error: str | None = None, watching: WatchState | None = None
) -> StatusReply:
    """Status as the index and its writer record it (any process reads the same), with this
    process's own scan progress when it is the one scanning, and its own problems (an index it
    cannot open); ``watching``: this process's watcher, else what a server recorded."""
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
    lock = indexer.writer.write_lock if indexer else database.WriterLock(database.lock_path(db_path))
    writer = lock.holder()
    own = indexer.progress if indexer else None
    failed = lock.last_record() if indexer is None and writer is None else None
    if failed is not None and failed.phase != "failed":
        failed = None
    detail = indexer.write_failure if indexer else failed.problem if failed else None
    failure = write_problem(db_path, detail) if detail is not None else None
    skipped = json.loads(meta.get("skipped_counts") or "{}")
    if own is not None and own.state == "indexing":
        state, phase, done, total, skipped = "indexing", own.phase, own.files_done, own.files_total, own.skipped
    elif writer is not None and writer.phase in ("walking", "indexing"):  # another process is scanning now
        state, phase, done, total = "indexing", writer.phase, writer.files_done, writer.files_total
    elif (indexer is None and startup_error) or failure:
        state, phase, done, total = "error", "", 0, 0
    elif own.finished_at if own is not None else meta.get("last_scan"):  # a daemon waits for its own first scan
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
    saved = max(int(meta.get("errors_encountered") or 0), indexer.saved_errors if indexer else failed.errors if failed else 0)
    size = sum(p.stat().st_size for p in (db_path, Path(f"{db_path}-wal")) if p.exists())
    return {
        "source_directory": str(config.source_directory),
        "index_path": str(db_path),
        "state": state,
        "progress": {"phase": phase, "files_done": done, "files_total": total},
        "indexed_files": counts["indexed_files"],
        "total_documents": counts["total_documents"],
        "index_size_mb": round(size / (1024 * 1024), 3),
        "last_scan": meta.get("last_scan"),
        "errors_encountered": saved + unsaved + (1 if startup_error else 0),
        "last_error": last_error,
        "skipped_files": skipped,
        "fallback_decoded_files": counts["fallback_decoded_files"],
        "writer_pid": writer.pid if writer is not None else None,
        "watching": _watching_reply(watching, meta.get("watching")),
    }


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
