"""What the benches share: the corpora they build, runs alternated with the floor, the machine's load, JSON out.

    python bench/harness.py corpus NAME      build corpus NAME (if missing) and print its folder

Corpora are built under /tmp/bench-speed, never in the repository; one already there is used as it is:

- ``powershell-docs``: the .md/.txt files of MicrosoftDocs/PowerShell-Docs at 27138b21 (3,117
  files, 33 MB), unpacked from /work/shared/corpora/powershell-docs.tar.gz;
- ``realistic``: those docs and the seven relevance collections of /work/shared/relevance (each
  NAME/docs/*.txt), side by side in one folder: 24,957 files;
- ``8-copies``: the PowerShell docs copied 8 times under folders copy1 ... copy8 (24,936 files),
  a corpus where every text has many near-copies;
- ``synthetic``: 25,000 files of bench/make_corpus.py (seed 1).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
MAIN = str(REPO / "main.py")
SPEED = Path("/tmp/bench-speed")
SHARED = Path("/work/shared")
POWERSHELL_ARCHIVE = SHARED / "corpora" / "powershell-docs.tar.gz"
COLLECTION_ARCHIVES = SHARED / "relevance"
CORPORA = ("powershell-docs", "realistic", "8-copies", "synthetic")
_T = TypeVar("_T")


# ---- corpora ----------------------------------------------------------------------------------


def unpacked(archive: Path, into: Path) -> Path:
    """The folder ``archive`` holds, unpacked below ``into`` unless it is there already."""
    with tarfile.open(archive) as tar:
        top = tar.next().name.split("/")[0]
        target = into / top
        if not target.exists():
            partial = into / f".{top}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            tar.extractall(partial, filter="data")
            (partial / top).rename(target)
            partial.rmdir()
    return target


def powershell_docs() -> Path:
    """One copy of the PowerShell docs (what bench/agent_tasks.py's tasks were written for)."""
    return unpacked(POWERSHELL_ARCHIVE, SPEED / "ps")


def collections() -> list[Path]:
    """The seven relevance collections (NAME/docs/*.txt, queries.tsv, qrels.tsv), unpacked."""
    return [unpacked(archive, SPEED / "rel") for archive in sorted(COLLECTION_ARCHIVES.glob("*.tar.gz"))]


def realistic() -> Path:
    """The PowerShell docs and the seven relevance collections in one folder."""
    root = SPEED / "realistic"
    for archive in (POWERSHELL_ARCHIVE, *sorted(COLLECTION_ARCHIVES.glob("*.tar.gz"))):
        unpacked(archive, root)
    return root


def copies(count: int = 8) -> Path:
    """``count`` copies of the PowerShell docs, in folders copy1, copy2, ..."""
    root = SPEED / f"{count}-copies"
    if not root.exists():
        source, partial = powershell_docs(), SPEED / f".{count}-copies.partial"
        shutil.rmtree(partial, ignore_errors=True)
        for number in range(1, count + 1):
            shutil.copytree(source, partial / f"copy{number}")
        partial.rename(root)
    return root


def synthetic(files: int = 25_000, seed: int = 1) -> Path:
    """bench/make_corpus.py's corpus of ``files`` files."""
    import make_corpus

    root = SPEED / f"synthetic-{files}"
    if not root.exists():
        partial = SPEED / f".synthetic-{files}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        make_corpus.write_corpus(partial, files, seed)
        partial.rename(root)
    return root


def corpus(name: str | Path) -> Path:
    """A corpus named in CORPORA, built if it is missing, or else the folder ``name``."""
    builders = {"powershell-docs": powershell_docs, "realistic": realistic, "8-copies": copies, "synthetic": synthetic}
    if str(name) in builders:
        return builders[str(name)]()
    folder = Path(name)
    if not folder.is_dir():
        raise SystemExit(f"no corpus {name}: give a folder or one of {', '.join(CORPORA)}")
    return folder.resolve()


# ---- the machine ------------------------------------------------------------------------------


def load() -> list[float]:
    """The load averages over 1, 5 and 15 minutes: say them with every figure."""
    return [round(x, 2) for x in os.getloadavg()]


def code_version(code: Path = REPO) -> str:
    """The commit a checkout is at, "+changes" if its code differs from it (others edit it while benches run)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(code), *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return f"{code.name} (not a git checkout)"  # e.g. a `git archive` copy made to bench one commit
    dirty = git("status", "--porcelain", "--", "*.py", ":!bench", ":!tests")
    return head + ("+changes" if dirty else "")


def machine(code: Path = REPO) -> dict:
    """What a report says of where it ran; ``load_end`` is added by the caller when done."""
    return {"nproc": os.cpu_count(), "load_start": load(), "python": sys.version.split()[0],
            "sqlite": sqlite3.sqlite_version, "code": code_version(code)}


def spinning() -> subprocess.Popen:
    """A process that keeps one core busy until it is killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@contextmanager
def busy(on: bool) -> Iterator[None]:
    """With ``on``, one core kept busy meanwhile: what a user's machine looks like."""
    spinner = spinning() if on else None
    try:
        yield
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()


def write_json(path: Path | None, report: object) -> None:
    """Write ``report`` to ``path`` (when one is given) as indented JSON."""
    if path is not None:
        path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


# ---- timing -----------------------------------------------------------------------------------


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p95/p99 (nearest rank) and max, in milliseconds."""
    ordered = sorted(samples)

    def rank(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))] * 1000, 2)

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "max": round(ordered[-1] * 1000, 2), "n": len(ordered)}


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def rotated(names: list[_T], turn: int) -> list[_T]:
    """``names`` starting at a different one each turn, so that none is always first (or after the floor)."""
    shift = turn % len(names)
    return names[shift:] + names[:shift]


def alternated(rounds: int, runs: dict[str, Callable[[], _T]], each: Callable[[int, str, _T], None] | None = None) -> dict[str, list[_T]]:
    """Every one of ``runs`` once a round, in rotating order, so that a change in the machine's
    load hits all of them alike; ``each(round, name, result)`` after every run."""
    results: dict[str, list[_T]] = {name: [] for name in runs}
    for number in range(rounds):
        for name in rotated(list(runs), number):
            results[name].append(runs[name]())
            if each:
                each(number + 1, name, results[name][-1])
    return results


def run_child(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """Run a command; return (wall seconds, peak RSS of that child in MB, its stderr tail)."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode("utf-8", "replace")[-2000:]
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}): {tail}")
    return elapsed, usage.ru_maxrss / 1024, tail


