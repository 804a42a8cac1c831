"""Compare ranking variants on test collections (the experiments behind the README's Ranking section).

Each variant changes one thing in search.py or query.py for the length of a run (a patched
constant or function), then the collection's queries go through ``search.search`` as in
bench/relevance.py. ``plain`` is the reference: a plain FTS5 table of the raw files, all query
words OR-ed, ordered by bm25.

    .venv/bin/python bench/ranking_variants.py /tmp/bench-ranking/cranfield /tmp/bench-ranking/cisi \
        --index-dir /tmp/bench-ranking/indexes [--only NAME ...]
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import query  # noqa: E402
import relevance  # noqa: E402
import search  # noqa: E402
from database import TOKENIZER  # noqa: E402
from query import build_match, quote  # noqa: E402


def phrases_required(parsed: query.ParsedQuery) -> query.MatchPlan:
    """As before this change: a question's "phrases" and prefix* terms must all match."""
    plan = build_match(parsed)
    required = [quote(p) for p in parsed.phrases] + [quote([p]) + "*" for p in parsed.prefixes]
    if not plan.question or not required:
        return plan
    return replace(plan, precise=f"({' AND '.join(required)}) AND {plan.precise}")


@contextmanager
def patched(**changes: object) -> Iterator[None]:
    with ExitStack() as stack:
        for name, value in changes.items():  # each where it is looked up: the query's plan or its ranking
            stack.enter_context(mock.patch.object(query if hasattr(query, name) else search, name, value))
        yield


#: name -> (what it changes, patches to search.py or query.py). Earlier rounds are this script at
#: the commits that made them: d1d48c6 (compounds, stopwords, repeated words, bigram phrases, term
#: cap) and 00324d3 (the configuration before af318f8's ranking rework). The rows of
#: docs/ranking.md's "Every variant tried" table marked "D" are these variants of the current one.
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "current": ("as committed", {}),
    "no feedback": ("questions without pseudo-relevance feedback", {"feedback_words": lambda *_: []}),
    "no feedback, cap 256": ("no feedback, MAX_QUERY_TERMS 64 -> 256", {"feedback_words": lambda *_: [], "MAX_QUERY_TERMS": 256}),
    "phrases required": ("a question's quoted phrases must match (5 cisi queries quote a word)", {"build_match": phrases_required}),
    **{
        f"share {share}": (f"FEEDBACK_SHARE 0.15 -> {share}", {"FEEDBACK_SHARE": share})
        for share in (0.1, 0.2, 0.25, 0.3, 0.5)
    },
    "3 feedback words": ("FEEDBACK_WORDS 10 -> 3", {"FEEDBACK_WORDS": 3}),
    "5 feedback words": ("FEEDBACK_WORDS 10 -> 5", {"FEEDBACK_WORDS": 5}),
    "5 feedback files": ("FEEDBACK_FILES 10 -> 5, FEEDBACK_MIN_FILES 3 -> 2", {"FEEDBACK_FILES": 5, "FEEDBACK_MIN_FILES": 2}),
    "15 feedback files": ("FEEDBACK_FILES 10 -> 15, FEEDBACK_MIN_FILES 3 -> 4", {"FEEDBACK_FILES": 15, "FEEDBACK_MIN_FILES": 4}),
    "repeats 1": ("MAX_REPEATS 2 -> 1", {"MAX_REPEATS": 1}),
    "repeats 3": ("MAX_REPEATS 2 -> 3", {"MAX_REPEATS": 3}),
    "weights 2,1,1": ("title weight 2", {"COLUMN_WEIGHTS": (2.0, 1.0, 1.0)}),
    "weights 3,2,1": ("the weights before af318f8", {"COLUMN_WEIGHTS": (3.0, 2.0, 1.0)}),
    "cap 256 terms": ("MAX_QUERY_TERMS 64 -> 256", {"MAX_QUERY_TERMS": 256}),
}


PLAIN = {
    "plain": "plain FTS5 table, the query's distinct words OR-ed",
    "plain, repeats": "plain FTS5 table, every query word OR-ed (repeats count)",
}


def plain_ranker(collection: Path, index_dir: Path, unique: bool) -> relevance.Ranker:
    """The reference: one plain FTS5 table of the files' text, the query's words OR-ed (each once
    if ``unique``: this reproduces the "plain FTS5" figures of the collections' README), bm25 order."""
    db = index_dir / f"plain-{collection.name}.sqlite3"
    conn = sqlite3.connect(db)
    if not conn.execute("SELECT name FROM sqlite_master WHERE name = 'plain'").fetchone():
        conn.execute(f"CREATE VIRTUAL TABLE plain USING fts5(body, tokenize=\"{TOKENIZER}\")")
        with conn:
            conn.executemany(
                "INSERT INTO plain (rowid, body) VALUES (?, ?)",
                ((int(p.stem), p.read_text(encoding="utf-8")) for p in (collection / "docs").glob("*.txt")),
            )

    def rank(query: str, limit: int) -> list[str]:
        words = search._words(query)
        if unique:
            words = list(dict.fromkeys(w.lower() for w in words))
        if not words:
            return []
        match = " OR ".join(quote([w]) for w in words)
        rows = conn.execute("SELECT rowid FROM plain WHERE plain MATCH ? ORDER BY bm25(plain) LIMIT ?", (match, limit))
        return [str(r[0]) for r in rows]

    return rank


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("collections", nargs="+", type=Path)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="variant names to run (default: all, plus plain)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    args.index_dir.mkdir(parents=True, exist_ok=True)
    data = {
        c: (relevance.index_collection(c, args.index_dir), relevance.read_queries(c / "queries.tsv"), relevance.read_qrels(c / "qrels.tsv"))
        for c in args.collections
    }
    names = [*PLAIN, *VARIANTS] if not args.only else args.only
    header = " | ".join(f"{c.name} nDCG@10 | R@100 | MRR@10" for c in args.collections)
    print(f"| variant | change | {header} |")
    print("|---|---|" + "---:|" * 3 * len(args.collections))
    for name in names:
        cells = []
        for collection, (db_path, queries, qrels) in data.items():
            if name in PLAIN:
                what = PLAIN[name]
                rank = plain_ranker(collection, args.index_dir, unique=name == "plain")
                summary, _ = relevance.evaluate(collection.name, queries, qrels, rank)
            else:
                what, patches = VARIANTS[name]
                with patched(**patches):
                    summary, _ = relevance.evaluate(collection.name, queries, qrels, relevance.daemon_ranker(db_path))
            cells.append(f"{summary.ndcg:.4f} | {summary.recall:.4f} | {summary.mrr:.4f}")
        print(f"| {name} | {what} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
