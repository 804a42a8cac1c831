"""Whether two checkouts give the same search replies: for speed work that must not change them.

    python bench/same_replies.py --code OLD_CHECKOUT [--corpus realistic] [--queries bench/same_replies.json]
        [--work DIR]

Each checkout (a git worktree of any commit: ``git worktree add /tmp/ab-<sha> <sha>``; this tree is
the other) builds its own index of the corpus with its own ``main.py index``, as compare_search.py
does, then answers every query of the list with its own ``search()`` in a child process, checking
the shown files on disk as the server does. The replies are compared whole: paths, titles,
headings, lines, snippets, scores, copies named, warnings, how the query was read. Prints the
queries whose replies differ (the first few differences shown) and how many; exits 1 if any do.

The default list (bench/same_replies.json, 304 queries) is the first 40 queries of each of the
seven relevance collections, the agent tasks' queries and PowerShell keywords, identifiers and
phrases: on the ``realistic`` corpus it reaches the plain-text collections, headed Markdown with
five versions of each page, code identifiers and phrases.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

from compare_search import build_index  # noqa: E402
from harness import corpus as named_corpus, load  # noqa: E402

#: A child answering every query of a JSON list with its own search(): one JSON reply a line.
CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import search
freshness = search.Freshness(Path(sys.argv[3]))
for query in json.load(open(sys.argv[4], encoding="utf-8")):
    try:
        reply = search.search(Path(sys.argv[2]), query, 10, freshness=freshness)
    except Exception as exc:  # a refusal is a reply too: both checkouts must give the same
        reply = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(reply, sort_keys=True, default=str), flush=True)
"""
#: How many differing queries are shown with their first differing results.
SHOWN = 5


def replies(code: Path, db: Path, corpus: Path, queries: Path) -> list[dict]:
    """``code``'s search() reply to each query of the file ``queries``, in order."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(code), str(db), str(corpus), str(queries)],
                          capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def differing(queries: list[str], before: list[dict], after: list[dict]) -> list[tuple[str, dict, dict]]:
    """The (query, reply before, reply after) whose replies are not equal."""
    if len(before) != len(queries) or len(after) != len(queries):
        raise SystemExit(f"a checkout answered {len(before)} and {len(after)} of {len(queries)} queries")
    return [(query, old, new) for query, old, new in zip(queries, before, after) if old != new]


def show(found: list[tuple[str, dict, dict]], total: int) -> None:
    for query, old, new in found[:SHOWN]:
        print(f"differs: {query[:100]!r}")
        for key in sorted(set(old) | set(new)):
            if key != "results" and old.get(key) != new.get(key):
                print(f"  {key}: {json.dumps(old.get(key))[:200]} -> {json.dumps(new.get(key))[:200]}")
        for place, (a, b) in enumerate(zip(old.get("results", []), new.get("results", []))):
            if a != b:
                print(f"  result {place}: {json.dumps(a)[:300]}\n            -> {json.dumps(b)[:300]}")
        if len(old.get("results", [])) != len(new.get("results", [])):
            print(f"  results: {len(old.get('results', []))} -> {len(new.get('results', []))}")
    print(f"{total} queries, {len(found)} differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, required=True, help="the other checkout (the one before the change)")
    parser.add_argument("--corpus", default="realistic", help="a folder, or a corpus bench/harness.py builds")
    parser.add_argument("--queries", type=Path, default=BENCH / "same_replies.json", help="a JSON list of queries")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-speed/same-replies"))
    args = parser.parse_args()
    corpus = named_corpus(args.corpus)
    queries = json.loads(args.queries.read_text(encoding="utf-8"))
    load_start = load()
    answered = []
    for code in (args.code.resolve(), REPO):
        folder = args.work / code.name / corpus.name
        folder.mkdir(parents=True, exist_ok=True)
        answered.append(replies(code, build_index(code, corpus, folder), corpus, args.queries))
    found = differing(queries, *answered)
    show(found, len(queries))
    print(f"{args.code.resolve()} -> {REPO}; corpus {corpus}; load {load_start} -> {load()}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
