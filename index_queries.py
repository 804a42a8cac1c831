"""The readers' queries: everything search, listing, status and documents read from an index
(ranked sections, files by name or condition, sections' text and snippets, counts and meta values),
and the in-memory tables that split a query's text into words and stems as the index does.

Each takes a reading connection (database.reader) and binds every value it is given.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from database import (
    CJK_SEPARATOR, FILE_NAME_SQL, SECTION_BITS, TOKENIZER, WORD_TOKENIZER, decompress, file_id_of, fts_text, indexed_text, section_id,
    shown_text, snapshot, starting_with, stored_outline, stored_tags,
)
from identifiers import identifier_parts, parts_apart
from models import StoredFile

#: best_section_per_file ranks this many sections per wanted file before falling back to grouping all.
CANDIDATE_SECTIONS_PER_FILE = 8


def source_meta(meta: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The meta values a source's indexer wrote (see index_writer.SourceWriter), without their prefix."""
    cut = len(prefix)
    return {key[cut:]: value for key, value in meta.items() if key.startswith(prefix)} if prefix else dict(meta)


_words_local = threading.local()


def _word_tables() -> sqlite3.Connection:
    """This thread's in-memory FTS5 tables that split text as the index does: ``words`` (not
    stemmed) and ``stems`` (stemmed, as the index stores them), each with its list of tokens."""
    conn = getattr(_words_local, "conn", None)
    if conn is None:
        conn = _words_local.conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute(f'CREATE VIRTUAL TABLE words USING fts5(text, tokenize="{WORD_TOKENIZER}")')
        conn.execute("CREATE VIRTUAL TABLE words_read USING fts5vocab(words, instance)")
        conn.execute(f'CREATE VIRTUAL TABLE stems USING fts5(text, tokenize="{TOKENIZER}")')
        conn.execute("CREATE VIRTUAL TABLE stems_read USING fts5vocab(stems, instance)")
    return conn


def _tokens(texts: Sequence[str], table: str) -> list[list[str]]:
    conn = _word_tables()
    tokens: list[list[str]] = [[] for _ in texts]
    conn.execute("BEGIN")
    try:
        # A lone surrogate cannot be given to SQLite: it becomes "?", which separates words.
        conn.executemany(
            f"INSERT INTO {table} (rowid, text) VALUES (?, ?)",
            ((number, fts_text(text.encode("utf-8", "replace").decode("utf-8"))) for number, text in enumerate(texts)),
        )
        for number, token in conn.execute(f"SELECT doc, CAST(term AS BLOB) FROM {table}_read ORDER BY doc, offset"):
            tokens[number].append(_stem_text(token))
    finally:
        conn.execute("ROLLBACK")
    return tokens


def _stem_text(term: bytes) -> str:
    """A token as text. The porter stemmer works on bytes: it can cut a multi-byte character in two
    ("a\ube79ing" loses "ing" and then one byte of a doubled "consonant"), so a stem may not be
    UTF-8. Its broken bytes become U+FFFD, which unicode61 never puts in a token, so such a stem
    matches no stem read back from the index; the word is then simply not counted."""
    return term.decode("utf-8", "replace")


def query_words(texts: Sequence[str]) -> list[list[str]]:
    """The words FTS5 reads in each of ``texts``, in order: lowercase, without diacritics, not
    stemmed (the index stems them when they are searched). Made by FTS5's own tokenizer, in an
    in-memory table of this thread: a regular expression would disagree with it on thousands of
    code points."""
    return _tokens(texts, "words")


def stems(words: Sequence[str]) -> list[str]:
    """The stem the index stores for each of ``words`` (each one word, as query_words gives them)."""
    return [" ".join(read) for read in _tokens(words, "stems")]


def index_totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """(sections, words in them) in the index, from FTS5's own record of them: no counting."""
    row = conn.execute("SELECT block FROM sections_fts_data WHERE id = 1").fetchone()
    values = _varints(row[0]) if row and row[0] else []
    return (values[0], sum(values[1:])) if values else (0, 0)


def _varints(blob: bytes) -> list[int]:
    """SQLite's variable-length integers, one after another in ``blob``."""
    values: list[int] = []
    at = 0
    while at < len(blob):
        value = 0
        for count in range(9):
            byte = blob[at]
            at += 1
            if count == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80 or at >= len(blob):
                break
        values.append(value)
    return values


def sections_with(conn: sqlite3.Connection, stems_: Iterable[str]) -> dict[str, int]:
    """How many sections hold each of ``stems_`` (as stems() gives them; absent ones are left out)."""
    # One lookup per stem: fts5vocab seeks for "term = ?", but reads its whole vocabulary for an IN.
    held: dict[str, int] = {}
    for stem in dict.fromkeys(stems_):
        row = conn.execute("SELECT doc FROM temp.sections_vocab WHERE term = ?", (stem,)).fetchone()
        if row:
            held[stem] = row[0]
    return held


#: A rowid range [low, high) of sections_fts: the sections of a range of file ids.
Span = tuple[int, int]
EVERY_ROW: Span = (0, (1 << 63) - 1)


