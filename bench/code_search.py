"""Search over real source trees: the questions of bench/code_questions.json against this project's
index and against the floor (one FTS5 table over whole files, as bench/floor.py), with index time and size.

The code bases are fetched, pinned, from their registries (``pip download --no-binary :all:``,
``npm pack``) into WORK/downloads and unpacked into WORK/src, once. Each question names the file
that answers and the definitions that do (the end of a hit's heading). Per ranker: the first hit
in the right file, the first hit at a right definition (its heading ends with one; the floor has no
definitions), the right file in the top 3; and identifier queries (``parse extended query string``
for ``parseExtendedQueryString``) in the top 3 alone.

    .venv/bin/python bench/code_search.py --work /tmp/code_search
    .venv/bin/python bench/code_search.py --work /tmp/code_search --project /tmp/old-checkout  # another version

``--project`` measures another checkout of this project (before/after) on the same questions;
``--copies N`` also times the index of N copies of the tree, where fixed costs (starting the
loader processes) weigh less than on 2 MB.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from harness import load

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "code_questions.json"
#: The files indexed, by both rankers: what the four code bases hold besides images and keys.
EXTENSIONS = (".py", ".js", ".md", ".rst", ".txt", ".toml", ".cfg")
RUNS = 3
TOP = 3


def fetch(work: Path, packages: list[dict]) -> Path:
    """WORK/src holding each package's source, downloaded once."""
    downloads, src = work / "downloads", work / "src"
    downloads.mkdir(parents=True, exist_ok=True)
    for package in packages:
        target = src / package["folder"]
        if target.is_dir():
            continue
        spec = f"{package['name']}=={package['version']}" if package["registry"] == "pypi" else f"{package['name']}@{package['version']}"
        if package["registry"] == "pypi":
            command = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", str(downloads), spec]
        else:
            command = ["npm", "pack", "--silent", "--pack-destination", str(downloads), spec]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        archive = next(p for p in downloads.iterdir() if p.name.lower().startswith(f"{package['name']}-{package['version']}"))
        staging = Path(tempfile.mkdtemp(dir=work))
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        inner = staging / package["folder"] if (staging / package["folder"]).is_dir() else staging
        target.parent.mkdir(parents=True, exist_ok=True)
        if inner is staging:
            inner.rename(target)
        else:
            inner.rename(target)
            shutil.rmtree(staging)
    return src


def our_index(src: Path, index_dir: Path) -> tuple[Path, list[float], int]:
    """This project's index of ``src``: its path, the seconds each of RUNS full indexes took, its size."""
    from index_writer import IndexWriter
    from indexer import TextIndexer
    from models import ServerConfig

    seconds = []
    for _ in range(RUNS):
        shutil.rmtree(index_dir, ignore_errors=True)
        index_dir.mkdir(parents=True, mode=0o700)
        config = ServerConfig(source_directory=src, index_output_directory=index_dir, included_extensions=EXTENSIONS, scan_interval_seconds=0)
        started = time.perf_counter()
        writer = IndexWriter(config.db_path)
        assert TextIndexer(config, writer).scan()["success"]
        writer.close()
        seconds.append(time.perf_counter() - started)
    size = sum(p.stat().st_size for p in index_dir.iterdir() if p.name.startswith(config.db_path.name) and not p.name.endswith(".lock"))
    return config.db_path, seconds, size


def floor_index(src: Path, db: Path) -> tuple[list[float], int]:
    """The floor's table over ``src`` (bench/floor.py with EXTENSIONS): seconds per run, size."""
    import floor

    floor.INCLUDED = EXTENSIONS
    seconds = []
    for _ in range(RUNS):
        db.unlink(missing_ok=True)
        started = time.perf_counter()
        floor.build(str(src), str(db))
        seconds.append(time.perf_counter() - started)
    return seconds, db.stat().st_size


def our_ranking(db_path: Path):
    from search import search

    def ranked(query: str) -> list[tuple[str, str]]:
        return [(hit["path"], hit.get("heading", "")) for hit in search(db_path, query, 10)["results"]]
    return ranked


