"""Where a full index's CPU goes: the writer process's own and its loader processes', against the floor.

    python bench/index_cpu.py --corpus DIR [--runs N] [--work DIR] [--code CHECKOUT ...] [--busy]

Runs ``bench/floor.py index`` and ``main.py index`` of each checkout given with ``--code`` (default:
this one; give several to compare them) on a fresh index folder, alternately, N rounds. Each
daemon runs in a child that reports getrusage() for itself (the writer process) and for its
children (the loader processes). With C usable cores, no schedule can finish before
max(writer CPU, all CPU / C): that bound, divided by the floor's wall time, is the best ratio this
machine allows for this code. ``--busy`` keeps one core busy with a spinning process throughout
(what a user's machine looks like while it indexes), for the floor and the daemon alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO)]

from config import USABLE_CPUS  # noqa: E402

CHILD = r"""
import json, resource, runpy, sys, time
sys.path.insert(0, sys.argv[1])
sys.argv = [sys.argv[1] + "/main.py", *sys.argv[2:]]
start = time.perf_counter()
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    if exc.code:
        raise
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("RUSAGE " + json.dumps({
    "wall": time.perf_counter() - start,
    "writer": own.ru_utime + own.ru_stime,
    "loaders": children.ru_utime + children.ru_stime,
}), file=sys.stderr)
"""


def floor_run(corpus: Path, db: Path) -> dict[str, float]:
    db.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(BENCH / "floor.py"), "index", str(corpus), str(db)])
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit("the floor failed")
    return {"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime}


def daemon_run(corpus: Path, index_dir: Path, code: Path = REPO) -> dict[str, float]:
    shutil.rmtree(index_dir, ignore_errors=True)
    cmd = [sys.executable, "-c", CHILD, str(code), "index", "--source", str(corpus), "--index-dir", str(index_dir)]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stderr.splitlines() if line.startswith("RUSAGE ")]
    if done.returncode or not lines:
        raise SystemExit(f"main.py index failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix("RUSAGE "))


def spinning() -> subprocess.Popen:
    """A process that keeps one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/index-cpu"))
    parser.add_argument("--code", type=Path, action="append", help="a checkout to run (repeat to compare; default: this one)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    args = parser.parse_args()
    codes = [code.resolve() for code in args.code or [REPO]]
    args.work.mkdir(parents=True, exist_ok=True)
    busy = spinning() if args.busy else None
    try:
        compare(args.corpus, args.work, codes, args.runs)
    finally:
        if busy:
            busy.kill()
            busy.wait()


def compare(corpus: Path, work: Path, codes: list[Path], runs: int) -> None:
    """Alternate the floor and each checkout ``runs`` times; print each run and the medians."""
    print(f"usable cores: {USABLE_CPUS}; load before: {os.getloadavg()[0]:.2f}")
    print(f"{'run':<5}{'code':<28}{'floor s':>9}{'floor CPU':>11}{'daemon s':>10}{'writer CPU':>12}{'loaders CPU':>13}{'ratio':>7}{'CPU ratio':>10}{'bound':>7}")
    ratios: dict[Path, list[float]] = {code: [] for code in codes}
    cpu_ratios: dict[Path, list[float]] = {code: [] for code in codes}
    bounds: dict[Path, list[float]] = {code: [] for code in codes}
    for run in range(1, runs + 1):
        for code in codes:
            floor = floor_run(corpus, work / "floor.db")
            daemon = daemon_run(corpus, work / "index", code)
            cpu = daemon["writer"] + daemon["loaders"]
            ratios[code].append(daemon["wall"] / floor["wall"])
            cpu_ratios[code].append(cpu / floor["cpu"])
            bounds[code].append(max(daemon["writer"], cpu / USABLE_CPUS) / floor["wall"])
            print(
                f"{run:<5}{str(code)[-27:]:<28}{floor['wall']:>9.2f}{floor['cpu']:>11.2f}{daemon['wall']:>10.2f}{daemon['writer']:>12.2f}"
                f"{daemon['loaders']:>13.2f}{ratios[code][-1]:>7.2f}{cpu_ratios[code][-1]:>10.2f}{bounds[code][-1]:>7.2f}",
                flush=True,
            )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for code in codes:
        print(
            f"{code}: median ratio {statistics.median(ratios[code]):.2f} (runs {min(ratios[code]):.2f}-{max(ratios[code]):.2f}),"
            f" CPU ratio {statistics.median(cpu_ratios[code]):.2f}, bound on {USABLE_CPUS} cores {statistics.median(bounds[code]):.2f}"
        )


if __name__ == "__main__":
    main()
