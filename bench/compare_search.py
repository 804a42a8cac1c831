"""search() latency of two versions of the code on the same index, sampled alternately.

    python bench/compare_search.py --corpus DIR --index DB --old REV [--repeat N]

Each version runs in its own process: REV (any git revision, checked out with ``git archive`` into
a temporary folder) and the working tree. The queries are bench/run.py's, chosen from DIR; DB is
an index of DIR that both versions can read. Per query it prints both p50s, new/old, and whether
both returned the same files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from run import choose_queries  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from search import search
db = Path(sys.argv[2])
for line in sys.stdin:
    start = time.perf_counter()
    reply = search(db, json.loads(line), 10)
    print(json.dumps([time.perf_counter() - start, reply["files_matched"], [hit["path"] for hit in reply["results"]]]), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--old", required=True, help="git revision to compare the working tree with")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as old_tree:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.old], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(old_tree, filter="data")
        versions = {
            name: subprocess.Popen(
                [sys.executable, "-c", CHILD, tree, str(args.index)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            for name, tree in (("old", old_tree), ("new", str(REPO)))
        }

        def ask(name: str, query: str) -> list:
            process = versions[name]
            process.stdin.write(json.dumps(query) + "\n")
            process.stdin.flush()
            return json.loads(process.stdout.readline())

        print(f"{'query (p50 ms)':<16}{'old':>9}{'new':>9}{'new/old':>9}  same files")
        for name, spec in choose_queries(args.corpus).items():
            same = ask("old", spec["query"])[1:] == ask("new", spec["query"])[1:]
            samples: dict[str, list[float]] = {"old": [], "new": []}
            for turn in range(args.repeat):
                for version in ("old", "new") if turn % 2 else ("new", "old"):  # neither always goes first
                    samples[version].append(ask(version, spec["query"])[0] * 1000)
            old, new = statistics.median(samples["old"]), statistics.median(samples["new"])
            print(f"{name:<16}{old:>9.2f}{new:>9.2f}{new / old:>9.2f}  {same}")
        for process in versions.values():
            process.stdin.close()
            process.wait()


if __name__ == "__main__":
    main()
