"""Compare ranking variants on test collections (the experiments behind the README's Ranking section).

Each variant changes one thing in search.py for the length of a run (a patched constant or an
alternative ``build_match``), then the collection's queries go through ``search.search`` as in
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
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import relevance  # noqa: E402
import search  # noqa: E402
from database import TOKENIZER  # noqa: E402
from search import MatchPlan, ParsedQuery, _is_stopword, _quote  # noqa: E402


def _or_plan(parsed: ParsedQuery, terms: list[list[str]]) -> MatchPlan:
    """Every term OR-ed (phrases and prefixes too): pure bm25 over whatever matches."""
    parts = [_quote(t) for t in terms] + [_quote(p) for p in parsed.phrases] + [_quote([p]) + "*" for p in parsed.prefixes]
    return MatchPlan("(" + " OR ".join(parts) + ")", None)


def _question_terms(parsed: ParsedQuery) -> list[list[str]]:
    return [t for t in parsed.terms if not _is_stopword(t)] or parsed.terms


def keep_stopwords(parsed: ParsedQuery) -> MatchPlan:
    return _or_plan(parsed, parsed.terms)


def dedupe_terms(parsed: ParsedQuery) -> MatchPlan:
    seen: set[tuple[str, ...]] = set()
    unique = [t for t in _question_terms(parsed) if not (tuple(w.lower() for w in t) in seen or seen.add(tuple(w.lower() for w in t)))]
    return _or_plan(parsed, unique)


def split_compounds(parsed: ParsedQuery) -> MatchPlan:
    """``two-dimensional`` as two OR-ed words instead of one phrase."""
    return _or_plan(parsed, split_terms(parsed))


def compounds_and_words(parsed: ParsedQuery) -> MatchPlan:
    """A compound both as its phrase and as its words."""
    terms = _question_terms(parsed)
    extra = [[w] for t in terms if len(t) > 1 for w in t if w.lower() not in search.STOPWORDS]
    return _or_plan(parsed, terms + extra)


def bigram_bonus(parsed: ParsedQuery) -> MatchPlan:
    """Adjacent content words of the question also OR-ed as a phrase: files using them together score more."""
    terms = _question_terms(parsed)
    pairs = [a + b for a, b in zip(terms, terms[1:])]
    return _or_plan(parsed, terms + pairs)


def repeats_capped(limit: int):
    """A word repeated in the question counts at most ``limit`` times (query-term saturation)."""

    def build(parsed: ParsedQuery) -> MatchPlan:
        seen: Counter[str] = Counter()
        kept = []
        for term in split_terms(parsed):
            seen[term[0].lower()] += 1
            if seen[term[0].lower()] <= limit:
                kept.append(term)
        return _or_plan(parsed, kept)

    return build


def split_terms(parsed: ParsedQuery) -> list[list[str]]:
    return [[w] for t in _question_terms(parsed) for w in t if w.lower() not in search.STOPWORDS]


#: Generic function words and request words of questions ("describe", "give", "anyone") that the
#: committed list lacks; no word of either collection's subject.
EXTRA_STOPWORDS = frozenset(
    """also although among another anyone anything around besides cannot either else enough etc even ever
    every however indeed instead many may might much must neither never nevertheless often otherwise perhaps
    per quite rather really several shall since still therefore thus though toward towards upon us whatever
    whether within without yet already via describe discuss explain give show tell find know want need please
    interested looking wondering possible someone something""".split()
)


@contextmanager
def patched(**changes: object) -> Iterator[None]:
    if not changes:
        yield
        return
    with mock.patch.multiple(search, **changes):
        yield


#: name -> (what it changes, patches to search.py)
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "current": ("as committed", {}),
    "weights 1,1,1": ("no title/heading boost", {"COLUMN_WEIGHTS": (1.0, 1.0, 1.0)}),
    "weights 2,1.5,1": ("milder title/heading boost", {"COLUMN_WEIGHTS": (2.0, 1.5, 1.0)}),
    "weights 5,3,1": ("stronger title/heading boost", {"COLUMN_WEIGHTS": (5.0, 3.0, 1.0)}),
    "keep stopwords": ("OR every word, stopwords too", {"build_match": keep_stopwords}),
    "dedupe terms": ("a repeated word counts once", {"build_match": dedupe_terms}),
    "split compounds": ("two-dimensional -> two OR dimensional", {"build_match": split_compounds}),
    "compound+words": ("two-dimensional -> phrase OR two OR dimensional", {"build_match": compounds_and_words}),
    "bigram bonus": ("adjacent content words also as phrases", {"build_match": bigram_bonus}),
    "cap 256 terms": ("MAX_QUERY_TERMS 64 -> 256", {"MAX_QUERY_TERMS": 256}),
    "split + cap 256": ("split compounds, MAX_QUERY_TERMS 256", {"build_match": split_compounds, "MAX_QUERY_TERMS": 256}),
    "split + weights 5,3,1": ("split compounds, weights 5,3,1", {"build_match": split_compounds, "COLUMN_WEIGHTS": (5.0, 3.0, 1.0)}),
    "split + more stopwords": ("split compounds, ~90 more function/request words", {"build_match": split_compounds, "STOPWORDS": search.STOPWORDS | EXTRA_STOPWORDS}),
    "split + repeats<=2": ("split compounds, a word counts at most twice", {"build_match": repeats_capped(2)}),
    "split + repeats<=3": ("split compounds, a word counts at most 3 times", {"build_match": repeats_capped(3)}),
    "split + weights 1,1,1": ("split compounds, weights 1,1,1", {"build_match": split_compounds, "COLUMN_WEIGHTS": (1.0, 1.0, 1.0)}),
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
        conn.execute(f"CREATE VIRTUAL TABLE plain USING fts5(body, tokenize='{TOKENIZER}')")
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
        match = " OR ".join(_quote([w]) for w in words)
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
