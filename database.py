"""The core every database module shares: the schema and its version, connections (the writer's
settings, each thread's reader), the text forms the index stores (fts_text, indexed_text, compressed
text, section ids) and what SQLite's errors mean (problem_of, is_corruption, is_interruption).

SQL is spoken only here and in the modules built on this one: index_files.py (the index's files on
disk and the writer lock), index_writer.py (the one writing connection, schema preparation,
recovery) and index_queries.py (everything the readers ask). Every value is bound.

Layout: ``files`` holds one row per indexed file; ``sections`` one row per section with its
text zlib-compressed; ``sections_fts`` is a contentless FTS5 table over (title, heading, body)
whose rowids equal the section ids. A section id is ``file_id << SECTION_BITS | n``, so a file's
sections are one rowid range and a hit's file is ``rowid >> SECTION_BITS``, with no join.
One writer connection (the indexer's), any number of reader connections; WAL.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import sys
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from exceptions import IndexUnavailableError
from identifiers import identifier_parts
from index_files import check_index_directory, index_file_problem
from models import INDEX_FORMAT

SCHEMA_VERSION = INDEX_FORMAT
SECTION_BITS = 20
MAX_SECTIONS_PER_FILE = 1 << SECTION_BITS
#: Invisible format characters that Unicode added after 6.1, the version FTS5's unicode61 tables
#: follow: FTS5 would read them as letters, so a word wrapped in one (a right-to-left isolate
#: around a name, say) could never be found by itself. Here they separate words.
EXTRA_SEPARATORS = "".join(
    chr(code) for first, last in ((0x605, 0x605), (0x61C, 0x61C), (0x890, 0x891), (0x8E2, 0x8E2), (0x2066, 0x2069),
                                  (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3))
    for code in range(first, last + 1)
)
#: How text becomes words: the index stems them (porter); a query's words are split the same way
#: first (query_words), so that what is counted and capped is what FTS5 will search.
WORD_TOKENIZER = f"unicode61 remove_diacritics 2 separators '{EXTRA_SEPARATORS}'"
TOKENIZER = f"porter {WORD_TOKENIZER}"
#: Chinese and Japanese are written without spaces, and unicode61 reads a run of their characters
#: as one word: 获取 could not be found in 获取子项目录列表. FTS5 is given the text with CJK_SEPARATOR (an
#: invisible separator) on each side of such a character that touches another letter or digit, so
#: each is a word; a query's run is read the same way and searched as the phrase of its
#: characters: substring search. Hangul is written with spaces between words and is left alone.
CJK_SEPARATOR = "\u200b"
_CJK = "\u3005\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
#: Where a CJK character meets another letter or digit (获取 in 获取子项, 接口 in API接口).
_CJK_PAIR = re.compile(f"(?<=[{_CJK}])(?=[^\\W_])|(?<=[^\\W_])(?=[{_CJK}])")
CJK_WORD = re.compile(f"[{_CJK}]")


def fts_text(text: str) -> str:
    """``text`` as FTS5 is given it (see CJK_SEPARATOR)."""
    # Most text is ASCII, or holds no CJK character at all: a search for one is ~6x cheaper than the substitution.
    return text if text.isascii() or not CJK_WORD.search(text) else _CJK_PAIR.sub(CJK_SEPARATOR, text)


def indexed_text(text: str, parts: str | None = None) -> str:
    """``text`` as the index is given it: fts_text, and the words inside its camelCase identifiers
    (``parts``, if they were found already: identifiers.identifier_parts) after it. A snippet is cut
    from fts_text alone: these words are never shown."""
    parts = identifier_parts(text) if parts is None else parts
    return fts_text(f"{text}\n{parts}" if parts else text)


def shown_text(text: str) -> str:
    """fts_text's separators taken out again (of a snippet made from it)."""
    return text.replace(CJK_SEPARATOR, "") if CJK_SEPARATOR in text else text


