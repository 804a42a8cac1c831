"""Near-copies of a text: a per-file sketch of its lines, which ranked files it folds together, and which leads.

A sketch holds the SKETCH_SIZE smallest hashes of a text's distinct lines: a bottom-k MinHash.
Among the SKETCH_SIZE smallest hashes of two sketches together, the share that both hold
estimates the Jaccard similarity of the two texts' sets of lines; it is exact when both texts
have fewer lines than that. Versions of a page that differ in a line or two share nearly all
their lines; different pages share few. Lines, not runs of words: on the PowerShell docs (33 MB)
sketching runs of 3 words took 2.4 s of CPU against 0.6 s, and folded versions no better against
difflib's truth (bench/near_copies.py, removed after 29aaf48 measured it: precision 0.994 and recall 0.911, against 0.997 and 0.906);
but a paragraph written on one line is one unit, changed by any word in it.
Sketches are stored in the index (loader.py makes them): a change to how they are made needs a
new models.INDEX_FORMAT.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import struct
import zlib
from collections.abc import Iterator

#: Hashes kept per text (4 bytes each): the estimate's standard error at a similarity s is about
#: sqrt(s * (1 - s) / SKETCH_SIZE), 0.04 at 0.9.
SKETCH_SIZE = 64
#: Texts whose estimated similarity is at least this are near-copies: one result.
NEAR_COPY = 0.9


def sketch(text: str) -> bytes:
    """The sketch of ``text``: its lines' SKETCH_SIZE smallest hashes, in order, 4 bytes each (a
    hash's top 32 bits keep its order); empty for a text of blank lines."""
    smallest = _smallest(line_hashes(text))
    return struct.pack(f"<{len(smallest)}i", *(h >> 32 for h in smallest))


def line_hashes(text: str) -> set[int]:
    """The hashes of the lines of ``text`` that hold more than spaces, lowercased and stripped.

    A line's hash is Python's hash of the 1-tuple of its CRC-32, which spreads CRC's linear bits:
    unlike a string's, an int tuple's hash is not salted per process, so loader processes agree
    (CPython's tuple hash has been the same since 3.8). Every step is a C loop."""
    lines = set(map(bytes.strip, text.lower().encode("utf-8", "surrogatepass").splitlines()))
    lines.discard(b"")
    return set(map(hash, zip(map(zlib.crc32, lines))))


def _smallest(hashes: set[int]) -> list[int]:
    """The SKETCH_SIZE smallest of ``hashes``, in order. Hashes spread evenly over 64 bits, so those
    lie below the cut that 4 * SKETCH_SIZE of them would be expected under: sorting only the ones
    below it takes a third of heapq.nsmallest's time."""
    if len(hashes) > 4 * SKETCH_SIZE:
        cut = -(1 << 63) + (4 * SKETCH_SIZE << 64) // len(hashes)
        below = sorted(filter(cut.__gt__, hashes))
        if len(below) >= SKETCH_SIZE:
            return below[:SKETCH_SIZE]
    return sorted(hashes)[:SKETCH_SIZE]


def _hashes(blob: bytes) -> frozenset[int]:
    return frozenset(struct.unpack(f"<{len(blob) // 4}i", blob))


def similarity(a: bytes, b: bytes) -> float:
    """The estimated Jaccard similarity of the texts sketched as ``a`` and ``b`` (0 if either has no lines)."""
    return _similarity(_hashes(a), _hashes(b))