def floor_ranking(db: Path, stopwords: frozenset[str]):
    conn = sqlite3.connect(db)

    def ranked(query: str) -> list[tuple[str, str]]:
        words = [w for w in re.findall(r"[^\W_]+", query.lower()) if w not in stopwords] or re.findall(r"[^\W_]+", query.lower())
        match = " OR ".join(f'"{word}"' for word in dict.fromkeys(words))
        rows = conn.execute("SELECT path FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT 10", (match,)).fetchall()
        return [(path, "") for (path,) in rows]
    return ranked


def score(ranked, questions: list[dict], verbose: bool, name: str) -> dict[str, str]:
    file_first = definition_first = file_top = identifier_top = identifiers = 0
    for question in questions:
        hits = ranked(question["query"])
        in_file = [path == question["path"] for path, _ in hits]
        at_definition = bool(hits) and in_file[0] and any(hits[0][1].endswith(d) for d in question["definitions"])
        file_first += bool(in_file) and in_file[0]
        definition_first += at_definition
        file_top += any(in_file[:TOP])
        if question.get("kind") == "identifier":
            identifiers += 1
            identifier_top += any(in_file[:TOP])
        if verbose:
            first = f"{hits[0][0]} [{hits[0][1]}]" if hits else "nothing"
            print(f"  {name}: {'F' if in_file and in_file[0] else '-'}{'D' if at_definition else '-'}{'3' if any(in_file[:TOP]) else '-'}"
                  f"  {question['query']!r} -> {first}", file=sys.stderr)
    total = len(questions)
    return {
        "first hit in the right file": f"{file_first}/{total}",
        "first hit at a right definition": f"{definition_first}/{total}",
        f"right file in the top {TOP}": f"{file_top}/{total}",
        f"identifier queries: right file in the top {TOP}": f"{identifier_top}/{identifiers}",
    }


def report_cost(what: str, our_seconds: list[float], our_size: int, floor_seconds: list[float], floor_size: int) -> None:
    ours, floor_med = statistics.median(our_seconds), statistics.median(floor_seconds)
    print(f"{what}index time (median of {RUNS}): {ours:.3f} s, floor {floor_med:.3f} s ({ours / floor_med:.2f}x)")
    print(f"{what}index size: {our_size / 1e6:.2f} MB, floor {floor_size / 1e6:.2f} MB ({our_size / floor_size:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "code_search")
    parser.add_argument("--project", type=Path, default=HERE.parent, help="the checkout of this project to measure")
    parser.add_argument("--copies", type=int, default=1, help="also time the index of this many copies of the tree (fixed costs weigh less)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each question's first hit, on stderr")
    args = parser.parse_args()
    sys.path[:0] = [str(args.project.resolve()), str(HERE)]
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from query import STOPWORDS

    spec = json.loads(QUESTIONS.read_text())
    src = fetch(args.work, spec["packages"])
    files = [p for p in src.rglob("*") if p.is_file() and p.name.lower().endswith(EXTENSIONS)]
    print(f"{len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.2f} MB ({', '.join(EXTENSIONS)}); load {load()}")
    db_path, our_seconds, our_size = our_index(src, args.work / "index")
    floor_seconds, floor_size = floor_index(src, args.work / "floor.sqlite3")
    report_cost("", our_seconds, our_size, floor_seconds, floor_size)
    if args.copies > 1:
        copies = args.work / f"copies-{args.copies}"
        if not copies.is_dir():
            for n in range(args.copies):
                shutil.copytree(src, copies / f"copy{n}")
        _, our_seconds, our_size = our_index(copies, args.work / "copies-index")
        floor_seconds, floor_size = floor_index(copies, args.work / "copies-floor.sqlite3")
        report_cost(f"{args.copies} copies of the tree, ", our_seconds, our_size, floor_seconds, floor_size)
    results = {
        "this project": score(our_ranking(db_path), spec["questions"], args.verbose, "ours"),
        "floor (FTS5 over whole files)": score(floor_ranking(args.work / "floor.sqlite3", frozenset(STOPWORDS)), spec["questions"], args.verbose, "floor"),
    }
    measures = list(next(iter(results.values())))
    print("\n| measure | " + " | ".join(results) + " |")
    print("|---|" + "---:|" * len(results))
    for measure in measures:
        print(f"| {measure} | " + " | ".join(r[measure] for r in results.values()) + " |")


if __name__ == "__main__":
    main()