# ---- full indexes: the floor and a checkout's main.py index ----------------------------------

#: Runs a checkout's main.py in this child and reports the CPU of the writer (this process) and of
#: its loader processes (its children) on stderr.
_INDEX_CHILD = r"""
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


def floor_index(corpus: Path, db: Path) -> dict[str, float]:
    """bench/floor.py's full index of ``corpus`` into a fresh ``db``: wall and CPU seconds."""
    db.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(BENCH / "floor.py"), "index", str(corpus), str(db)])
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit("the floor failed")
    return {"wall": time.perf_counter() - start, "cpu": usage.ru_utime + usage.ru_stime}


def daemon_index(corpus: Path, index_dir: Path, code: Path = REPO) -> dict[str, float]:
    """``main.py index`` of checkout ``code`` into a fresh ``index_dir``: wall seconds, CPU
    seconds of the writer process and of its loader processes."""
    shutil.rmtree(index_dir, ignore_errors=True)
    cmd = [sys.executable, "-c", _INDEX_CHILD, str(code), "index", "--source", str(corpus), "--index-dir", str(index_dir)]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stderr.splitlines() if line.startswith("RUSAGE ")]
    if done.returncode or not lines:
        raise SystemExit(f"{code}/main.py index failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix("RUSAGE "))


# ---- a server's start -------------------------------------------------------------------------

_INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}) + "\n"


def time_to_initialize(args: list[str]) -> float:
    """Seconds from starting ``main.py ARGS`` (a server on stdio) to its reply to ``initialize``."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, MAIN, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(_INITIALIZE.encode())
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline())
    elapsed = time.perf_counter() - started
    assert reply.get("id") == 1 and "result" in reply, reply
    proc.kill()
    proc.wait()
    return elapsed


def time_import() -> float:
    """Seconds a new process takes to import the MCP SDK alone: the floor of a server's start."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp.server"], check=True)
    return time.perf_counter() - started


@contextmanager
def indexing(corpus: Path, index_dir: Path) -> Iterator[None]:
    """Another process writing a fresh index of ``corpus`` into ``index_dir`` meanwhile."""
    shutil.rmtree(index_dir, ignore_errors=True)
    proc = subprocess.Popen([sys.executable, MAIN, "index", "--source", str(corpus), "--index-dir", str(index_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # past opening: the index is being written
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "corpus":
        sys.exit(__doc__)
    sys.path.insert(0, str(BENCH))
    print(corpus(sys.argv[2]))