def _similarity(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    smallest = sorted(a | b)[:SKETCH_SIZE]
    return len((a & b).intersection(smallest)) / len(smallest)


def _most_unshared(size: int) -> int:
    """How many of the SKETCH_SIZE smallest hashes of two sketches together (``size`` of them) may
    be held by one only, for the two to be near-copies (the same float comparison as near's)."""
    return size - next(shared for shared in range(size + 1) if shared / size >= NEAR_COPY)


#: Two near-copies' smallest shared hash is among the PROBED_HASHES smallest of each: every hash
#: below it is held by one only, and all of those are among the smallest the similarity counts.
PROBED_HASHES = 1 + max(map(_most_unshared, range(1, SKETCH_SIZE + 1)))


class Leaders:
    """The sketches of the files leading the groups of a search so far, to find the group a file
    is a near-copy of. Each leader's PROBED_HASHES smallest hashes point to it, so a file is
    compared only to the leaders whose smallest hashes it shares, however many groups there are."""

    def __init__(self) -> None:
        self.leaders: list[tuple[object, frozenset[int]]] = []
        self.holding: dict[int, list[int]] = {}

    def add(self, key: object, blob: bytes) -> None:
        """Make the file sketched as ``blob`` the leader of the group ``key``."""
        hashes = _hashes(blob)
        for h in sorted(hashes)[:PROBED_HASHES]:
            self.holding.setdefault(h, []).append(len(self.leaders))
        self.leaders.append((key, hashes))

    def near(self, blob: bytes) -> Iterator[object]:
        """The keys of the groups whose leader the file sketched as ``blob`` is a near-copy of, best-ranked first."""
        hashes = _hashes(blob)
        least = math.ceil(NEAR_COPY * min(SKETCH_SIZE, len(hashes)))  # fewer shared hashes cannot reach NEAR_COPY
        # The smallest hash it shares with a near-copy is also among its len - least + 1 smallest
        # (a near-copy lacks at most len - least of its hashes): a short sketch probes fewer.
        probe = sorted(hashes)[:min(PROBED_HASHES, len(hashes) - least + 1)]
        for n in sorted({n for h in probe for n in self.holding.get(h, ())}):
            key, theirs = self.leaders[n]
            if len(hashes & theirs) >= least and _similarity(hashes, theirs) >= NEAR_COPY:
                yield key


#: A version in a folder or file name: 7.4, v2, 5.1.0, 2023 (in "7.4", "powershell-7.4", "v2.3").
_VERSION = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)*)(?![\w.])|(?<=[-_])v?(\d+(?:\.\d+)*)(?![\w.])")


def version_in(name: str) -> tuple[int, ...] | None:
    """The version a folder or file name carries, as numbers to compare ("7.4" -> (7, 4)); None
    if it carries none, or more than one."""
    found = [match[1] or match[2] for match in _VERSION.finditer(name)]
    return tuple(int(part) for part in found[0].split(".")) if len(found) == 1 else None


@functools.lru_cache(maxsize=4096)  # a search makes it for each result it shows; the same files come back
def versionless(path: str) -> str:
    """``path`` with the version in each folder or file name that carries one (version_in) as "*":
    the versions of a page ("5.1/about_x.md", "7.4/about_x.md") have one ("*/about_x.md")."""
    folders, _, name = path.rpartition("/")
    stem, dot, extension = name.rpartition(".") if "." in name else (name, "", "")
    parts = [_VERSION.sub("*", part) if version_in(part) else part for part in folders.split("/")] if folders else []
    return "/".join([*parts, (_VERSION.sub("*", stem) + dot + extension) if version_in(stem) else name])


def newest_first(paths: list[str], query: str) -> int:
    """Which of ``paths`` (copies of one text) is to lead their result: when they differ only in
    one folder or file name, at the same place, and each of those names carries a version, the
    newest version's, unless the query names one of those versions (then that one); else the
    first. Returns its index in ``paths``."""
    parts = [path.split("/") for path in paths]
    if len(paths) < 2 or len({len(split) for split in parts}) != 1:
        return 0
    differing = [at for at in range(len(parts[0])) if len({split[at] for split in parts}) > 1]
    if len(differing) != 1:
        return 0
    names = [split[differing[0]] for split in parts]
    if differing[0] == len(parts[0]) - 1:  # a file's name: its version without its extension
        names = [name.rsplit(".", 1)[0] if "." in name else name for name in names]
    versions = [version_in(name) for name in names]
    if any(version is None for version in versions):
        return 0
    asked = {version_in(word) for word in re.findall(r"[\w.-]+", query)} - {None}
    named = [n for n, version in enumerate(versions) if version in asked]
    if named:
        return named[0]
    return max(range(len(paths)), key=lambda n: (versions[n], -n))


#: Numbers joined by dots, dashes or slashes (versions and dates: "7.4", "2024-05-01"), which the
#: answering sections of versioned copies differ in.
_VERSION_OR_DATE = re.compile(r"\d+(?:[./-]\d+)+")


def answer_key(text: str) -> bytes:
    """A digest of what an answering section says: equal for texts that differ only in versions,
    dates, case and spacing (two hits answering in the same section are one result)."""
    said = " ".join(_VERSION_OR_DATE.sub("0", text).lower().split())
    return hashlib.blake2b(said.encode("utf-8", "surrogatepass"), digest_size=8).digest()
