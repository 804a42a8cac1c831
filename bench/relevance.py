"""Ranking quality on a test collection: nDCG@10, Recall@100 and MRR@10, overall and per query.

A collection is a directory holding ``docs/<id>.txt``, ``queries.tsv`` (query id TAB text) and
``qrels.tsv`` (query id TAB document id TAB grade; grade 0 means judged not relevant). The docs
are indexed with the daemon's own indexer, and every query goes through ``search.search`` exactly
as the MCP ``search`` tool calls it, with default settings and the largest limit (100).

    .venv/bin/python bench/relevance.py /tmp/bench-ranking/cranfield /tmp/bench-ranking/cisi \
        --index-dir /tmp/bench-ranking/indexes --worst 10

Queries without any relevant document are left out of the averages (and counted); a query the
search refuses (no searchable words) scores 0.

With ``--phrasings DIR`` (DIR/<collection>.json: each query's alternatives, written without seeing
the documents; bench/phrasings/), each collection is also ranked by each alternative alone, by the
agent's own reciprocal-rank fusion of its separate calls (the query and every alternative, top 10
each), and by one search with ``alternatives`` (phrasings.fused_search):

    .venv/bin/python bench/relevance.py /tmp/rel/* --phrasings bench/phrasings
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from harness import collections as shared_collections, load, write_json  # noqa: E402
from exceptions import QueryError  # noqa: E402
from index_writer import IndexWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig  # noqa: E402
from phrasings import fused_search  # noqa: E402
from search import search  # noqa: E402

NDCG_DEPTH = 10
RECALL_DEPTH = 100
MRR_DEPTH = 10

#: A ranker takes (query text, how many results) and returns document ids, best first.
Ranker = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class QueryScore:
    """The metrics of one query."""

    query_id: str
    ndcg: float
    recall: float
    mrr: float
    relevant: int
    text: str


@dataclass(frozen=True)
class Summary:
    """Means over the judged queries of a collection."""

    collection: str
    queries: int
    unjudged: int
    ndcg: float
    recall: float
    mrr: float


def read_queries(path: Path) -> dict[str, str]:
    """query id -> text, in file order."""
    queries: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            query_id, _, text = line.partition("\t")
            queries[query_id.strip()] = text.strip()
    return queries


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {document id: grade}."""
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            query_id, doc_id, grade = line.split("\t")[:3]
            qrels.setdefault(query_id.strip(), {})[doc_id.strip()] = int(grade)
    return qrels


def ndcg_at(ranking: list[str], grades: dict[str, int], depth: int = NDCG_DEPTH) -> float:
    """nDCG with linear gain (the grade) and a log2(rank + 1) discount, as trec_eval computes it."""
    dcg = sum(grades.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:depth]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:depth]
    idcg = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranking: list[str], grades: dict[str, int], depth: int = RECALL_DEPTH) -> float:
    """Share of the relevant documents found in the first ``depth`` results."""
    relevant = {doc for doc, g in grades.items() if g > 0}
    return len(relevant.intersection(ranking[:depth])) / len(relevant) if relevant else 0.0


def mrr_at(ranking: list[str], grades: dict[str, int], depth: int = MRR_DEPTH) -> float:
    """1 / rank of the first relevant result within ``depth``, else 0."""
    return next((1.0 / (rank + 1) for rank, doc in enumerate(ranking[:depth]) if grades.get(doc, 0) > 0), 0.0)


def index_collection(collection: Path, index_dir: Path) -> Path:
    """Index ``collection/docs`` with the daemon's indexer (incrementally); return the database path."""
    config = ServerConfig(
        source_directory=(collection / "docs").resolve(),
        index_output_directory=index_dir.resolve(),
        scan_interval_seconds=0,
    )
    writer = IndexWriter(config.db_path)
    try:
        TextIndexer(config, writer).scan()
        writer.optimize()
    finally:
        writer.close()
    return config.db_path


def daemon_ranker(db_path: Path) -> Ranker:
    """Rank with the daemon's search, called as the MCP tool calls it; document id = file stem."""

    def rank(query: str, limit: int) -> list[str]:
        try:
            reply = search(db_path, query, limit, indexing=False)
        except QueryError:
            return []
        return [Path(hit["path"]).stem for hit in reply["results"]]

    return rank


#: The agent's own fusion of separate calls: reciprocal rank with the usual constant, over the top
#: AGENT_CALL_LIMIT of each call (what a call returns by default).
AGENT_RANK_OFFSET = 60
AGENT_CALL_LIMIT = 10


