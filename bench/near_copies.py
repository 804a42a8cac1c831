"""How well search's fold of near-copies (copies.py) tells versions of a page from other pages.

    python bench/near_copies.py CORPUS [--seed N]

CORPUS is a folder of versioned docs, such as the PowerShell docs (reference/5.1/..., reference/7.4/...,
one folder per version). Each .md/.txt/.rst file is read as the index reads it (sections.file_content)
and sketched (copies.sketch). Labelled pairs:

- the same page (same path below the version folder) in two versions: every such pair;
- two different pages of one folder (hard negatives) and two pages anywhere: one of each per page.

A pair's truth is its exact similarity, computed two ways: the Jaccard similarity of the two texts'
whole sets of lines (copies.line_hashes), and difflib's ratio over their lines in order; it is a near-copy when
that is at least copies.NEAR_COPY. The fold as built takes a pair as near-copies when the sketches'
estimate is at least NEAR_COPY (copies.Leaders). Printed: precision and recall of the fold against
each truth on the labelled pairs, and, over every pair of files in the corpus that the fold would
join, the share that truly is a near-copy (precision without sampling).
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import copies  # noqa: E402
from sections import file_content  # noqa: E402

VERSION_FOLDER = re.compile(r"(?:^|/)\d+\.\d+/")
SUFFIXES = {".md", ".txt", ".rst"}


def read_corpus(root: Path) -> dict[str, str]:
    texts = {}
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() in SUFFIXES and path.is_file():
            rel = path.relative_to(root).as_posix()
            texts[rel] = file_content(rel, path.read_bytes()).text
    return texts


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def labelled_pairs(paths: list[str], rng: random.Random) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(same page in two versions, different pages)."""
    by_page: dict[str, list[str]] = defaultdict(list)
    by_folder: dict[str, list[str]] = defaultdict(list)
    for rel in paths:
        match = VERSION_FOLDER.search(rel)
        if match:
            by_page[rel[:match.start()] + "/" + rel[match.end():]].append(rel)
        by_folder[rel.rpartition("/")[0]].append(rel)
    same = [(a, b) for versions in by_page.values() for i, a in enumerate(versions) for b in versions[i + 1:]]
    page_of = {rel: page for page, versions in by_page.items() for rel in versions}
    different = []
    for rel in paths:
        folder = [other for other in by_folder[rel.rpartition("/")[0]] if page_of.get(other, other) != page_of.get(rel, rel)]
        if folder:
            different.append((rel, rng.choice(folder)))
        other = rng.choice(paths)
        if page_of.get(other, other) != page_of.get(rel, rel):
            different.append((rel, other))
    return same, different


def report(name: str, folded: list[bool], truth: list[bool]) -> None:
    tp = sum(f and t for f, t in zip(folded, truth))
    fp = sum(f and not t for f, t in zip(folded, truth))
    fn = sum(t and not f for f, t in zip(folded, truth))
    print(f"  truth by {name:8}: near-copies {sum(truth):5}  folded {sum(folded):5}  TP {tp:5}  FP {fp:4}  FN {fn:4}"
          f"  precision {tp / max(1, tp + fp):.3f}  recall {tp / max(1, tp + fn):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    texts = read_corpus(args.corpus)
    started = time.perf_counter()
    sketches = {rel: copies.sketch(text) for rel, text in texts.items()}
    took = time.perf_counter() - started
    size = sum(map(len, texts.values()))
    print(f"{len(texts)} files, {size / 1e6:.1f} M characters: sketched in {took:.2f} s ({took / len(texts) * 1000:.2f} ms a file)")
    lines = {rel: copies.line_hashes(text) for rel, text in texts.items()}
    same, different = labelled_pairs(sorted(texts), random.Random(args.seed))
    pairs = same + different
    print(f"labelled pairs: {len(same)} same page in two versions, {len(different)} different pages")
    folded = [copies.similarity(sketches[a], sketches[b]) >= copies.NEAR_COPY for a, b in pairs]
    exact = [jaccard(lines[a], lines[b]) for a, b in pairs]
    by_lines = [difflib.SequenceMatcher(None, texts[a].splitlines(), texts[b].splitlines(), autojunk=False).ratio() for a, b in pairs]
    print(f"the fold (estimate >= {copies.NEAR_COPY}) on the labelled pairs:")
    report("Jaccard", folded, [s >= copies.NEAR_COPY for s in exact])
    report("difflib", folded, [s >= copies.NEAR_COPY for s in by_lines])
    print(f"  different pages folded: {sum(folded[len(same):])} of {len(different)}")
    same_exact = exact[:len(same)]
    bands = Counter(min(9, int(s * 10)) for s in same_exact)
    print("  same page in two versions, exact Jaccard: " + "  ".join(f"{b / 10:.1f}+ {bands[b]}" for b in sorted(bands)))
    # Every pair the fold would join: each file with each file before it that it is a near-copy of.
    leaders = copies.Leaders()
    joined = []
    for rel in sorted(texts):
        joined += [(other, rel) for other in leaders.near(sketches[rel])]
        leaders.add(rel, sketches[rel])
    true = sum(jaccard(lines[a], lines[b]) >= copies.NEAR_COPY for a, b in joined)
    print(f"every pair of the corpus the fold joins: {len(joined)}, of which near-copies by exact Jaccard: {true}"
          f" (precision {true / max(1, len(joined)):.3f})")


if __name__ == "__main__":
    main()
