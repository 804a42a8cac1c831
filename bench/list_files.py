"""list_files over many files: the time of a page, by filter, on an index of N small files (default
100,000 in 1,000 folders over two sources, one file in ten tagged), as the MCP tool calls it.

    .venv/bin/python bench/list_files.py [--files 100000] [--keep DIR]

Prints, per kind of listing, the median and worst of 7 runs in ms, and the reply's size in characters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from index_writer import IndexWriter, SourceWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from listing import list_files  # noqa: E402
from models import ServerConfig, Source  # noqa: E402

RUNS = 7


def make_tree(root: Path, files: int) -> list[Path]:
    """Two sources, ``files`` files in all, 100 per folder; every tenth file tagged."""
    sources = [root / "notes", root / "docs"]
    for number in range(files):
        folder = sources[number % 2] / f"d{number // 200:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        tags = f"---\ntags: [t{number % 7}, topic-{number % 3}]\n---\n" if number % 10 == 0 else ""
        (folder / f"n{number:07d}.md").write_text(f"{tags}# Note {number}\n\nword{number % 1000} text of note {number}.\n")
    return sources


def build(sources: list[Path], index_dir: Path) -> ServerConfig:
    named = tuple(Source(folder.name, folder) for folder in sources)
    config = ServerConfig(source_directory=named[0].directory, index_output_directory=index_dir, sources=named)
    writer = IndexWriter(config.db_path)
    try:
        for source in config.sources:
            TextIndexer(config.for_source(source), SourceWriter(writer, config.key_prefix(source.name))).scan()
    finally:
        writer.close()
    return config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="build (or reuse) the tree and index here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="list-files-") as scratch:
        root = (args.keep or Path(scratch)).resolve()
        started = time.perf_counter()
        sources = [root / "notes", root / "docs"] if (root / "docs").is_dir() else make_tree(root, args.files)
        config = build(sources, root / "idx")
        print(f"{args.files:,} files: tree and index in {time.perf_counter() - started:.0f}s; load {os.getloadavg()[0]:.2f}")
        kinds = {
            "first page (100)": {},
            "page at offset 40,000": {"offset": 40_000},
            "one source": {"collection": "docs"},
            "folder": {"path": "d0100/"},
            "glob **/n00001*.md": {"path": "**/n00001*.md"},
            "tag": {"tags": ["t3"]},
            "two tags": {"tags": ["t3", "topic-1"]},
            "modified after (all pass)": {"modified_after": "2000-01-01"},
            "1,000 at once": {"limit": 1000},
        }
        print("| listing | total | ms p50 | ms max | reply chars |")
        print("|---|---:|---:|---:|---:|")
        for name, arguments in kinds.items():
            times = []
            for _ in range(RUNS):
                at = time.perf_counter()
                reply = list_files(config, **arguments)
                times.append((time.perf_counter() - at) * 1000)
            size = len(json.dumps(reply, ensure_ascii=False, separators=(",", ":")))
            print(f"| {name} | {reply['total']:,} | {statistics.median(times):.1f} | {max(times):.1f} | {size:,} |")
        print(f"load at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