def phrasing_rankers(db_path: Path, alternatives: dict[str, list[str]]) -> dict[str, Ranker]:
    """Rankers over the alternatives of each query (by its text): each alternative alone
    ("alternative N"), the agent fusing the query's and every alternative's top 10 by reciprocal
    rank ("agent RRF"), and one search with alternatives ("fused")."""
    single = daemon_ranker(db_path)

    def alternative(number: int) -> Ranker:
        def rank(query: str, limit: int) -> list[str]:
            phrasings = alternatives.get(query, [])
            return single(phrasings[number], limit) if number < len(phrasings) else single(query, limit)
        return rank

    def agent_rrf(query: str, limit: int) -> list[str]:
        scores: dict[str, float] = {}
        for text in [query, *alternatives.get(query, [])]:
            for place, doc in enumerate(single(text, AGENT_CALL_LIMIT), 1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (AGENT_RANK_OFFSET + place)
        return sorted(scores, key=lambda doc: -scores[doc])[:limit]

    def fused(query: str, limit: int) -> list[str]:
        try:
            reply = fused_search(db_path, query, min(limit, 100), alternatives=alternatives.get(query, []))
        except QueryError:
            return []
        return [Path(hit["path"]).stem for hit in reply["results"]]

    count = max((len(found) for found in alternatives.values()), default=0)
    return {**{f"alternative {n + 1}": alternative(n) for n in range(count)}, "agent RRF": agent_rrf, "fused": fused}


def evaluate(
    name: str, queries: dict[str, str], qrels: dict[str, dict[str, int]], rank: Ranker
) -> tuple[Summary, list[QueryScore]]:
    """Run every judged query through ``rank`` and score it."""
    scores: list[QueryScore] = []
    unjudged = 0
    for query_id, text in queries.items():
        grades = qrels.get(query_id, {})
        if not any(g > 0 for g in grades.values()):
            unjudged += 1
            continue
        ranking = rank(text, max(RECALL_DEPTH, NDCG_DEPTH, MRR_DEPTH))
        scores.append(
            QueryScore(
                query_id, ndcg_at(ranking, grades), recall_at(ranking, grades), mrr_at(ranking, grades),
                sum(1 for g in grades.values() if g > 0), text,
            )
        )
    count = len(scores) or 1
    summary = Summary(
        name, len(scores), unjudged,
        sum(s.ndcg for s in scores) / count, sum(s.recall for s in scores) / count, sum(s.mrr for s in scores) / count,
    )
    return summary, scores


def evaluate_collection(collection: Path, index_dir: Path, make_ranker: Callable[[Path], Ranker] = daemon_ranker) -> tuple[Summary, list[QueryScore]]:
    """Index a collection and evaluate its queries with the ranker built on its index."""
    db_path = index_collection(collection, index_dir)
    queries = read_queries(collection / "queries.tsv")
    qrels = read_qrels(collection / "qrels.tsv")
    return evaluate(collection.name, queries, qrels, make_ranker(db_path))


def print_summaries(summaries: Iterable[Summary]) -> None:
    """One Markdown table row per collection."""
    print(f"| collection | queries | nDCG@{NDCG_DEPTH} | Recall@{RECALL_DEPTH} | MRR@{MRR_DEPTH} |")
    print("|---|---:|---:|---:|---:|")
    for s in summaries:
        print(f"| {s.collection} | {s.queries} | {s.ndcg:.4f} | {s.recall:.4f} | {s.mrr:.4f} |")


def print_phrasings(collections: list[Path], index_dir: Path, folder: Path, single: dict[str, float]) -> None:
    """nDCG@10 of each collection's query alone, each alternative alone, the agent's fusion and
    the server's (phrasing_rankers), as one Markdown table."""
    rows = []
    for collection in collections:
        written = json.loads((folder / f"{collection.name}.json").read_text(encoding="utf-8"))["queries"]
        alternatives = {entry["query"]: entry["alternatives"] for entry in written.values()}
        db_path = index_collection(collection, index_dir)
        queries, qrels = read_queries(collection / "queries.tsv"), read_qrels(collection / "qrels.tsv")
        found = {name: evaluate(collection.name, queries, qrels, rank)[0].ndcg for name, rank in phrasing_rankers(db_path, alternatives).items()}
        rows.append((collection.name, {"query": single[collection.name], **found}))
    names = list(rows[0][1]) if rows else []
    print(f"| collection | {' | '.join(names)} |")
    print(f"|---|{'---:|' * len(names)}")
    for name, found in rows:
        print(f"| {name} | {' | '.join(f'{found[column]:.4f}' for column in names)} |")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("collections", nargs="*", type=Path,
                        help="collection directories (docs/, queries.tsv, qrels.tsv); default: the seven of /work/shared/relevance")
    parser.add_argument("--index-dir", type=Path, help="where to keep the indexes (default: a temporary directory)")
    parser.add_argument("--worst", type=int, default=0, metavar="N", help="also list the N worst queries by nDCG")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every per-query score to FILE")
    parser.add_argument("--phrasings", type=Path, metavar="DIR", help="also rank each query's alternatives from DIR/<collection>.json")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    args.collections = args.collections or shared_collections()
    load_start = load()
    with tempfile.TemporaryDirectory(prefix="relevance-") as scratch:
        index_dir = args.index_dir or Path(scratch)
        results = [evaluate_collection(c, index_dir) for c in args.collections]
        if args.phrasings:
            print_phrasings(args.collections, index_dir, args.phrasings, {summary.collection: summary.ndcg for summary, _ in results})
    print_summaries(summary for summary, _ in results)
    for summary, scores in results:
        if args.worst:
            print(f"\nworst {args.worst} of {summary.collection} (query id, nDCG@10, Recall@100, relevant, text):")
            for s in sorted(scores, key=lambda s: (s.ndcg, s.recall))[: args.worst]:
                print(f"  {s.query_id:>5} {s.ndcg:.3f} {s.recall:.3f} {s.relevant:>3}  {s.text[:100]}")
    print(f"load {load_start} -> {load()}")
    write_json(args.json, {s.collection: [asdict(q) for q in scores] for s, scores in results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
