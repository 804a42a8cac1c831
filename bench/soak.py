"""Soak: the MCP server with a 1 s scan interval over a tree mutated at random for N minutes.

    .venv/bin/python bench/soak.py [--minutes 10] [--files 400] [--seed 1] [--out bench/out/soak.json]

While it runs: files are edited, deleted, added and renamed a few times a second, and the server is
searched through the MCP tool. Every 10 s the server's RSS and open file descriptors are sampled
from /proc. At the end: one refresh_index, then the index must equal the disk exactly (every live
file found by its unique token, no deleted or stale content), and the figures are printed as JSON.
Not a test: too long for CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from reliability_helpers import MAIN_PY, RelCorpus, rel_check_index, rel_db_path  # noqa: E402


def server_pid(marker: str) -> int:
    """The pid of the server process whose command line names our (unique) source directory."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(MAIN_PY).encode() in cmdline and marker.encode() in cmdline:
                return int(entry)
    raise RuntimeError("server process not found")


def sample(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open file descriptors) of a process."""
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def soak(minutes: float, files: int, seed: int, work: Path) -> dict:
    from mcp import Client, StdioServerParameters

    source, index_dir = work / "src", work / "idx"
    source.mkdir()
    corpus = RelCorpus(source, random.Random(seed))
    for _ in range(files):
        corpus.add()
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(MAIN_PY), "--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "1"],
    )
    rng = random.Random(seed + 1)
    samples: list[dict] = []
    counts = {"edits": 0, "deletes": 0, "adds": 0, "renames": 0, "searches": 0, "search_errors": 0}
    async with Client(params) as client:
        pid = server_pid(str(source))
        started = time.monotonic()
        next_sample = started
        while time.monotonic() - started < minutes * 60:
            if time.monotonic() >= next_sample:
                rss, fds = sample(pid)
                samples.append({"t": round(time.monotonic() - started), "rss_kib": rss, "fds": fds})
                next_sample += 10
            action = rng.random()
            live = sorted(corpus.versions)
            if action < 0.5 and live:
                corpus.edit(rng.choice(live))
                counts["edits"] += 1
            elif action < 0.65 and len(live) > files // 2:
                corpus.delete(rng.choice(live))
                counts["deletes"] += 1
            elif action < 0.85:
                corpus.add()
                counts["adds"] += 1
            elif live:
                old = rng.choice(live)
                no, version = corpus.versions.pop(old)
                new = f"moved/{Path(old).name}"
                if new not in corpus.versions:
                    (source / "moved").mkdir(exist_ok=True)
                    os.replace(source / old, source / new)
                    corpus.versions[new] = (no, version)
                    counts["renames"] += 1
                else:
                    corpus.versions[old] = (no, version)
            token, _ = rng.choice(list(corpus.live_tokens().items()))
            reply = await client.call_tool("search", {"query": token})
            counts["searches"] += 1
            counts["search_errors"] += int(bool(reply.is_error))
            await anyio.sleep(0.2)
        refreshed = await client.call_tool("refresh_index", {})
        rss, fds = sample(pid)
        samples.append({"t": round(time.monotonic() - started), "rss_kib": rss, "fds": fds})
        missing = []
        for token, rel in corpus.live_tokens().items():
            reply = await client.call_tool("search", {"query": token})
            paths = [hit["path"] for hit in (reply.structured_content or {}).get("results", [])]
            if paths != [rel]:
                missing.append((rel, paths))
        stale = 0
        for token in corpus.dead:
            reply = await client.call_tool("search", {"query": token})
            stale += len((reply.structured_content or {}).get("results", []))
        status = (await client.call_tool("get_index_status", {})).structured_content
    checked = rel_check_index(rel_db_path(source, index_dir), corpus, complete=True)
    warm = [s for s in samples if s["t"] >= 60] or samples
    return {
        "minutes": minutes,
        "mutations": counts,
        "final_refresh": refreshed.structured_content,
        "live_files": len(corpus.versions),
        "live_files_not_found_exactly": len(missing),
        "dead_tokens": len(corpus.dead),
        "dead_tokens_found": stale,
        "index_equals_disk": not missing and stale == 0 and checked["files"] == len(corpus.versions),
        "rss_kib_first_after_1min": warm[0]["rss_kib"],
        "rss_kib_last": samples[-1]["rss_kib"],
        "rss_kib_max": max(s["rss_kib"] for s in samples),
        "rss_kib_per_min_after_1min": round(slope([(s["t"] / 60, s["rss_kib"]) for s in warm]), 1),
        "fds_first": samples[0]["fds"],
        "fds_after_1min": warm[0]["fds"],
        "fds_last": samples[-1]["fds"],
        "fds_max": max(s["fds"] for s in samples),
        "index_size_mb_at_end": status["index_size_mb"],
        "status_errors_encountered": status["errors_encountered"],
        "status_last_error": status["last_error"],
        "samples": samples,
    }


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 for fewer than two points)."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "soak.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rel-soak-", dir="/tmp"))
    try:
        result = anyio.run(soak, args.minutes, args.files, args.seed, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    return 0 if result["index_equals_disk"] else 1


if __name__ == "__main__":
    sys.exit(main())
