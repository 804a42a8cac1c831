"""list_files: browse the indexed files that match path, extension, date, tag and source filters, by path."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import database
import index_queries
from exceptions import ArgumentError, IndexUnavailableError
from filters import case_hint, file_condition_of, read_filters
from models import FileList, ListedFile, ServerConfig, modified_time
from search import Freshness, unreadable_files, unreadable_warnings
from sources import filter_prefixes

#: list_files returns at most this many files at once, and pages up to MAX_LIST_OFFSET.
MAX_LIST_LIMIT = 1000
MAX_LIST_OFFSET = 10_000_000
#: A reply holds files up to about this many characters (the rest on the next page): an agent pays for each.
MAX_LIST_CHARS = 40_000


def list_files(
    config: ServerConfig, path: str | None = None, collection: str | Sequence[str] | None = None,
    extensions: Sequence[str] | None = None, modified_after: str | None = None, modified_before: str | None = None,
    tags: Sequence[str] | None = None, limit: int = 100, offset: int = 0,
) -> FileList:
    """The indexed files that pass the filters (as search reads them), sorted by path (by source,
    then path, with several), from ``offset``, at most ``limit``."""
    for name, value, most in (("limit", limit, MAX_LIST_LIMIT), ("offset", offset, MAX_LIST_OFFSET)):
        least = 1 if name == "limit" else 0
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
            raise ArgumentError(name, f"must be a whole number from {least} to {most:,}, got {value!r}")
    filters = read_filters(path, extensions, modified_after, modified_before, filter_prefixes(config, collection, path), tags)
    try:
        conn = database.reader(config.db_path)
    except IndexUnavailableError as exc:
        why = "nothing is indexed yet" if exc.not_made_yet else f"the index cannot be read now: {exc.reason}"
        return {"files": [], "total": 0, "has_more": False, "next_offset": None, "warnings": [why]}
    try:
        with database.snapshot(conn):
            total, rows = index_queries.listed_files(conn, file_condition_of(filters), limit, offset)
            hint = case_hint(conn, filters) if total == 0 else None
    except sqlite3.Error as exc:  # damaged, or its disk full: say so as search does
        database.drop_reader(config.db_path)
        raise IndexUnavailableError(str(config.db_path), f"listing failed: {database.problem_of(exc, config.db_path)}") from exc
    files = _within_budget([_listed(config, *row) for row in rows])
    more = offset + len(files) < total
    warnings = [hint] if hint else []
    warnings += _unreadable(config, [row[0] for row in rows[:len(files)]])
    if len(files) < len(rows):
        warnings.append(f"{len(files)} files shown of the {len(rows)} asked for, to keep the reply under {MAX_LIST_CHARS:,} characters")
    reply: FileList = {
        "files": files, "total": total, "has_more": more, "next_offset": offset + len(files) if more else None, "warnings": warnings,
    }
    return reply


def _unreadable(config: ServerConfig, keys: list[str]) -> list[str]:
    """What a listing says of its files that cannot be read now (their source gone, unreadable,
    unmounted or replaced; their folder unreadable or unmounted), as a search says of those it
    leaves out."""
    def said(count: int, why: str) -> str:
        return f"{count} listed file{'s are' if count > 1 else ' is'} as last indexed, not readable now: {why}"

    return unreadable_warnings(unreadable_files(Freshness.of(config), keys), said)


def _within_budget(files: list[ListedFile]) -> list[ListedFile]:
    """The first of ``files`` that fit in MAX_LIST_CHARS (at least one)."""
    used = 0
    for count, listed in enumerate(files):
        used += len(json.dumps(listed, ensure_ascii=False, separators=(",", ":"))) + 1
        if used > MAX_LIST_CHARS and count:
            return files[:count]
    return files


def _listed(config: ServerConfig, key: str, title: str, size: int, mtime_ns: int, tags: str) -> ListedFile:
    collection, path = config.split_key(key)
    listed: ListedFile = {"path": path, "title": title, "size": size, "modified": modified_time(mtime_ns), "tags": database.stored_tags(tags)}
    return {"collection": collection, **listed} if config.several else listed  # type: ignore[return-value]



