"""How much of a query's time is its snippets: the daemon and the floor, each with and without.

    python bench/snippet_cost.py --corpus DIR --index DB --floor FLOOR_DB [--repeat N]

DB is an index that ``main.py index --source DIR`` wrote, FLOOR_DB one that
``bench/floor.py index DIR FLOOR_DB`` wrote. The queries are bench/run.py's, chosen from DIR.
"Without snippets" runs ``search.search()`` with ``index_queries.snippets`` replaced by one that makes
none, and the floor's query without its ``snippet()`` column. The four are sampled in turn.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import floor  # noqa: E402
from run import choose_queries  # noqa: E402

import index_queries  # noqa: E402
from search import search  # noqa: E402


def no_snippets(*_args: object) -> dict[int, str]:
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--floor", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=41)
    args = parser.parse_args()
    conn = sqlite3.connect(f"file:{args.floor}?mode=ro", uri=True)

    def floor_without_snippet(match: str) -> list:
        return conn.execute("SELECT path FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT 10", (match,)).fetchall()

    def daemon_without_snippets(query: str) -> object:
        with mock.patch.object(index_queries, "snippets", no_snippets):
            return search(args.index, query, 10)

    print(f"{'query (p50 ms)':<16}{'daemon':>8}{'no snip':>9}{'floor':>8}{'no snip':>9}")
    for name, spec in choose_queries(args.corpus).items():
        query, match = spec["query"], spec["floor"]
        runs = {
            "daemon": lambda query=query: search(args.index, query, 10),
            "daemon_no_snippets": lambda query=query: daemon_without_snippets(query),
            "floor": lambda match=match: floor.top10(conn, match),
            "floor_no_snippet": lambda match=match: floor_without_snippet(match),
        }
        samples: dict[str, list[float]] = {key: [] for key in runs}
        for _ in range(args.repeat):
            for key, run in runs.items():
                start = time.perf_counter()
                run()
                samples[key].append(time.perf_counter() - start)
        p50 = {key: statistics.median(values) * 1000 for key, values in samples.items()}
        print(f"{name:<16}{p50['daemon']:>8.2f}{p50['daemon_no_snippets']:>9.2f}{p50['floor']:>8.2f}{p50['floor_no_snippet']:>9.2f}")


if __name__ == "__main__":
    main()
