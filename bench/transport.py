"""What a search costs over Streamable HTTP, against the same search over stdio (the floor).

    python bench/transport.py --corpus DIR [--work DIR] [--queries 200] [--clients 4]

Indexes the corpus once (``main.py index``), then starts two servers on that index, one on stdio
and one with ``--transport http``, each driven by the SDK's client (the SDK's stdio and Streamable
HTTP transports). The same queries go through both, alternated one by one, so machine noise hits
both alike. Prints per-call p50/p99 in ms and the HTTP/stdio ratio; then the same queries from
``--clients`` HTTP clients at once (one server, one index), as calls per second against one client.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / "main.py")
QUERIES = [
    "install", "how do I configure the firewall?", '"error message"', "config*", "remote session credentials",
    "array -string", "get the help of a module", "execution policy", "environment variable path", "parameter binding",
]


async def timed(client: Client, query: str) -> float:
    started = time.perf_counter()
    result = await client.call_tool("search", {"query": query})
    elapsed = time.perf_counter() - started
    assert not result.is_error, result.content[0].text
    return elapsed


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(corpus: Path, work: Path, count: int, clients: int) -> None:
    args = ["--source", str(corpus), "--index-dir", str(work / "idx"), "--scan-interval", "0"]
    subprocess.run([sys.executable, MAIN, "index", *args], check=True, stderr=subprocess.DEVNULL)
    log = work / "http.log"
    with open(log, "wb") as errors:
        http = subprocess.Popen([sys.executable, MAIN, "serve", "--transport", "http", "--port", "0", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        while not (found := re.search(r"serving (http://\S+/mcp)", log.read_text())):
            assert http.poll() is None, log.read_text()
            time.sleep(0.05)
        url = found.group(1)
        queries = [QUERIES[i % len(QUERIES)] for i in range(count)]
        stdio_params = StdioServerParameters(command=sys.executable, args=[MAIN, *args])
        async with Client(stdio_params) as stdio, Client(url) as over_http:
            for client in (stdio, over_http):  # warm: the page cache, the SDK's first-call costs
                for query in QUERIES:
                    await timed(client, query)
            times: dict[str, list[float]] = {"stdio": [], "http": []}
            for query in queries:
                times["stdio"].append(await timed(stdio, query))
                times["http"].append(await timed(over_http, query))
        for name, values in times.items():
            print(f"{name:>6}: p50 {1000 * statistics.median(values):6.1f} ms   p99 {1000 * percentile(values, 0.99):6.1f} ms")
        print(f" ratio: p50 {statistics.median(times['http']) / statistics.median(times['stdio']):.2f}x (http / stdio)")

        async def one_client(done: list[int], deadline: float) -> None:
            async with Client(url) as client:
                while time.perf_counter() < deadline:
                    await timed(client, QUERIES[done[0] % len(QUERIES)])
                    done[0] += 1

        rates = {}
        for number in (1, clients):
            done = [0]
            started = time.perf_counter()
            async with anyio.create_task_group() as group:
                for _ in range(number):
                    group.start_soon(one_client, done, started + 10)
            rates[number] = done[0] / (time.perf_counter() - started)
            print(f"{number} HTTP client(s) at once: {rates[number]:.0f} searches/s")
        print(f" ratio: {rates[clients] / rates[1]:.2f}x the throughput of one client ({os.cpu_count()} CPUs)")
    finally:
        http.terminate()
        http.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        anyio.run(run, options.corpus.resolve(), options.work or Path(scratch), options.queries, options.clients)


if __name__ == "__main__":
    main()
