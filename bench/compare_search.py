"""Search latency of several checkouts on one corpus, alternated with the floor in one run.

    python bench/compare_search.py --corpus DIR|realistic --code OLD_CHECKOUT [--code ...] [--repeat N]
        [--mcp-repeat N] [--no-mcp] [--busy] [--work DIR] [--json OUT]

Each checkout (a git worktree of any commit: ``git worktree add /tmp/ab-<sha> <sha>``; this tree is
always measured too, last) builds its own index of DIR with its own ``main.py index`` (the index
format differs between commits). Then, per query kind of bench/run.py (chosen from DIR), turn by
turn so that a change in the machine's load hits all alike: the floor (bench/floor.py's top 10 by
bm25 with ``snippet()`` on a plain FTS5 table of DIR), each checkout's own ``search.search()`` in a
child process of its own (timed there), and each checkout's MCP server over stdio (``main.py serve
--scan-interval 0``, timed from here). Prints each p50 and p99, each checkout's p50 against the
floor's and this tree's against each other checkout's, and the load. ``--busy`` keeps one core busy
with a spinning process while the queries run (what a user's machine looks like).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import floor  # noqa: E402
from harness import busy, corpus as named_corpus, load, percentiles, rotated, write_json  # noqa: E402
from run import choose_queries  # noqa: E402

#: A child answering one query a line with its own search(): [seconds, files_matched, paths].
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


def build_index(code: Path, corpus: Path, folder: Path) -> Path:
    """``code``'s own index of ``corpus`` in ``folder`` (made or brought up to date); its database file."""
    subprocess.run([sys.executable, str(code / "main.py"), "index", "--source", str(corpus), "--index-dir", str(folder)],
                   cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    found = sorted(folder.glob("*.sqlite3"), key=lambda path: path.stat().st_mtime)
    if not found:
        raise SystemExit(f"{code}: main.py index left no .sqlite3 file in {folder}")
    return found[-1]


class InProcess:
    """One checkout's search() in a child process of its own."""

    def __init__(self, code: Path, db: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", CHILD, str(code), str(db)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, query: str) -> list:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(query) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        assert self.process.stdin
        self.process.stdin.close()
        self.process.wait()


def measure_in_process(codes: dict[str, Path], dbs: dict[str, Path], floor_db: Path, queries: dict, repeat: int) -> dict:
    """Per kind and side (floor and each checkout): seconds of each turn; and whether each checkout
    returned the same files as this tree."""
    children = {name: InProcess(codes[name], dbs[name]) for name in codes}
    conn = sqlite3.connect(f"file:{floor_db}?mode=ro", uri=True)
    out: dict = {}
    try:
        for kind, spec in queries.items():
            floor.top10(conn, spec["floor"])
            answers = {name: child.ask(spec["query"]) for name, child in children.items()}  # warm, and compared
            samples: dict[str, list[float]] = {"floor": [], **{name: [] for name in children}}
            for turn in range(repeat):
                for name in rotated(["floor", *children], turn):
                    if name == "floor":
                        start = time.perf_counter()
                        floor.top10(conn, spec["floor"])
                        samples["floor"].append(time.perf_counter() - start)
                    else:
                        samples[name].append(children[name].ask(spec["query"])[0])
            this = answers[list(children)[-1]][2]
            out[kind] = {"samples": samples, "same_files": {name: answer[2] == this for name, answer in answers.items()},
                         "files_matched": {name: answer[1] for name, answer in answers.items()}}
    finally:
        conn.close()
        for child in children.values():
            child.close()
    return out


async def measure_mcp(codes: dict[str, Path], corpus: Path, work: Path, queries: dict, repeat: int) -> dict:
    """Per kind and checkout: seconds of each MCP search call over stdio, the servers called in turn."""
    from mcp import Client, StdioServerParameters

    async with AsyncExitStack() as stack:
        clients = {}
        for name, code in codes.items():
            params = StdioServerParameters(
                command=sys.executable, cwd=str(work / code.name),
                args=[str(code / "main.py"), "serve", "--source", str(corpus), "--index-dir", str(work / code.name),
                      "--scan-interval", "0"],
            )
            clients[name] = await stack.enter_async_context(Client(params))
        first = next(iter(queries.values()))["query"]
        for client in clients.values():  # each server's first scan (nothing changed) ends before timing
            while (await client.call_tool("search", {"query": first, "limit": 10})).structured_content.get("indexing", False):
                await asyncio.sleep(0.1)
        out: dict = {}
        for kind, spec in queries.items():
            samples: dict[str, list[float]] = {name: [] for name in clients}
            for name in clients:
                await clients[name].call_tool("search", {"query": spec["query"], "limit": 10})
            for turn in range(repeat):
                for name in rotated(list(clients), turn):
                    start = time.perf_counter()
                    result = await clients[name].call_tool("search", {"query": spec["query"], "limit": 10})
                    samples[name].append(time.perf_counter() - start)
                    if result.is_error:
                        raise RuntimeError(f"{name}: search {spec['query']!r} failed: {result.content[0].text}")
            out[kind] = samples
        return out


def report(codes: dict[str, Path], queries: dict, in_process: dict, mcp: dict | None) -> list[str]:
    """The table: per kind, each side's p50 and p99 (ms) in process and over MCP, and the ratios."""
    names = list(codes)
    short = {name: Path(name).name[-14:] for name in names}
    this = names[-1]
    lines = []
    for kind in queries:
        samples = in_process[kind]["samples"]
        floor_p = percentiles(samples["floor"])
        lines.append(f"{kind} ({queries[kind]['query'][:50]!r}): floor p50 {floor_p['p50']:.2f} p99 {floor_p['p99']:.2f} ms")
        for name in names:
            p = percentiles(samples[name])
            row = (f"  {short[name]:<15} search() p50 {p['p50']:7.2f} p99 {p['p99']:7.2f} /floor {p['p50'] / max(floor_p['p50'], 1e-3):5.2f}"
                   f" p99/floor p99 {p['p99'] / max(floor_p['p99'], 1e-3):5.2f}")
            if mcp:
                m = percentiles(mcp[kind][name])
                row += f" | MCP p50 {m['p50']:7.2f} p99 {m['p99']:7.2f} /floor {m['p50'] / max(floor_p['p50'], 1e-3):5.2f}"
            if name != this:
                mine, theirs = statistics.median(samples[this]), statistics.median(samples[name])
                row += f" | this/it {mine / theirs:5.2f}"
                if mcp:
                    row += f" MCP {statistics.median(mcp[kind][this]) / statistics.median(mcp[kind][name]):5.2f}"
                row += "" if in_process[kind]["same_files"][name] else " (other files)"
            lines.append(row)
    for name in names:
        ratios = [statistics.median(in_process[k]["samples"][name]) / statistics.median(in_process[k]["samples"]["floor"]) for k in queries]
        row = f"median over kinds, {short[name]}: search() p50/floor {statistics.median(ratios):.2f}"
        if mcp:
            over = [statistics.median(mcp[k][name]) / statistics.median(in_process[k]["samples"]["floor"]) for k in queries]
            row += f", MCP p50/floor {statistics.median(over):.2f}"
        lines.append(row)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a folder, or a corpus bench/harness.py builds (realistic, 8-copies, ...)")
    parser.add_argument("--code", type=Path, action="append", default=[], help="another checkout (repeat for several)")
    parser.add_argument("--repeat", type=int, default=20, help="timed search() calls per query and side")
    parser.add_argument("--mcp-repeat", type=int, default=10, help="timed MCP calls per query and server")
    parser.add_argument("--no-mcp", action="store_true")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process while the queries run")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/compare-search"))
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args()
    corpus = named_corpus(args.corpus)
    codes = {str(code.resolve()): code.resolve() for code in [*args.code, REPO]}
    load_start = load()
    dbs = {}
    if len({code.name for code in codes.values()}) < len(codes):
        parser.error("each checkout's folder needs a name of its own (its index goes to --work/<that name>)")
    for name, code in codes.items():
        folder = args.work / code.name
        folder.mkdir(parents=True, exist_ok=True)
        dbs[name] = build_index(code, corpus, folder)
    floor_db = args.work / f"floor-{corpus.name}.sqlite3"  # one per corpus: a floor of another corpus answers other queries
    if not floor_db.exists():
        floor.build(str(corpus), str(floor_db))
    queries = choose_queries(corpus)
    with busy(args.busy):
        in_process = measure_in_process(codes, dbs, floor_db, queries, args.repeat)
        mcp = None if args.no_mcp else asyncio.run(measure_mcp(codes, corpus, args.work, queries, args.mcp_repeat))
    load_end = load()
    lines = report(codes, queries, in_process, mcp)
    lines.append(f"load (1 min) {load_start[0]:.2f} at start, {load_end[0]:.2f} at end; {os.cpu_count()} cores;"
                 f" {'one core kept busy' if args.busy else 'nothing else started'}")
    print("\n".join(lines))
    write_json(args.json, {"codes": list(codes), "queries": queries, "in_process": in_process, "mcp": mcp,
                           "load": [load_start, load_end]})


if __name__ == "__main__":
    main()
