"""How soon a server answers MCP ``initialize`` while another process uses the same index.

    python bench/initialize.py --corpus DIR [--work DIR] [--repeat 5]

For each case, a fresh ``main.py serve`` is started and timed from its start to the initialize
reply, alternated with the floor: ``python -c "import mcp.server"``, what importing the SDK alone
costs on this machine now. Cases: no other process; another process holding the index's write
lock (as a writer mid-batch does); another process running ``main.py index`` on a fresh index of
the corpus (writing all the time). Prints the median and the worst of each, in seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from index_files import WriterLock, lock_path  # noqa: E402
from models import ServerConfig  # noqa: E402

MAIN = str(REPO / "main.py")
INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}) + "\n"


def time_to_initialize(args: list[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, MAIN, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INITIALIZE.encode())
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline())
    elapsed = time.perf_counter() - started
    assert reply.get("id") == 1 and "result" in reply, reply
    proc.kill()
    proc.wait()
    return elapsed


def time_import() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp.server"], check=True)
    return time.perf_counter() - started


@contextmanager
def nothing() -> Iterator[None]:
    yield


@contextmanager
def holding_the_lock(db: Path) -> Iterator[None]:
    with WriterLock(lock_path(db)).held():
        yield


@contextmanager
def indexing(corpus: Path, index_dir: Path) -> Iterator[None]:
    shutil.rmtree(index_dir, ignore_errors=True)
    proc = subprocess.Popen([sys.executable, MAIN, "index", "--source", str(corpus), "--index-dir", str(index_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # past opening: the index is being written
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, help="index directory (default: /tmp/bench-speed/initialize-<corpus>)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = args.work or Path("/tmp/bench-speed") / f"initialize-{args.corpus.name}"
    served = ["--source", str(args.corpus), "--index-dir", str(work), "--scan-interval", "0"]
    subprocess.run([sys.executable, MAIN, "index", *served[:4]], check=True, capture_output=True)
    db = ServerConfig(source_directory=args.corpus.resolve(), index_output_directory=work.resolve()).db_path
    cases = {
        "no other process": nothing(),
        "another process holds the write lock": holding_the_lock(db),
        "another process indexes the corpus": indexing(args.corpus, work.with_name(work.name + "-other")),
    }
    print(f"seconds from start to the initialize reply, median / worst of {args.repeat}")
    for name, case in cases.items():
        served_times, import_times = [], []
        with case:
            for _ in range(args.repeat):
                served_times.append(time_to_initialize(served))
                import_times.append(time_import())
        print(f"  {name:40s} server {statistics.median(served_times):.2f} / {max(served_times):.2f}"
              f"   import mcp.server {statistics.median(import_times):.2f} / {max(import_times):.2f}")


if __name__ == "__main__":
    main()
