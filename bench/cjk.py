"""Substring search in Chinese and Japanese text: how many files holding a CJK string the search
finds, and whether every file it returns holds it.

    .venv/bin/python bench/cjk.py DIR [DIR ...] [--queries 300] [--seed 1]

Each DIR's ``*.html``, ``*.md`` and ``*.txt`` files are copied as text (HTML tags stripped) into a
scratch folder and indexed. Queries are strings of 2 to 4 CJK characters taken at random from the
text; the truth for each is every copied file that contains it (``str.__contains__``). Reports
recall (files found / files holding it, up to the 100 asked for) and precision (returned files
that hold it), and the search time.
"""

from __future__ import annotations

import argparse
import html
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import database  # noqa: E402
from index_writer import IndexWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig  # noqa: E402
from search import search  # noqa: E402

_TAG = re.compile(r"<script.*?</script>|<style.*?</style>|<[^>]+>", re.S)
_RUN = re.compile(f"{database.CJK_WORD.pattern}{{2,}}")


def copy_as_text(sources: list[Path], target: Path) -> dict[str, str]:
    """Copy every document as text into ``target``; return {file name: text}."""
    texts: dict[str, str] = {}
    for number, path in enumerate(p for source in sources for p in sorted(source.rglob("*")) if p.suffix in (".html", ".md", ".txt")):
        raw = path.read_text(encoding="utf-8", errors="replace")
        text = html.unescape(_TAG.sub(" ", raw)) if path.suffix == ".html" else raw
        name = f"{number:05d}.txt"
        (target / name).write_text(text, encoding="utf-8")
        texts[name] = text
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cjk-") as scratch:
        source = Path(scratch) / "docs"
        source.mkdir()
        texts = copy_as_text(args.dirs, source)
        config = ServerConfig(source_directory=source, index_output_directory=Path(scratch) / "idx", scan_interval_seconds=0)
        writer = IndexWriter(config.db_path)
        try:
            TextIndexer(config, writer).scan()
        finally:
            writer.close()
        runs = [run for text in texts.values() for run in _RUN.findall(text)]
        rng = random.Random(args.seed)
        found = expected = returned = correct = 0
        times: list[float] = []
        for _ in range(args.queries):
            run = rng.choice(runs)
            size = rng.randint(2, min(4, len(run)))
            start = rng.randrange(len(run) - size + 1)
            query = run[start:start + size]
            truth = {name for name, text in texts.items() if query in text}
            began = time.perf_counter()
            reply = search(config.db_path, query, limit=100)
            times.append(time.perf_counter() - began)
            hits = {Path(hit["path"]).name for hit in reply["results"]}
            expected += min(len(truth), 100)
            found += len(hits & truth)
            returned += len(hits)
            correct += len(hits & truth)
        print(f"{len(texts)} files, {sum(map(len, texts.values())):,} characters, {len(runs):,} CJK runs, {args.queries} queries")
        print(f"recall {found / max(expected, 1):.4f} ({found}/{expected})  precision {correct / max(returned, 1):.4f} ({correct}/{returned})")
        print(f"search p50 {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