COMPRESSION_LEVEL = 1  # zlib: level 1 is ~3x faster than 6 for ~10% more bytes on prose
BUSY_TIMEOUT_MS = 10_000
#: The meta key of a source's count of files by extension, kept by a scan for the server's
#: instructions (after the source's prefix with several sources: index_writer.SourceWriter.set_meta).
FORMATS_KEY = "formats"
_CORRUPTION_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_INTERRUPT_CODE = 9  # SQLITE_INTERRUPT
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
#: How many SQLite VM steps run between two looks at whether a query should stop.
PROGRESS_STEPS = 1000

#: A file's name (its path after the last "/"), in lower case as SQLite lowers it (ASCII letters
#: only): indexed, so that files_named finds the files of a name without reading every path.
#: rtrim strips the name's characters off the path's end, leaving its folder to cut off.
FILE_NAME_SQL = "lower(replace(path, rtrim(path, replace(path, '/', '')), ''))"

SCHEMA = f"""
CREATE TABLE files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    indexed_at_ns INTEGER NOT NULL,
    encoding TEXT NOT NULL,
    fallback_decoded INTEGER NOT NULL,
    title TEXT NOT NULL,
    section_count INTEGER NOT NULL,
    sketch BLOB NOT NULL,
    tags TEXT NOT NULL
);
CREATE INDEX files_by_name ON files({FILE_NAME_SQL});
CREATE INDEX files_by_title ON files(lower(title));
CREATE TABLE sections (
    id INTEGER PRIMARY KEY,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    heading TEXT NOT NULL,
    body BLOB NOT NULL,
    said BLOB NOT NULL,
    outline TEXT NOT NULL
);
CREATE VIRTUAL TABLE sections_fts USING fts5(title, heading, body, content='', tokenize="{TOKENIZER}");
CREATE TABLE file_tags (tag TEXT NOT NULL, file_id INTEGER NOT NULL, PRIMARY KEY (tag, file_id)) WITHOUT ROWID;
CREATE INDEX file_tags_by_file ON file_tags(file_id);
CREATE TABLE skipped (path TEXT PRIMARY KEY, reason TEXT NOT NULL, detail TEXT NOT NULL, signature TEXT);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
"""


#: Free space on the index's disk under which SQLite's "disk I/O error" is taken for a full disk (it
#: says no more when it cannot grow the shared-memory file, which every reader needs).
FULL_DISK_BYTES = 1 << 20


#: Why a reader cannot use an index a writer has not made yet.
NOT_YET = "not initialised yet"


def problem_of(exc: BaseException, db_path: Path) -> str:
    """What went wrong with the index at ``db_path``: SQLite's message, or when that only says
    "disk I/O error" (or "disk is full") and the disk holding the index is (nearly) full, that."""
    text = str(exc)
    if "disk I/O error" in text or "disk is full" in text or getattr(exc, "errno", None) == errno.ENOSPC:
        try:
            stats = os.statvfs(db_path.parent)
        except OSError:
            return text
        free = stats.f_bavail * stats.f_frsize
        if free < FULL_DISK_BYTES:
            return f"the disk is full ({free:,} bytes free where the index is, in {db_path.parent}): free some space there"
    return text


def is_corruption(exc: BaseException) -> bool:
    """True for errors that mean the database file itself is damaged or not a database."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None and sys.version_info < (3, 11):
        # 3.10's errors carry no code: it raises DatabaseError itself, no subclass, for SQLITE_CORRUPT
        # and SQLITE_NOTADB (and for codes never met here); index_writer._prepare_schema raises one of its own.
        return type(exc) is sqlite3.DatabaseError and not str(exc).startswith("schema version")
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and (code & 0xFF) in _CORRUPTION_CODES


def is_busy(exc: BaseException) -> bool:
    """True for the error of a statement that waited its busy timeout for a lock another
    connection held ("database is locked"): nothing is wrong with the file."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None and sys.version_info < (3, 11):  # 3.10's errors carry no code, only SQLite's message
        return isinstance(exc, sqlite3.OperationalError) and str(exc) in ("database is locked", "database table is locked")
    return isinstance(exc, sqlite3.OperationalError) and code is not None and (code & 0xFF) in _BUSY_CODES


