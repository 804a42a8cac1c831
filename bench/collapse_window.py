"""How the first ranking window of a collapsed search (search.COLLAPSE_WINDOW) changes its
latency: p50 of 7 runs per query, for each window tried.

    python bench/collapse_window.py INDEX_DIR "query one|query two|..." [--windows 3,10,30,100]

INDEX_DIR holds an index made by main.py index (its newest .sqlite3 file is used).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import search  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index_dir", type=Path)
    parser.add_argument("queries")
    parser.add_argument("--windows", default="3,10,30,100")
    args = parser.parse_args()
    db = max(args.index_dir.glob("*.sqlite3"), key=lambda path: path.stat().st_mtime)
    queries = args.queries.split("|")
    print("window  " + "  ".join(f"{query[:14]:>14}" for query in queries) + "   (p50 ms)")
    for window in (int(part) for part in args.windows.split(",")):
        search.COLLAPSE_WINDOW = window
        medians = []
        for query in queries:
            search.search(db, query, 10)
            times = []
            for _ in range(7):
                started = time.perf_counter()
                search.search(db, query, 10)
                times.append(time.perf_counter() - started)
            medians.append(statistics.median(times) * 1000)
        print(f"{window:6}  " + "  ".join(f"{median:14.1f}" for median in medians))


if __name__ == "__main__":
    main()
