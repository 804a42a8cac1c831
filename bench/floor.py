"""The floor the daemon is measured against: what bare SQLite FTS5 and os.scandir cost.

    python bench/floor.py index CORPUS DB     walk, read, decode, insert into one FTS5 table

The index is one FTS5 table with the daemon's tokenizer, one row per file, filled in a single
transaction: no change detection, no sections, no crash safety between files.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator

INCLUDED = (".md", ".txt", ".rst")
TOKENIZER = "porter unicode61 remove_diacritics 2"


def walk(root: str) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every regular file under ``root`` as (path relative to root, entry); folders depth first."""
    stack = [(root, "")]
    while stack:
        folder, prefix = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, prefix + entry.name + "/"))
                elif entry.is_file(follow_symlinks=False):
                    yield prefix + entry.name, entry


def stat_walk(root: str) -> int:
    """Stat every file under ``root`` (what any change detection must at least do); return the count."""
    count = 0
    for _, entry in walk(root):
        entry.stat()
        count += 1
    return count


def texts(root: str) -> Iterator[tuple[str, str]]:
    for rel, entry in walk(root):
        if not entry.name.lower().endswith(INCLUDED):
            continue
        with open(entry.path, "rb") as handle:
            data = handle.read()
        if b"\x00" not in data[:8192]:
            yield rel, data.decode("utf-8", "replace")


def build(root: str, db: str) -> None:
    """Index every text file under ``root`` into a fresh database ``db`` in one transaction."""
    conn = sqlite3.connect(db)
    conn.execute(f"CREATE VIRTUAL TABLE docs USING fts5(path UNINDEXED, body, tokenize='{TOKENIZER}')")
    with conn:
        conn.executemany("INSERT INTO docs (path, body) VALUES (?, ?)", texts(root))
    conn.close()


def top10(conn: sqlite3.Connection, match: str) -> list[tuple[str, str]]:
    """The floor's query: best 10 files by bm25 with a 32-token snippet each."""
    return conn.execute(
        "SELECT path, snippet(docs, 1, '[', ']', '…', 32) FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT 10",
        (match,),
    ).fetchall()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "index":
        sys.exit(__doc__)
    build(sys.argv[2], sys.argv[3])
