"""What a fresh result costs: a search whose best file changed since it was indexed, answered by
indexing that file again first (the server's way, TextIndexer.refresh_if_free), against the same
search with the file unchanged.

    python bench/freshness.py --corpus DIR [--work DIR] [--repeat N]

The corpus is indexed under --work first (main.py index). Each round appends a line to the best
file of a query, then times the search with freshness; the unchanged search is timed in turns.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from index_writer import IndexWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig  # noqa: E402
from search import Freshness, search  # noqa: E402

QUERIES = ("remote session", "execution policy", "how do I read a file line by line?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/work-freshness"))
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    config = ServerConfig(source_directory=args.corpus.resolve(), index_output_directory=(args.work / "index").resolve())
    subprocess.run([sys.executable, str(BENCH.parent / "main.py"), "index", "--source", str(args.corpus), "--index-dir", str(config.index_output_directory)],
                   check=True, stderr=subprocess.DEVNULL)
    writer = IndexWriter(config.db_path)
    indexer = TextIndexer(config, writer)
    freshness = Freshness(config.source_directory, lambda paths: indexer.refresh_if_free(paths, 0.25))
    print(f"{'query':40} {'unchanged p50':>14} {'changed p50':>12} {'ratio':>6}  stale")
    try:
        for query in QUERIES:
            best = search(config.db_path, query, 10, freshness=freshness)["results"][0]["path"]
            target = config.source_directory / best
            original = target.read_bytes()
            plain, fresh, stale = [], [], 0
            try:
                for number in range(args.repeat):
                    started = time.perf_counter()
                    search(config.db_path, query, 10, freshness=freshness)
                    plain.append(time.perf_counter() - started)
                    target.write_bytes(original + f"\nedited {number}\n".encode())
                    started = time.perf_counter()
                    reply = search(config.db_path, query, 10, freshness=freshness)
                    fresh.append(time.perf_counter() - started)
                    stale += any(hit["stale"] for hit in reply["results"])
            finally:
                target.write_bytes(original)
                indexer.refresh_files([best])
            p50, q50 = statistics.median(plain) * 1000, statistics.median(fresh) * 1000
            print(f"{query[:40]:40} {p50:14.1f} {q50:12.1f} {q50 / p50:6.2f}  {stale}/{args.repeat}")
    finally:
        writer.close()


if __name__ == "__main__":
    main()
