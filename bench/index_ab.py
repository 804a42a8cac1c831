"""A full index of one corpus by two checkouts, alternated with SQLite FTS5's floor in one run.

    python bench/index_ab.py --corpus DIR --before OLD_CHECKOUT [--after THIS_CHECKOUT] [--rounds 3]

The floor is a bare insert of every .md/.txt/.rst file into one FTS5 table (porter unicode61) in one
transaction; each checkout runs ``main.py index`` in a child process into its own index folder in a
temporary directory. Prints each time and the best of each against the best floor, with the load.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def floor(files: list[str], work: str) -> float:
    started = time.perf_counter()
    db = os.path.join(work, "floor.db")
    con = sqlite3.connect(db)
    con.execute("CREATE VIRTUAL TABLE d USING fts5(p UNINDEXED, b, tokenize='porter unicode61')")
    with con:
        con.executemany("INSERT INTO d VALUES (?, ?)", ((f, open(f, "rb").read().decode("utf-8", "replace")) for f in files))
    con.close()
    os.remove(db)
    return time.perf_counter() - started


def index(checkout: Path, corpus: str, folder: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, str(checkout / "main.py"), "index", "--source", corpus, "--index-dir", folder],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--before", required=True, type=Path, help="another checkout (a git worktree of an older commit)")
    parser.add_argument("--after", default=Path(__file__).resolve().parent.parent, type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpus = os.path.abspath(args.corpus)
    files = [os.path.join(d, n) for d, _, names in os.walk(corpus) for n in names if n.endswith((".md", ".txt", ".rst"))]
    times: dict[str, list[float]] = {"floor": [], "before": [], "after": []}
    with tempfile.TemporaryDirectory() as work:
        for number in range(args.rounds):
            times["floor"].append(floor(files, work))
            times["before"].append(index(args.before, corpus, os.path.join(work, f"before{number}")))
            times["after"].append(index(args.after, corpus, os.path.join(work, f"after{number}")))
    best = {name: min(values) for name, values in times.items()}
    print({name: [round(value, 2) for value in values] for name, values in times.items()})
    print(f"floor {best['floor']:.2f} s; before {best['before'] / best['floor']:.2f}x, after {best['after'] / best['floor']:.2f}x;"
          f" load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
