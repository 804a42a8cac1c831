"""list_files latency of several checkouts on one source folder, alternated in one run.

    python bench/listing_cost.py --source DIR --code OLD_CHECKOUT [--code ...] [--rounds N] [--limit N]

Each checkout (a git worktree of any commit: ``git worktree add /tmp/ab-<sha> <sha>``; this tree is
always measured too, last) builds its own index of DIR with its own ``main.py index`` into a folder
of its own under /tmp, then answers ``list_files(limit=N)`` in a child process of its own, timed
there, turn by turn so that a change in the machine's load hits all alike. Prints each checkout's
median and p90 in milliseconds, the files shown, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(BENCH)]

from compare_search import build_index  # noqa: E402
from harness import load, rotated  # noqa: E402

#: A child answering a line "limit" with one timed list_files: [seconds, files shown].
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from listing import list_files
from models import ServerConfig
config = ServerConfig(source_directory=Path(sys.argv[2]), index_output_directory=Path(sys.argv[3]))
for line in sys.stdin:
    start = time.perf_counter()
    reply = list_files(config, limit=int(line))
    print(json.dumps([time.perf_counter() - start, len(reply["files"])]), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--code", type=Path, action="append", default=[], help="another checkout to measure")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    source = args.source.resolve()
    codes = {str(code): code.resolve() for code in args.code} | {"this tree": REPO}
    work = Path(tempfile.mkdtemp(prefix="listing-cost-"))
    children = {}
    for number, (name, code) in enumerate(codes.items()):
        index_dir = work / str(number)
        index_dir.mkdir()
        build_index(code, source, index_dir)
        children[name] = subprocess.Popen([sys.executable, "-c", CHILD, str(code), str(source), str(index_dir)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=index_dir)
    before = load()

    def ask(name: str) -> list:
        child = children[name]
        child.stdin.write(f"{args.limit}\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    samples: dict[str, list[float]] = {name: [] for name in children}
    shown = {name: ask(name)[1] for name in children}  # warm
    for turn in range(args.rounds):
        for name in rotated(list(children), turn):
            samples[name].append(ask(name)[0])
    for child in children.values():
        child.stdin.close()
        child.wait()
    for name, seconds in samples.items():
        ordered = sorted(seconds)
        print(f"{name}: median {statistics.median(ordered) * 1000:.2f} ms, p90 {ordered[int(len(ordered) * 0.9)] * 1000:.2f} ms,"
              f" {shown[name]} files shown")
    print(f"{source}, limit {args.limit}, {args.rounds} rounds; load {before} -> {load()}; cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
