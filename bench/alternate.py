"""bench/run.py of several checkouts, alternated round after round: before and after, on one machine.

    python bench/alternate.py --corpus DIR --code OLD_CHECKOUT --code NEW_CHECKOUT [--rounds 5]
        [--busy] [--only index,rescan,queries,mcp] [--repeat 15] [--work DIR] [--json OUT]

Each round runs every checkout's own ``bench/run.py`` (its code, its floor, in the same run) in
turn, so a change in the machine's load hits all of them alike. ``--busy`` keeps one core busy
with a spinning process for the whole run (what a user's machine looks like). Prints, per
checkout, the median over rounds (and the range) of: the full index and the no-change rescan
against their floors, each query kind's p50 against the floor's (in process and over MCP) and its
p99 against the floor's p99, the median over the kinds, and the load at each run's start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from index_cpu import spinning  # noqa: E402


def run_once(code: Path, corpus: Path, work: Path, only: str, repeat: int) -> dict:
    """One run of ``code``'s bench/run.py; its JSON report."""
    out = work / "report.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(code / "bench" / "run.py"), "--corpus", str(corpus), "--work", str(work),
           "--only", only, "--repeat", str(repeat), "--json", str(out)]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode or not out.exists():
        raise SystemExit(f"{code}/bench/run.py failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def figures(report: dict) -> dict[str, float]:
    """The ratios one report gives, by name."""
    found: dict[str, float] = {}
    for part in ("index", "rescan"):
        if part in report:
            found[f"{part} / floor"] = report[part]["ratio"]
    p50s, mcp50s = [], []
    for kind, q in report.get("queries", {}).items():
        if "floor_ms" not in q:
            continue
        floor = q["floor_ms"]
        found[f"{kind} p50 / floor"] = q["search_ms"]["p50"] / max(floor["p50"], 1e-3)
        found[f"{kind} p99 / floor p99"] = q["search_ms"]["p99"] / max(floor["p99"], 1e-3)
        p50s.append(found[f"{kind} p50 / floor"])
        if "mcp_ms" in q:
            found[f"{kind} MCP p50 / floor"] = q["mcp_ms"]["p50"] / max(floor["p50"], 1e-3)
            mcp50s.append(found[f"{kind} MCP p50 / floor"])
    if p50s:
        found["median over kinds, p50 / floor"] = statistics.median(p50s)
    if mcp50s:
        found["median over kinds, MCP p50 / floor"] = statistics.median(mcp50s)
    if "changed_file" in report:
        found["changed file searchable, ms"] = report["changed_file"].get("median_ms", float("nan"))
    return found


def summary(reports: dict[str, list[dict]]) -> str:
    """A table: each figure's median over rounds and its range, per checkout."""
    names = list(reports)
    rows = list(dict.fromkeys(key for runs in reports.values() for report in runs for key in figures(report)))
    lines = [f"{'figure':<40}" + "".join(f"{name[-30:]:>34}" for name in names)]
    for row in rows:
        cells = []
        for name in names:
            values = [figures(report)[row] for report in reports[name] if row in figures(report)]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-")
        lines.append(f"{row:<40}" + "".join(f"{cell:>34}" for cell in cells))
    for name in names:
        loads = [f"{r['machine']['load_start'][0]:.1f}-{r['machine']['load_end'][0]:.1f}" for r in reports[name]]
        lines.append(f"load (1 min) per run, {name}: {', '.join(loads)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--code", type=Path, action="append", required=True, help="a checkout (repeat: each is run every round)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    parser.add_argument("--only", default="index,rescan,queries,mcp", help="bench/run.py sections to run")
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per query")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/alternate"))
    parser.add_argument("--json", type=Path, help="write every report here")
    args = parser.parse_args()
    codes = {str(code.resolve()): code.resolve() for code in args.code}
    reports: dict[str, list[dict]] = {name: [] for name in codes}
    busy = spinning() if args.busy else None
    try:
        for round_number in range(1, args.rounds + 1):
            for number, (name, code) in enumerate(codes.items()):
                work = args.work / f"code{number}"
                work.mkdir(parents=True, exist_ok=True)
                reports[name].append(run_once(code, args.corpus.resolve(), work, args.only, args.repeat))
                print(f"round {round_number}, {name}: {json.dumps({k: round(v, 3) for k, v in figures(reports[name][-1]).items()})}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"busy": args.busy, "load_now": os.getloadavg(), "reports": reports}, indent=1))
    finally:
        if busy:
            busy.kill()
            busy.wait()
    print(summary(reports))


if __name__ == "__main__":
    main()
