"""Measure the daemon against the bare-FTS5 floor, on the same files, in one run.

    python bench/run.py --corpus DIR|realistic|8-copies [--json OUT] [--work DIR] [--repeat N] [--only SECTION,...]

1. full index: ``main.py index`` vs bench/floor.py (walk, read, decode, one FTS5 transaction);
2. no-change rescan vs an os.scandir walk that stats every file;
3. one changed file: time until refresh_index (over MCP) makes it searchable;
4. query latency p50/p95/p99 for common, rare, phrase, prefix, two-term and question queries:
   the floor's top-10 with snippet, search.search(), the MCP search tool over stdio, and rg -l;
5. index size / corpus size, peak RSS while indexing, ``main.py search`` wall time;
6. get_document p50/p95/p99 on ~200 files (whole file, one section, 20 lines) vs open().read().split();
7. filtered search (a narrow folder, a wide extension or glob, a date), search with the
   freshness check and search without collapsing copies, each as a ratio to the default
   unfiltered search in the same run.

``--only documents,filters`` runs only the sections named (see SECTIONS); the index is then
brought up to date with ``main.py index`` instead of being built and timed.

Speed is reported as ratios to the floor measured in the same run; absolute times on a shared
machine mean little. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import floor  # noqa: E402
from harness import MAIN, SPEED, corpus as named_corpus, load, machine, percentiles, run_child, timed, write_json  # noqa: E402
from documents import document_reply  # noqa: E402
from exceptions import ArgumentError  # noqa: E402
from filters import read_filters  # noqa: E402
from index_writer import IndexWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig  # noqa: E402
from query import STOPWORDS  # noqa: E402
from search import Freshness, search  # noqa: E402

QUERY_CLASSES = ("common", "rare", "phrase", "prefix", "two_terms", "question")
SAMPLE_FILES = 1500
SECTIONS = ("index", "rescan", "queries", "cli", "mcp", "rg", "documents", "filters")
DOCUMENT_FILES = 200
#: The narrow filter's folder holds about this share of the indexed files (0.1% to 1% if one does).
NARROW_SHARE, NARROW_BAND = 0.003, (0.001, 0.01)
_WORD = re.compile(r"[^\W_]+")


# ---- helpers ---------------------------------------------------------------------------------


def daemon_args(corpus: Path, index_dir: Path) -> list[str]:
    return ["--source", str(corpus), "--index-dir", str(index_dir)]


# ---- choosing queries from the corpus --------------------------------------------------------


def word_statistics(corpus: Path) -> tuple[int, Counter[str], Counter[tuple[str, str]]]:
    """(files sampled, document frequency of each word, of each pair of adjacent content words)
    over about SAMPLE_FILES text files of the corpus."""
    paths = sorted(rel for rel, _ in floor.walk(str(corpus)) if rel.lower().endswith(floor.INCLUDED))
    step = max(1, len(paths) // SAMPLE_FILES)
    df: Counter[str] = Counter()
    pairs: Counter[tuple[str, str]] = Counter()
    sample = 0
    for rel in paths[::step]:
        data = (corpus / rel).read_bytes()
        if b"\x00" in data[:8192]:
            continue
        sample += 1
        words = [w.lower() for w in _WORD.findall(data.decode("utf-8", "replace"))]
        df.update(set(words))
        pairs.update({(a, b) for a, b in zip(words, words[1:]) if a not in STOPWORDS and b not in STOPWORDS and a != b})
    return sample, df, pairs


def choose_queries(corpus: Path) -> dict[str, dict[str, str]]:
    """Pick query words by their document frequency in a sample of files: works on any corpus.

    Each query has the user text (for the daemon) and an equivalent FTS5 expression (for the floor).
    """
    sample, df, pairs = word_statistics(corpus)
    content = [(w, n) for w, n in df.most_common() if w not in STOPWORDS and len(w) >= 4 and w.isalpha()]
    if not content:
        raise SystemExit("the corpus has too few words to choose queries from")

    def near(share: float, pool: list[tuple] = content) -> str:
        return min(pool, key=lambda item: (abs(item[1] / sample - share), item[0]))[0]

    common = content[0][0]
    rare = min((w for w, n in content if n == 1 and len(w) >= 6), default=content[-1][0])
    mid, mid2 = near(0.10), near(0.04)
    phrase = near(0.02, [p for p in pairs.items() if p[1] >= 2] or list(pairs.items()))
    prefix = mid[:4]
    return {
        "common": {"query": common, "floor": f'"{common}"'},
        "rare": {"query": rare, "floor": f'"{rare}"'},
        "phrase": {"query": f'"{phrase[0]} {phrase[1]}"', "floor": f'"{phrase[0]} {phrase[1]}"'},
        "prefix": {"query": f"{prefix}*", "floor": f'"{prefix}"*'},
        "two_terms": {"query": f"{mid} {mid2}", "floor": f'"{mid}" AND "{mid2}"'},
        "question": {
            "query": f"how do I use {mid2} with the {common} and {rare}?",
            "floor": f'"use" OR "{mid2}" OR "{common}" OR "{rare}"',  # the words the daemon searches
        },
    }


def rg_pattern(name: str, spec: dict[str, str]) -> list[str]:
    words = _WORD.findall(spec["query"])
    if name == "phrase":
        return ["-F", "-e", " ".join(words)]
    if name == "prefix":
        return ["-e", rf"\b{words[0]}"]
    if name == "question":
        return ["-w", "-e", "|".join(w for w in words if w.lower() not in STOPWORDS)]
    return ["-w", "-e", words[0]]


# ---- the measurements ------------------------------------------------------------------------


def measure_index(corpus: Path, work: Path, index_dir: Path, floor_db: Path) -> dict:
    for target in (index_dir, floor_db):
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    floor_s, floor_rss, _ = run_child([sys.executable, str(BENCH / "floor.py"), "index", str(corpus), str(floor_db)], work)
    daemon_s, daemon_rss, log = run_child([sys.executable, MAIN, "index", *daemon_args(corpus, index_dir)], work)
    return {
        "floor_s": round(floor_s, 3), "daemon_s": round(daemon_s, 3), "ratio": round(daemon_s / floor_s, 3),
        "floor_peak_rss_mb": round(floor_rss, 1), "daemon_peak_rss_mb": round(daemon_rss, 1),
        "daemon_log_tail": log.strip().splitlines()[-1] if log.strip() else "",
    }


def measure_rescan(corpus: Path, config: ServerConfig, repeat: int) -> dict:
    writer = IndexWriter(config.db_path)
    indexer = TextIndexer(config, writer)
    start = time.perf_counter()
    replies = [indexer.scan()]  # the first scan after opening also loads the stored file list
    first_s = time.perf_counter() - start
    # Alternated, so a change in the machine's load hits both sides alike.
    floor_samples, daemon_samples = [], []
    for _ in range(repeat):
        floor_samples += timed(lambda: floor.stat_walk(str(corpus)), 1)
        daemon_samples += timed(lambda: replies.append(indexer.scan()), 1)
    writer.close()
    floor_s, daemon_s = statistics.median(floor_samples), statistics.median(daemon_samples)
    return {
        "floor_s": round(floor_s, 4), "daemon_s": round(daemon_s, 4), "ratio": round(daemon_s / floor_s, 3),
        "daemon_first_scan_after_open_s": round(first_s, 4), "files_read_in_last_rescan": replies[-1]["files_processed"],
    }


def measure_queries(queries: dict, db_path: Path, floor_db: Path, repeat: int) -> dict:
    conn = sqlite3.connect(f"file:{floor_db}?mode=ro", uri=True)
    out = {}
    for name, spec in queries.items():
        floor.top10(conn, spec["floor"])
        search(db_path, spec["query"], 10)  # warm both before timing
        # Alternated, so a change in the machine's load hits both sides alike.
        floor_samples, search_samples = [], []
        for _ in range(repeat):
            floor_samples += timed(lambda: floor.top10(conn, spec["floor"]), 1)
            search_samples += timed(lambda: search(db_path, spec["query"], 10), 1)
        reply = search(db_path, spec["query"], 10)
        floor_p, search_p = percentiles(floor_samples), percentiles(search_samples)
        out[name] = {
            **spec, "files_matched": reply["files_matched"], "results": len(reply["results"]),
            "floor_ms": floor_p, "search_ms": search_p, "p50_ratio": round(search_p["p50"] / max(floor_p["p50"], 1e-3), 3),
        }
    conn.close()
    return out


def measure_rg(corpus: Path, queries: dict) -> dict:
    rg = shutil.which("rg")
    if rg is None:
        return {}
    out = {}
    for name, spec in queries.items():
        cmd = [rg, "-l", "-i", "-g", "*.md", "-g", "*.txt", "-g", "*.rst", *rg_pattern(name, spec), str(corpus)]
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out[name] = round((time.perf_counter() - start) * 1000, 1)
    return out


def measure_cli(corpus: Path, index_dir: Path, work: Path, queries: dict, repeat: int) -> dict:
    out = {}
    for name in ("common", "rare"):
        cmd = [sys.executable, MAIN, "search", queries[name]["query"], *daemon_args(corpus, index_dir), "--limit", "10"]
        samples = [run_child(cmd, work)[0] for _ in range(repeat)]
        out[name] = round(statistics.median(samples) * 1000, 1)
    return out


async def measure_mcp(corpus: Path, index_dir: Path, work: Path, queries: dict, repeat: int, changes: int) -> dict:
    """Over a real stdio MCP connection: search latency, and write-to-searchable time for one file."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=[MAIN, "serve", *daemon_args(corpus, index_dir), "--scan-interval", "0"], cwd=str(work)
    )
    async with Client(params) as client:
        while True:  # the server's first scan (nothing changed) must finish before timing
            status = (await client.call_tool("get_index_status", {})).structured_content
            if status["state"] == "idle" and status["last_scan"]:
                break
            await asyncio.sleep(0.05)
        latency = {}
        for name, spec in queries.items():
            await client.call_tool("search", {"query": spec["query"], "limit": 10})
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                result = await client.call_tool("search", {"query": spec["query"], "limit": 10})
                samples.append(time.perf_counter() - start)
                if result.is_error:
                    raise RuntimeError(f"search {spec['query']!r} failed over MCP: {result.content[0].text}")
            latency[name] = percentiles(samples)
        changed = await _change_one_file(client, corpus, changes)
    return {"search_ms": latency, "changed_file": changed}


