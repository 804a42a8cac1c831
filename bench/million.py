"""A corpus of a million real-text files, and the daemon measured on it against SQLite FTS5's floor.

    python bench/million.py --out DIR [--files 1000000] [--seed 1] [--repeat 10] [--json OUT]
        [--ps /tmp/ps/powershell-docs] [--collections /tmp/rel] [--steps build,index,...]

The sources are text that can be regenerated here: the PowerShell docs and the seven relevance
collections (/work/shared/corpora/powershell-docs.tar.gz and /work/shared/relevance/*.tar.gz,
unpacked: ``tar -xzf ARCHIVE -C DIR``). They are cut (the docs at their headings, as markup.py
finds them; the collections' documents whole) and recombined, seeded, into files of about 4 KB
on average, in a tree of folders: depth 1 to 6, 10 to 100 files each (about 18,000 folders for a
million files). Most files are Markdown (a title, front matter for half of them, 4 to 14 pieces
of the docs or the collections), a quarter are .txt (3 to 15 documents of the collections), a
tenth reST; 1 in 1,000 is large (40 to 120 pieces); 1 folder in 20 is a later version of an
earlier one (each file with one line changed and one added, as versioned documentation is). The
same --files and --seed give the same bytes; a corpus already built with them under DIR is used
as it is. The corpus goes to DIR/corpus, the indexes to DIR/work.

What each figure means (the steps, in order; --steps runs some of them):
- build: seconds to write the corpus (two processes); files, folders, MB of text.
- index: ``main.py index`` into a fresh folder, wall seconds, against bench/floor.py (walk, read,
  decode, insert every file into one FTS5 table in one transaction) on the same files, one run
  each. Peak RSS: of the largest single process, and of the sum over the daemon's process tree
  (the writer and its loader processes), sampled from /proc every 0.1 s.
  Index size: the index folder's files against the text's bytes (and the floor's database).
- rescan: a no-change rescan (TextIndexer.scan() in this process, as the server's refresh_index
  runs it), median of --rescans, alternated with the floor (an os.scandir walk that stats every
  file); the first scan after opening the index also loads its file list, shown apart.
- initialize: seconds from a ``main.py serve`` start to its reply to MCP ``initialize``, median
  and worst of 5, while another process runs ``main.py index`` on a fresh index of the corpus:
  a server on the index being written, and one on the finished index; against
  ``python -c "import mcp.server"`` alternated with them (what importing the SDK costs then).
- watching: the folders the corpus has (one inotify watch each), the folders a server watches
  (get_index_status) and how long after its start it said so, against
  /proc/sys/fs/inotify/max_user_watches. As root, the limit is then lowered below what the
  server needs (to what other processes use now plus half of it) for one more server, what its
  get_index_status says is shown, and the limit is restored.
- queries: for each query kind of bench/run.py (chosen from the corpus by document frequency),
  p50 and p99 of search.search() (top 10) alternated with the floor's top 10 with snippet(),
  --repeat times each; then the same kinds over MCP stdio through a server (p50/p99), and how
  long after a write refresh_index makes a changed file searchable. With --repeat 10, p99 is the
  worst sample.
- stability: STABILITY_QUESTIONS questions of 6 to 10 words (a lead such as "how do I" and a run
  of words from a line of a file of the corpus, both picked with --seed: any corpus works), each
  through search.search() at limit 10, first with the machine as idle as it gets (after up to
  QUIET_WAIT_S for the 1-minute load to fall to QUIET_LOAD), then again while two child
  processes spin (both cores busy; killed afterwards). How many give the same top 10 (paths in
  order, each hit's heading and lines) both times, and both lists of any that do not; each
  pass's load, share of CPU time busy (/proc/stat; and the part of it the searches took) and seconds. What a question ranks is planned from
  the index's statistics (query.fit_question), never from the clock: all should be the same.

Every step's own duration is reported too. Prints a Markdown table; --json writes everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import harness  # noqa: E402
import run as bench_run  # noqa: E402
import markup  # noqa: E402
from file_utils import IGNORED_DIRECTORIES  # noqa: E402
from models import ServerConfig  # noqa: E402
from query import STOPWORDS  # noqa: E402
from search import search  # noqa: E402

MAIN = str(REPO / "main.py")
STEPS = ("build", "index", "rescan", "initialize", "watching", "queries", "stability")
#: Changes whenever the same arguments would build other bytes: a corpus of another is built again.
CORPUS_VERSION = 1
MAX_WATCHES = Path("/proc/sys/fs/inotify/max_user_watches")
#: What a server's status says of watching until it has opened its index (daemon.py): no verdict yet.
NOT_OPEN_YET = "the index is not open yet"

# ---- the corpus: its sources ------------------------------------------------------------------

#: How many folders of each depth (1 = at the top), relatively.
DEPTH_WEIGHTS = {1: 1, 2: 9, 3: 25, 4: 30, 5: 20, 6: 15}
#: A new folder's parent is one of the last RECENT_PARENTS folders made one level up: siblings
#: cluster, as in real trees.
RECENT_PARENTS = 20
FILES_PER_FOLDER = (10, 100)
VERSION_SHARE = 0.05
LARGE_SHARE = 0.001
#: A file's kind, by weight: Markdown, plain text, reST.
KINDS = {"md": 65, "txt": 25, "rst": 10}
_WORD = re.compile(r"\b[a-z][a-z0-9]{2,11}\b")


@dataclass(frozen=True)
class Sources:
    """The texts files are made of: pieces of the docs (heading, text led by that heading's line),
    the collections' documents (title, text) and words for folder names."""

    pieces: list[tuple[str, str]]
    documents: list[tuple[str, str]]
    words: list[str]


def markdown_pieces(text: str) -> list[tuple[str, str]]:
    """A Markdown page cut before each of its headings as markup.py finds them (none inside code
    fences), front matter left out: (heading, text). A level-1 heading becomes level 2: a made
    file has its own title."""
    padded = "\n" + text.replace("\r\n", "\n") + "\n"
    start, _ = markup.front_matter(padded)
    headings = markup.markdown_headings(padded, start)
    cuts = [(start, "")] + [(at, name) for at, _, name in headings] + [(len(padded) - 1, "")]
    pieces = [(name, padded[at + 1:end].strip()) for (at, name), (end, _) in zip(cuts, cuts[1:])]
    return [(name, "#" + piece if piece.startswith("# ") else piece) for name, piece in pieces if len(piece) >= 80]


def read_sources(ps: Path, collections: Path) -> Sources:
    """Every piece of the docs and every document of the collections, in a fixed order."""
    pieces: list[str] = []
    headings: set[str] = set()
    for path in sorted(ps.rglob("*.md")):
        for name, piece in markdown_pieces(path.read_text(encoding="utf-8", errors="replace")):
            pieces.append((name, piece))
            headings.update(_WORD.findall(name.lower()))
    documents: list[tuple[str, str]] = []
    for name in sorted(p.name for p in collections.iterdir() if (p / "docs").is_dir()):
        docs = sorted((collections / name / "docs").glob("*.txt"), key=lambda p: (len(p.stem), p.stem))
        for path in docs:
            title, _, text = path.read_text(encoding="utf-8", errors="replace").partition("\n")
            if text.strip():
                documents.append((title.strip(), text.strip()))
    if not pieces or not documents:
        raise SystemExit(f"no sources: {len(pieces)} pieces of Markdown under {ps}, {len(documents)} documents under {collections}/*/docs")
    words = sorted(w for w in headings if w not in IGNORED_DIRECTORIES)
    return Sources(pieces, documents, words)


# ---- the corpus: its tree ---------------------------------------------------------------------


@dataclass(frozen=True)
class Folder:
    """A folder of the corpus: its path, how many files it holds, and the folder it is a later
    version of (its files are theirs, edited), if any."""

    number: int
    path: str
    files: int
    version_of: int | None = None


def plan_tree(files: int, seed: int, words: list[str]) -> list[Folder]:
    """Folders holding ``files`` files in all, 10 to 100 each (the last up to 109), at depths
    DEPTH_WEIGHTS; 1 in 20 a version of an earlier one, beside it."""
    rng = random.Random(f"{seed}/tree")
    folders: list[Folder] = []
    originals: list[Folder] = []
    by_depth: dict[int, list[str]] = {0: [""]}
    children: dict[str, set[str]] = {}
    depths, weights = zip(*DEPTH_WEIGHTS.items())
    left = files

    def child(parent: str, name: str) -> str:
        taken = children.setdefault(parent, set())
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name}-{n}"
        taken.add(unique)
        return f"{parent}/{unique}" if parent else unique

    while left > 0:
        bases = [f for f in originals[-RECENT_PARENTS * 10:] if f.files <= left and left - f.files not in range(1, FILES_PER_FOLDER[0])]
        if bases and rng.random() < VERSION_SHARE:
            base = rng.choice(bases)
            parent, _, name = base.path.rpartition("/")
            folders.append(Folder(len(folders), child(parent, f"{name}-v{rng.randint(2, 9)}"), base.files, base.number))
            left -= base.files
            continue
        depth = rng.choices(depths, weights)[0]
        while not by_depth.get(depth - 1):
            depth -= 1
        parent = rng.choice(by_depth[depth - 1][-RECENT_PARENTS:])
        name = "-".join(rng.sample(words, rng.choice((1, 1, 2))))
        path = child(parent, name)
        count = rng.randint(*FILES_PER_FOLDER)
        count = left if left - count < FILES_PER_FOLDER[0] else count
        folders.append(Folder(len(folders), path, count))
        originals.append(folders[-1])
        by_depth.setdefault(depth, []).append(path)
        left -= count
    return folders


