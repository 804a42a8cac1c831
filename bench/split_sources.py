"""Several sources rank as one: each test collection indexed from one folder, then split over three
folders served together (doc i in folder i % 3, hard links), and the same queries run on both.

Prints per collection nDCG@10 and Recall@100 of each, their difference (issue #24's target: within
0.005), and the search time per query of each (median and p90 over the collection's queries, the
same process, alternated; target: three sources within 1.2x of one). Questions are ranked without
the time bound that falls back to their rarest words, so that load cannot change the ranking.

    .venv/bin/python bench/split_sources.py /tmp/rel/cranfield /tmp/rel/cisi ... [--parts 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exceptions import QueryError  # noqa: E402
from index_writer import IndexWriter, SourceWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig, Source  # noqa: E402
from search import search  # noqa: E402

from bench.relevance import evaluate, read_qrels, read_queries  # noqa: E402


def split_folders(docs: Path, scratch: Path, parts: int) -> list[Path]:
    """``docs`` spread over ``parts`` folders by hard links: doc i goes to folder i % parts."""
    folders = [scratch / f"part{n}" for n in range(parts)]
    for folder in folders:
        folder.mkdir(parents=True)
    for number, doc in enumerate(sorted(docs.iterdir())):
        os.link(doc, folders[number % parts] / doc.name)
    return folders


def build_index(sources: list[Path], index_dir: Path) -> Path:
    """Index the sources into one index, as `main.py index --source A --source B ...` does."""
    named = tuple(Source(folder.name, folder.resolve()) for folder in sources)
    config = ServerConfig(source_directory=named[0].directory, index_output_directory=index_dir, scan_interval_seconds=0, sources=named)
    writer = IndexWriter(config.db_path)
    try:
        for source in config.sources:
            prefix = config.key_prefix(source.name)
            TextIndexer(config.for_source(source), SourceWriter(writer, prefix) if prefix else writer).scan()
        writer.optimize()
    finally:
        writer.close()
    return config.db_path


def timed_ranker(db_path: Path, times: list[float]):  # noqa: ANN201 - a relevance.Ranker
    def rank(query: str, limit: int) -> list[str]:
        started = time.perf_counter()
        try:
            reply = search(db_path, query, limit)
        except QueryError:
            return []
        finally:
            times.append(time.perf_counter() - started)
        return [Path(hit["path"]).stem for hit in reply["results"]]

    return rank


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("collections", nargs="+", type=Path)
    parser.add_argument("--parts", type=int, default=3, help="folders to split each collection over")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print("| collection | nDCG@10 one | nDCG@10 split | diff | Recall@100 one | split | ms/query one (p50, p90) | split (p50, p90) | ratio p50 |")
    print("|---|---:|---:|---:|---:|---:|---|---|---:|")
    for collection in args.collections:
        with tempfile.TemporaryDirectory(prefix="split-") as scratch:
            root = Path(scratch)
            one = build_index([(collection / "docs").resolve()], root / "idx-one")
            split = build_index(split_folders(collection / "docs", root / "split", args.parts), root / "idx-split")
            queries, qrels = read_queries(collection / "queries.tsv"), read_qrels(collection / "qrels.tsv")
            times_one: list[float] = []
            times_split: list[float] = []
            for _ in range(2):  # alternated: a second round of each, after the first warmed the caches
                times_one.clear()
                times_split.clear()
                whole, _ = evaluate(collection.name, queries, qrels, timed_ranker(one, times_one))
                parts, _ = evaluate(collection.name, queries, qrels, timed_ranker(split, times_split))
        p = [(statistics.median(t) * 1000, statistics.quantiles(t, n=10)[-1] * 1000) for t in (times_one, times_split)]
        print(f"| {collection.name} | {whole.ndcg:.4f} | {parts.ndcg:.4f} | {parts.ndcg - whole.ndcg:+.4f} | {whole.recall:.4f} |"
              f" {parts.recall:.4f} | {p[0][0]:.1f}, {p[0][1]:.1f} | {p[1][0]:.1f}, {p[1][1]:.1f} | {p[1][0] / p[0][0]:.2f}x |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
