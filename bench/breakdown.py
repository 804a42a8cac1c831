"""Where indexing CPU goes, stage by stage, on the same files: the evidence behind the index ratio.

    python bench/breakdown.py CORPUS_DIR

Each stage runs alone on one thread and is timed in process CPU seconds (less sensitive to a busy
machine than wall time): the daemon's read+hash, decode, split and compress, its SQLite writes
(FTS rows for sections, the compressed section table), the same text inserted as one FTS row per
file, and the whole floor (bench/floor.py). Databases go to a temporary directory.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import database  # noqa: E402
import floor  # noqa: E402
from exceptions import FileSkipped  # noqa: E402
from file_utils import decode_text, read_regular_file  # noqa: E402
from indexer import BATCH_BYTES  # noqa: E402
from sections import split_sections  # noqa: E402



def cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    paths = sorted(rel for rel, _ in floor.walk(str(root)) if rel.lower().endswith(floor.INCLUDED))
    stages = dict.fromkeys(("read+hash", "decode", "split", "compress"), 0.0)
    loaded = []
    for rel in paths:
        try:
            seconds, raw = cpu(lambda: read_regular_file(root, rel, 10 << 20))
            stages["read+hash"] += seconds
            seconds, (text, _, _) = cpu(lambda: decode_text(rel, raw.data))
            stages["decode"] += seconds
        except FileSkipped:
            continue
        seconds, (title, sections) = cpu(lambda: split_sections(text, rel))
        stages["split"] += seconds
        seconds, bodies = cpu(lambda: [database.compress(s.body) for s in sections])
        stages["compress"] += seconds
        loaded.append((text, title, sections, bodies))
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:

        def write(name: str, schema: str, rows) -> float:
            """Rows into a fresh table, a transaction per BATCH_BYTES of text as in the daemon."""
            conn = sqlite3.connect(os.path.join(tmp, name), isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(schema)
            if "fts5" in schema:
                conn.execute("INSERT INTO f (f, rank) VALUES ('hashsize', ?)", (database.FTS_HASH_BYTES,))
            start = time.process_time()
            batch_bytes = 0
            conn.execute("BEGIN")
            for file_no, item in enumerate(loaded, start=1):
                rows(conn, file_no, *item)
                batch_bytes += len(item[0])
                if batch_bytes >= BATCH_BYTES:
                    conn.execute("COMMIT")
                    conn.execute("BEGIN")
                    batch_bytes = 0
            conn.execute("COMMIT")
            conn.close()
            return time.process_time() - start

        fts = f"CREATE VIRTUAL TABLE f USING fts5(title, heading, body, content='', tokenize=\"{database.TOKENIZER}\")"
        stages["fts insert, section rows"] = write("sections.db", fts, lambda c, n, text, title, sections, bodies: c.executemany(
            "INSERT INTO f (rowid, title, heading, body) VALUES (?, ?, ?, ?)",
            [(database.section_id(n, i), title, s.heading, s.body) for i, s in enumerate(sections)]))
        stages["fts insert, file rows"] = write("files.db", fts, lambda c, n, text, title, sections, bodies: c.execute(
            "INSERT INTO f (rowid, title, heading, body) VALUES (?, ?, '', ?)", (n, title, text)))
        stages["section table insert"] = write(
            "blobs.db", "CREATE TABLE s (id INTEGER PRIMARY KEY, a, b, heading, body)",
            lambda c, n, text, title, sections, bodies: c.executemany(
                "INSERT INTO s VALUES (?, ?, ?, ?, ?)",
                [(database.section_id(n, i), s.start_line, s.end_line, s.heading, b) for i, (s, b) in enumerate(zip(sections, bodies))]))
        stages["floor (whole bench/floor.py)"], _ = cpu(lambda: floor.build(str(root), os.path.join(tmp, "floor.db")))
    rows = sum(len(item[2]) for item in loaded)
    print(f"{len(loaded)} files, {rows} sections ({rows / max(len(loaded), 1):.1f} per file), load {os.getloadavg()[0]:.2f}")
    for name, seconds in stages.items():
        print(f"  {name:<32}{seconds:8.2f} s CPU")


if __name__ == "__main__":
    main()