# ---- the corpus: its files --------------------------------------------------------------------


def _title(rng: random.Random, sources: Sources) -> str:
    heading = rng.choice(sources.pieces)[0]
    if heading and rng.random() < 0.5:
        return heading
    title = rng.choice(sources.documents)[0]
    return title or " ".join(rng.sample(sources.words, 3)).capitalize()


def _count(rng: random.Random, low: int, high: int) -> int:
    """Pieces in a file: mostly few, 1 file in 1/LARGE_SHARE large."""
    if rng.random() < LARGE_SHARE:
        return rng.randint(40, 120)
    return min(high, low + int(rng.expovariate(1 / 3.0)))


def make_file(rng: random.Random, sources: Sources) -> tuple[str, str, str]:
    """(title, extension, text) of one new file."""
    kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
    title = _title(rng, sources)
    if kind == "txt":
        docs = [rng.choice(sources.documents) for _ in range(_count(rng, 3, 15))]
        return title, ".txt", "\n\n".join(f"{t}\n\n{text}" if t else text for t, text in docs) + "\n"
    parts: list[str] = []
    for _ in range(_count(rng, 4, 14)):
        if rng.random() < 0.7:
            heading, piece = rng.choice(sources.pieces)
            parts.append(_rst_section(heading, _below_heading(piece)) if kind == "rst" and heading else piece)
        else:
            doc_title, text = rng.choice(sources.documents)
            parts.append((f"## {doc_title}\n\n{text}" if kind == "md" else _rst_section(doc_title, text)) if doc_title else text)
    if kind == "rst":
        return title, ".rst", f"{title}\n{'=' * len(title)}\n\n" + "\n\n".join(parts) + "\n"
    head = f"# {title}\n\n"
    if rng.random() < 0.5:
        date = f"{rng.randint(2015, 2025)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        head = f"---\ntitle: {title}\nms.date: {date}\n---\n\n" + head
    return title, ".md", head + "\n\n".join(parts) + "\n"