def is_interruption(exc: BaseException) -> bool:
    """True for the error a statement stopped by ``interruptible`` raises."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None and sys.version_info < (3, 11):  # 3.10's errors carry no code, only SQLite's message
        return isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted"
    return isinstance(exc, sqlite3.OperationalError) and code is not None and (code & 0xFF) == _INTERRUPT_CODE


def connect(db_path: Path, read_only: bool = False) -> sqlite3.Connection:
    """A connection with the settings every user of the index shares; ``read_only``: one that
    never writes the file, not even the checkpoint SQLite makes when the last connection closes."""
    target = f"file:{quote(os.fsencode(db_path))}?mode=ro" if read_only else db_path
    conn = sqlite3.connect(target, uri=read_only, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    _configure(conn)
    return conn


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    # The schema is this module's own; nothing in a file (a view, a trigger) may call functions.
    conn.execute("PRAGMA trusted_schema = OFF")


@contextmanager
def interruptible(conn: sqlite3.Connection, should_stop: Callable[[], bool] | None) -> Iterator[None]:
    """Run the statements inside so that SQLite abandons them once ``should_stop()`` is true; they
    then raise an error that ``is_interruption`` recognises. FTS5 does some of its work in one step
    (merging a prefix's doclists), so this stops a query soon after, not at once."""
    if should_stop is None:
        yield
        return
    conn.set_progress_handler(lambda: 1 if should_stop() else 0, PROGRESS_STEPS)
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)


def compress(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), COMPRESSION_LEVEL)


class SectionDamaged(sqlite3.DatabaseError):
    """A section's stored text does not decompress: the file is damaged where SQLite's own checks
    do not look (is_corruption says so, and the index is rebuilt)."""

    sqlite_errorcode = 11  # SQLITE_CORRUPT


def decompress(blob: bytes) -> str:
    try:
        return zlib.decompress(blob).decode("utf-8")
    except (zlib.error, UnicodeDecodeError, TypeError) as exc:
        raise SectionDamaged(f"a section's stored text is damaged ({exc})") from None


def starting_with(prefix: str) -> tuple[str, str | bytes]:
    """(low, high) such that ``low <= text < high`` holds for exactly the texts that start with
    ``prefix``, so that an index on the column finds them. SQLite orders texts by their UTF-8 bytes,
    which is code point order: high is ``prefix`` with its last character one higher (those that
    are U+10FFFF dropped first), or, when none is left, an empty blob, which is above every text."""
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return prefix, b""
    last = ord(stem[-1]) + 1
    if 0xD800 <= last < 0xE000:  # surrogates are not characters of a text: the next one is U+E000
        last = 0xE000
    return prefix, stem[:-1] + chr(last)


def section_id(file_id: int, n: int) -> int:
    return (file_id << SECTION_BITS) | n


def file_id_of(section_rowid: int) -> int:
    return section_rowid >> SECTION_BITS


_reader_local = threading.local()


