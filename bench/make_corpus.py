"""Write a deterministic synthetic corpus for the benchmark: same arguments, same bytes.

    python bench/make_corpus.py OUT_DIR --files 25000 [--seed 1]

Text is drawn from a Zipf-distributed vocabulary (a few words in nearly every file, a long tail
in few), plus a handful of file-specific rare words. Markdown files have headings, reST files
underlined titles, text files only paragraphs. About 1 file in 1000 is large (1-2 MB), 1 in 500
is binary (NUL bytes, with a .txt name), and files sit in nested folders, 50 to a folder.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
from pathlib import Path

#: Real English function words at the top of the ranking, so questions have stopwords to drop.
FUNCTION_WORDS = "the of and to a in is that for it with as on be by this are or from at an which".split()
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ea")]
VOCABULARY_SIZE = 30_000
TAIL_SIZE = 300_000  # rare words: each lands in a file or two
SENTENCE_POOL = 20_000
ZIPF_EXPONENT = 1.07
FILES_PER_FOLDER = 50
LARGE_EVERY, BINARY_EVERY = 1000, 500


def make_words(rng: random.Random, count: int, min_syl: int, max_syl: int) -> list[str]:
    """``count`` distinct pronounceable made-up words."""
    words: list[str] = []
    seen: set[str] = set(FUNCTION_WORDS)
    while len(words) < count:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(min_syl, max_syl)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class Generator:
    """Holds the vocabulary and the sentence pool; ``text(i)`` is file i's content."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.seed = seed
        vocabulary = FUNCTION_WORDS + make_words(rng, VOCABULARY_SIZE - len(FUNCTION_WORDS), 2, 4)
        self.tail = make_words(rng, TAIL_SIZE, 3, 5)
        weights = list(itertools.accumulate(1.0 / (rank ** ZIPF_EXPONENT) for rank in range(1, len(vocabulary) + 1)))
        self.sentences = []
        for _ in range(SENTENCE_POOL):
            words = rng.choices(vocabulary, cum_weights=weights, k=rng.randint(6, 18))
            self.sentences.append(" ".join(words).capitalize() + ".")
        self.heading_words = vocabulary[20:2000]

    def paragraph(self, rng: random.Random, rare: list[str]) -> str:
        sentences = rng.choices(self.sentences, k=rng.randint(2, 7))
        if rare and rng.random() < 0.3:
            sentences.insert(rng.randrange(len(sentences) + 1), f"See {rare.pop()} for details.")
        return " ".join(sentences)

    def heading(self, rng: random.Random) -> str:
        return " ".join(rng.sample(self.heading_words, rng.randint(2, 5))).capitalize()

    def text(self, i: int, ext: str) -> str:
        rng = random.Random(self.seed * 1_000_003 + i)
        target = 1_000_000 + rng.randrange(1_000_000) if i % LARGE_EVERY == LARGE_EVERY - 1 else int(rng.lognormvariate(8.0, 0.9))
        rare = rng.sample(self.tail, 4)
        title = self.heading(rng)
        parts = [f"# {title}" if ext == ".md" else f"{title}\n{'=' * len(title)}" if ext == ".rst" else title]
        size = len(parts[0])
        while size < target:
            if ext != ".txt" and rng.random() < 0.25:
                heading = self.heading(rng)
                parts.append(f"## {heading}" if ext == ".md" else f"{heading}\n{'-' * len(heading)}")
            parts.append(self.paragraph(rng, rare))
            size += len(parts[-1]) + 2
        return "\n\n".join(parts) + "\n"


def relative_path(i: int) -> str:
    folder = i // FILES_PER_FOLDER
    ext = (".md", ".md", ".md", ".md", ".md", ".md", ".md", ".txt", ".txt", ".rst")[i % 10]
    return f"area{folder // 100:03d}/topic{folder % 100:02d}/doc{i:06d}{ext}"


def write_corpus(out: Path, files: int, seed: int = 1) -> int:
    """Write ``files`` files under ``out``; return the total bytes written."""
    generator = Generator(seed)
    total = 0
    made: set[str] = set()
    for i in range(files):
        rel = relative_path(i)
        folder = os.path.dirname(rel)
        if folder not in made:
            (out / folder).mkdir(parents=True, exist_ok=True)
            made.add(folder)
        if i % BINARY_EVERY == BINARY_EVERY - 2:
            data = random.Random(i).randbytes(4096) + b"\x00" * 64
        else:
            data = generator.text(i, os.path.splitext(rel)[1]).encode("utf-8")
        (out / rel).write_bytes(data)
        total += len(data)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--files", type=int, default=25_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    total = write_corpus(args.out, args.files, args.seed)
    print(f"wrote {args.files} files, {total / 1e6:.1f} MB, under {args.out}")


if __name__ == "__main__":
    main()