def _below_heading(piece: str) -> str:
    """A piece's text after its heading's line (and a setext heading's underline)."""
    _, _, body = piece.partition("\n")
    first, _, rest = body.lstrip("\n").partition("\n")
    return rest if first.strip() and not first.strip(" =-") else body


def _rst_section(heading: str, body: str) -> str:
    return f"{heading}\n{'-' * len(heading)}\n\n{body.strip()}"


def _slug(title: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", title.lower()))[:60] or "page"


def folder_files(folder: Folder, plan: list[Folder], seed: int, sources: Sources) -> list[tuple[str, str]]:
    """(name, text) of each file of ``folder``; a version's are its base folder's, each with one
    line changed and a line added."""
    if folder.version_of is not None:
        base = folder_files(plan[folder.version_of], plan, seed, sources)
        return [(name, _edited(text, random.Random(f"{seed}/{folder.number}/{n}"), sources)) for n, (name, text) in enumerate(base)]
    named: list[tuple[str, str]] = []
    taken: set[str] = set()
    for n in range(folder.files):
        title, ext, text = make_file(random.Random(f"{seed}/{folder.number}/{n}"), sources)
        name, k = _slug(title), 1
        while name + ext in taken:
            k += 1
            name = f"{_slug(title)}-{k}"
        taken.add(name + ext)
        named.append((name + ext, text))
    return named


def _edited(text: str, rng: random.Random, sources: Sources) -> str:
    lines = text.split("\n")
    candidates = [n for n, line in enumerate(lines) if len(line) > 20] or [0]
    n = rng.choice(candidates)
    lines[n] = lines[n] + " " + " ".join(rng.sample(sources.words, 2))
    lines.insert(rng.randrange(len(lines)), f"Applies to version {rng.randint(2, 9)}.{rng.randint(0, 9)}.")
    return "\n".join(lines)


_WORKER: tuple[list[Folder], int, Sources, Path] | None = None


def _write_folders(numbers: list[int]) -> tuple[int, int]:
    """A build process's work: write these folders' files; (files, bytes) written."""
    assert _WORKER is not None
    plan, seed, sources, out = _WORKER
    files = size = 0
    for number in numbers:
        folder = out / plan[number].path
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in folder_files(plan[number], plan, seed, sources):
            data = text.encode("utf-8")
            (folder / name).write_bytes(data)
            files += 1
            size += len(data)
    return files, size


def build_corpus(out: Path, files: int, seed: int, sources: Sources, processes: int = 2) -> dict:
    """Write the corpus to ``out`` (emptied first) in ``processes`` processes; what it holds."""
    global _WORKER
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    plan = plan_tree(files, seed, sources.words)
    _WORKER = (plan, seed, sources, out)
    batches = [list(range(start, min(start + 64, len(plan)))) for start in range(0, len(plan), 64)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:  # forked: the sources are not copied
        written = pool.map(_write_folders, batches, chunksize=1)
    _WORKER = None
    depths = [folder.path.count("/") + 1 for folder in plan]
    return {"files": sum(f for f, _ in written), "bytes": sum(b for _, b in written), "folders_with_files": len(plan),
            "folders": _count_folders(out), "depths": {d: depths.count(d) for d in sorted(set(depths))},
            "versions": sum(folder.version_of is not None for folder in plan)}


def _count_folders(root: Path) -> int:
    return sum(len(dirs) for _, dirs, _ in os.walk(root))


def ensure_corpus(out: Path, files: int, seed: int, ps: Path, collections: Path) -> dict:
    """The corpus under out/corpus, built unless out/corpus.json says it was, with these arguments."""
    manifest, corpus = out / "corpus.json", out / "corpus"
    wanted = {"files": files, "seed": seed, "corpus_version": CORPUS_VERSION}
    if manifest.exists() and corpus.is_dir():
        built = json.loads(manifest.read_text())
        if {key: built.get(key) for key in wanted} == wanted:
            return {**built, "reused": True}
    start = time.perf_counter()
    sources = read_sources(ps, collections)
    built = {**wanted, **build_corpus(corpus, files, seed, sources),
             "sources": {"pieces": len(sources.pieces), "documents": len(sources.documents)}}
    built["build_s"] = round(time.perf_counter() - start, 1)
    manifest.write_text(json.dumps(built, indent=2))
    return {**built, "reused": False}


# ---- measuring --------------------------------------------------------------------------------


def _tree_rss_mb(pid: int) -> list[float]:
    """RSS of a process and of each of its descendants now, in MB (empty if it is gone)."""
    sizes, stack = [], [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/status") as handle:
                sizes.append(next((int(line.split()[1]) for line in handle if line.startswith("VmRSS:")), 0) / 1024)
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    stack.extend(int(child) for child in handle.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return sizes


def run_measured(cmd: list[str], cwd: Path) -> dict:
    """Run a command to its end: wall seconds, and the peaks of its largest process's RSS and of
    its process tree's summed RSS, in MB, sampled from /proc every 0.1 s (wait4's ru_maxrss would
    count this process's own pages, which the child shares until it execs)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peaks = [0.0, 0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            sizes = _tree_rss_mb(proc.pid)
            peaks[:] = max(peaks[0], max(sizes, default=0)), max(peaks[1], sum(sizes))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stderr is not None
    tail = proc.stderr.read().decode("utf-8", "replace")[-2000:]  # read to the end before waiting: a full pipe would stop it
    code = proc.wait()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if code:
        raise RuntimeError(f"{cmd[:3]} failed: {tail}")
    return {"s": round(wall, 3), "largest_rss_mb": round(peaks[0]), "tree_rss_mb": round(peaks[1]),
            "log": tail.strip().splitlines()[-1] if tail.strip() else ""}


def measure_index(corpus: Path, work: Path, index_dir: Path, floor_db: Path, text_bytes: int) -> dict:
    """Full index against the floor, one run each; peak RSS; index size."""
    shutil.rmtree(index_dir, ignore_errors=True)
    floor_db.unlink(missing_ok=True)
    floor_run = run_measured([sys.executable, str(BENCH / "floor.py"), "index", str(corpus), str(floor_db)], work)
    daemon = run_measured([sys.executable, MAIN, "index", *bench_run.daemon_args(corpus, index_dir)], work)
    index_bytes = sum(p.stat().st_size for p in index_dir.iterdir() if p.is_file())
    return {"floor": floor_run, "daemon": daemon, "ratio": round(daemon["s"] / floor_run["s"], 2),
            "index_mb": round(index_bytes / 1e6), "index_ratio": round(index_bytes / text_bytes, 2),
            "floor_mb": round(floor_db.stat().st_size / 1e6), "floor_ratio": round(floor_db.stat().st_size / text_bytes, 2)}


def measure_initialize(corpus: Path, index_dir: Path, other: Path, repeat: int = 5) -> dict:
    """Time to the initialize reply while another process indexes the corpus into ``other``."""
    cases = {"on the index being written": other, "on the finished index": index_dir}
    out: dict = {}
    with harness.indexing(corpus, other):
        time.sleep(4.0)  # past the walk's start: the writer holds the lock and writes
        imports: list[float] = []
        for name, folder in cases.items():
            served = ["serve", "--source", str(corpus), "--index-dir", str(folder), "--scan-interval", "0"]
            times = []
            for _ in range(repeat):
                times.append(harness.time_to_initialize(served))
                imports.append(harness.time_import())
            out[name] = {"median_s": round(statistics.median(times), 2), "max_s": round(max(times), 2)}
        out["import mcp.server"] = {"median_s": round(statistics.median(imports), 2), "max_s": round(max(imports), 2)}
    shutil.rmtree(other, ignore_errors=True)
    return out


def inotify_watches_in_use() -> int:
    """inotify watches all processes hold now (as far as /proc shows this user)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with open(f"/proc/{pid}/fdinfo/{fd}") as handle:
                    count += sum(line.startswith("inotify wd:") for line in handle)
        except OSError:
            continue
    return count


async def _watching_status(corpus: Path, index_dir: Path, work: Path, timeout: float = 1800.0) -> dict:
    """Start a server; its get_index_status once its first scan is done and it watches (or says why
    not), and how long after its start it was watching (NaN: never)."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[MAIN, "serve", *bench_run.daemon_args(corpus, index_dir)], cwd=str(work))
    start = time.perf_counter()
    watching_s = None
    async with Client(params) as client:
        while time.perf_counter() - start < timeout:
            status = (await client.call_tool("get_index_status", {})).structured_content or {}
            watching = status.get("watching", {})
            if watching_s is None and watching.get("active"):
                watching_s = time.perf_counter() - start
            decided = watching.get("active") or watching.get("problem") not in (None, NOT_OPEN_YET)
            if status.get("state") == "idle" and status.get("last_scan") and decided:
                break
            await asyncio.sleep(0.2)
    return {"watching": watching, "state": status.get("state"), "s_to_watching": round(watching_s or float("nan"), 1)}


def measure_watching(corpus: Path, index_dir: Path, work: Path, lower_limit: bool) -> dict:
    """Folders to watch, what a server watches, the kernel's limit; and what status says under a lower one."""
    limit = int(MAX_WATCHES.read_text())
    needed = 1 + _count_folders(corpus)
    out: dict = {"folders": needed, "max_user_watches": limit, "server": asyncio.run(_watching_status(corpus, index_dir, work))}
    if not lower_limit or os.geteuid() != 0:
        out["lower_limit"] = "not tried (needs root; --no-lower-limit)"
        return out
    lowered = inotify_watches_in_use() + needed // 2
    try:
        MAX_WATCHES.write_text(str(lowered))
        under = asyncio.run(_watching_status(corpus, index_dir, work))
    finally:
        MAX_WATCHES.write_text(str(limit))
    out["lower_limit"] = {"max_user_watches": lowered, **under}
    return out


def measure_queries(corpus: Path, index_dir: Path, floor_db: Path, work: Path, repeat: int) -> dict:
    """search() against the floor per query kind (alternated), then over MCP stdio."""
    config = ServerConfig(source_directory=corpus, index_output_directory=index_dir.resolve())
    queries = bench_run.choose_queries(corpus)
    measured = bench_run.measure_queries(queries, config.db_path, floor_db, repeat)
    mcp = asyncio.run(bench_run.measure_mcp(corpus, index_dir, work, queries, repeat, 3))
    for name, p in mcp["search_ms"].items():
        measured[name]["mcp_ms"] = p
    return {"kinds": measured, "changed_file": mcp["changed_file"]}


#: The stability step: how many questions, how they start, and how idle the machine is waited for.
STABILITY_QUESTIONS = 50
LEADS = ("how do I", "how to", "what is", "why does", "where is", "can I", "what happens when")
QUIET_LOAD = 1.0
QUIET_WAIT_S = 120.0
SPINNERS = 2


def stability_questions(corpus: Path, seed: int, count: int = STABILITY_QUESTIONS) -> list[str]:
    """``count`` different questions of 6 to 10 words: a lead of LEADS and a run of words (letters
    only) of one line of a file of the corpus; lead, file, line and run picked with ``seed``."""
    rng = random.Random(f"{seed}/stability")
    paths = sorted(rel for rel, _ in bench_run.floor.walk(str(corpus)) if rel.lower().endswith(bench_run.floor.INCLUDED))
    questions: list[str] = []
    for _ in range(count * 50):
        if len(questions) == count or not paths:
            break
        text = (corpus / rng.choice(paths)).read_text(encoding="utf-8", errors="replace")
        lead = rng.choice(LEADS).split()
        size = rng.randint(6, 10) - len(lead)
        lines = [words for words in ([w.lower() for w in bench_run._WORD.findall(line)] for line in text.splitlines())
                 if len(words) >= size and all(w.isalpha() and len(w) <= 15 for w in words)]
        if not lines:
            continue
        words = rng.choice(lines)
        start = rng.randrange(len(words) - size + 1)
        run_of = words[start:start + size]
        question = " ".join(lead + run_of) + "?"
        if sum(w not in STOPWORDS and len(w) >= 3 for w in run_of) >= 2 and question not in questions:
            questions.append(question)
    return questions


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far (/proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _top10(db_path: Path, question: str) -> dict:
    """A question's top 10 as [path, heading, line_start, line_end] (or the error it raised), and
    how it was read (files matched, warnings, the words searched and the feedback words)."""
    try:
        reply = search(db_path, question, 10)
    except Exception as exc:  # noqa: BLE001 - a search stopped at its deadline is a difference to show
        return {"top": f"{type(exc).__name__}: {exc}", "read": None}
    top = [[hit["path"], hit.get("heading", ""), hit["line_start"], hit["line_end"]] for hit in reply["results"]]
    read = {"files_matched": reply["files_matched"], "warnings": reply["warnings"],
            "optional": reply["query_read"]["optional"], "feedback": reply["query_read"]["feedback"]}
    return {"top": top, "read": read}


def _stability_pass(db_path: Path, questions: list[str]) -> dict:
    """Each question's _top10; the pass's seconds, load, and share of the machine's CPU time busy
    (all processes) and spent by this one (the searches)."""
    load, cpu, own, start = bench_run.load(), _cpu_times(), os.times(), time.perf_counter()
    replies = [_top10(db_path, question) for question in questions]
    busy, total = (now - then for now, then in zip(_cpu_times(), cpu))
    wall, own_s = time.perf_counter() - start, sum(os.times()[:2]) - sum(own[:2])
    return {"s": round(wall, 1), "load_start": load, "load_end": bench_run.load(), "cpu_busy_share": round(busy / max(total, 1), 2),
            "own_cpu_share": round(own_s / (wall * (os.cpu_count() or 1)), 2), "replies": replies}


@contextlib.contextmanager
def spinning(processes: int = SPINNERS) -> Iterator[None]:
    """``processes`` child processes spinning on a core each until the block ends (then killed)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        time.sleep(2.0)  # running before the first question
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def measure_stability(corpus: Path, db_path: Path, seed: int) -> dict:
    """The same questions' top 10 on an idle machine and on one with every core busy."""
    questions = stability_questions(corpus, seed)
    waited = time.perf_counter()
    while os.getloadavg()[0] > QUIET_LOAD and time.perf_counter() - waited < QUIET_WAIT_S:
        time.sleep(5.0)
    waited = round(time.perf_counter() - waited)
    idle = _stability_pass(db_path, questions)
    with spinning():
        busy = _stability_pass(db_path, questions)
    differ, read_differ, replies = [], [], []
    for question, a, b in zip(questions, idle.pop("replies"), busy.pop("replies")):
        replies.append({"question": question, **a})
        if a["top"] != b["top"]:
            differ.append({"question": question, "idle": a["top"], "busy": b["top"], "idle_read": a["read"], "busy_read": b["read"]})
        elif a["read"] != b["read"]:
            read_differ.append({"question": question, "idle_read": a["read"], "busy_read": b["read"]})
    return {"questions": len(questions), "identical": len(questions) - len(differ), "waited_for_quiet_s": waited,
            "idle": idle, "busy": {**busy, "spinners": SPINNERS}, "differ": differ, "read_differs": read_differ,
            "replies_idle": replies}


def timed_step(name: str, report: dict, fn: Callable[[], dict]) -> None:
    """Run one step; its result and duration go into the report (printed as it goes)."""
    start = time.perf_counter()
    load = harness.load()
    print(f"[{time.strftime('%H:%M:%S')}] {name} (load {load}) ...", file=sys.stderr, flush=True)
    report[name] = fn()
    report["steps"][name] = {"s": round(time.perf_counter() - start, 1), "load_start": load, "load_end": harness.load()}
    print(f"[{time.strftime('%H:%M:%S')}] {name} done in {report['steps'][name]['s']} s: {json.dumps(report[name])[:300]}",
          file=sys.stderr, flush=True)


def run(out: Path, files: int, seed: int, ps: Path, collections: Path, repeat: int, rescans: int,
        steps: tuple[str, ...] = STEPS, lower_limit: bool = True) -> dict:
    """Every step named in ``steps``; the corpus is built (or reused) whatever they are."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    corpus, work = out / "corpus", out / "work"
    index_dir, floor_db = work / "index", work / "floor.sqlite3"
    work.mkdir(exist_ok=True)
    report: dict = {"machine": {"nproc": os.cpu_count(), "python": sys.version.split()[0], "code": harness.code_version(),
                                "memory_mb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20},
                    "steps": {}, "repeat": repeat}
    timed_step("build", report, lambda: ensure_corpus(out, files, seed, ps, collections))
    text_bytes = report["build"]["bytes"]
    if "index" in steps:
        bench_run.warm_cache(corpus)
        timed_step("index", report, lambda: measure_index(corpus, work, index_dir, floor_db, text_bytes))
    elif not floor_db.exists() or not index_dir.exists():
        raise SystemExit("no index yet: run the index step first")
    config = ServerConfig(source_directory=corpus, index_output_directory=index_dir.resolve())
    if "rescan" in steps:
        timed_step("rescan", report, lambda: bench_run.measure_rescan(corpus, config, rescans))
    if "initialize" in steps:
        timed_step("initialize", report, lambda: measure_initialize(corpus, index_dir, work / "index-other"))
    if "watching" in steps:
        timed_step("watching", report, lambda: measure_watching(corpus, index_dir, work, lower_limit))
    if "queries" in steps:
        timed_step("queries", report, lambda: measure_queries(corpus, index_dir, floor_db, work, repeat))
    if "stability" in steps:
        timed_step("stability", report, lambda: measure_stability(corpus, config.db_path, seed))
    return report


# ---- the table --------------------------------------------------------------------------------


def table(r: dict) -> Iterator[str]:
    """The report as Markdown lines."""
    b = r["build"]
    yield (f"{b['files']:,} files ({b['bytes'] / 1e6:,.0f} MB of text) in {b['folders']:,} folders (depths {b['depths']},"
           f" {b['versions']} version folders), seed {b['seed']}; {r['machine']['nproc']} cores, code {r['machine']['code']}")
    yield ""
    yield "| measure | floor | docsearch | ratio | notes |"
    yield "|---|---|---|---|---|"
    if "index" in r:
        i = r["index"]
        yield (f"| full index | {i['floor']['s']:,.1f} s | {i['daemon']['s']:,.1f} s | **{i['ratio']}x** |"
               f" {b['files'] / i['daemon']['s']:,.0f} files/s, {b['bytes'] / 1e6 / i['daemon']['s']:.1f} MB/s |")
        yield (f"| peak RSS | {i['floor']['largest_rss_mb']} MB | {i['daemon']['tree_rss_mb']} MB (process tree),"
               f" {i['daemon']['largest_rss_mb']} MB (largest process) | | |")
        yield f"| size / text | {i['floor_ratio']} ({i['floor_mb']:,} MB) | {i['index_ratio']} ({i['index_mb']:,} MB) | | |"
    if "rescan" in r:
        s = r["rescan"]
        yield (f"| no-change rescan | {s['floor_s']} s | {s['daemon_s']} s | **{s['ratio']:.2f}x** |"
               f" first scan after opening the index: {s['daemon_first_scan_after_open_s']} s |")
    if "initialize" in r:
        z = r["initialize"]
        imp = z["import mcp.server"]
        for name in ("on the index being written", "on the finished index"):
            yield (f"| `initialize` while indexing, {name} (median / worst) | {imp['median_s']} / {imp['max_s']} s (import mcp.server) |"
                   f" {z[name]['median_s']} / {z[name]['max_s']} s | {z[name]['median_s'] / imp['median_s']:.2f}x | |")
    if "watching" in r:
        w = r["watching"]
        server = w["server"]
        yield (f"| watching | {w['folders']:,} folders to watch; max_user_watches {w['max_user_watches']:,} |"
               f" {server['watching'].get('folders', 0):,} watched, {server['s_to_watching']} s after start | |"
               f" {server['watching'].get('problem') or 'active'} |")
        low = w["lower_limit"]
        if isinstance(low, dict):
            yield (f"| watching, limit lowered to {low['max_user_watches']:,} | | active: {low['watching'].get('active')},"
                   f" {low['watching'].get('folders', 0):,} folders | | status says: {low['watching'].get('problem')} |")
        else:
            yield f"| watching, limit lowered | | | | {low} |"
    if "queries" in r:
        for name, q in r["queries"]["kinds"].items():
            f, d, m = q["floor_ms"], q["search_ms"], q.get("mcp_ms", {})
            yield (f"| query {name} `{q['query']}` p50 / p99 | {f['p50']} / {f['p99']} ms | {d['p50']} / {d['p99']} ms |"
                   f" **{q['p50_ratio']:.2f}x** | MCP {m.get('p50')} / {m.get('p99')} ms; {q['files_matched']:,} files matched |")
        c = r["queries"]["changed_file"]
        yield f"| changed file searchable (refresh_index + search, MCP) | | {c['median_ms']} ms median, {c['max_ms']} max | | |"
    if "stability" in r:
        st = r["stability"]
        idle, busy = st["idle"], st["busy"]
        yield (f"| same top 10, idle vs {busy['spinners']} cores kept busy ({st['questions']} questions) | |"
               f" **{st['identical']} of {st['questions']}** | | idle: load {idle['load_start']} -> {idle['load_end']},"
               f" CPU {idle['cpu_busy_share']:.0%} busy ({idle['own_cpu_share']:.0%} the searches), {idle['s']} s;"
               f" busy: load {busy['load_start']} -> {busy['load_end']},"
               f" CPU {busy['cpu_busy_share']:.0%} busy ({busy['own_cpu_share']:.0%} the searches), {busy['s']} s |")
        for d in st["differ"]:
            yield f"| differs: `{d['question']}` | | idle {d['idle']} | | busy {d['busy']} |"
    yield ""
    yield "| step | seconds | load at start -> end |"
    yield "|---|---|---|"
    for name, step in r["steps"].items():
        reused = " (reused)" if name == "build" and b.get("reused") else ""
        yield f"| {name}{reused} | {step['s']:,} | {step['load_start']} -> {step['load_end']} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the corpus goes to OUT/corpus, indexes to OUT/work")
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ps", type=Path, default=Path("/tmp/ps/powershell-docs"), help="the PowerShell docs, unpacked")
    parser.add_argument("--collections", type=Path, default=Path("/tmp/rel"), help="the relevance collections, unpacked: NAME/docs/*.txt")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per query kind")
    parser.add_argument("--rescans", type=int, default=3, help="timed no-change rescans")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of: {','.join(STEPS)} (build always runs)")
    parser.add_argument("--no-lower-limit", action="store_true", help="do not lower fs.inotify.max_user_watches, even as root")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()
    steps = tuple(step.strip() for step in args.steps.split(",") if step.strip())
    if unknown := set(steps) - set(STEPS):
        parser.error(f"--steps: unknown {sorted(unknown)}")
    report = run(args.out, args.files, args.seed, args.ps, args.collections, args.repeat, args.rescans, steps, not args.no_lower_limit)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print("\n".join(table(report)))


if __name__ == "__main__":
    main()
