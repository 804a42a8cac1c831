"""What one search with alternatives costs against the separate searches an agent would make instead.

    python bench/phrasings_cost.py [--corpus powershell-docs] [--rounds 5] [--busy]

Starts the server on DIR over MCP stdio (the SDK's client), waits for its first index, then, for
each need below (a query and three phrasings an agent might write), alternately: one ``search``
with ``alternatives``, and the four searches one by one. Reports the median time of each and the
characters the agent receives (the replies' text content), with the machine's load; ``--busy``
keeps one core busy meanwhile.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

MAIN_PY = Path(__file__).resolve().parent.parent / "main.py"
#: Needs as an agent phrases them over the PowerShell docs: the user's words, then the docs' likely terms.
NEEDS = [
    ("run a script from the internet", ["execution policy remote signed", "Set-ExecutionPolicy RemoteSigned", "Unblock-File downloaded script"]),
    ("read a file line by line", ["Get-Content each line", "StreamReader ReadLine", "foreach line in file"]),
    ("test if a file exists", ["Test-Path file", "check path exists", "Test-Path -PathType Leaf"]),
    ("environment variables", ["$env: variable", "about_Environment_Variables", "set environment variable persist"]),
]


async def measure(corpus: Path, work: Path, rounds: int) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(MAIN_PY), "--source", str(corpus), "--index-dir", str(work), "--scan-interval", "0"])
    async with Client(params) as client:
        while (await client.call_tool("get_index_status", {})).structured_content["state"] != "idle":
            await anyio.sleep(0.2)
        fused_ms, separate_ms, fused_chars, separate_chars = [], [], [], []
        for _ in range(rounds):
            for query, alternatives in NEEDS:
                started = time.perf_counter()
                reply = await client.call_tool("search", {"query": query, "alternatives": alternatives})
                fused_ms.append((time.perf_counter() - started) * 1000)
                fused_chars.append(len(reply.content[0].text))
                started = time.perf_counter()
                texts = [(await client.call_tool("search", {"query": text})).content[0].text for text in [query, *alternatives]]
                separate_ms.append((time.perf_counter() - started) * 1000)
                separate_chars.append(sum(len(text) for text in texts))
    print(f"load {harness.load()}; {len(NEEDS)} needs x {rounds} rounds, alternated")
    print("| | median ms | median characters to the agent |")
    print("|---|---:|---:|")
    print(f"| one search with 3 alternatives | {statistics.median(fused_ms):.1f} | {statistics.median(fused_chars):,.0f} |")
    print(f"| four separate searches | {statistics.median(separate_ms):.1f} | {statistics.median(separate_chars):,.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="powershell-docs", help="a corpus name of harness.py, or a folder")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    args = parser.parse_args()
    print(f"load at start {harness.load()}, code {harness.code_version()}")
    with tempfile.TemporaryDirectory(prefix="phrasings-cost-") as work, harness.busy(args.busy):
        anyio.run(measure, harness.corpus(args.corpus), Path(work), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
