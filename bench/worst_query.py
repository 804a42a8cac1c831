"""The worst query the bounds in query.py allow, timed on a real index.

    python bench/worst_query.py --corpus DIR [--work DIR] [--repeat 3] [--json OUT]

Indexes DIR with ``main.py index`` (into --work, reused when already built), picks words from the
corpus by document frequency (run.word_statistics) and the three-letter prefixes that start the
most word occurrences, then times ``search.search()`` (limit 100 and limit 10, with snippets) for
queries built to cost as much as the bounds allow: the most common words up to MAX_QUERY_TERMS,
phrases and compounds of common words at MAX_PHRASE_WORDS, the costliest prefixes at
MAX_PREFIXES, exclusions, stopwords only, mixes of those, and the issue's two runaway queries. A
one-word query for the most common word is timed alongside, as the yardstick of this machine now.

Prints each query's best and worst time over --repeat runs and the slowest of all. The target
(issue #11): every query answers within 1 s on a 25k-file index.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO), str(BENCH)]

import run  # noqa: E402
from harness import SPEED, corpus as named_corpus, load, write_json  # noqa: E402
from models import ServerConfig  # noqa: E402
from query import MAX_PHRASE_WORDS, MAX_PREFIXES, MAX_QUERY_TERMS, STOPWORDS  # noqa: E402
from search import search  # noqa: E402


def build_index(corpus: Path, work: Path) -> Path:
    config = ServerConfig(source_directory=corpus.resolve(), index_output_directory=(work / "idx").resolve())
    done = subprocess.run([sys.executable, str(REPO / "main.py"), "index", "--source", str(corpus), "--index-dir", str(work / "idx")],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return config.db_path


def costly_queries(corpus: Path) -> dict[str, str]:
    """Query shapes that push each bound in query.py to its limit, from this corpus's words."""
    sample, df, pairs = run.word_statistics(corpus)
    by_df = [w for w, _ in df.most_common() if w.isalpha()]
    common_pairs = [f'"{a} {b}"' for (a, b), _ in pairs.most_common(32)]
    # Words in about 1 file in 200: a question of 64 of them matches few enough files for feedback.
    uncommon = [w for w, n in df.most_common() if w.isalpha() and w not in STOPWORDS and n <= max(1, sample // 200)][:64]
    content = [w for w in by_df if w not in STOPWORDS and len(w) >= 3]
    stop = [w for w in by_df if w in STOPWORDS]
    starts: Counter[str] = Counter()
    for word, count in df.items():
        if len(word) >= 3 and word.isalpha():
            starts[word[:3]] += count
    prefixes = [p for p, _ in starts.most_common(MAX_PREFIXES)]
    terms, phrase_words = MAX_QUERY_TERMS, MAX_PHRASE_WORDS
    common_phrase = " ".join(by_df[:phrase_words])
    phrases = terms // phrase_words
    return {
        "yardstick: most common word": content[0],
        "question: 64 most common words": " ".join(content[:terms]),
        "question: 60 common words + 4 prefixes": " ".join(content[: terms - len(prefixes)] + [p + "*" for p in prefixes]),
        "keywords: 3 most common words": " ".join(content[:3]),
        "keywords: 4 costliest prefixes": " ".join(p + "*" for p in prefixes),
        "phrase: 12 most common words": f'"{common_phrase}"',
        "phrases: 5 x 12 common words": " ".join(f'"{" ".join(by_df[k:k + phrase_words])}"' for k in range(phrases)),
        "compounds: 5 x 12 common words": " ".join("-".join(by_df[k:k + phrase_words]) for k in range(phrases)),
        "phrases: 32 common word pairs": " ".join(common_pairs),
        "question: 4 common words + 30 common pairs": " ".join(content[:4] + common_pairs[:30]),
        "question with feedback: 64 words in 1 file in 200": " ".join(uncommon),
        "stopwords only: 64": " ".join((stop * terms)[:terms]),
        "exclusions: 1 word, 63 common excluded": content[0] + " " + " ".join("-" + w for w in content[1:terms]),
        "repeated: the most common word 64 times": " ".join([content[0]] * terms),
        "mix: 4 prefixes, a 12-word phrase, 48 words": " ".join(
            [p + "*" for p in prefixes] + [f'"{common_phrase}"'] + content[: terms - len(prefixes) - phrase_words]
        ),
        "phrases: 5 x 12 times the commonest word": " ".join(f'"{" ".join([by_df[0]] * phrase_words)}"' for _ in range(phrases)),
        "phrases: 5 different x 12 times common words": " ".join(
            f'"{" ".join([by_df[k]] * phrase_words)}"' for k in range(phrases)
        ),
        "exclusions: 4 words, 5 phrases of the commonest word": " ".join(
            content[50:54] + [f'-"{" ".join([by_df[k], by_df[0]] * (phrase_words // 2))}"' for k in range(phrases)]
        ),
        "glued: 2 phrases of 50 words joined by U+19B0": " ".join(
            f'"{chr(0x19B0).join([by_df[k]] * 50)}"' for k in range(2)
        ),
        "issue: phrase 'a b ' x 250,000": '"' + "a b " * 250_000 + '"',
        "issue: 'the-a' x 2,500": "-".join(["the", "a"] * 2500),
    }


def time_queries(db_path: Path, queries: dict[str, str], repeat: int) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for name, query in queries.items():
        for limit in (100, 10):
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                reply = search(db_path, query, limit)
                samples.append(time.perf_counter() - started)
            results[f"{name} (limit {limit})"] = {
                "best_ms": round(min(samples) * 1000, 1), "worst_ms": round(max(samples) * 1000, 1),
                "files_matched": reply["files_matched"], "warnings": len(reply["warnings"]),
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="a folder, or a corpus bench/harness.py builds (realistic, 8-copies, ...)")
    parser.add_argument("--work", type=Path, help="where the index goes (default: /tmp/bench-speed/worst-<corpus>)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    corpus = named_corpus(args.corpus)
    work = args.work or SPEED / f"worst-{corpus.name}"
    db_path = build_index(corpus, work)
    queries = costly_queries(corpus)
    load_start = load()
    results = time_queries(db_path, queries, args.repeat)
    files = sum(1 for _ in run.floor.walk(str(corpus)))
    loads = [load_start, load()]
    print(f"{files} files, load {loads[0]} -> {loads[1]}; search() best / worst of {args.repeat}, ms")
    for name, figures in results.items():
        print(f"  {name:58s} {figures['best_ms']:8.1f} {figures['worst_ms']:8.1f}  matched {figures['files_matched']:6d}"
              f"  warnings {figures['warnings']}")
    slowest = max(results, key=lambda name: results[name]["worst_ms"])
    yardstick = results["yardstick: most common word (limit 10)"]["best_ms"]
    print(f"slowest: {slowest}: {results[slowest]['worst_ms']:.1f} ms ({results[slowest]['worst_ms'] / yardstick:.1f}x the yardstick)")
    write_json(args.json, {"files": files, "load": loads, "results": results, "slowest": slowest})


if __name__ == "__main__":
    main()
