"""How many distinct texts an agent sees in the top 10 on a corpus full of copies, with and
without collapsing duplicates (search(..., collapse_duplicates=...)), and what collapsing costs.

    python bench/duplicates.py [--corpus DIR] [--work DIR] [--repeat N] [--json OUT]

The corpus defaults to the PowerShell docs (/tmp/bench-speed/ps/powershell-docs, extracted from
/work/shared/corpora/powershell-docs.tar.gz if missing): one reference per PowerShell version, so
most pages exist in several near-identical copies. It is indexed with ``main.py index``.

A result's text is the body of its best section as the index stores it: the section of the
returned file that has the returned heading and contains the returned line range (the snippet's
lines), read with database.load_sections. "distinct" counts distinct bodies, compared exactly
(what collapsing compares); "near" counts them after lowercasing, collapsing whitespace and
replacing every number (version numbers, dates) by N, which shows copies collapsing leaves.
"hidden" counts texts in the uncollapsed top 10 that the collapsed reply does not show (as a
result): it should be 0. "also_in bad" counts also_in files holding no section with the result's
exact text: it should be 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import database  # noqa: E402
from models import ServerConfig  # noqa: E402
from search import search  # noqa: E402

TARBALL = Path("/work/shared/corpora/powershell-docs.tar.gz")
DEFAULT_CORPUS = Path("/tmp/bench-speed/ps/powershell-docs")
QUERIES = (
    "about_Signing",
    "execution policy",
    "Get-ChildItem recurse",
    "remote session",
    "script block logging",
    "Invoke-Command ComputerName",
    "ErrorAction SilentlyContinue",
    "splatting",
    "pipeline input ByPropertyName",
    "ConvertTo-Json depth",
    "Start-Job background job",
    "Get-Credential PSCredential",
    "about_Profiles",
    "Where-Object filter",
    "Set-StrictMode",
    "try catch finally",
    "environment variable PATH",
    "Export-Csv NoTypeInformation",
    "PSModulePath module autoloading",
    "how do I read a file line by line?",
)
_NUMBER = re.compile(r"\d+(?:\.\d+)*")


def prepare(corpus: Path, work: Path) -> ServerConfig:
    """Extract the corpus if it is the default one and missing; bring its index up to date."""
    if not corpus.exists() and corpus == DEFAULT_CORPUS:
        with tarfile.open(TARBALL) as tar:
            tar.extractall(DEFAULT_CORPUS.parent, filter="data")
    config = ServerConfig(source_directory=corpus.resolve(), index_output_directory=(work / "index").resolve())
    subprocess.run([sys.executable, str(REPO / "main.py"), "index", "--source", str(config.source_directory),
                    "--index-dir", str(config.index_output_directory)], check=True, stderr=subprocess.DEVNULL)
    return config


def file_id(conn: sqlite3.Connection, path: str) -> int:
    return conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()[0]


def best_section_text(conn: sqlite3.Connection, hit: dict) -> str:
    """The body of the section a hit comes from (see the module docstring)."""
    first = file_id(conn, hit["path"]) << database.SECTION_BITS
    rows = conn.execute(
        "SELECT id FROM sections WHERE id >= ? AND id < ? AND heading = ? AND start_line <= ? AND end_line >= ?",
        (first, first + database.MAX_SECTIONS_PER_FILE, hit["heading"], hit["line_start"], hit["line_end"]),
    ).fetchall()
    if len(rows) != 1:
        raise RuntimeError(f"{len(rows)} sections of {hit['path']} fit {hit['heading']!r} {hit['line_start']}-{hit['line_end']}")
    return str(database.load_sections(conn, [rows[0][0]])[rows[0][0]]["body"])


def holds_text(conn: sqlite3.Connection, path: str, text: str) -> bool:
    """True if a section of the file at ``path`` has exactly this body."""
    first = file_id(conn, path) << database.SECTION_BITS
    ids = [rowid for (rowid,) in conn.execute("SELECT id FROM sections WHERE id >= ? AND id < ?", (first, first + database.MAX_SECTIONS_PER_FILE))]
    return any(section["body"] == text for section in database.load_sections(conn, ids).values())


def near(text: str) -> str:
    return " ".join(_NUMBER.sub("N", text.lower()).split())


def p50_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def measure(config: ServerConfig, query: str, repeat: int) -> dict:
    """Distinct texts in the top 10 without and with collapsing, and both latencies (alternated)."""
    conn = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True)
    before = search(config.db_path, query, 10, collapse_duplicates=False)["results"]
    after = search(config.db_path, query, 10)["results"]
    texts_before = [best_section_text(conn, hit) for hit in before]
    texts_after = [best_section_text(conn, hit) for hit in after]
    also_in_bad = sum(not holds_text(conn, other, text) for hit, text in zip(after, texts_after) for other in hit["also_in"])
    conn.close()
    plain, collapsed = [], []
    for _ in range(repeat):
        for samples, collapse in ((plain, False), (collapsed, True)):
            start = time.perf_counter()
            search(config.db_path, query, 10, collapse_duplicates=collapse)
            samples.append(time.perf_counter() - start)
    return {
        "query": query, "before_results": len(before), "before_distinct": len(set(texts_before)),
        "before_near": len(set(map(near, texts_before))), "after_results": len(after), "after_distinct": len(set(texts_after)),
        "after_near": len(set(map(near, texts_after))), "also_in_count": sum(hit["also_in_count"] for hit in after),
        "also_in_bad": also_in_bad, "hidden": len(set(texts_before) - set(texts_after)),
        "files_covered": len(after) + sum(hit["also_in_count"] for hit in after),
        "p50_plain_ms": p50_ms(plain), "p50_collapsed_ms": p50_ms(collapsed),
        "ratio": round(statistics.median(collapsed) / statistics.median(plain), 2),
    }


def print_table(rows: list[dict], files: int) -> None:
    print(f"{files} files indexed; top 10 per query; before = collapse_duplicates=False, after = True (the default)")
    print(f"{'query':<36}{'before':>7}{'dist':>5}{'near':>5}{'after':>6}{'dist':>5}{'near':>5}{'also_in':>8}{'files':>6}"
          f"{'hidden':>7}{'bad':>4}{'p50 off':>9}{'p50 on':>8}{'ratio':>6}")
    for r in rows:
        print(f"{r['query'][:35]:<36}{r['before_results']:>7}{r['before_distinct']:>5}{r['before_near']:>5}{r['after_results']:>6}"
              f"{r['after_distinct']:>5}{r['after_near']:>5}{r['also_in_count']:>8}{r['files_covered']:>6}{r['hidden']:>7}"
              f"{r['also_in_bad']:>4}{r['p50_plain_ms']:>9.1f}{r['p50_collapsed_ms']:>8.1f}{r['ratio']:>6.2f}")
    mean = lambda key: statistics.mean(r[key] for r in rows)  # noqa: E731
    print(f"{'mean':<36}{mean('before_results'):>7.1f}{mean('before_distinct'):>5.1f}{mean('before_near'):>5.1f}"
          f"{mean('after_results'):>6.1f}{mean('after_distinct'):>5.1f}{mean('after_near'):>5.1f}{mean('also_in_count'):>8.1f}"
          f"{mean('files_covered'):>6.1f}{mean('hidden'):>7.1f}{mean('also_in_bad'):>4.1f}")
    plain, collapsed = sum(r["p50_plain_ms"] for r in rows), sum(r["p50_collapsed_ms"] for r in rows)
    print(f"collapsing: sum of p50s {collapsed:.1f} ms vs {plain:.1f} ms without (ratio {collapsed / plain:.2f});"
          f" median per-query ratio {statistics.median(r['ratio'] for r in rows):.2f}, max {max(r['ratio'] for r in rows):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/work-duplicates"))
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per query and setting")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.ERROR)
    config = prepare(args.corpus, args.work)
    conn = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True)
    files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
    conn.close()
    rows = [measure(config, query, args.repeat) for query in QUERIES]
    print_table(rows, files)
    if args.json:
        args.json.write_text(json.dumps({"corpus": str(config.source_directory), "files": files, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
