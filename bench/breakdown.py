"""Where indexing CPU goes, stage by stage, on the same files: the evidence behind the index ratio.

    python bench/breakdown.py CORPUS_DIR [--runs N]

Each stage of loader.load_file (read and hash, decode and find headings, split, compress, said
keys, outlines, sketch, tags), the pickling that carries a chunk of loaded files from a loader
process to the writer and back, and the writer's own work (IndexWriter.upsert_file per file, its
FTS5 insert alone, the commits) runs on one thread and is timed in process CPU seconds (less
sensitive to a busy machine than wall time), beside the whole floor (bench/floor.py). With
``--runs N`` each figure is the least of N runs. Databases go to a temporary directory.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import database  # noqa: E402
import floor  # noqa: E402
import harness  # noqa: E402
import index_writer  # noqa: E402
from copies import sketch  # noqa: E402
from exceptions import FileSkipped  # noqa: E402
from file_utils import read_regular_file  # noqa: E402
from index_writer import IndexWriter  # noqa: E402
from indexer import BATCH_BYTES, BATCH_FILES  # noqa: E402
from loader import CHUNK_FILES, _LoaderResults  # noqa: E402
from markup import front_matter_tags  # noqa: E402
from models import LoadedFile  # noqa: E402
from sections import file_content, said_key, sections  # noqa: E402

_T = TypeVar("_T")
LOADER, WRITER = "loader", "writer"


class Stages:
    """CPU seconds per (side, stage)."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)

    def timed(self, side: str, stage: str, fn: Callable[[], _T]) -> _T:
        start = time.process_time()
        result = fn()
        self.seconds[(side, stage)] += time.process_time() - start
        return result


def load(root: Path, rel: str, stages: Stages) -> LoadedFile:
    """loader.load_file, a stage at a time."""
    raw = stages.timed(LOADER, "read and hash", lambda: read_regular_file(root, rel, 10 << 20))
    content = stages.timed(LOADER, "decode, headings, title", lambda: file_content(rel, raw.data))
    split = stages.timed(LOADER, "split into sections", lambda: sections(content))
    stored = stages.timed(LOADER, "compress", lambda: [database.compress(s.body) for s in split])
    said = stages.timed(LOADER, "said keys", lambda: [said_key(s.body) for s in split])
    outlines = stages.timed(LOADER, "outlines", lambda: [database.outline_text(s.outline) for s in split])
    sketched = stages.timed(LOADER, "sketch", lambda: sketch(content.text))
    tags = stages.timed(LOADER, "tags", lambda: front_matter_tags(content.padded))
    indexed = stages.timed(LOADER, "identifier parts", lambda: [database.indexed_text(s.body) for s in split])
    rows = [(s.start_line, s.end_line, s.heading, *more) for s, *more in zip(split, indexed, stored, said, outlines)]
    return LoadedFile(
        path=rel, mtime_ns=raw.mtime_ns, size=raw.size, inode=raw.inode, ctime_ns=raw.ctime_ns, content_hash=raw.content_hash,
        read_at_ns=raw.read_at_ns, encoding=content.encoding, fallback_decoded=content.fallback_decoded, title=content.title,
        sections=rows, sketch=sketched, tags=tags,
    )


def carry(loaded: list[LoadedFile], stages: Stages) -> None:
    """Pickle chunks as a loader process sends them, and unpickle them as the writer reads them."""
    for start in range(0, len(loaded), CHUNK_FILES):
        blob = stages.timed(LOADER, "pickle a chunk", lambda: pickle.dumps(loaded[start:start + CHUNK_FILES], pickle.HIGHEST_PROTOCOL))
        stages.timed(WRITER, "unpickle a chunk", lambda: _LoaderResults(io.BytesIO(blob)).load())


def write(loaded: list[LoadedFile], db: Path, stages: Stages) -> None:
    """IndexWriter.upsert_file of every file, in batches as the indexer makes them."""
    writer = IndexWriter(db)
    try:
        done = 0
        while done < len(loaded):
            batch, size = [], 0
            while done < len(loaded) and len(batch) < BATCH_FILES and size < BATCH_BYTES:
                batch.append(loaded[done])
                size += loaded[done].size
                done += 1
            stages.timed(WRITER, "BEGIN", lambda: writer.conn.execute("BEGIN IMMEDIATE"))
            for item in batch:
                stages.timed(WRITER, "upsert_file (all its SQL)", lambda: writer.upsert_file(item, None))
            stages.timed(WRITER, "COMMIT", lambda: writer.conn.execute("COMMIT"))
    finally:
        writer.close()


def fts_alone(loaded: list[LoadedFile], db: Path, stages: Stages) -> None:
    """The FTS5 insert of the same rows into a table of its own: the part of upsert_file that is FTS5's."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(title, heading, body, content='', tokenize=\"{database.TOKENIZER}\")")
    conn.execute("INSERT INTO f (f, rank) VALUES ('hashsize', ?)", (index_writer.FTS_HASH_BYTES,))
    conn.execute("BEGIN")
    for number, item in enumerate(loaded, start=1):
        rows = [(database.section_id(number, n), item.title, s[2], s[3]) for n, s in enumerate(item.sections)]
        stages.timed(WRITER, "  of which the FTS5 insert", lambda: conn.executemany("INSERT INTO f (rowid, title, heading, body) VALUES (?, ?, ?, ?)", rows))
    stages.timed(WRITER, "  of which the FTS5 insert", lambda: conn.execute("COMMIT"))
    conn.close()


def one_run(root: Path, paths: list[str]) -> tuple[Stages, int, int]:
    stages = Stages()
    loaded = []
    for rel in paths:
        try:
            loaded.append(load(root, rel, stages))
        except FileSkipped:
            continue
    carry(loaded, stages)
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        write(loaded, Path(tmp) / "index.sqlite3", stages)
        fts_alone(loaded, Path(tmp) / "fts.sqlite3", stages)
        stages.timed("floor", "whole bench/floor.py", lambda: floor.build(str(root), os.path.join(tmp, "floor.db")))
    return stages, len(loaded), sum(len(item.sections) for item in loaded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    root = args.corpus.resolve()
    paths = sorted(rel for rel, _ in floor.walk(str(root)) if rel.lower().endswith(floor.INCLUDED))
    runs = [one_run(root, paths) for _ in range(args.runs)]
    least = {key: min(stages.seconds[key] for stages, _, _ in runs) for key in runs[0][0].seconds}
    _, files, rows = runs[0]
    print(f"{files} files, {rows} sections ({rows / max(files, 1):.1f} per file); least of {args.runs} run(s); load {harness.load()}")
    for side in (LOADER, WRITER, "floor"):
        total = sum(seconds for (s, stage), seconds in least.items() if s == side and not stage.startswith("  "))
        print(f"{side}: {total:.2f} s CPU")
        for (s, stage), seconds in least.items():
            if s == side:
                print(f"  {stage:<34}{seconds:8.3f} s")


if __name__ == "__main__":
    main()
