"""Two ways to make the ten snippets of a reply: the daemon's temporary FTS5 table, or an
external-content FTS5 table over a view that decompresses the stored sections.

    python bench/snippet_routes.py --corpus DIR --index DB --work DIR [--repeat N]

DB is an index that ``main.py index --source DIR`` wrote; it is copied into --work, and the copy
gets an external-content table (built with FTS5's 'rebuild', which takes about as long as
indexing). For each of bench/run.py's queries, the daemon ranks the sections, then these are
timed (p50 ms): ``temp`` index_queries.snippets() on the whole sections; ``ext/row`` snippet() from the
external-content table, one statement per section (``rowid = ?``); ``ext IN`` one statement with
``rowid IN (...)``; ``seek`` finding the ten rows again in the index without any snippet.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from run import choose_queries, timed  # noqa: E402

import database  # noqa: E402
import index_queries  # noqa: E402
import search  # noqa: E402
from query import build_match, parse_query  # noqa: E402
from snippets import SNIPPET_TOKENS  # noqa: E402

EXTERNAL = f"""
CREATE VIEW IF NOT EXISTS section_text AS SELECT s.id AS id, f.title AS title, s.heading AS heading,
    decompress(s.body) AS body FROM sections AS s JOIN files AS f ON f.id = s.id >> {database.SECTION_BITS};
CREATE VIRTUAL TABLE IF NOT EXISTS ext_fts USING fts5(title, heading, body, content='section_text',
    content_rowid='id', tokenize="{database.TOKENIZER}");
"""


def p50(run: Callable[[], object], repeat: int) -> float:
    return statistics.median(timed(run, repeat)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    copy = args.work / "snippet-routes.sqlite3"
    source = sqlite3.connect(f"file:{args.index}?mode=ro", uri=True)
    target = sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.create_function("decompress", 1, database.decompress, deterministic=True)
    target.executescript(EXTERNAL)
    target.execute("INSERT INTO ext_fts (ext_fts) VALUES ('rebuild')")
    target.commit()
    target.close()
    conn = database.reader(copy)
    conn.create_function("decompress", 1, database.decompress, deterministic=True)
    print(f"{'query':<12}{'temp':>8}{'ext/row':>9}{'ext IN':>8}{'seek':>7}")
    for name, spec in choose_queries(args.corpus).items():
        parsed = parse_query(spec["query"])
        plan = build_match(parsed)
        with database.snapshot(conn):
            ranking = search.rank(search.Searching(copy, conn), parsed, plan, 10)
        times = time_routes(conn, plan.precise, [rowid for rowid, _ in ranking[0]], args.repeat)
        print(f"{name:<12}" + "".join(f"{t:>{w}.2f}" for t, w in zip(times, (8, 9, 8, 7), strict=True)))


def time_routes(conn: sqlite3.Connection, match: str, rowids: list[int], repeat: int) -> list[float]:
    """p50 ms of: temp, ext/row, ext IN, seek (see the module docstring)."""
    sections = index_queries.load_sections(conn, rowids)
    texts = {rowid: (s["title"], s["heading"], s["body"]) for rowid, s in sections.items()}
    per_row = "SELECT snippet(ext_fts, 2, '[', ']', '…', 32) FROM ext_fts WHERE ext_fts MATCH ? AND rowid = ?"
    in_list = f"SELECT snippet(ext_fts, 2, '[', ']', '…', 32) FROM ext_fts WHERE ext_fts MATCH ? AND rowid IN ({','.join('?' * len(rowids))})"
    seek = "SELECT rowid FROM sections_fts WHERE sections_fts MATCH ? AND rowid = ?"
    return [
        p50(lambda: index_queries.snippets(conn, match, texts, ("[", "]"), SNIPPET_TOKENS), repeat),
        p50(lambda: [conn.execute(per_row, (match, rowid)).fetchall() for rowid in rowids], repeat),
        p50(lambda: conn.execute(in_list, (match, *rowids)).fetchall(), repeat),
        p50(lambda: [conn.execute(seek, (match, rowid)).fetchall() for rowid in rowids], repeat),
    ]

if __name__ == "__main__":
    main()
