"""Query latency of long questions over a large index, against a plain FTS5 floor in the same run.

The risk the ranking adds: a natural-language question OR-s many words, some present in most
files, and feedback runs a second query. This script generates a synthetic corpus (seeded; each
file mixes the shuffled words of two documents of the collection given with ``--vocab-from``, so
word document-frequencies stay realistic, plus one word planted in 90% of the files), indexes it
with the daemon's indexer, builds a plain FTS5 table of the same files, then times in turn, query
by query: ``search.search(db, q, 10)``; the same without feedback; and the floor, a plain FTS5
top-10 query with ``snippet()``, the query's distinct words OR-ed, ordered by bm25.

    .venv/bin/python bench/ranking_latency.py --dir /tmp/bench-ranking/synth --files 100000 \
        --vocab-from /tmp/bench-ranking/cisi --questions /tmp/bench-ranking/cisi/queries.tsv
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import relevance  # noqa: E402
import search as search_module  # noqa: E402
from database import TOKENIZER  # noqa: E402
from query import build_match, parse_query  # noqa: E402
from search import search  # noqa: E402

#: Planted in 90% of the files; added to every question of the second group.
COMMON_WORD = "system"
QUESTIONS = 40
KEYWORD_QUERIES = ("retrieval", "library catalog", "boolean search terms", COMMON_WORD)


def generate(target: Path, files: int, vocab_from: Path, seed: int = 7) -> None:
    """Write ``files`` text files under ``target`` (skipped if already complete)."""
    if target.is_dir() and sum(1 for _ in target.rglob("*.txt")) >= files:
        return
    docs = [re.findall(r"[a-z]+", p.read_text(encoding="utf-8").lower()) for p in sorted((vocab_from / "docs").glob("*.txt"))]
    rng = random.Random(seed)
    for n in range(files):
        folder = target / f"d{n // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        first, second = rng.sample(docs, 2)
        body = first + rng.sample(second, len(second) // 3)
        rng.shuffle(body)
        if rng.random() < 0.9:
            body.insert(rng.randrange(len(body) + 1), COMMON_WORD)
        lines = [" ".join(body[i:i + 12]) for i in range(0, len(body), 12)]
        (folder / f"f{n}.txt").write_text(" ".join(first[:8]) + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")


def build_plain(source: Path, db: Path) -> sqlite3.Connection:
    """A plain FTS5 table (with its content) of every file under ``source``."""
    conn = sqlite3.connect(db)
    if not conn.execute("SELECT name FROM sqlite_master WHERE name = 'plain'").fetchone():
        conn.execute(f"CREATE VIRTUAL TABLE plain USING fts5(body, tokenize=\"{TOKENIZER}\")")
        with conn:
            conn.executemany("INSERT INTO plain (body) VALUES (?)", ((p.read_text(encoding="utf-8"),) for p in source.rglob("*.txt")))
        conn.execute("INSERT INTO plain (plain) VALUES ('optimize')")
    return conn


def floor_query(conn: sqlite3.Connection, query: str) -> None:
    words = list(dict.fromkeys(w.lower() for t in parse_query(query).terms for w in t))
    match = " OR ".join('"' + w + '"' for w in words)
    conn.execute(
        "SELECT rowid, snippet(plain, 0, '**', '**', '…', 32) FROM plain WHERE plain MATCH ? ORDER BY bm25(plain) LIMIT 10",
        (match,),
    ).fetchall()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_queries(runners: dict[str, Callable[[str], object]], queries: list[str], rounds: int) -> dict[str, list[float]]:
    """Milliseconds per call of each runner, the runners taking turns on each query."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for query in queries:
            for name, run in runners.items():
                start = time.perf_counter()
                run(query)
                times[name].append((time.perf_counter() - start) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="where the corpus and indexes go")
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--vocab-from", type=Path, required=True, help="a collection directory whose docs give the words")
    parser.add_argument("--questions", type=Path, required=True, help="a queries.tsv of long questions to time")
    parser.add_argument("--rounds", type=int, default=3, help="times each query is run")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    source = args.dir / "corpus"
    generate(source / "docs", args.files, args.vocab_from)
    db_path = relevance.index_collection(source, args.dir / "index")
    plain = build_plain(source / "docs", args.dir / "plain.sqlite3")
    questions = list(relevance.read_queries(args.questions).values())[:QUESTIONS]
    groups = {
        "questions": questions,
        f"questions + '{COMMON_WORD}'": [f"{q} in a {COMMON_WORD}" for q in questions],
        "keywords": list(KEYWORD_QUERIES),
    }

    def without_feedback(query: str) -> object:
        with mock.patch.object(search_module, "feedback_words", lambda *_: []):
            return search(db_path, query, 10)

    runners: dict[str, Callable[[str], object]] = {
        "search": lambda q: search(db_path, q, 10),
        "no feedback": without_feedback,
        "floor": lambda q: floor_query(plain, q),
    }
    print(f"{args.files} files; {len(questions)} questions, the same with '{COMMON_WORD}' (in ~90% of the files) added, "
          f"{len(KEYWORD_QUERIES)} keyword queries; {args.rounds} rounds; milliseconds")
    print("| queries | feedback ran | " + " | ".join(f"{r} p50 | {r} p99" for r in runners) + " | search/floor p50 |")
    print("|---|---:|" + "---:|" * (2 * len(runners) + 1))
    for name, queries in groups.items():
        times = time_queries(runners, queries, args.rounds)
        cells = " | ".join(f"{statistics.median(t):.1f} | {percentile(t, 0.99):.1f}" for t in times.values())
        ratio = statistics.median(times["search"]) / statistics.median(times["floor"])
        with_feedback = sum(
            1 for q in queries
            if build_match(parse_query(q)).question and search(db_path, q, 10)["files_matched"] <= search_module.FEEDBACK_MAX_FILES
        )
        print(f"| {name} | {with_feedback}/{len(queries)} | {cells} | {ratio:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
