"""What each per-reply feature of a search costs: search() with features turned off one after another, against the floor.

    python bench/feature_cost.py --index INDEX.sqlite3 --source DIR --floor FLOOR.sqlite3 [--repeat N] QUERY=FLOOR_MATCH...

Each QUERY is searched in process as the server does (``search.search`` with the files shown
checked on disk under ``--source``), then with one feature off at a time: the answering span (each
hit keeps its ranked section: ``snippets.answering_spans`` replaced for the run), the folding of
copies (``collapse_duplicates=False``; it also merges results that answer alike), the check on
disk, the feedback words; then with all four off; and the floor's top 10 with ``snippet()``
(bench/floor.py) for FLOOR_MATCH on ``--floor``. Features interact (with no answering span, the
merging reads whole sections), so the costs of single features do not add up. Turns alternate, ``--repeat`` each
(default 15); prints p50 in ms and p50 / the floor's. The index comes from ``main.py index`` (or
bench/compare_search.py's work folder), the floor from ``bench/floor.py index``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import floor  # noqa: E402
import search  # noqa: E402

FEATURES = ("answering span", "folding of copies", "check on disk", "feedback")
#: Each variant: the features it turns off.
VARIANTS = {"every feature": (), **{f"no {name}": (name,) for name in FEATURES}, "none of them": FEATURES}


def variant_search(index: Path, source: Path, query: str, off: tuple[str, ...]) -> Callable[[], object]:
    """search() of ``query`` with the features ``off`` turned off."""
    freshness = None if "check on disk" in off else search.Freshness(source.resolve())
    spans = (lambda conn, highlights, sections: sections) if "answering span" in off else search.answering_spans

    def run() -> object:
        kept, search.answering_spans = search.answering_spans, spans
        try:
            return search.search(
                index, query, freshness=freshness, collapse_duplicates="folding of copies" not in off, feedback="feedback" not in off
            )
        finally:
            search.answering_spans = kept

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--floor", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("queries", nargs="+", help="QUERY=FLOOR_MATCH: the user's query and the floor's FTS5 expression")
    args = parser.parse_args()
    conn = sqlite3.connect(f"file:{args.floor}?mode=ro", uri=True)
    print("query | floor ms | " + " | ".join(VARIANTS) + "  (p50 ms, / floor)")
    for pair in args.queries:
        query, _, match = pair.partition("=")
        runs = {"floor": lambda: floor.top10(conn, match)}
        runs.update({name: variant_search(args.index, args.source, query, off) for name, off in VARIANTS.items()})
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for run in runs.values():
            run()  # warm
        for _ in range(args.repeat):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - start)
        p50 = {name: statistics.median(values) for name, values in samples.items()}
        cells = " | ".join(f"{p50[name] * 1000:.2f} ({p50[name] / p50['floor']:.1f}x)" for name in VARIANTS)
        print(f"{query} | {p50['floor'] * 1000:.2f} | {cells}")
    conn.close()


if __name__ == "__main__":
    main()
