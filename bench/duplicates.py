"""How many distinct texts an agent sees in the top 10 on a corpus full of copies, with and
without collapsing duplicates (search(..., collapse_duplicates=...)), and what collapsing costs.

    python bench/duplicates.py [--corpus DIR] [--work DIR] [--repeat N] [--json OUT]

The corpus defaults to the PowerShell docs in /tmp/bench-speed/ps/powershell-docs: the .md and .txt
files of the public MicrosoftDocs/PowerShell-Docs repository, copied there as docs/measurements.md
("Corpora") shows. It holds one reference per PowerShell version, so most pages exist in several
near-identical copies. It is indexed with ``main.py index``.

A result's text is the body of its best section as the index stores it: the section of the
returned file that has the returned heading and contains the returned line range (the snippet's
lines), read with index_queries.load_sections. Texts are counted three ways: "exact" (the body as
stored), "said" (YAML front matter at the start and Markdown heading lines left out, whitespace
runs as one space: a little looser than sections.said_key's rule, which drops front matter and
heading lines only where the section starts and keeps whitespace) and "near" (said,
lowercased, every number such as a version or a date as N: the copies collapsing leaves).
"hidden" counts the said-texts of the uncollapsed top 10 that no collapsed result shows: it
should be 0. "bad" counts also_in files holding no section that says the result's text: it
should be 0.
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
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import database  # noqa: E402
import index_queries  # noqa: E402
import search as search_module  # noqa: E402
from models import ServerConfig  # noqa: E402
from run import code_version  # noqa: E402
from search import search  # noqa: E402

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
_FRONT_MATTER = re.compile(r"\A\s*---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t].*)?$", re.M)


def prepare(corpus: Path, work: Path) -> ServerConfig:
    """Bring the corpus's index up to date."""
    if not corpus.is_dir():
        raise SystemExit(f"no corpus at {corpus}: copy the PowerShell docs there as docs/measurements.md (Corpora) shows, or give --corpus")
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
    return str(index_queries.load_sections(conn, [rows[0][0]])[rows[0][0]]["body"])


def says(conn: sqlite3.Connection, path: str, text: str) -> bool:
    """True if a section of the file at ``path`` says ``text`` (see said)."""
    first = file_id(conn, path) << database.SECTION_BITS
    ids = [rowid for (rowid,) in conn.execute("SELECT id FROM sections WHERE id >= ? AND id < ?", (first, first + database.MAX_SECTIONS_PER_FILE))]
    return any(said(str(section["body"])) == text for section in index_queries.load_sections(conn, ids).values())


def said(body: str) -> str:
    """The body without front matter at its start and Markdown heading lines, whitespace runs as one space."""
    return " ".join(_HEADING.sub("", _FRONT_MATTER.sub("", body, count=1)).split()) or body


def near(body: str) -> str:
    return _NUMBER.sub("N", said(body).lower())


def counts(texts: list[str]) -> dict[str, int]:
    return {"results": len(texts), "exact": len(set(texts)), "said": len(set(map(said, texts))), "near": len(set(map(near, texts)))}


def windows(config: ServerConfig, query: str, collapse: bool) -> list[int]:
    """How many files each ranking pass of one search asked for (search ranks again, more, while
    the files ranked hold too few texts)."""
    asked: list[int] = []
    original = search_module.rank

    def counted(run, parsed, plan, limit, need=None):  # type: ignore[no-untyped-def]
        asked.append(limit)
        return original(run, parsed, plan, limit, need)

    search_module.rank = counted
    try:
        search(config.db_path, query, 10, collapse_duplicates=collapse)
    finally:
        search_module.rank = original
    return asked


def p50_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def measure(config: ServerConfig, query: str, repeat: int) -> dict:
    """Distinct texts in the top 10 without and with collapsing, and both latencies (alternated)."""
    conn = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True)
    before = search(config.db_path, query, 10, collapse_duplicates=False)["results"]
    after = search(config.db_path, query, 10)["results"]
    texts_before = [best_section_text(conn, hit) for hit in before]
    texts_after = [best_section_text(conn, hit) for hit in after]
    also_in_bad = sum(not says(conn, other, said(text)) for hit, text in zip(after, texts_after) for other in hit["also_in"])
    conn.close()
    plain, collapsed = [], []
    for _ in range(repeat):
        for samples, collapse in ((plain, False), (collapsed, True)):
            start = time.perf_counter()
            search(config.db_path, query, 10, collapse_duplicates=collapse)
            samples.append(time.perf_counter() - start)
    return {
        "query": query, "before": counts(texts_before), "after": counts(texts_after),
        "also_in_count": sum(hit["also_in_count"] for hit in after), "also_in_bad": also_in_bad,
        "hidden": len(set(map(said, texts_before)) - set(map(said, texts_after))),
        "windows_off": windows(config, query, False), "windows_on": windows(config, query, True),
        "files_covered": len(after) + sum(hit["also_in_count"] for hit in after),
        "p50_plain_ms": p50_ms(plain), "p50_collapsed_ms": p50_ms(collapsed),
        "ratio": round(statistics.median(collapsed) / statistics.median(plain), 2),
    }


def print_table(rows: list[dict], files: int) -> None:
    print(f"code {code_version()}; {files} files indexed; top 10 per query; before = collapse_duplicates=False, after = True (the default);"
          " distinct texts: exact / said / near (see the docstring)")
    print(f"{'query':<36}{'before: n exact said near':>26}{'after: n exact said near':>26}{'also_in':>8}{'files':>6}"
          f"{'hidden':>7}{'bad':>4}{'p50 off':>9}{'p50 on':>8}{'ratio':>6}  files ranked off / on")

    def four(c: dict) -> str:
        return f"{c['results']:>11}{c['exact']:>6}{c['said']:>5}{c['near']:>5}"

    for r in rows:
        print(f"{r['query'][:35]:<36}{four(r['before'])}{four(r['after'])}{r['also_in_count']:>8}{r['files_covered']:>6}"
              f"{r['hidden']:>7}{r['also_in_bad']:>4}{r['p50_plain_ms']:>9.1f}{r['p50_collapsed_ms']:>8.1f}{r['ratio']:>6.2f}"
              f"  {','.join(map(str, r['windows_off']))} / {','.join(map(str, r['windows_on']))}")

    def mean(side: str) -> str:
        return "".join(f"{statistics.mean(r[side][k] for r in rows):>{w}.1f}" for k, w in (("results", 11), ("exact", 6), ("said", 5), ("near", 5)))

    other = "".join(f"{statistics.mean(r[k] for r in rows):>{w}.1f}" for k, w in (("also_in_count", 8), ("files_covered", 6), ("hidden", 7), ("also_in_bad", 4)))
    print(f"{'mean':<36}{mean('before')}{mean('after')}{other}")
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
        args.json.write_text(json.dumps({"corpus": str(config.source_directory), "code": code_version(), "files": files, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
