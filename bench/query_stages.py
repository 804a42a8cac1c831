"""Where a search's time goes: search() with its stages timed, per query, in process.

    python bench/query_stages.py --index INDEX.sqlite3 [--source DIR] [--repeat N] QUERY...

Each stage function of search.py, snippets.py and index_queries.py named in STAGES is wrapped by a
timer for the run; each query is searched once to warm up, then ``--repeat`` times (default 10).
Prints the whole search and each stage that took at least 0.1 ms: milliseconds per search and calls
per search. Stages nest (``_rank_enough`` holds the ranking and the grouping), so the rows do not add
up. ``--source``: the indexed folder, to check the files shown on disk as the MCP server does
(search.Freshness, without refreshing). The index comes from ``main.py index``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import index_queries  # noqa: E402
import search  # noqa: E402
import snippets  # noqa: E402

STAGES: dict[ModuleType, tuple[str, ...]] = {
    # answering_spans and section_snippets as search.py imported them (the names it calls)
    search: (
        "_rank_enough", "rank", "_first_groups", "_outdated", "names_first", "with_weighed_words", "plan_within_bounds",
        "answering_spans", "section_snippets", "feedback_words", "_sections_holding", "_result", "section_hit", "suggest",
    ),
    snippets: ("heading_spans", "_may_match", "_span_scores"),
    index_queries: (
        "best_section_per_file", "best_section_of_every_file", "sections_matching", "best_section_of_files", "files_with_each",
        "count_matching_files", "load_sections", "file_sections", "matching_texts", "estimated_matching_rows",
        "score_question", "best_question_hits", "best_with_feedback", "snippets", "stems", "query_words", "files_named",
    ),
}


class StageTimes:
    """Seconds and calls per stage, gathered by the wrappers ``install`` puts in place."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def install(self) -> None:
        for module, names in STAGES.items():
            for name in names:
                setattr(module, name, self._timed(name, getattr(module, name)))

    def _timed(self, name: str, fn: Callable) -> Callable:
        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        return timed

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True, help="the index's .sqlite3 file")
    parser.add_argument("--source", type=Path, help="the indexed folder: check the files shown on disk, as the server does")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("queries", nargs="+")
    args = parser.parse_args()
    freshness = search.Freshness(args.source.resolve()) if args.source else None
    times = StageTimes()
    times.install()
    for query in args.queries:
        reply = search.search(args.index, query, freshness=freshness)
        times.clear()
        start = time.perf_counter()
        for _ in range(args.repeat):
            search.search(args.index, query, freshness=freshness)
        whole = (time.perf_counter() - start) / args.repeat
        print(f"{query[:40]!r}: {whole * 1000:.1f} ms, {len(reply['results'])} results, files_matched {reply['files_matched']}")
        for name, seconds in sorted(times.seconds.items(), key=lambda item: -item[1]):
            if seconds / args.repeat >= 0.0001:
                print(f"    {name:<28} {seconds / args.repeat * 1000:7.2f} ms  x{times.calls[name] / args.repeat:.1f}")


if __name__ == "__main__":
    main()