async def _change_one_file(client, corpus: Path, changes: int) -> dict:
    # Hidden files and folders (.github/...) are not indexed by default: the file changed must be.
    rel = sorted(rel for rel, _ in floor.walk(str(corpus)) if rel.endswith(".md") and not any(part.startswith(".") for part in rel.split("/")))[0]
    path = corpus / rel
    original = path.read_bytes()
    samples = []
    try:
        for n in range(changes):
            marker = f"benchmarkmarker{os.getpid()}x{n}"
            start = time.perf_counter()
            path.write_bytes(original + f"\n\n{marker}\n".encode())
            refreshed = await client.call_tool("refresh_index", {"filepath": rel})
            found = await client.call_tool("search", {"query": marker, "limit": 10})
            samples.append(time.perf_counter() - start)
            hits = (found.structured_content or {}).get("results", [])
            if refreshed.is_error or not any(hit["path"] == rel for hit in hits):
                raise RuntimeError(f"{rel} was not searchable after refresh_index")
    finally:
        path.write_bytes(original)
        await client.call_tool("refresh_index", {"filepath": rel})
    return {"file": rel, "file_bytes": len(original), "median_ms": round(statistics.median(samples) * 1000, 1),
            "max_ms": round(max(samples) * 1000, 1), "n": len(samples)}


