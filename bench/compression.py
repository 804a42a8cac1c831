"""CPU seconds and size of zlib settings on a folder's text, cut into sections as the indexer does.

    python bench/compression.py DIR

The indexer stores each section zlib-compressed (database.COMPRESSION_LEVEL); this compares the
settings the standard library offers, on the same sections.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from file_utils import decode_text  # noqa: E402
from sections import split_sections  # noqa: E402


def with_settings(level: int, wbits: int = 15, mem_level: int = 8, strategy: int = zlib.Z_DEFAULT_STRATEGY) -> Callable[[bytes], bytes]:
    def compress(data: bytes) -> bytes:
        compressor = zlib.compressobj(level, zlib.DEFLATED, wbits, mem_level, strategy)
        return compressor.compress(data) + compressor.flush()

    return compress


SETTINGS = {
    "level 1 (the indexer's)": with_settings(1),
    "level 1, raw deflate": with_settings(1, wbits=-15),
    "level 1, 4 KB window": with_settings(1, wbits=12),
    "level 6 (zlib's default)": with_settings(6),
    "Z_RLE": with_settings(1, strategy=zlib.Z_RLE),
    "Z_HUFFMAN_ONLY": with_settings(1, strategy=zlib.Z_HUFFMAN_ONLY),
}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sections = []
    for path in sorted(Path(sys.argv[1]).rglob("*")):
        if path.is_file() and path.suffix.lower() in {".md", ".txt", ".rst"}:
            text = decode_text(path.name, path.read_bytes())[0]
            sections += [section.body.encode("utf-8") for section in split_sections(text, path.name)[1]]
    total = sum(map(len, sections))
    print(f"{len(sections)} sections, {total / 1e6:.1f} MB")
    for name, compress in SETTINGS.items():
        start = time.process_time()
        size = sum(len(compress(body)) for body in sections)
        print(f"{name:<26} {time.process_time() - start:6.3f} s CPU   size {size / total:.3f} of the text")


if __name__ == "__main__":
    main()
