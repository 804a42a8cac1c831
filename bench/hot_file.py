"""A file written all the time (a log): the server's CPU while it grows, and how soon after the
last write its final text is found.

    python bench/hot_file.py [--work DIR] [--size-mb 4.5] [--every 0.2] [--seconds 30]

A server (main.py serve, scan interval one hour, so only its watcher sees the writes) runs on a
folder holding a few notes and one log of --size-mb; the log gets a line appended every --every
seconds for --seconds. Reported: the server's CPU seconds over those seconds, and the seconds from
the last write (which adds a word found nowhere else) until a search finds that word (polled every
5 ms, as any reader of the index would).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from models import ServerConfig  # noqa: E402
from status import read_status  # noqa: E402
from watch import cpu_seconds, until_found  # noqa: E402

MAIN = BENCH.parent / "main.py"
WORDS = "request served cache miss upstream latency worker queue retry timeout connection pool".split()


def log_line(rng: random.Random, number: int) -> str:
    return f"2024-01-01T00:00:{number % 60:02d} INFO " + " ".join(rng.choice(WORDS) for _ in range(12)) + "\n"


def prepare(work: Path, size_mb: float) -> Path:
    """A source folder with a few notes and a log of ``size_mb``."""
    if work.exists():
        shutil.rmtree(work)
    src = work / "src"
    src.mkdir(parents=True)
    for number in range(20):
        (src / f"note{number}.md").write_text(f"# Note {number}\n\nsome text about topic {number}\n", encoding="utf-8")
    rng = random.Random(5)
    with open(src / "app.log", "w", encoding="utf-8") as out:
        number = 0
        while out.tell() < size_mb * (1 << 20):
            out.write(log_line(rng, number))
            number += 1
    return src


def wait_idle(config: ServerConfig, files: int) -> None:
    while True:
        status = read_status(config, None)
        if status["state"] == "idle" and status["indexed_files"] >= files:
            return
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/work-hot-file"))
    parser.add_argument("--size-mb", type=float, default=4.5)
    parser.add_argument("--every", type=float, default=0.2)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    src = prepare(args.work, args.size_mb)
    config = ServerConfig(source_directory=src.resolve(), index_output_directory=(args.work / "index").resolve(),
                          included_extensions=(".md", ".log"))
    flags = ["--source", str(src), "--index-dir", str(config.index_output_directory), "--include-ext", ".md,.log"]
    log = open(args.work / "server.log", "w")
    server = subprocess.Popen([sys.executable, str(MAIN), "serve", *flags, "--scan-interval", "3600"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_idle(config, 21)
        rng = random.Random(6)
        before = cpu_seconds(server.pid)
        started = time.perf_counter()
        number = 0
        while time.perf_counter() - started < args.seconds:
            with open(src / "app.log", "a", encoding="utf-8") as out:
                out.write(log_line(rng, number))
            number += 1
            time.sleep(args.every)
        with open(src / "app.log", "a", encoding="utf-8") as out:
            out.write("the last line says zqfinalwordqz\n")
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server.pid) - before
        found = until_found(config, "zqfinalwordqz", 1)
        print(f"log of {args.size_mb} MB, {number} appends every {args.every}s over {elapsed:.1f}s:"
              f" server CPU {cpu:.2f} s ({100 * cpu / elapsed:.0f}% of one core)")
        print(f"final text found {found:.2f} s after the last write")
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(30)
        log.close()


if __name__ == "__main__":
    main()