# ---- get_document ----------------------------------------------------------------------------


def indexed_paths(db_path: Path) -> list[tuple[str, int]]:
    """(path, mtime_ns) of every file the index holds, by path."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT path, mtime_ns FROM files ORDER BY path").fetchall()
    finally:
        conn.close()


def floor_document(path: Path) -> list[str]:
    """The floor of get_document: read the file and split it into lines, nothing else."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read().split("\n")


def measure_documents(corpus: Path, config: ServerConfig, repeat: int = 3) -> dict:
    """get_document (documents.document_reply) on DOCUMENT_FILES files spread over the index: the
    whole file, the middle heading of its outline, and 20 lines from its middle, each alternated
    with the floor on the same file."""
    paths = [path for path, _ in indexed_paths(config.db_path)]
    paths = paths[:: max(1, len(paths) // DOCUMENT_FILES)][:DOCUMENT_FILES]
    samples: dict[str, list[float]] = {"floor": [], "whole": [], "section": [], "range": []}
    per_file: dict[str, list[float]] = {"whole": [], "section": [], "range": []}
    errors: list[str] = []
    truncated = 0
    for rel in paths:
        try:
            first = document_reply(config, rel, outline=True)  # warms the file and gives its outline
        except ArgumentError as exc:
            errors.append(f"{rel}: {exc}")
            continue
        truncated += first["truncated"]
        outline, middle = first["outline"], max(1, first["total_lines"] // 2 - 9)
        calls: dict[str, Callable[[], object]] = {
            "whole": lambda: document_reply(config, rel),
            "range": lambda: document_reply(config, rel, start_line=middle, end_line=middle + 19),
        }
        if outline:
            entry = outline[len(outline) // 2]  # its line picks it among headings of the same name
            calls["section"] = lambda: document_reply(config, rel, heading=entry["heading"], start_line=entry["line_start"])
        mine: dict[str, list[float]] = {"floor": [], **{kind: [] for kind in calls}}
        try:
            for _ in range(repeat):
                mine["floor"] += timed(lambda: floor_document(corpus / rel), 1)
                for kind, call in calls.items():
                    mine[kind] += timed(call, 1)
        except ArgumentError as exc:
            errors.append(f"{rel} ({kind}): {exc}")
            continue
        for kind, got in mine.items():
            samples[kind] += got
            if kind != "floor":
                per_file[kind].append(statistics.median(got) / statistics.median(mine["floor"]))
    floor_p = percentiles(samples["floor"])
    out: dict = {"files": len(paths), "repeat": repeat, "truncated_whole": truncated, "errors": errors[:10],
                 "error_count": len(errors), "floor_ms": floor_p}
    for kind in per_file:
        ratios = sorted(per_file[kind])
        out[kind] = {"ms": percentiles(samples[kind]), "p50_ratio": round(percentiles(samples[kind])["p50"] / max(floor_p["p50"], 1e-3), 2),
                     "files": len(ratios), "per_file_ratio_median": round(statistics.median(ratios), 2),
                     "per_file_ratio_max": round(ratios[-1], 2)}
    return out


# ---- filtered search and the freshness check -------------------------------------------------


def choose_filters(db_path: Path) -> dict[str, dict]:
    """Filters chosen from the index's paths: a narrow folder (NARROW_SHARE of the files) as a
    prefix and as a glob, the commonest extension as an extension list and as a glob, and a date
    every file passes. Each has search() arguments, the floor's SQLite GLOB (None: unfiltered
    floor) and a check that a returned path passes it."""
    files = indexed_paths(db_path)
    folders: Counter[str] = Counter()
    for path, _ in files:
        parts = path.split("/")[:-1]
        folders.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    total = len(files)
    band = [(f, n) for f, n in folders.items() if NARROW_BAND[0] <= n / total <= NARROW_BAND[1]] or list(folders.items())
    folder, _ = min(band, key=lambda item: (abs(math.log(item[1] / total / NARROW_SHARE)), item[0]))
    ext = Counter(os.path.splitext(path)[1].lower() for path, _ in files).most_common(1)[0][0]
    oldest = min(mtime for _, mtime in files)
    after = time.strftime("%Y-%m-%d", time.gmtime(oldest / 1e9 - 86400))
    inside = f"{folder}/"
    return {
        "narrow_folder": {"args": {"path": inside}, "floor_glob": f"{folder}/*", "check": lambda p: p.startswith(inside)},
        "narrow_glob": {"args": {"path": f"{folder}/**/*{ext}"}, "floor_glob": f"{folder}/*{ext}",
                        "check": lambda p: p.startswith(inside) and p.endswith(ext)},
        "wide_ext": {"args": {"extensions": [ext]}, "floor_glob": f"*{ext}", "check": lambda p: p.lower().endswith(ext)},
        "wide_glob": {"args": {"path": f"**/*{ext}"}, "floor_glob": f"*{ext}", "check": lambda p: p.endswith(ext)},
        "wide_date": {"args": {"modified_after": after}, "floor_glob": None, "check": lambda p: True},
    }


def floor_top10_in(conn: sqlite3.Connection, match: str, glob: str | None) -> list[tuple[str, str]]:
    """The floor's query restricted to the paths matching an SQLite GLOB."""
    if glob is None:
        return floor.top10(conn, match)
    return conn.execute(
        "SELECT path, snippet(docs, 1, '[', ']', '…', 32) FROM docs WHERE docs MATCH ? AND path GLOB ? ORDER BY rank LIMIT 10",
        (match, glob),
    ).fetchall()


def measure_filters(corpus: Path, queries: dict, db_path: Path, floor_db: Path, repeat: int) -> dict:
    """Per query class: unfiltered search, search with the freshness check, search without
    collapsing copies (all_copies), and each filter of choose_filters, alternated in every round;
    the floor's query with the same filter too."""
    chosen = choose_filters(db_path)
    conn = sqlite3.connect(f"file:{floor_db}?mode=ro", uri=True)
    fresh = Freshness(corpus)
    searches: dict[str, Callable[[str], dict]] = {
        "none": lambda q: search(db_path, q, 10),
        "fresh": lambda q: search(db_path, q, 10, freshness=fresh),
        "all_copies": lambda q: search(db_path, q, 10, collapse_duplicates=False),
    }
    for name, spec in chosen.items():
        searches[name] = lambda q, f=read_filters(**spec["args"]): search(db_path, q, 10, filters=f)
    paths = [path for path, _ in indexed_paths(db_path)]
    passing = {name: sum(map(spec["check"], paths)) for name, spec in chosen.items()}
    out: dict = {"filters": {name: {"args": spec["args"], "files": passing[name], "share": round(passing[name] / len(paths), 4)}
                             for name, spec in chosen.items()}, "queries": {}}
    for qname, spec in queries.items():
        floors = {"none": None, **{name: f["floor_glob"] for name, f in chosen.items()}}
        times: dict[str, list[float]] = {name: [] for name in searches}
        floor_times: dict[str, list[float]] = {name: [] for name in floors}
        replies = {name: run_search(spec["query"]) for name, run_search in searches.items()}  # warm, and checked
        for _ in range(repeat):
            for name, run_search in searches.items():
                times[name] += timed(lambda: run_search(spec["query"]), 1)
            for name, glob in floors.items():
                floor_times[name] += timed(lambda: floor_top10_in(conn, spec["floor"], glob), 1)
        base = percentiles(times["none"])["p50"]
        rows = {}
        for name, got in times.items():
            p, floor_p = percentiles(got), percentiles(floor_times[name if name in floors else "none"])
            reply, check = replies[name], chosen[name]["check"] if name in chosen else (lambda path: True)
            rows[name] = {
                "ms": p, "ratio_to_unfiltered": round(p["p50"] / max(base, 1e-3), 2), "floor_ms": floor_p,
                "ratio_to_floor": round(p["p50"] / max(floor_p["p50"], 1e-3), 2),
                "files_matched": reply["files_matched"], "results": len(reply["results"]),
                "failing_filter": [hit["path"] for hit in reply["results"] if not check(hit["path"])][:3],
                "stale": sum(hit["stale"] for hit in reply["results"]),
            }
        out["queries"][qname] = rows
    conn.close()
    return out


def corpus_size(corpus: Path) -> tuple[int, int]:
    files = total = 0
    for rel, entry in floor.walk(str(corpus)):
        if rel.lower().endswith(floor.INCLUDED):
            files += 1
            total += entry.stat().st_size
    return files, total


def warm_cache(corpus: Path) -> None:
    for _, entry in floor.walk(str(corpus)):
        with open(entry.path, "rb") as handle:
            while handle.read(1 << 20):
                pass


def ensure_index(corpus: Path, work: Path, index_dir: Path, floor_db: Path) -> None:
    """Without the index section: build the floor if it is missing, bring the index up to date."""
    if not floor_db.exists():
        run_child([sys.executable, str(BENCH / "floor.py"), "index", str(corpus), str(floor_db)], work)
    run_child([sys.executable, MAIN, "index", *daemon_args(corpus, index_dir)], work)


def run(corpus: Path, work: Path, repeat: int, quick: bool = False, only: tuple[str, ...] = SECTIONS) -> dict:
    corpus = corpus.resolve()
    work.mkdir(parents=True, exist_ok=True)
    index_dir, floor_db = work / "index", work / "floor.sqlite3"
    config = ServerConfig(source_directory=corpus, index_output_directory=index_dir.resolve())
    report: dict = {"machine": machine(), "sections": list(only)}
    files, total = corpus_size(corpus)
    report["corpus"] = {"path": str(corpus), "text_files": files, "bytes": total}
    warm_cache(corpus)
    if "index" in only:
        report["index"] = measure_index(corpus, work, index_dir, floor_db)
        report["index"]["files_per_s"] = round(files / report["index"]["daemon_s"])
        report["index"]["mb_per_s"] = round(total / 1e6 / report["index"]["daemon_s"], 1)
    else:
        ensure_index(corpus, work, index_dir, floor_db)
    if "rescan" in only:
        report["rescan"] = measure_rescan(corpus, config, 7)
    if "index" in only:
        db_bytes = sum(p.stat().st_size for p in index_dir.iterdir() if p.is_file())
        report["size"] = {"corpus_bytes": total, "index_bytes": db_bytes, "ratio": round(db_bytes / total, 3),
                          "floor_bytes": floor_db.stat().st_size, "floor_ratio": round(floor_db.stat().st_size / total, 3)}
    queries = choose_queries(corpus)
    report["queries"] = measure_queries(queries, config.db_path, floor_db, repeat) if "queries" in only else {}
    if "cli" in only:
        report["cli_search_ms"] = measure_cli(corpus, index_dir, work, queries, 2 if quick else 5)
    if "mcp" in only:
        mcp = asyncio.run(measure_mcp(corpus, index_dir, work, queries, max(2, repeat // 3), 2 if quick else 5))
        for name, p in mcp["search_ms"].items():
            report["queries"].setdefault(name, dict(queries[name]))["mcp_ms"] = p
        report["changed_file"] = mcp["changed_file"]
    if "rg" in only:
        for name, ms in measure_rg(corpus, queries).items():
            report["queries"].setdefault(name, dict(queries[name]))["rg_ms"] = ms
    if "documents" in only:
        report["documents"] = measure_documents(corpus, config)
    if "filters" in only:
        report["filters"] = measure_filters(corpus, queries, config.db_path, floor_db, repeat)
    report["machine"]["load_end"] = load()
    return report


def print_table(r: dict) -> None:
    print(f"corpus {r['corpus']['path']}: {r['corpus']['text_files']} text files, {r['corpus']['bytes'] / 1e6:.1f} MB;"
          f" {r['machine']['nproc']} cores, load {r['machine']['load_start']} -> {r['machine']['load_end']}; code {r['machine']['code']}")
    if "index" in r:
        i, z = r["index"], r["size"]
        print(f"{'measure':<28}{'floor':>12}{'daemon':>12}{'ratio':>8}")
        print(f"{'full index (s)':<28}{i['floor_s']:>12.2f}{i['daemon_s']:>12.2f}{i['ratio']:>8.2f}"
              f"   {i['files_per_s']} files/s, {i['mb_per_s']} MB/s")
    if "rescan" in r:
        s = r["rescan"]
        print(f"{'no-change rescan (s)':<28}{s['floor_s']:>12.3f}{s['daemon_s']:>12.3f}{s['ratio']:>8.2f}"
              f"   first scan after opening the index: {s['daemon_first_scan_after_open_s']:.3f} s")
    if "index" in r:
        print(f"{'index size / corpus':<28}{z['floor_ratio']:>12.2f}{z['ratio']:>12.2f}")
        print(f"{'peak RSS indexing (MB)':<28}{i['floor_peak_rss_mb']:>12.0f}{i['daemon_peak_rss_mb']:>12.0f}")
    if "changed_file" in r:
        c = r["changed_file"]
        print(f"changed file searchable via refresh_index: median {c['median_ms']} ms, max {c['max_ms']} ms")
    if "cli_search_ms" in r:
        print(f"main.py search, cold process: {r['cli_search_ms']} ms")
    if r["queries"]:
        nan = {"p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
        print(f"{'query (ms)':<12}{'matched':>8}{'floor p50':>10}{'p50':>8}{'p95':>8}{'p99':>8}{'ratio':>7}{'mcp p50':>9}{'mcp p99':>9}{'rg -l':>8}")
        for name, q in r["queries"].items():
            search_ms, floor_ms, mcp_ms = q.get("search_ms", nan), q.get("floor_ms", nan), q.get("mcp_ms", nan)
            print(f"{name:<12}{q.get('files_matched', -1):>8}{floor_ms['p50']:>10.1f}{search_ms['p50']:>8.1f}"
                  f"{search_ms['p95']:>8.1f}{search_ms['p99']:>8.1f}{q.get('p50_ratio', float('nan')):>7.2f}"
                  f"{mcp_ms['p50']:>9.1f}{mcp_ms['p99']:>9.1f}{q.get('rg_ms', float('nan')):>8.0f}")
    if "documents" in r:
        print_documents(r["documents"])
    if "filters" in r:
        print_filters(r["filters"])


def print_documents(d: dict) -> None:
    f = d["floor_ms"]
    print(f"get_document on {d['files']} files x {d['repeat']} ({d['truncated_whole']} whole files truncated at 20,000 chars,"
          f" {d['error_count']} errors); floor open().read().split(): p50 {f['p50']} p95 {f['p95']} p99 {f['p99']} ms")
    print(f"{'get_document (ms)':<20}{'files':>6}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}{'/floor':>8}{'per-file med':>14}{'per-file max':>14}")
    for kind in ("whole", "section", "range"):
        k = d[kind]
        print(f"{kind:<20}{k['files']:>6}{k['ms']['p50']:>8.2f}{k['ms']['p95']:>8.2f}{k['ms']['p99']:>8.2f}{k['ms']['max']:>8.2f}"
              f"{k['p50_ratio']:>8.2f}{k['per_file_ratio_median']:>14.2f}{k['per_file_ratio_max']:>14.2f}")
    for error in d["errors"]:
        print(f"  error: {error}")


def print_filters(f: dict) -> None:
    for name, spec in f["filters"].items():
        print(f"filter {name}: {spec['args']} -> {spec['files']} files ({spec['share']:.2%})")
    print(f"{'query':<11}{'search':<15}{'matched':>8}{'shown':>6}{'p50':>8}{'p95':>8}{'p99':>8}{'/unfilt':>8}{'floor p50':>10}{'/floor':>8}  notes")
    for qname, rows in f["queries"].items():
        for name, q in rows.items():
            notes = (f"NOT PASSING FILTER: {q['failing_filter']}" if q["failing_filter"] else "") + (f" stale {q['stale']}" if q["stale"] else "")
            print(f"{qname:<11}{name:<15}{q['files_matched']:>8}{q['results']:>6}{q['ms']['p50']:>8.1f}{q['ms']['p95']:>8.1f}"
                  f"{q['ms']['p99']:>8.1f}{q['ratio_to_unfiltered']:>8.2f}{q['floor_ms']['p50']:>10.1f}{q['ratio_to_floor']:>8.2f}  {notes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="a folder, or a corpus bench/harness.py builds: realistic, 8-copies, powershell-docs, synthetic")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    parser.add_argument("--work", type=Path, help="where the indexes go (default: /tmp/bench-speed/work-<corpus name>)")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per query")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections to run, of: {','.join(SECTIONS)}")
    args = parser.parse_args()
    only = tuple(part.strip() for part in args.only.split(",") if part.strip())
    if unknown := set(only) - set(SECTIONS):
        parser.error(f"--only: unknown sections {sorted(unknown)}; choose from {','.join(SECTIONS)}")
    logging.basicConfig(stream=sys.stderr, level=logging.ERROR)
    corpus = named_corpus(args.corpus)
    work = args.work or SPEED / f"work-{corpus.name}"
    report = run(corpus, work, args.repeat, only=only)
    print_table(report)
    write_json(args.json, report)


if __name__ == "__main__":
    main()
