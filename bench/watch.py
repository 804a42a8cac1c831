"""Edits visible at once: how long from a write to a search that finds it, with the server's
watcher and no rescan due; CPU while idle; and a burst (a git checkout changing many files).

    python bench/watch.py --corpus DIR [--work DIR] [--edits 100] [--burst 5000] [--idle 30]

The corpus is copied to --work/src and made a git repository; a server (main.py serve, scan
interval one hour) runs on it, and this process searches its index as any reader does.
- edits: append a new word to a random file, create a file, or rename one; time until a search
  finds it (polled every 5 ms).
- idle: the server's CPU time over --idle seconds of nothing happening.
- burst: `git checkout` of a branch where --burst files differ; time until a search finds all of
  them, against the floor: `main.py index` picking up the same checkout with no server running.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from models import ServerConfig  # noqa: E402
from search import search  # noqa: E402
from status import read_status  # noqa: E402

MAIN = BENCH.parent / "main.py"
POLL_SECONDS = 0.005


def git(src: Path, *args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "-C", str(src), "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args],
                   check=True, capture_output=True, env=env)


def prepare(corpus: Path, work: Path, burst: int) -> tuple[Path, list[str]]:
    """A copy of the corpus as a git repository on branch main, and a branch 'burst' in which
    ``burst`` files end with the word burstword."""
    src = work / "src"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(corpus, src)
    files = sorted(str(path.relative_to(src)) for path in src.rglob("*.md"))
    files = [rel for rel in files if not any(part.startswith(".") for part in rel.split("/"))]  # hidden: not indexed
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "corpus")
    git(src, "checkout", "-q", "-b", "burst")
    changed = random.Random(7).sample(files, min(burst, len(files)))
    for rel in changed:
        with open(src / rel, "a", encoding="utf-8") as out:
            out.write("\nburstword\n")
    git(src, "commit", "-q", "-am", "burst")
    git(src, "checkout", "-q", "main")
    return src, files


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def until_found(config: ServerConfig, query: str, wanted: int, limit: float = 60.0) -> float:
    """Seconds until a search for ``query`` matches ``wanted`` files (inf past ``limit``)."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        try:
            if search(config.db_path, query, 1)["files_matched"] == wanted:
                return time.perf_counter() - started
        except Exception:  # noqa: BLE001 - the index may be mid-rebuild; keep polling
            pass
        time.sleep(POLL_SECONDS)
    return float("inf")


def wait_idle(config: ServerConfig) -> None:
    while True:
        status = read_status(config, None)
        if status["state"] == "idle" and status["last_scan"]:
            return
        time.sleep(0.2)


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/work-watch"))
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    src, files = prepare(args.corpus.resolve(), args.work, args.burst)
    config = ServerConfig(source_directory=src.resolve(), index_output_directory=(args.work / "index").resolve())
    flags = ["--source", str(src), "--index-dir", str(config.index_output_directory)]
    log = open(args.work / "server.log", "w")
    server = subprocess.Popen([sys.executable, str(MAIN), "serve", *flags, "--scan-interval", "3600"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_idle(config)
        status = read_status(config, None)
        print(f"corpus: {status['indexed_files']} files; watching: {status['watching']}")
        rng = random.Random(11)
        kinds: dict[str, list[float]] = {"edit": [], "new file": [], "rename": []}
        for number in range(args.edits):
            word = f"zqedit{number}x"
            kind = ("edit", "edit", "new file", "rename")[number % 4]
            if kind == "edit":
                with open(src / rng.choice(files), "a", encoding="utf-8") as out:
                    out.write(f"\n{word}\n")
            elif kind == "new file":
                (src / f"new-{number}.md").write_text(f"# New {number}\n\n{word}\n", encoding="utf-8")
            else:
                old = rng.choice(files)
                with open(src / old, "a", encoding="utf-8") as out:
                    out.write(f"\n{word}\n")
                until_found(config, word, 1)
                new = old[:-3] + f"-renamed{number}.md"
                os.rename(src / old, src / new)
                files[files.index(old)] = new
                started = time.perf_counter()
                while time.perf_counter() - started < 60:
                    hits = search(config.db_path, word, 1)["results"]
                    if hits and hits[0]["path"] == new:
                        break
                    time.sleep(POLL_SECONDS)
                kinds[kind].append(time.perf_counter() - started)
                continue
            kinds[kind].append(until_found(config, word, 1))
        every = [value for values in kinds.values() for value in values]
        print(f"edit to searchable, {len(every)} changes: {percentiles(every)}")
        for kind, values in kinds.items():
            print(f"  {kind:9} ({len(values):3}): {percentiles(values)}")
        before = cpu_seconds(server.pid)
        time.sleep(args.idle)
        idle = cpu_seconds(server.pid) - before
        print(f"idle: {idle:.3f} s CPU in {args.idle:.0f} s ({100 * idle / args.idle:.3f}% of one core)")
        before = cpu_seconds(server.pid)
        started = time.perf_counter()
        git(src, "checkout", "-q", "-f", "burst")
        checkout = time.perf_counter() - started
        burst_seconds = checkout + until_found(config, "burstword", args.burst, 600)
        burst_cpu = cpu_seconds(server.pid) - before
        print(f"burst: git checkout of {args.burst} changed files ({checkout:.2f} s) searchable after {burst_seconds:.2f} s"
              f" ({burst_seconds - checkout:.2f} s after the checkout ended), server CPU {burst_cpu:.2f} s")
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(30)
        log.close()
    git(src, "checkout", "-q", "-f", "main")
    subprocess.run([sys.executable, str(MAIN), "index", *flags], check=True, capture_output=True)
    git(src, "checkout", "-q", "-f", "burst")
    started = time.perf_counter()
    subprocess.run([sys.executable, str(MAIN), "index", *flags], check=True, capture_output=True)
    floor = time.perf_counter() - started
    print(f"floor: main.py index after the same checkout, no server: {floor:.2f} s;"
          f" (burst after the checkout) / floor = {(burst_seconds - checkout) / floor:.2f}")


if __name__ == "__main__":
    main()
