"""A full index of one corpus by two or more checkouts, alternated with the floor in one run: what a change cost.

    python bench/index_ab.py --corpus DIR --before OLD_CHECKOUT [--after THIS_CHECKOUT] [--rounds 3]
    python bench/index_ab.py --corpus DIR --code CHECKOUT [--code ...] [--rounds 3] [--busy] [--json OUT]

The floor is bench/floor.py: a bare insert of every .md/.txt/.rst file into one FTS5 table in one
transaction. Each checkout runs its own ``main.py index`` into a fresh index folder under --work
(a temporary directory by default), in a child that reports the CPU of the writer process and of
its loader processes. Round after round, the order rotating: the floor, then each checkout. Prints
each run, then per checkout the median wall ratio to the floor (and its range), the CPU ratio,
and the best ratio C usable cores allow (max(writer CPU, all CPU / C) / floor wall), with the load
before and after. ``--busy`` keeps one core busy throughout (what a user's machine looks like).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from config import USABLE_CPUS  # noqa: E402
from harness import REPO, alternated, busy, corpus, daemon_index, floor_index, load, write_json  # noqa: E402


def compare(source: Path, work: Path, codes: dict[str, Path], rounds: int) -> dict:
    """Alternate the floor and each checkout ``rounds`` times; print each run; the runs and the medians."""
    runs = {"floor": lambda: floor_index(source, work / "floor.db")}
    runs.update({name: (lambda code=code, name=name: daemon_index(source, work / f"index-{name}", code)) for name, code in codes.items()})
    print(f"usable cores: {USABLE_CPUS}; load before: {load()}", flush=True)

    def say(number: int, name: str, run: dict[str, float]) -> None:
        cpu = ", ".join(f"{key} {value:.2f}" for key, value in run.items() if key != "wall")
        print(f"round {number} {name}: {run['wall']:.2f} s ({cpu} CPU s)", flush=True)

    results = alternated(rounds, runs, say)
    floors = results.pop("floor")
    summary: dict = {"load_end": load(), "floor_s": [round(run["wall"], 3) for run in floors], "codes": {}}
    for name, daemons in results.items():
        ratios = [run["wall"] / floor["wall"] for run, floor in zip(daemons, floors)]
        cpu_ratios = [(run["writer"] + run["loaders"]) / floor["cpu"] for run, floor in zip(daemons, floors)]
        bounds = [max(run["writer"], (run["writer"] + run["loaders"]) / USABLE_CPUS) / floor["wall"] for run, floor in zip(daemons, floors)]
        summary["codes"][name] = {"code": str(codes[name]), "runs": daemons, "ratio": statistics.median(ratios),
                                  "ratio_range": [min(ratios), max(ratios)], "cpu_ratio": statistics.median(cpu_ratios),
                                  "bound": statistics.median(bounds)}
        print(f"{name} ({codes[name]}): median ratio {statistics.median(ratios):.2f} (runs {min(ratios):.2f}-{max(ratios):.2f}),"
              f" CPU ratio {statistics.median(cpu_ratios):.2f}, bound on {USABLE_CPUS} cores {statistics.median(bounds):.2f}")
    print(f"floor median {statistics.median(run['wall'] for run in floors):.2f} s; load after: {summary['load_end']}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a folder, or a corpus bench/harness.py builds (realistic, 8-copies, ...)")
    parser.add_argument("--before", type=Path, help="another checkout (a git worktree of an older commit)")
    parser.add_argument("--after", type=Path, help="the checkout after the change (default with --before: this one)")
    parser.add_argument("--code", type=Path, action="append", default=[], help="a checkout to run (repeat to compare)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    parser.add_argument("--work", type=Path, help="where the indexes go (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="write the runs and the medians here")
    args = parser.parse_args()
    codes = {f"code{number}": code.resolve() for number, code in enumerate(args.code, 1)}
    if args.before:
        codes = {"before": args.before.resolve(), "after": (args.after or REPO).resolve(), **codes}
    codes = codes or {"this": REPO}
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.work) as work, busy(args.busy):
        write_json(args.json, {"load_start": load(), **compare(corpus(args.corpus), Path(work), codes, args.rounds)})


if __name__ == "__main__":
    main()