def reader(db_path: Path) -> sqlite3.Connection:
    """This thread's reading connection to ``db_path``, opened again when the file was replaced or
    written since (its size or time changed): a connection's page cache answers from what it read
    before, and a file written over in place (same inode, no lock taken) would go unseen."""
    cached = getattr(_reader_local, "conns", None)
    if cached is None:
        cached = _reader_local.conns = {}
    identity = _readable_index(db_path)
    entry = cached.get(db_path)
    if entry is not None and entry[1] == identity:
        return entry[0]
    # The connection it replaces is not closed here: a search in this thread may still be using it
    # (a part of a large query asks again). Python closes it, through SQLite, once unused; SQLite's
    # close, unlike one of Python's own, keeps the locks other connections of this process hold on
    # the file (https://www.sqlite.org/howtocorrupt.html, 2.2), and the file is never opened here
    # but through SQLite.
    try:
        conn = connect(db_path, read_only=True)
        conn.create_function("path_matches", 2, _path_matches, deterministic=True)
        conn.execute(f'CREATE VIRTUAL TABLE IF NOT EXISTS temp.snippet_fts USING fts5(title, heading, body, tokenize="{TOKENIZER}")')
        conn.execute(f'CREATE VIRTUAL TABLE IF NOT EXISTS temp.span_fts USING fts5(title, heading, body, content="", tokenize="{TOKENIZER}")')
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS question_hits (id INTEGER PRIMARY KEY, score REAL NOT NULL)")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.sections_vocab USING fts5vocab(main, sections_fts, row)")
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.sections_positions USING fts5vocab(main, sections_fts, instance)")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise IndexUnavailableError(str(db_path), f"cannot open: {problem_of(exc, db_path)}", damaged=is_corruption(exc)) from None
    if version != SCHEMA_VERSION:
        conn.close()
        if version == 0:  # its first scan has not written its schema yet
            raise IndexUnavailableError(str(db_path), NOT_YET, not_made_yet=True)
        raise IndexUnavailableError(str(db_path), f"its format ({version}) is not this version's ({SCHEMA_VERSION}); the next scan rebuilds it")
    cached[db_path] = (conn, identity)
    return conn


def _readable_index(db_path: Path) -> tuple[int, int, int]:
    """The inode, size and modification time of the index file at ``db_path``, after the checks a
    writer makes when it opens it (see check_index_directory, index_file_problem): a reader never
    follows a link to another index, nor reads one that another user could have put there."""
    try:
        check_index_directory(db_path.parent)
        st = os.lstat(db_path)
    except (FileNotFoundError, NotADirectoryError):
        raise IndexUnavailableError(str(db_path), "no index yet; it is created by the first scan", not_made_yet=True) from None
    except OSError as exc:
        raise IndexUnavailableError(str(db_path), f"cannot read it: {exc.strerror or exc}") from None
    problem = index_file_problem(st)
    if problem:
        raise IndexUnavailableError(str(db_path), f"it is {problem}; not reading it (the next scan moves it aside)")
    return st.st_ino, st.st_size, st.st_mtime_ns


def drop_reader(db_path: Path) -> None:
    """Forget this thread's connection (after an error), so the next call opens a fresh one."""
    entry = getattr(_reader_local, "conns", {}).pop(db_path, None)
    if entry is not None:
        entry[0].close()


def _path_matches(pattern: str, path: str) -> bool:
    """SQL path_matches(pattern, path): the regular expression matches the whole path (re caches it)."""
    return re.fullmatch(pattern, path, re.S) is not None


def stored_tags(stored: str) -> list[str]:
    """A file's tags as files.tags holds them (a JSON list, or "" for none)."""
    return json.loads(stored) if stored else []


def outline_text(outline: Sequence[tuple[int, int, str]]) -> str:
    """A section's outline (models.Section) as the sections table stores it: JSON. Not compressed:
    a list of distinct headings shrank to 0.58 of its size, at the cost of one zlib call per section."""
    return json.dumps(outline, ensure_ascii=False, separators=(",", ":"))


def stored_outline(text: str) -> list[list]:
    """A section's outline as outline_text stored it; SectionDamaged if it is not what was stored."""
    try:
        outline = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise SectionDamaged(f"a section's stored outline is damaged ({exc})") from None
    if not isinstance(outline, list) or not all(isinstance(mark, list) and len(mark) == 3 for mark in outline):
        raise SectionDamaged("a section's stored outline is damaged (not a list of headings)")
    return outline


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction: every query inside sees the same index, and what is written to temp
    tables is rolled back at the end. Nested use joins the outer transaction."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:  # an interrupted write (to a temp table) already rolled it back
            conn.execute("ROLLBACK")