def file_spans(conn: sqlite3.Connection, parts: int) -> list[Span]:
    """``parts`` spans of about as many file ids each, covering every file (file ids are given in
    increasing order, so max(id) is about the number of files ever indexed)."""
    top = _top_file_id(conn)
    if parts < 2 or top < parts:
        return [EVERY_ROW]
    bounds = [0] + [section_id(top * k // parts, 0) for k in range(1, parts)] + [EVERY_ROW[1]]
    return list(itertools.pairwise(bounds))


def estimated_matching_rows(conn: sqlite3.Connection, match: str, sample: int) -> int:
    """Sections matching ``match``, estimated by counting them in the first 1/``sample`` of file ids
    (ids start at 1)."""
    top = _top_file_id(conn)
    return estimated_rows_each(conn, [match], top // sample + 1)[0]


def estimated_rows_each(conn: sqlite3.Connection, matches: Sequence[str], sample_files: int) -> list[int]:
    """Sections matching each of ``matches``, estimated by counting them among the first
    ``sample_files`` file ids: FTS5 reads only the start of each doclist."""
    top = _top_file_id(conn)
    sampled = max(1, min(sample_files, top))
    cut = section_id(sampled + 1, 0)
    counts = [
        conn.execute("SELECT count(*) FROM sections_fts WHERE sections_fts MATCH ? AND rowid < ?", (match, cut)).fetchone()[0]
        for match in matches
    ]
    return [count * top // sampled for count in counts]


def positions_per_section(conn: sqlite3.Connection, stems_: Sequence[str], most: int) -> list[float]:
    """For each of ``stems_``, its positions per section holding it among its first ``most``
    positions in the index (0 if it holds none): FTS5 reads only the start of its doclist."""
    found = []
    for stem in stems_:
        positions, sections = conn.execute(
            "SELECT count(*), count(DISTINCT doc) FROM (SELECT doc FROM temp.sections_positions WHERE term = ? LIMIT ?)", (stem, most)
        ).fetchone()
        found.append(positions / sections if sections else 0.0)
    return found


def _top_file_id(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT max(id) FROM files").fetchone()[0] or 0


def generation(conn: sqlite3.Connection) -> str | None:
    """A value that changes with every committed write: equal on two connections means they read
    the same index (compare inside their read transactions)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return row[0] if row else None


class FileCondition(NamedTuple):
    """A condition on the ``files`` table (file_condition makes one): SQL and its values."""

    sql: str
    values: tuple[object, ...]


EVERY_PATH = FileCondition("", ())


class Scope(NamedTuple):
    """The files a search may return, bound as parameters: ``ids`` is a JSON array of file ids,
    the only files allowed if ``inside``, else the files left out (a query's -exclusions);
    ``rows`` is a rowid range holding every allowed file's sections, which FTS5 uses to skip the
    rest of each doclist (a filter on a folder whose files were indexed together); ``passing``,
    a condition each matching section's file is looked up for (a filter too wide to list)."""

    ids: str
    inside: bool
    rows: Span
    passing: FileCondition = EVERY_PATH


EVERY_FILE = Scope("[]", False, EVERY_ROW)


def scope_of(excluded: Sequence[int], allowed: Sequence[int] | None, passing: FileCondition = EVERY_PATH) -> Scope:
    """The Scope of every file but ``excluded`` (and those failing ``passing``), or of ``allowed``
    (sorted ids) but ``excluded``."""
    if allowed is None:
        return Scope(json.dumps(list(excluded)), False, EVERY_ROW, passing)
    left_out = set(excluded)
    kept = [file_id for file_id in allowed if file_id not in left_out]
    rows = (section_id(kept[0], 0), section_id(kept[-1] + 1, 0)) if kept else (0, 0)
    return Scope(json.dumps(kept), True, rows)


def _scoped(scope: Scope, span: Span = EVERY_ROW) -> tuple[str, tuple[object, ...]]:
    """The SQL condition (and its parameters) for sections_fts rows of ``scope`` within ``span``:
    only the tests that leave rows out (each one costs every matching row a look: a search of every
    file ranked a common word 8% slower with them, and counted its files 70% slower)."""
    sql, values = "", []
    low, high = max(span[0], scope.rows[0]), min(span[1], scope.rows[1])
    if (low, high) != EVERY_ROW:
        sql, values = " AND sections_fts.rowid >= ? AND sections_fts.rowid < ?", [low, high]
    if scope.inside or scope.ids != EVERY_FILE.ids:
        sql += f" AND (sections_fts.rowid >> {SECTION_BITS}) {'IN' if scope.inside else 'NOT IN'} (SELECT value FROM json_each(?))"
        values.append(scope.ids)
    if scope.passing.sql:
        sql += f" AND EXISTS (SELECT 1 FROM files WHERE files.id = sections_fts.rowid >> {SECTION_BITS} AND {scope.passing.sql})"
        values.extend(scope.passing.values)
    return sql, tuple(values)


def matching_files(conn: sqlite3.Connection, match: str) -> list[int]:
    """The ids of the files with a section matching ``match``."""
    rows = conn.execute(
        f"SELECT DISTINCT rowid >> {SECTION_BITS} FROM sections_fts WHERE sections_fts MATCH ?", (match,)
    ).fetchall()
    return [file_id for (file_id,) in rows]


def file_condition(
    prefix: str, glob: str | None, suffixes: Sequence[str], modified: tuple[int | None, int | None], pattern: str | None,
    like: str | None = None, tags: Sequence[str] = (), alternatives: Sequence[tuple[str, str | None, str | None]] = (),
) -> FileCondition:
    """The files whose path starts with ``prefix`` (read from the index on paths), matches the
    SQLite ``glob``, the LIKE pattern ``like`` (ASCII letters in any case; \\ escapes) and the
    regular expression ``pattern`` (if any; see database._path_matches), ends with one of ``suffixes`` (any
    case; if any), and whose mtime_ns is within ``modified`` (from, inclusive; until, exclusive;
    None: open), holding every one of ``tags``. ``alternatives``: (prefix, glob, pattern) rules a
    path must pass one of (the sources of a search over several), checked last."""
    conditions = ["files.path >= ?", "files.path < ?"]
    values: list[object] = [*starting_with(prefix)]
    if glob is not None:
        conditions.append("files.path GLOB ?")
        values.append(glob)
    if like is not None:
        conditions.append("files.path LIKE ? ESCAPE '\\'")
        values.append(like)
    if suffixes:
        conditions.append("(" + " OR ".join("files.path LIKE ? ESCAPE '\\'" for _ in suffixes) + ")")
        values.extend("%" + re.sub(r"([%_\\])", r"\\\1", suffix) for suffix in suffixes)
    for condition, bound in zip(("files.mtime_ns >= ?", "files.mtime_ns < ?"), modified):
        if bound is not None:
            conditions.append(condition)
            values.append(bound)
    for tag in tags:  # in any case
        conditions.append("files.id IN (SELECT file_id FROM file_tags WHERE tag = ?)")
        values.append(tag.lower())
    if pattern is not None:
        conditions.append("path_matches(?, files.path)")
        values.append(pattern)
    if alternatives:
        each = [file_condition(*rule[:2], (), (None, None), rule[2]) for rule in alternatives]
        conditions.append("(" + " OR ".join(f"({rule.sql})" for rule in each) + ")")
        values.extend(value for rule in each for value in rule.values)
    return FileCondition(" AND ".join(conditions), tuple(values))


def listed_files(conn: sqlite3.Connection, condition: FileCondition, limit: int, offset: int) -> tuple[int, list[tuple]]:
    """list_files: how many files pass ``condition``, and the page of them from ``offset``, by key:
    (key, title, size, mtime_ns, tags as stored)."""
    total = conn.execute(f"SELECT count(*) FROM files WHERE {condition.sql}", condition.values).fetchone()[0]
    rows = conn.execute(
        f"SELECT path, title, size, mtime_ns, tags FROM files WHERE {condition.sql} ORDER BY path LIMIT ? OFFSET ?",
        (*condition.values, limit, offset),
    ).fetchall()
    return total, rows


def files_passing(conn: sqlite3.Connection, condition: FileCondition, most: int) -> list[int] | None:
    """The ids of the files passing ``condition``, in order; None if there are more than ``most``."""
    rows = conn.execute(f"SELECT id FROM files WHERE {condition.sql} LIMIT ?", (*condition.values, most + 1)).fetchall()
    return sorted(file_id for (file_id,) in rows) if len(rows) <= most else None


def paths_passing(conn: sqlite3.Connection, condition: FileCondition, most: int) -> list[str]:
    """The paths of at most ``most`` files passing ``condition``."""
    return [path for (path,) in conn.execute(f"SELECT path FROM files WHERE {condition.sql} LIMIT ?", (*condition.values, most))]


def best_section_per_file(
    conn: sqlite3.Connection, match: str, weights: Sequence[float], limit: int, span: Span = EVERY_ROW, scope: Scope = EVERY_FILE
) -> list[tuple[int, float]]:
    """The best-ranked section of each of the top ``limit`` files in ``span``: [(section rowid, bm25)],
    best first.

    bm25() is negative, lower is better. The matching sections are sorted (no temporary table)
    and read in that order only until ``limit`` distinct files are met: a file's best section ranks
    above its others, so those are exactly the answer, and the rows after them never reach Python
    (a bounded sort of a fixed number of candidates cost more than the whole sort). Only when the
    first ``limit * CANDIDATE_SECTIONS_PER_FILE`` sections hold fewer files (a few files with very
    many matching sections) is every matching section grouped by file instead.
    """
    candidates = limit * CANDIDATE_SECTIONS_PER_FILE
    condition, values = _scoped(scope, span)
    ranked = conn.execute(
        f"SELECT rowid, bm25(sections_fts, ?, ?, ?) AS score FROM sections_fts WHERE sections_fts MATCH ?{condition}"
        " ORDER BY score, rowid",
        (*weights, match, *values),
    )
    best: dict[int, tuple[int, float]] = {}
    try:
        for seen, (rowid, score) in enumerate(ranked, 1):
            best.setdefault(rowid >> SECTION_BITS, (rowid, score))
            if len(best) == limit:
                return list(best.values())
            if seen == candidates:
                break
        else:
            return list(best.values())  # every matching section was seen
    finally:
        ranked.close()
    return [(rowid, score) for rowid, score, _ in best_section_of_every_file(conn, match, weights, limit, span, scope)]


def best_section_of_every_file(
    conn: sqlite3.Connection, match: str, weights: Sequence[float], limit: int, span: Span = EVERY_ROW, scope: Scope = EVERY_FILE
) -> list[tuple[int, float, int]]:
    """Like best_section_per_file, by grouping every matching section in ``span`` by file; each row
    also holds how many files matched. One pass: for an expression that does most of its work
    deciding which rows match (a phrase, several AND-ed words), this costs little more than counting."""
    # FTS5 refuses bm25() inside an aggregate; a materialized CTE computes it first.
    condition, values = _scoped(scope, span)
    return conn.execute(
        "WITH hits AS MATERIALIZED (SELECT rowid AS id, bm25(sections_fts, ?, ?, ?) AS score"
        f" FROM sections_fts WHERE sections_fts MATCH ?{condition}),"
        f" by_file AS MATERIALIZED (SELECT id, min(score) AS best FROM hits GROUP BY id >> {SECTION_BITS})"
        " SELECT id, best, (SELECT count(*) FROM by_file) FROM by_file ORDER BY best, id LIMIT ?",
        (*weights, match, *values, limit),
    ).fetchall()


def terms_starting(conn: sqlite3.Connection, start: str, lengths: tuple[int, int]) -> list[tuple[str, int]]:
    """[(stem, sections holding it)] of the index's stems that start with ``start`` and whose length
    is within ``lengths`` (inclusive). Stems that are not UTF-8 are left out: see _stem_text."""
    rows = conn.execute(
        "SELECT CAST(term AS BLOB), doc FROM temp.sections_vocab WHERE term >= ? AND term < ? AND length(term) BETWEEN ? AND ?",
        (*starting_with(start), *lengths),
    )
    return [(text, count) for text, count in ((_stem_text(term), count) for term, count in rows) if "\ufffd" not in text]


def first_section_matching(conn: sqlite3.Connection, match: str) -> int | None:
    """The rowid of a section matching ``match``, if any."""
    row = conn.execute("SELECT rowid FROM sections_fts WHERE sections_fts MATCH ? LIMIT 1", (match,)).fetchone()
    return row[0] if row else None


def files_with_each(conn: sqlite3.Connection, matches: Sequence[str], scope: Scope = EVERY_FILE) -> list[int]:
    """The ids of the files of ``scope`` in which each of ``matches`` matches some section (not
    necessarily the same one)."""
    condition, values = _scoped(scope)
    each = " INTERSECT ".join(
        f"SELECT rowid >> {SECTION_BITS} AS id FROM sections_fts WHERE sections_fts MATCH ?{condition}" for _ in matches
    )
    rows = conn.execute(f"SELECT id FROM ({each}) ORDER BY id", [v for match in matches for v in (match, *values)]).fetchall()
    return [file_id for (file_id,) in rows]


def best_section_of_files(
    conn: sqlite3.Connection, match: str, weights: Sequence[float], files: Sequence[int], limit: int
) -> list[tuple[int, float]]:
    """The best section matching ``match`` of each of the top ``limit`` of ``files``: [(rowid, bm25)]."""
    return conn.execute(
        "WITH hits AS MATERIALIZED (SELECT rowid AS id, bm25(sections_fts, ?, ?, ?) AS score FROM sections_fts"
        f" WHERE sections_fts MATCH ? AND (rowid >> {SECTION_BITS}) IN (SELECT value FROM json_each(?)))"
        f" SELECT id, min(score) AS best FROM hits GROUP BY id >> {SECTION_BITS} ORDER BY best, id LIMIT ?",
        (*weights, match, json.dumps(list(files)), limit),
    ).fetchall()


def count_matching_files(conn: sqlite3.Connection, match: str, span: Span = EVERY_ROW, scope: Scope = EVERY_FILE) -> int:
    condition, values = _scoped(scope, span)
    return conn.execute(
        f"SELECT count(DISTINCT rowid >> {SECTION_BITS}) FROM sections_fts WHERE sections_fts MATCH ?{condition}", (match, *values),
    ).fetchone()[0]


def stored_file(conn: sqlite3.Connection, path: str) -> StoredFile | None:
    """What the index holds about the file at ``path`` (a source key), if anything."""
    row = conn.execute(
        "SELECT id, mtime_ns, size, inode, ctime_ns, content_hash, indexed_at_ns FROM files WHERE path = ?", (path,)
    ).fetchone()
    return StoredFile(*row) if row else None


def paths_holding(conn: sqlite3.Connection, file_ids: Iterable[int], words: Sequence[str]) -> dict[int, str]:
    """The paths (index keys) of the files ``file_ids`` whose path holds one of ``words`` (ASCII
    letters in any case, as LIKE compares them): the few worth a closer look, without handing every
    ranked file's path to Python."""
    holding = " OR ".join(["path LIKE ?"] * len(words))
    rows = conn.execute(
        f"SELECT id, path FROM files WHERE id IN (SELECT value FROM json_each(?)) AND ({holding})",
        (json.dumps(list(file_ids)), *(f"%{word}%" for word in words)),
    )
    return dict(rows.fetchall())


def files_named(conn: sqlite3.Connection, name: str, most: int, scope: Scope = EVERY_FILE) -> list[int]:
    """The ids of the files of ``scope`` (at most ``most``, by path) whose name, name without its
    extension, or title is ``name`` (ASCII letters in any case), that have sections. Three lookups
    in the indexes on names and titles."""
    key = _ascii_lower(name)
    in_scope = "(files.id IN (SELECT value FROM json_each(?))) = ?"
    passing = f" AND {scope.passing.sql}" if scope.passing.sql else ""
    rows = conn.execute(
        "SELECT id FROM ("
        f" SELECT * FROM files WHERE {FILE_NAME_SQL} = ?"
        f" UNION SELECT * FROM files WHERE {FILE_NAME_SQL} > ? AND {FILE_NAME_SQL} < ? AND instr(substr({FILE_NAME_SQL}, ?), '.') = 0"
        " UNION SELECT * FROM files WHERE lower(title) = ?"
        f") AS files WHERE section_count > 0 AND {in_scope}{passing} ORDER BY path LIMIT ?",
        (key, key + ".", key + "/", len(key) + 2, key, scope.ids, scope.inside, *scope.passing.values, most),
    ).fetchall()
    return [file_id for (file_id,) in rows]


def paths_near(conn: sqlite3.Connection, path: str, most: int) -> list[str]:
    """Indexed paths ``path`` may have meant: the files of its name (ASCII letters in any case),
    those in or under its folder, and those whose name starts with its name's first three characters; at
    most ``most`` of each, read from the indexes on paths and names."""
    folder, _, name = path.rpartition("/")
    key = _ascii_lower(name)
    prefix, start = f"{folder}/" if folder else "", key[:3]
    rows = conn.execute(
        f"SELECT path FROM (SELECT path FROM files WHERE {FILE_NAME_SQL} = ? LIMIT ?)"
        " UNION ALL SELECT path FROM (SELECT path FROM files WHERE path >= ? AND path < ? LIMIT ?)"
        f" UNION ALL SELECT path FROM (SELECT path FROM files WHERE {FILE_NAME_SQL} >= ? AND {FILE_NAME_SQL} < ? LIMIT ?)",
        (key, most, *starting_with(prefix), most, *starting_with(start), most),
    ).fetchall()
    return list(dict.fromkeys(found for (found,) in rows))


def _ascii_lower(text: str) -> str:
    """``text`` lowered as SQLite's lower() does: ASCII letters only."""
    return re.sub("[A-Z]+", lambda letters: letters[0].lower(), text)


def load_sections(conn: sqlite3.Connection, rowids: Sequence[int], text: bool = True) -> dict[int, dict[str, object]]:
    """Location and said key of the given sections, with their file's path, title, sketch (copies.py)
    and what a rescan compares (``signature``, see models.Signature), whether the file is this one
    section without a heading (``headless``), and their ``body`` if ``text``; in the order given
    (callers break ties by it)."""
    rows = conn.execute(
        f"SELECT s.id, s.start_line, s.end_line, s.heading, {'s.body' if text else 'NULL'}, s.said, f.path, f.title, f.sketch,"
        " f.mtime_ns, f.size, f.inode, f.ctime_ns, f.tags, f.section_count = 1 AND s.outline = '[]'"
        f" FROM sections AS s JOIN files AS f ON f.id = s.id >> {SECTION_BITS} WHERE s.id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(rowids)),),
    )
    found = {
        rowid: {
            "start_line": start, "end_line": end, "heading": heading, "said": said, "path": path, "title": title, "sketch": sketch,
            "mtime_ns": mtime_ns, "signature": (path, mtime_ns, size, inode, ctime_ns), "tags": stored_tags(tags),
            "headless": bool(headless), **({"body": decompress(body)} if text else {}),
        }
        for rowid, start, end, heading, body, said, path, title, sketch, mtime_ns, size, inode, ctime_ns, tags, headless in rows
    }
    return {rowid: found[rowid] for rowid in rowids if rowid in found}


def _shown_row(rowid: int, title: str, heading: str, body: str) -> tuple[int, str, str, str]:
    """A section's row as a snippet is cut from it (with its words as written only)."""
    return rowid, fts_text(title), fts_text(heading), fts_text(body)


def snippets(
    conn: sqlite3.Connection, match: str, texts: Mapping[int, tuple[str, str, str]], markers: tuple[str, str], tokens: int,
    apart: str = "",
) -> dict[int, str]:
    """snippet() of the body for a handful of (title, heading, body) texts that match ``match``,
    computed in a temporary FTS5 table. With ``apart`` (a separator no text holds), the parts of
    their identifiers are words too (identifiers.parts_apart), and a snippet shows them as written.

    The index is contentless (its text is stored compressed), so snippets are made from the few
    sections being returned: this keeps snippet cost independent of the size of the index.
    """
    if not texts:
        return {}
    with snapshot(conn):
        conn.execute("DELETE FROM temp.snippet_fts")
        conn.executemany(
            "INSERT INTO temp.snippet_fts (rowid, title, heading, body) VALUES (?, ?, ?, ?)",
            [_shown_row(rowid, *((parts_apart(part, apart) for part in text) if apart else text)) for rowid, text in texts.items()],
        )
        rows = conn.execute(
            "SELECT rowid, snippet(snippet_fts, 2, ?, ?, '…', ?) FROM temp.snippet_fts WHERE snippet_fts MATCH ?",
            (markers[0], markers[1], tokens, match),
        ).fetchall()
    # Two CJK words, or two parts of an identifier, highlighted side by side read as one.
    joins = [markers[1] + separator + markers[0] for separator in (CJK_SEPARATOR, apart) if separator]
    return {rowid: shown_text(_without(text, [*joins, apart])) for rowid, text in rows}


def _without(text: str, pieces: Sequence[str]) -> str:
    """``text`` with every one of ``pieces`` taken out, in order."""
    for piece in pieces:
        text = text.replace(piece, "")
    return text


def file_sections(conn: sqlite3.Connection, rowid: int, before: int, most: int) -> list[tuple[int, int, int, str, list[list]]]:
    """(id, start_line, end_line, body, outline) of at most ``most`` sections of ``rowid``'s file in
    text order, from the ``before``-th before it (from the file's first)."""
    first = max(section_id(file_id_of(rowid), 0), rowid - before)
    past = min(first + most, section_id(file_id_of(rowid) + 1, 0))
    rows = conn.execute("SELECT id, start_line, end_line, body, outline FROM sections WHERE id >= ? AND id < ? ORDER BY id", (first, past))
    return [(rowid, start, end, decompress(body), stored_outline(outline)) for rowid, start, end, body, outline in rows]


def sections_matching(conn: sqlite3.Connection, parts: Sequence[str], ranges: Sequence[tuple[int, int]]) -> set[int]:
    """The ids within ``ranges`` (first, last) of the sections whose heading or text match any of
    ``parts`` (FTS5 expressions): lookups in the index, in one statement, no text read."""
    match = f"{{heading body}} : ({' OR '.join(parts)})"
    one = "SELECT rowid FROM sections_fts WHERE sections_fts MATCH ? AND rowid >= ? AND rowid <= ?"
    rows = conn.execute(" UNION ALL ".join([one] * len(ranges)), [value for first, last in ranges for value in (match, first, last)])
    return {rowid for (rowid,) in rows}


def matching_texts(conn: sqlite3.Connection, texts: Mapping[int, tuple[str, str]], parts: Sequence[str]) -> list[tuple[set[int], set[int]]]:
    """For each of ``parts`` (FTS5 expressions), which of the (heading, text) ``texts`` it matches:
    (in the text or the heading, in the heading), computed in the temporary FTS5 table.

    A heading or text can match a part only where it holds the part's shape (_shape: its words'
    pieces in order, with only separators between the words): the others are not read. The rest
    are read first without the words inside their identifiers (finding those is most of the work);
    only a text a part did not match (or not in its heading) that holds the shape with those words
    after it is read again with them, as the index reads it (database.indexed_text). Every text is
    read with them at once where the pieces cannot tell (_pieces_can_tell)."""
    pieces = _word_pieces(parts)
    if not _pieces_can_tell(pieces, texts):
        return _matched(conn, {number: (indexed_text(heading), indexed_text(text)) for number, (heading, text) in texts.items()}, parts)
    lowered = {number: (_searchable(heading), _searchable(text)) for number, (heading, text) in texts.items()}
    columns = [(number, column, low) for number, pair in lowered.items() if None not in pair for column, low in enumerate(pair)]
    shapes = [_shape(each) for each in pieces]
    holding = [_holding(columns, each) for each in pieces]
    # A text FTS5 may read otherwise than it is written ("café" as "cafe") is read whole at once.
    first = {number: tuple(map(indexed_text, texts[number])) for number, pair in lowered.items() if None in pair}
    first.update(
        (number, tuple(map(fts_text, texts[number])))
        for held, each, shape in zip(holding, pieces, shapes)
        for number, _, low in held
        if number not in first and (len(each) == 1 or _holds_shape(shape, low))  # one piece: holding it is the shape but for where it starts
    )
    found = _matched(conn, first, parts)
    inside: dict[tuple[int, int], str] = {}  # (text, 0 its heading or 1 its text) -> the words inside its identifiers

    def holds_with_parts(number: int, column: int, low: str, shape: Shape) -> bool:
        if (number, column) not in inside:
            inside[number, column] = identifier_parts(texts[number][column])
        # Read already without them: only a match reaching into them can add one.
        return bool(inside[number, column]) and _holds_shape(shape, f"{_last_words(low, shape.reach - 1)}\n{inside[number, column].lower()}")

    again = {
        number
        for (anywhere, headed), held, shape in zip(found, holding, shapes)
        for number, column, low in held
        if number not in (headed if column == 0 else anywhere) and holds_with_parts(number, column, low, shape)
    }
    if again:
        whole = _matched(
            conn,
            {number: tuple(indexed_text(text, inside.get((number, column))) for column, text in enumerate(texts[number])) for number in again},
            parts,
        )
        for (anywhere, headed), (more_anywhere, more_headed) in zip(found, whole):
            anywhere |= more_anywhere
            headed |= more_headed
    return found


def _holding(columns: list[tuple[int, int, str]], pieces: Sequence[str]) -> list[tuple[int, int, str]]:
    """The (text, column, lowered) of ``columns`` that hold every one of ``pieces``: the words inside
    identifiers are pieces of words, so the others cannot match, with or without them."""
    for piece in sorted(pieces, key=len, reverse=True):  # the longest first: the fewest hold it
        columns = [column for column in columns if piece in column[2]]
    return columns


#: What unicode61 may read as part of a word, or fold into one: letters, digits, marks, private
#: use and the rest of "C" (the categories' first letters). Punctuation, spaces and symbols are
#: not folded into ASCII letters.
_WORD_CATEGORIES = frozenset("LNMC")
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")


def _searchable(text: str) -> str | None:
    """``text`` in lower case, in which a word holding a piece holds it as written; None if FTS5
    may read it otherwise (a letter or digit other than ASCII: "café" is read "cafe")."""
    lowered = text.lower()
    if lowered.isascii() or not any(unicodedata.category(char)[0] in _WORD_CATEGORIES for char in set(_NOT_ASCII.findall(lowered))):
        return lowered
    return None


class Shape(NamedTuple):
    """What a lower-case text (_searchable) holds wherever FTS5 reads in it a string of given
    pieces (_word_pieces), from its first piece long enough to look for (_shape)."""

    lead: str  # the pattern's first piece
    pattern: re.Pattern[str]
    reach: int  # how many words the string has from the pattern's first to its own last


def _shape(pieces: Sequence[str]) -> Shape:
    """The Shape of a string of words whose pieces are ``pieces``: from its first piece of at least
    MIN_PIECE_CHARS up to its next empty one, each piece at a word's start, the rest of its word,
    then separators up to the next. A word's start is tested after its piece, so that the search
    looks for the piece's letters first. Shorter pieces before it are left out (one would be tried
    at every word's start), so are the words from an empty piece on ("i", "e": any word; each try
    would step through the words after it), and each piece is cut to MAX_SHAPE_PIECE_CHARS (the
    test reads it again)."""
    lead = next(number for number, piece in enumerate(pieces) if len(piece) >= MIN_PIECE_CHARS)
    cut = [piece[:MAX_SHAPE_PIECE_CHARS] for piece in itertools.takewhile(bool, pieces[lead:])]
    words = [re.escape(piece) + f"(?<![a-z0-9]{re.escape(piece)})[a-z0-9]*" for piece in cut]
    return Shape(cut[0], re.compile("[^a-z0-9]+".join(words)), len(pieces) - lead)


def _holds_shape(shape: Shape, lowered: str) -> bool:
    """Whether ``lowered`` (_searchable) may hold ``shape``: yes if it holds its first piece more
    than MAX_SHAPE_TRIES times (the search would try each; reading the text costs less)."""
    return lowered.count(shape.lead) > MAX_SHAPE_TRIES or shape.pattern.search(lowered) is not None


_WORDS_BACK = re.compile(r"[^a-z0-9]*(?:[a-z0-9]+[^a-z0-9]*)?")


def _last_words(lowered: str, count: int) -> str:
    """The end of ``lowered`` (_searchable) that holds its last ``count`` words (all of it if it has fewer)."""
    if count <= 0:
        return ""
    back, length = lowered[::-1], 0
    for _ in range(count):
        length = _WORDS_BACK.match(back, length).end()  # type: ignore[union-attr]  # it matches "" at worst
    return lowered[len(lowered) - length:]


def _pieces_can_tell(pieces: list[list[str]], texts: Mapping[int, tuple[str, str]]) -> bool:
    """Whether the ``pieces`` of the parts (_word_pieces) can tell which of ``texts`` to read: not
    if a part's longest piece is shorter than MIN_PIECE_CHARS, or a piece is not ASCII (a stem the
    stemmer cut inside a character, "ab🖖ing" -> "ab" and part of 🖖, is held by no text; FTS5's
    letters are not Python's), or if most of the text is not ASCII (MAX_OTHER_SHARE)."""
    if min((max(map(len, each), default=0) for each in pieces), default=0) < MIN_PIECE_CHARS:
        return False
    if not all(piece.isascii() for each in pieces for piece in each):
        return False
    others = sum(len(text) for _, text in texts.values() if not text.isascii())
    return others <= MAX_OTHER_SHARE * sum(len(text) for _, text in texts.values())


def _matched(conn: sqlite3.Connection, texts: Mapping[int, tuple[str, str]], parts: Sequence[str]) -> list[tuple[set[int], set[int]]]:
    """matching_texts of (heading, text) ``texts`` as FTS5 is to be given them."""
    found: list[tuple[set[int], set[int]]] = []
    # A table of its own, without content: it only answers which rows match, and emptying it
    # ('delete-all') costs nothing, where deleting rows with content tokenizes them again.
    with snapshot(conn):
        conn.execute("INSERT INTO temp.span_fts (span_fts) VALUES ('delete-all')")
        # In rowid order: FTS5 writes out what it holds in memory whenever a rowid is lower than the last.
        conn.executemany("INSERT INTO temp.span_fts (rowid, heading, body) VALUES (?, ?, ?)", [(n, *text) for n, text in sorted(texts.items())])
        for part in parts:
            anywhere = conn.execute("SELECT rowid FROM temp.span_fts WHERE span_fts MATCH ?", (f"{{heading body}} : {part}",))
            headed = conn.execute("SELECT rowid FROM temp.span_fts WHERE span_fts MATCH ?", (f"heading : {part}",))
            found.append(({rowid for (rowid,) in anywhere}, {rowid for (rowid,) in headed}))
    return found


#: The letters the index's stemmer (porter) writes at the end of a stem in place of the word's
#: own ("happy" -> "happi", "relational" -> "relate", "probability" -> "probabl"): a word starts
#: with its stem, less its last letter if that is one of these (1.4 million words and endings
#: checked; tests/test_fast_paths.py).
STEM_OWN_LETTERS = "eil"
#: A shorter piece of a word is in nearly every text: reading texts twice would cost more.
MIN_PIECE_CHARS = 3
#: Text other than ASCII is looked at character by character to know whether FTS5 reads it as it is
#: written ("café" as "cafe"): when more than this share of the characters are in such texts,
#: they are all read at once, as that costs less (1.2-1.4x the single read on accented or
#: typographic prose without the rule, 0.3-0.9x on ASCII reference pages).
MAX_OTHER_SHARE = 0.5
#: A shape's pieces are cut to this many characters: its search reads each again where it starts a word.
MAX_SHAPE_PIECE_CHARS = 8
#: A text holding a shape's first piece more often is read without looking for the shape (a run of
#: one letter holds "aaa" at every character): each try costs more than FTS5 reading the text.
MAX_SHAPE_TRIES = 1000
#: One FTS5 string, a word or a phrase, or a prefix* term: the parts query.quote makes.
_ONE_STRING = re.compile(r'"(?:[^"]|"")*"\*?')


def _word_pieces(parts: Sequence[str]) -> list[list[str]]:
    """For each of ``parts`` (FTS5 expressions), what each word of it holds in every word it matches,
    in lower case: the word's stem (a prefix* term's too is stemmed), less its last letter if the
    stemmer may have written it (STEM_OWN_LETTERS). The words inside identifiers are pieces of the
    text's words: a text that does not hold them cannot match the part, with or without those. []
    for a part that is not one string (``a OR b`` may match by either)."""
    return [
        [stem[:-1] if stem.endswith(tuple(STEM_OWN_LETTERS)) else stem for stem in spelled] if _ONE_STRING.fullmatch(part) else []
        for part, spelled in zip(parts, _tokens(parts, "stems"))
    ]


def score_question(conn: sqlite3.Connection, match: str, weights: Sequence[float], scope: Scope = EVERY_FILE) -> None:
    """bm25 of every section of ``scope`` matching ``match`` into temp.question_hits (inside a snapshot)."""
    conn.execute("DELETE FROM temp.question_hits")
    condition, values = _scoped(scope)
    conn.execute(
        "INSERT INTO temp.question_hits (id, score)"
        f" SELECT rowid, bm25(sections_fts, ?, ?, ?) FROM sections_fts WHERE sections_fts MATCH ?{condition}",
        (*weights, match, *values),
    )


def best_question_hits(conn: sqlite3.Connection, limit: int) -> list[tuple[int, float]]:
    """The best section of each of the top ``limit`` files in temp.question_hits, best first."""
    return conn.execute(
        f"SELECT id, min(score) AS best FROM temp.question_hits GROUP BY id >> {SECTION_BITS} ORDER BY best LIMIT ?",
        (limit,),
    ).fetchall()


def best_with_feedback(
    conn: sqlite3.Connection, feedback_match: str, weights: Sequence[float], feedback_share: float, limit: int,
    scope: Scope = EVERY_FILE,
) -> list[tuple[int, float]]:
    """Like best_question_hits, each section scored by its question score plus its bm25 for
    ``feedback_match`` scaled so that the best feedback score is ``feedback_share`` of the best
    question score: a question of five words and one of fifty give their feedback the same say.
    The question's doclists are not read again."""
    condition, values = _scoped(scope)
    return conn.execute(
        "WITH feedback AS MATERIALIZED (SELECT rowid AS id, bm25(sections_fts, ?, ?, ?) AS score"
        f" FROM sections_fts WHERE sections_fts MATCH ?{condition}),"
        " scale AS (SELECT ? * coalesce((SELECT min(score) FROM temp.question_hits) / nullif((SELECT min(score) FROM feedback), 0), 0) AS k),"
        " combined AS (SELECT id, sum(score) AS score FROM"
        " (SELECT id, score FROM temp.question_hits UNION ALL SELECT id, (SELECT k FROM scale) * score FROM feedback) GROUP BY id)"
        f" SELECT id, min(score) AS best FROM combined GROUP BY id >> {SECTION_BITS} ORDER BY best LIMIT ?",
        (*weights, feedback_match, *values, feedback_share, limit),
    ).fetchall()


def index_counts(conn: sqlite3.Connection, prefix: str = "") -> dict[str, object]:
    """Numbers for status: files, FTS rows, fallback-decoded files, skip counts, meta values; of
    the files whose keys start with ``prefix`` (one source's) if given."""
    # The files' section counts, not count(*) of sections: that reads every page of the stored text
    # (50 ms at 25k files); read from the index files_counted, not the files' rows (0.5 s at 1M).
    files, fallback, sections = conn.execute(
        "SELECT count(*), coalesce(sum(fallback_decoded), 0), coalesce(sum(section_count), 0) FROM files WHERE path >= ? AND path < ?",
        starting_with(prefix),
    ).fetchone()
    return {"indexed_files": files, "total_documents": sections, "fallback_decoded_files": fallback, "meta": meta_values(conn)}


def meta_values(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def recorded_folders(conn: sqlite3.Connection, prefix: str = "") -> dict[str, str]:
    """The identities (models.identity) of the folders a source's index was made from, as its last
    scan recorded them: "" for the source itself, "a/b/" for each mount point in it; none before
    any scan."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (prefix + "mounts",)).fetchone()
    try:
        recorded = json.loads(row[0]) if row else None
    except (ValueError, RecursionError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {folder: found for folder, found in recorded.items() if isinstance(folder, str) and isinstance(found, str)}


def skipped_files(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute("SELECT path, reason, detail FROM skipped ORDER BY path").fetchall()


def suffix_counts(conn: sqlite3.Connection, prefix: str = "") -> dict[str, int]:
    """How many indexed files have each extension (lowercased; "" for none), of the keys that start
    with ``prefix``: what the server's instructions say a source holds. Reads every key (1.2 s at
    a million files): a scan keeps the result in the meta (FORMATS_KEY), read at start."""
    rows = conn.execute("SELECT path FROM files WHERE path >= ? AND path < ?", starting_with(prefix))
    return dict(Counter(map(_suffix, (path for (path,) in rows))))


def _suffix(key: str) -> str:
    """A key's extension, lowercased: "" for a name without one (or a dot file's: ``.bashrc``)."""
    dot = key.rfind(".")
    return key[dot:].lower() if dot > key.rfind("/") + 1 else ""
