"""What changed on disk, and bringing the index up to date in bounded, crash-safe batches.

FileScanner compares the walk with what the index remembers. TextIndexer has files read, decoded,
split and compressed ahead of the writer (in loader processes when there are many, so that work
runs beside SQLite's inserts instead of sharing one core through the GIL) and writes each batch
of files in one transaction: a kill at any instant leaves every file either fully old or fully new.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import re
import signal
import stat
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import database
import formats
from config import USABLE_CPUS
from database import IndexWriter
from exceptions import ArgumentError, Cancelled, DocSearchError, FileSkipped, IndexUnavailableError, SourceUnavailableError
from file_utils import (
    IGNORED_DIRECTORIES,
    FileFilter,
    check_single_file,
    decode_text,
    has_surrogates,
    identity,
    ignored_by_rules,
    read_regular_file,
    resolve_user_path,
    walk_source,
    whitespace_twin,
)
from models import (
    DiskFile,
    DocumentReply,
    OutlineEntry,
    LoadedFile,
    RefreshReply,
    ScanProgress,
    Section,
    ServerConfig,
    Signature,
    StatusReply,
    WatchingReply,
)
from search import said_key, visible_text
from watcher import WatchState

logger = logging.getLogger(__name__)

#: A file whose mtime is this close to the moment it was read may have been modified again within
#: the file system's timestamp granularity; its content hash is re-checked on the next scan.
RACY_WINDOW_NS = 2_000_000_000
#: A transaction holds at most this many files or bytes of text. Large batches make the first index
#: fast: FTS5 builds a batch's terms in memory (up to database.FTS_HASH_BYTES) and writes them as
#: one segment at commit, so fewer commits mean fewer, larger segments and less merging.
BATCH_FILES = 10_000
BATCH_BYTES = 64 << 20
#: Loading (read, hash, decode, split, compress) is Python code; on a single thread it would share
#: one core with the writer. A scan with this many files to read loads them in LOADER_PROCESSES
#: processes, a chunk of CHUNK_FILES files or CHUNK_BYTES at a time, while the writer inserts.
PROCESS_LOADING_MIN_FILES = 200
LOADER_PROCESSES = USABLE_CPUS
CHUNK_FILES = 64
CHUNK_BYTES = 1 << 20
#: Loading runs at most this far ahead of the writer, so it goes on during a commit.
READ_AHEAD_BYTES = 32 << 20
#: Sections aim for TARGET_SECTION_CHARS, cut at a blank line, and never exceed MAX_SECTION_CHARS;
#: a heading starts a new one once the current one has MIN_SECTION_CHARS.
TARGET_SECTION_CHARS = 16000
MIN_SECTION_CHARS = TARGET_SECTION_CHARS // 2
MAX_SECTION_CHARS = 32000
MAX_TITLE_CHARS = 200
MARKDOWN_EXTENSIONS = (".md", ".markdown", ".mdx")
RST_EXTENSIONS = (".rst", ".rest")
#: Reasons that are too common to log one line per file (a summary line counts them).
QUIET_REASONS = frozenset({"excluded_extension", "excluded_directory", "hidden", "ignored", "excluded_pattern"})
#: Reasons that mean something went wrong while reading, counted as errors in status.
ERROR_REASONS = frozenset({"unreadable", "unavailable"})
#: A file skipped for these reasons may be there as it was: what the index holds for it is kept.
KEEP_REASONS = frozenset({"unreadable", "unavailable"})
#: A file skipped for what its content is stays skipped, unread, until it changes (a PDF that took
#: pdftotext its whole time limit must not cost that on every scan). Others are read again each
#: scan: "no_extractor" so that installing pdftotext is picked up, errors so they are retried.
REMEMBERED_REASONS = frozenset({"binary", "malformed", "too_large"})
#: A scan records its progress in the lock file (for status in other processes) this often.
PROGRESS_EVERY_FILES = 64
#: Bounds on what a reply or status carries about errors.
MAX_ERROR_CHARS = 1000
MAX_REPLY_ERRORS = 100

# The section regexes run on the text between two added newlines (see split_sections). [^\S\n] is
# the whitespace that str.strip() removes, less the newline.
_HEADING_OR_FENCED_BLOCK = re.compile(
    r"\n(?=[ #`~])"  # rejects most lines at once, faster than trying each branch on them
    r" {0,3}(?:(#{1,6})[ \t]+([^\n]*)"  # an ATX heading
    # a fenced block, to a fence of the same character at least as long; the lookahead makes the
    # whole run open it (a possessive quantifier, which 3.10 lacks), so that a shorter fence cannot
    # close it after backtracking
    r"|(`{3,}(?!`)|~{3,}(?!~))[^\n]*\n(?:[^\n]*\n)*? {0,3}\3"
    r"|(?:`{3}|~{3})[\s\S]*)"  # a fenced block that is never closed: to the end
)
_CLOSING_HASHES = re.compile(r"[ \t]+#+[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"\n(?=[ =-]) {0,3}(=+|-+)[^\S\n]*(?=\n)")
#: Lines a setext underline does not make a heading of: list items, quotes, ATX headings, fences,
#: table rows, another underline.
_NOT_PARAGRAPH = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:\s|$)|[>#|]|`{3}|~{3}|(?:=+|-+)$")
_FRONT_MATTER = re.compile(
    r"\n[^\S\n]*---[^\S\n]*(?=\n)"  # the opening line
    r"(?:((?:\n[^\n]*){0,198}?)\n[^\S\n]*(?:---|\.\.\.)[^\S\n]*(?=\n)"  # the fields, up to a closing line
    r"|((?:\n[^\n]*){0,199}))"  # or, never closed within 200 lines, the next 199 lines
)
#: A "title:" field, in any case; not re.IGNORECASE, which would also take "ı" and "İ" for "i".
_TITLE_FIELD = re.compile(r"\n[^\S\n]*[Tt][Ii][Tt][Ll][Ee][^\S\n]*:([^\n]*)")
_RST_UNDERLINE = re.compile(r"\n(([=\-`:'\"~^_*+#<>.])\2{2,})[^\S\n]*(?=\n)")
_BLANK_LINE = re.compile(r"\n(?=[^\S\n]*\n)")
_NOT_SPACE = re.compile(r"\S")
_CARRIAGE_RETURN = re.compile(r"\r\n?")


# ---- sections --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Content:
    """A file as the index reads it: its text, title and headings, whatever its format.

    A heading is (boundary, level, name); a boundary is the offset of the newline before the
    heading's line in ``padded``, the text between two added newlines (see sections()): kept as
    made while finding the headings, so that splitting does not copy a large text again."""

    padded: str
    title: str
    headings: list[tuple[int, int, str]]
    encoding: str = "utf-8"
    fallback_decoded: bool = False

    @property
    def text(self) -> str:
        return self.padded[1:-1]


class Reading(NamedTuple):
    """How files are read: the size limit, and whether notebook outputs are text too."""

    max_bytes: int
    notebook_outputs: bool = False


def reading(config: ServerConfig) -> Reading:
    return Reading(config.max_file_size_bytes, config.index_notebook_outputs)


def file_content(rel: str, data: bytes, notebook_outputs: bool = False, most: int | None = None, max_text: int | None = None) -> Content:
    """The Content of a file's bytes: a format formats.py extracts, else decoded text (Markdown and
    reST headings found in it); the first ``most`` headings if given. Raises FileSkipped, as
    too_large when an extracted text is longer than ``max_text`` characters."""
    extracted = formats.extract(rel, data, notebook_outputs=notebook_outputs, max_text_chars=max_text)
    if extracted is None:
        text, encoding, fallback = decode_text(rel, data)
        if "\r" in text:  # CR LF and old Mac CR-only line ends: lines end with \n alone here
            text = _CARRIAGE_RETURN.sub("\n", text)
        return text_content(text, rel, most, encoding, fallback)
    padded = f"\n{extracted.text}\n"
    headings = _boundaries(padded, extracted.headings[:most])
    title = _title(padded, extracted.title or next((name for _, level, name in headings if level == 1), ""), bool(headings))
    return Content(padded, title, headings, f"extracted:{rel.rsplit('.', 1)[-1].lower()}")


def text_content(text: str, name: str, most: int | None = None, encoding: str = "utf-8", fallback: bool = False) -> Content:
    """The Content of a text: headings for Markdown and reST (by ``name``), none for other files."""
    padded = f"\n{text}\n"
    headings, title = _headings(padded, name, most)
    return Content(padded, _title(padded, title, bool(headings)), headings, encoding, fallback)


def _boundaries(padded: str, headings: Sequence[formats.Heading]) -> list[tuple[int, int, str]]:
    """Extracted headings (by line number) as (boundary, level, name)."""
    found: list[tuple[int, int, str]] = []
    line, at = 1, 0  # padded[0] is the newline before line 1
    for heading in sorted(headings, key=lambda heading: heading.line):
        if found and heading.line <= line:
            continue  # one heading per line
        while line < heading.line and at >= 0:
            at = padded.find("\n", at + 1)
            line += 1
        if at < 0 or at >= len(padded) - 1:
            break
        found.append((at, heading.level, heading.name[:MAX_TITLE_CHARS]))
    return found


def split_sections(text: str, name: str) -> tuple[str, list[Section]]:
    """Return (title, sections) of a text: at headings for Markdown and reST, else at blank lines; bounded."""
    content = text_content(text, name)
    return content.title, sections(content)


def sections(content: Content) -> list[Section]:
    """A file's FTS rows: at its headings, else at blank lines; bounded in size."""
    # With a newline added before and after the text, every line sits between two newlines, and a
    # line is named by the offset of the newline before it (its boundary): sizes are differences of
    # boundaries, bodies are slices, and the regexes start with a newline, so the regex engine
    # jumps from newline to newline. Python code runs per heading and per section, not per line.
    padded, headings = content.padded, content.headings
    pieces: list[tuple[int, str, str]] = []
    max_chars = max(MAX_SECTION_CHARS, (len(padded) - 2) // (database.MAX_SECTIONS_PER_FILE // 2))
    path: list[tuple[int, str]] = []
    # A heading starts a new section once the current one holds MIN_SECTION_CHARS, or when its own
    # block would push the current one past the target. Reference pages with a heading every few
    # lines (one per parameter) would otherwise make an FTS row per few lines, and every row costs
    # index time, index size and query time.
    last = len(padded) - 1
    ends = [at for at, _, _ in headings[1:]] + [last]
    start, start_heading = 0, ""
    for (at, level, heading), block_end in zip(headings, ends):
        while path and path[-1][0] >= level:  # levels rise along the path: the closed ones are last
            path.pop()
        path.append((level, heading))
        current = at - start
        if current >= MIN_SECTION_CHARS or (current and block_end - start > TARGET_SECTION_CHARS):
            pieces.extend(_bounded_pieces(padded, start, at, start_heading, max_chars))
            start, start_heading = at, ""
        if not start_heading:  # a new section, or a short preamble that goes with the first heading
            start_heading = " > ".join(h for _, h in path)[:MAX_TITLE_CHARS]
    pieces.extend(_bounded_pieces(padded, start, last, start_heading, max_chars))
    return _numbered(padded, pieces)


def _headings(padded: str, name: str, most: int | None = None) -> tuple[list[tuple[int, int, str]], str]:
    """The headings of a Markdown or reST text (see _markdown_headings), none for other files, and
    the title they give."""
    lowered = name.lower()
    if lowered.endswith(MARKDOWN_EXTENSIONS):
        return _markdown_headings(padded, most)
    if lowered.endswith(RST_EXTENSIONS):
        return _rst_headings(padded, most)
    return [], ""


def _title(padded: str, title: str, has_headings: bool) -> str:
    """The title of a file: its headings' (or front matter's), else its first line."""
    if not title:
        body = _front_matter(padded)[0]  # front matter without a title: the title is not its "---"
        line = _first_text_line(padded, body)
        title = line.strip().lstrip("#").strip()
        if not title.strip("-=*_~+ \t") or (len(title) > 120 and not has_headings) or line.strip() == padded[body:].strip():
            title = ""  # a long first line is prose; a line alone is the text itself, not its title
    return title[:MAX_TITLE_CHARS]


def _markdown_headings(padded: str, most: int | None = None) -> tuple[list[tuple[int, int, str]], str]:
    """(boundary, level, heading) of each heading, ATX (``# X``) and setext (``X`` over ``===`` or
    ``---``), outside fenced blocks and front matter, the first ``most`` if given; and the title."""
    start, title = _front_matter(padded)
    headings: list[tuple[int, int, str]] = []
    fences: list[tuple[int, int]] = []
    for match in _HEADING_OR_FENCED_BLOCK.finditer(padded, start):
        hashes, rest = match.group(1, 2)
        if not hashes:
            fences.append(match.span())
            continue
        if len(headings) == most:
            break
        heading = rest.strip()
        if heading.endswith("#"):  # may end with a closing sequence; the regex is only worth it then
            heading = _CLOSING_HASHES.sub("", rest, count=1).strip()
        headings.append((match.start(), len(hashes), heading))
    setext = _setext_headings(padded, start, fences, most)
    if setext:
        headings = sorted(headings + setext)[:most]
    if not title:
        title = next((heading for _, level, heading in headings if level == 1), headings[0][2] if headings else "")
    return headings, title


def _setext_headings(padded: str, start: int, fences: list[tuple[int, int]], most: int | None) -> list[tuple[int, int, str]]:
    """Headings underlined with ``===`` (level 1) or ``---`` (level 2): the underline follows a
    line of paragraph text (not a list item, quote, ATX heading or indented code) outside fences."""
    found: list[tuple[int, int, str]] = []
    spans = iter(fences)
    fence = next(spans, None)
    for under in _SETEXT_UNDERLINE.finditer(padded, start):
        at = under.start()
        while fence is not None and fence[1] <= at:
            fence = next(spans, None)
        if fence is not None and fence[0] <= at:
            continue
        above = padded.rfind("\n", start, at)
        if above < 0:
            continue
        line = padded[above + 1:at]
        text = line.strip()
        if not text or line.startswith("    ") or _NOT_PARAGRAPH.match(text) or (fence is not None and fence[0] <= above):
            continue
        found.append((above, 1 if under[1][0] == "=" else 2, text))
        if len(found) == most:
            break
    return found


def _front_matter(padded: str) -> tuple[int, str]:
    """The boundary after YAML front matter (0 without any) and its title field."""
    found = _FRONT_MATTER.match(padded)
    if not found:
        return 0, ""
    closed = found[1] is not None
    values = [value.strip() for value in _TITLE_FIELD.findall(padded, *found.span(1 if closed else 2))]
    title = next((value.strip("'\"") for value in reversed(values) if value), "")
    return (found.end() if closed else 0), title


def _rst_headings(padded: str, most: int | None = None) -> tuple[list[tuple[int, int, str]], str]:
    headings: list[tuple[int, int, str]] = []
    styles: list[tuple[str, bool]] = []
    for under in _RST_UNDERLINE.finditer(padded, 1):  # from line 2: an underline needs a line above
        if len(headings) == most:
            break
        at = under.start()
        above = padded.rfind("\n", 0, at)
        text = padded[above + 1:at].strip()
        if text and not _RST_UNDERLINE.match(padded, above) and len(under[1]) >= len(text):
            over = padded.rfind("\n", 0, above)
            overlined = above > 0 and padded[over + 1:above].rstrip() == under[1]
            style = (under[2], overlined)
            if style not in styles:
                styles.append(style)
            headings.append((over if overlined else above, styles.index(style) + 1, text))
    title = headings[0][2] if headings else ""
    return headings, title


def _first_text_line(padded: str, start: int = 0) -> str:
    found = _NOT_SPACE.search(padded, start)
    if not found:
        return ""
    return padded[padded.rfind("\n", 0, found.start()) + 1:padded.find("\n", found.start())]


def _bounded_pieces(padded: str, start: int, end: int, heading: str, max_chars: int) -> Iterator[tuple[int, str, str]]:
    """Yield (offset, heading, body) near TARGET_SECTION_CHARS from the lines between boundaries start and end.

    A chunk is cut before its first line that would take it past max_chars, or before a blank line
    once it holds TARGET_SECTION_CHARS, whichever comes first; a line longer than max_chars is cut
    into pieces of its own.
    """
    chunk = start
    while True:
        # The first line that would take the chunk past max_chars runs from boundary overflow to
        # line_end; without one, overflow is end.
        line_end = padded.find("\n", chunk + max_chars + 2, end + 1)
        overflow = padded.rfind("\n", chunk, line_end) if line_end >= 0 else end
        blank = _BLANK_LINE.search(padded, chunk + TARGET_SECTION_CHARS, overflow + 1)
        cut = blank.start() if blank else overflow
        yield from _piece_if_text(padded, chunk, cut, heading)
        if cut == end:
            return
        chunk = cut
        if not blank and line_end - overflow - 1 > max_chars:
            for offset in range(overflow + 1, line_end, max_chars):
                yield offset, heading, padded[offset:min(offset + max_chars, line_end)]
            chunk = line_end


def _piece_if_text(padded: str, start: int, end: int, heading: str) -> Iterator[tuple[int, str, str]]:
    body = padded[start + 1:end]
    if body.strip():
        yield start + 1, heading, body


def _numbered(padded: str, pieces: list[tuple[int, str, str]]) -> list[Section]:
    """Sections from (offset, heading, body) in text order, counting each newline once."""
    sections: list[Section] = []
    line = counted = 0  # newlines in padded[:counted]: the line number there, as padded starts with one
    for offset, heading, body in pieces:
        line += padded.count("\n", counted, offset)
        end_line = line + body.count("\n")
        sections.append(Section(line, end_line, heading, body))
        line, counted = end_line, offset + len(body)
    return sections


# ---- documents (get_document) ------------------------------------------------------------------

#: get_document returns at most this many characters at once, and lists at most
#: MAX_OUTLINE_HEADINGS headings of a file.
MAX_DOCUMENT_CHARS = 100_000
MAX_OUTLINE_HEADINGS = 1000
#: An unknown heading's error lists at most this many of the file's headings.
MAX_HEADINGS_LISTED = 40


@dataclass(frozen=True)
class Document:
    """A file as the index reads it, from disk now."""

    path: str
    title: str
    lines: list[str]
    outline: list[OutlineEntry]
    #: The file has more headings than the outline lists (MAX_OUTLINE_HEADINGS).
    outline_truncated: bool
    content_hash: str
    mtime_ns: int


def file_outline(content: Content, total_lines: int) -> tuple[list[OutlineEntry], bool]:
    """The first MAX_OUTLINE_HEADINGS headings of a file (``content`` read with most=
    MAX_OUTLINE_HEADINGS + 1), each named by its path as search results name sections ("Install >
    Linux"), with the lines it spans (its subsections included); and whether it has more."""
    padded, headings = content.padded, content.headings
    more = len(headings) > MAX_OUTLINE_HEADINGS
    entries: list[OutlineEntry] = []
    path: list[tuple[int, str]] = []
    open_entries: list[OutlineEntry] = []
    line = counted = 0
    for at, level, heading in headings[:MAX_OUTLINE_HEADINGS]:
        line += padded.count("\n", counted, at + 1)  # the heading's line: newlines up to its boundary
        counted = at + 1
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, heading))
        while open_entries and open_entries[-1]["level"] >= level:
            open_entries.pop()["line_end"] = line - 1
        name_shown = visible_text(" > ".join(h for _, h in path)[:MAX_TITLE_CHARS])
        entry: OutlineEntry = {"heading": name_shown, "level": level, "line_start": line, "line_end": total_lines}
        entries.append(entry)
        open_entries.append(entry)
    return entries, more


def text_lines(text: str) -> list[str]:
    """The lines of ``text`` as the index numbers them (from 1; only \\n ends a line)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_document(config: ServerConfig, user_path: str) -> Document:
    """The file at ``user_path`` read from disk now, if the index would read it: the path rules of
    refresh_index (UnsafePathError), then the walk's (ArgumentError naming why not)."""
    root = config.source_directory
    rel = resolve_user_path(root, user_path, config.index_output_directory)
    try:
        if check_single_file(root, rel, file_filter(config)) is None:
            twin = whitespace_twin(root, rel)
            hint = f"; did you mean {twin!r} (the path given has white space around a name)?" if twin else ""
            raise ArgumentError("path", f"{rel}: no such file in the source directory{hint}")
        raw = read_regular_file(root, rel, config.max_file_size_bytes)
        content = file_content(rel, raw.data, config.index_notebook_outputs, MAX_OUTLINE_HEADINGS + 1, config.max_file_size_bytes)
    except FileSkipped as skipped:
        detail = f": {skipped.detail}" if skipped.detail else ""
        raise ArgumentError("path", f"{rel} is not a file the index reads ({skipped.reason}{detail}); nothing was returned") from None
    lines = text_lines(content.text)
    outline, more = file_outline(content, len(lines))
    return Document(rel, visible_text(content.title), lines, outline, more, raw.content_hash, raw.mtime_ns)


class Part(NamedTuple):
    """What get_document returns of a file: lines ``first`` to ``last`` (``text``, the first from
    the character it was asked from), and where the rest starts when there is more: the line, and
    the character within it when the cut is inside a line (else None)."""

    first: int
    last: int
    text: str
    next_line: int | None = None
    next_char: int | None = None


def document_part(
    document: Document, heading: str | None, start_line: int | None, end_line: int | None, max_chars: int, start_char: int = 0
) -> Part:
    """The lines asked for (a heading's, a range, else from the top; with a heading, start_line and
    end_line narrow its section, start_line also picking which of its occurrences), from character
    ``start_char`` of the first, as many whole lines as fit in ``max_chars``; a line longer than
    that is cut, and the rest of it is where the next part starts."""
    total = len(document.lines)
    for name, number in (("start_line", start_line), ("end_line", end_line)):
        if number is not None and number < 1:
            raise ArgumentError(name, f"lines are numbered from 1; got {number}")
    if heading:
        entry = _heading_named(document, heading, start_line)
        first = entry["line_start"] if start_line is None else start_line
        last = entry["line_end"] if end_line is None else min(end_line, entry["line_end"])
    else:
        first = 1 if start_line is None else start_line
        last = total if end_line is None else min(end_line, total)
        if first > max(total, 1):
            raise ArgumentError("start_line", f"{document.path} has {total} lines; start_line {first} is past its end")
    if end_line is not None and end_line < first:
        raise ArgumentError("end_line", f"must not be before start_line ({first}); got {end_line}")
    line = document.lines[first - 1] if total else ""
    if start_char > len(line):
        raise ArgumentError("start_char", f"line {first} of {document.path} has {len(line)} characters; start_char {start_char} is past its end")
    if total == 0:
        return Part(0, 0, "")
    if len(line) - start_char > max_chars:  # one line longer than max_chars (minified text): cut inside it
        return Part(first, first, line[start_char:start_char + max_chars], first, start_char + max_chars)
    taken = [line[start_char:]]
    used = len(taken[0])
    for number in range(first + 1, last + 1):
        line = document.lines[number - 1]
        used += 1 + len(line)
        if used > max_chars:
            return Part(first, number - 1, "\n".join(taken), number)
        taken.append(line)
    return Part(first, last, "\n".join(taken))


def document_reply(
    config: ServerConfig, user_path: str, heading: str | None = None, start_line: int | None = None, end_line: int | None = None,
    max_chars: int = 20_000, refresh: Callable[[list[str]], bool] | None = None, start_char: int = 0,
) -> DocumentReply:
    """get_document: a file read from disk now (see read_document and document_part), with its
    outline. If it differs from what the index holds, ``refresh([path])`` is asked to index it
    again (see TextIndexer.refresh_if_free); without one, or if it fails, the reply says stale.
    When ``truncated``, the same call from ``next_start_line`` (and ``next_start_char``) goes on."""
    for name, value in (("start_line", start_line), ("end_line", end_line)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ArgumentError(name, f"must be a whole number, got {value!r}")
    if not isinstance(start_char, int) or isinstance(start_char, bool) or start_char < 0:
        raise ArgumentError("start_char", f"must be a whole number from 0 (the line's first character), got {start_char!r}")
    if not isinstance(max_chars, int) or isinstance(max_chars, bool) or not 1 <= max_chars <= MAX_DOCUMENT_CHARS:
        raise ArgumentError("max_chars", f"must be a whole number from 1 to {MAX_DOCUMENT_CHARS:,}, got {max_chars!r}")
    if heading is not None and not isinstance(heading, str):
        raise ArgumentError("heading", f"must be a string, got {heading!r}")
    document = read_document(config, user_path)
    part = document_part(document, heading, start_line, end_line, max_chars, start_char)
    changed = _indexed_hash(config.db_path, document.path) != document.content_hash
    stale = changed and not (refresh is not None and refresh([document.path]))
    return {
        "path": document.path, "title": document.title, "text": visible_text(part.text), "line_start": part.first,
        "line_end": part.last, "total_lines": len(document.lines), "truncated": part.next_line is not None,
        "next_start_line": part.next_line, "next_start_char": part.next_char,
        "outline": document.outline, "outline_truncated": document.outline_truncated,
        "changed_since_indexed": changed, "stale": stale,
        "last_modified": datetime.fromtimestamp(document.mtime_ns / 1e9, tz=timezone.utc).isoformat(timespec="seconds"),
    }


def _indexed_hash(db_path: Path, rel: str) -> str | None:
    """The content hash the index holds for the file ``rel``; None if it holds none (or there is no index yet)."""
    try:
        stored = database.stored_file(database.reader(db_path), rel)
    except IndexUnavailableError:
        return None
    return stored.content_hash if stored else None


def _heading_named(document: Document, heading: str, line: int | None = None) -> OutlineEntry:
    """The outline entry named ``heading`` (see _headings_named); of several, the one holding
    ``line``, or the N-th for a name ending in "#N" that no heading has. ArgumentError otherwise,
    listing the headings, or each occurrence with its lines."""
    wanted = visible_text(heading).strip()
    found, base, nth = _headings_named(document, visible_text(heading)), wanted, None
    occurrence = _OCCURRENCE.fullmatch(wanted)
    if not found and occurrence:
        base, nth = occurrence[1].strip(), int(occurrence[2])
        found = _headings_named(document, base)
    if not found:
        names = [entry["heading"] for entry in document.outline]
        if not names:
            raise ArgumentError("heading", f"{document.path} has no headings; ask for start_line/end_line instead")
        listed = "; ".join(names[:MAX_HEADINGS_LISTED]) + (f"; ... ({len(names)} listed)" if len(names) > MAX_HEADINGS_LISTED else "")
        beyond = f" (only its first {MAX_OUTLINE_HEADINGS} headings are looked up)" if document.outline_truncated else ""
        raise ArgumentError("heading", f"{wanted[:200]!r} is not a heading of {document.path}{beyond}; its headings: {listed}")
    chosen = found
    if nth is not None:
        if not 1 <= nth <= len(found):
            raise ArgumentError("heading", f"{document.path} has {len(found)} headings named {base[:200]!r}, not {nth}: {_occurrences(base, found)}")
        chosen = [found[nth - 1]]
    if line is not None:
        holding = [entry for entry in chosen if entry["line_start"] <= line <= entry["line_end"]]
        if not holding:
            raise ArgumentError("start_line", f"start_line {line} is in no section named {wanted[:200]!r}: {_occurrences(base, found)}")
        return holding[-1]  # of nested ones holding the line, the innermost
    if len(chosen) > 1:
        raise ArgumentError(
            "heading", f"{len(found)} headings of {document.path} are named {base[:200]!r}: {_occurrences(base, found)};"
            " name one with its '#N', or give start_line (any line of it)"
        )
    return chosen[0]


#: A heading asked for as "Examples#2": the second of the headings named "Examples".
_OCCURRENCE = re.compile(r"(.+)#([0-9]{1,6})")


def _headings_named(document: Document, wanted: str) -> list[OutlineEntry]:
    """The outline entries named ``wanted``: by their path as given, else ignoring case and the
    spaces around each ' > ', else those whose own name is that (any case)."""
    def loose(name: str) -> str:
        return " > ".join(part.strip() for part in name.split(">")).casefold()

    for key in (lambda name: name, lambda name: name.strip(), loose):
        found = [entry for entry in document.outline if key(entry["heading"]) == key(wanted)]
        if found:
            return found
    return [entry for entry in document.outline if entry["heading"].rsplit(" > ", 1)[-1].casefold() == wanted.strip().casefold()]


def _occurrences(base: str, entries: list[OutlineEntry]) -> str:
    """Each of ``entries`` (headings of one name) with its lines and the name that asks for it."""
    listed = [
        f"{entry['heading'][:200]} at lines {entry['line_start']}-{entry['line_end']} ({base[:200]}#{number})"
        for number, entry in enumerate(entries[:MAX_HEADINGS_LISTED], 1)
    ]
    return "; ".join(listed) + (f"; ... ({len(entries)} in all)" if len(entries) > MAX_HEADINGS_LISTED else "")


# ---- reading ---------------------------------------------------------------------------------


def load_file(root: Path, rel: str, how: Reading) -> LoadedFile:
    """Read, extract or decode, and split one file; raise FileSkipped when it cannot or must not be indexed."""
    raw = read_regular_file(root, rel, how.max_bytes)
    content = file_content(rel, raw.data, how.notebook_outputs, max_text=how.max_bytes)
    rows = sections(content)
    return LoadedFile(
        path=rel, mtime_ns=raw.mtime_ns, size=raw.size, inode=raw.inode, ctime_ns=raw.ctime_ns, content_hash=raw.content_hash,
        read_at_ns=raw.read_at_ns, encoding=content.encoding, fallback_decoded=content.fallback_decoded, title=content.title,
        sections=rows, compressed_bodies=[database.compress(section.body) for section in rows],
        said_keys=[said_key(section.body) for section in rows],
    )


def load_or_skip(root: Path, rel: str, how: Reading) -> LoadedFile | FileSkipped:
    try:
        return load_file(root, rel, how)
    except FileSkipped as skipped:
        return skipped
    except Exception as exc:  # noqa: BLE001 - a file the code did not foresee must not stop the scan
        logger.exception("reading %r failed", rel)
        return FileSkipped(rel, "unreadable", f"reading it failed: {type(exc).__name__}: {str(exc)[:200]}")


def load_chunk(root: Path, paths: list[str], how: Reading) -> list[LoadedFile | FileSkipped]:
    """What a loader process runs: a chunk of files at a time, to keep the cost per task small."""
    return [load_or_skip(root, rel, how) for rel in paths]


def run_loader() -> None:
    """A loader process's main: read (root, chunks, reading) from stdin, then write each chunk's
    results to stdout, pickled, in order. A full pipe pauses it; a closed one (the writer's process
    is gone) ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the writer's process to handle
    root, chunks, how = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    try:
        for paths in chunks:
            pickle.dump(load_chunk(Path(root), paths, Reading(*how)), out, pickle.HIGHEST_PROTOCOL)
            out.flush()
    except BrokenPipeError:
        os._exit(0)


def _chunks(files: list[DiskFile]) -> list[tuple[list[str], int]]:
    """(paths, bytes) of consecutive files: at most CHUNK_FILES files, and CHUNK_BYTES unless one file
    is larger on its own."""
    chunks: list[tuple[list[str], int]] = []
    paths: list[str] = []
    size = 0
    for disk in files:
        if paths and (len(paths) >= CHUNK_FILES or size + disk.size > CHUNK_BYTES):
            chunks.append((paths, size))
            paths, size = [], 0
        paths.append(disk.path)
        size += disk.size
    if paths:
        chunks.append((paths, size))
    return chunks


class _ReadAhead:
    """How far loader processes may run ahead of the writer: READ_AHEAD_BYTES of files, except that
    the chunk the writer needs next is always let through (so nobody waits on a later chunk)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.used = 0
        self.next_chunk = 0
        self.stopping = False

    def take(self, chunk: int, size: int) -> bool:
        """Wait until chunk ``chunk`` may be held in memory; False if loading is being stopped."""
        with self.changed:
            while not self.stopping and chunk != self.next_chunk and self.used + size > READ_AHEAD_BYTES:
                self.changed.wait()
            self.used += size
            return not self.stopping

    def consumed(self, size: int) -> None:
        with self.changed:
            self.used -= size
            self.next_chunk += 1
            self.changed.notify_all()

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify_all()


class _LoaderResults(pickle.Unpickler):
    """Unpickles what a loader process sends, which can only be these classes: nothing in a
    loader's output can make the writer's process construct anything else."""

    ALLOWED = {
        ("models", "LoadedFile"), ("models", "Section"), ("exceptions", "FileSkipped"),
    }

    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"a loader process sent {module}.{name}, which it never sends")
        return super().find_class(module, name)


#: How a loader process starts: isolated mode (-I: no current directory, script directory,
#: PYTHONPATH or user site-packages on sys.path, no PYTHON* variables), from "/", importing this
#: install's modules by their absolute folder. Nothing in the folder the server was started in
#: (an untrusted project, often) can be imported in its place.
LOADER_COMMAND = [
    sys.executable, "-I", "-c",
    f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import indexer; indexer.run_loader()",
]


class _LoaderProcess:
    """One loader process and the thread that feeds it its chunks and queues what it sends back."""

    def __init__(self, root: Path, chunks: list[tuple[int, list[str], int]], how: Reading, read_ahead: _ReadAhead) -> None:
        self.process = subprocess.Popen(LOADER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        self.results: queue.SimpleQueue[list[LoadedFile | FileSkipped] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._exchange, args=(root, chunks, how, read_ahead), name="loader-pipe", daemon=True
        )
        self.thread.start()

    def _exchange(self, root: Path, chunks: list[tuple[int, list[str], int]], how: Reading, read_ahead: _ReadAhead) -> None:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            with stdin:
                pickle.dump((str(root), [paths for _, paths, _ in chunks], tuple(how)), stdin, pickle.HIGHEST_PROTOCOL)
            for number, _, size in chunks:
                if not read_ahead.take(number, size):
                    return
                # One unpickler per message, as pickle.load does: each dump numbers its memo from 0.
                self.results.put(_LoaderResults(stdout).load())
        except Exception as exc:  # noqa: BLE001 - a pipe, a pickle or anything else: the writer must not wait for ever
            if not read_ahead.stopping:
                logger.warning("a loader process stopped (%s); loading the rest in the writer's process", exc or "died")
            self.results.put(None)

    def next_result(self) -> list[LoadedFile | FileSkipped] | None:
        """The next chunk's files, or None if the process died."""
        return self.results.get()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.thread.join()
        if self.process.stdout:
            self.process.stdout.close()


def _load_in_processes(root: Path, files: list[DiskFile], how: Reading) -> Iterator[LoadedFile | FileSkipped]:
    """Load files in LOADER_PROCESSES processes, yielding results in the order of ``files``. Chunk k
    goes to process k mod N, so order needs no sorting. If a process cannot start or dies (killed
    for memory, say), the remaining files are loaded here."""
    chunks = _chunks(files)
    read_ahead = _ReadAhead()
    loaders: list[_LoaderProcess] = []

    def stop_loaders() -> None:
        read_ahead.stop()
        while loaders:
            loaders.pop().stop()

    count = min(LOADER_PROCESSES, len(chunks))
    try:
        for k in range(count):
            share = [(number, paths, size) for number, (paths, size) in enumerate(chunks) if number % count == k]
            loaders.append(_LoaderProcess(root, share, how, read_ahead))
    except OSError as exc:
        logger.warning("cannot start loader processes (%s); loading files in the writer's process", exc)
        stop_loaders()
    try:
        for number, (paths, size) in enumerate(chunks):
            result = loaders[number % count].next_result() if loaders else None
            if result is None:
                stop_loaders()
                result = load_chunk(root, paths, how)
            yield from result
            read_ahead.consumed(size)
    finally:
        stop_loaders()


# ---- change detection ------------------------------------------------------------------------


@dataclass
class Changes:
    """What a scan must do: files to (re)read, files to re-verify by hash, paths to remove."""

    to_read: list[DiskFile] = field(default_factory=list)
    to_verify: list[DiskFile] = field(default_factory=list)
    to_remove: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    #: The folders the walk found to be file systems of their own: path ("a/b/") -> identity.
    mounts: dict[str, str] = field(default_factory=dict)


def file_filter(config: ServerConfig) -> FileFilter:
    """The walk's rules for ``config``: which files are indexed (and may be read by get_document)."""
    return FileFilter(
        included_extensions=config.included_extensions,
        excluded_extensions=config.excluded_extensions,
        max_size_bytes=config.max_file_size_bytes,
        index_directory=config.index_output_directory,
        include_hidden=config.include_hidden,
        respect_gitignore=config.respect_gitignore,
        exclude_patterns=config.exclude_patterns,
    )


class FileScanner:
    """Walks the source and compares it with the stored signature (path, mtime, size, inode, ctime)
    of each file."""

    def __init__(self, config: ServerConfig) -> None:
        self.root = config.source_directory
        self.filter = file_filter(config)

    def changes(self, signatures: Mapping[Signature, int], recorded: Mapping[str, str] | None = None) -> Changes:
        """Compare the walk with IndexWriter.file_signatures(): a file is unchanged when its whole
        signature equals a stored one. What the walk could not list or stat is not removed.

        ``recorded``: the identities the last scan found for the source ("") and the mount points
        in it. If the source is now another folder, or a mount point is not the same file system
        (unmounted before or during the walk), and the walk finds none of the files indexed under
        it, they are kept: the source then raises SourceUnavailableError, a mount point is
        reported ``unavailable``.
        """
        recorded = recorded or {}
        result = Changes()
        unmatched = dict(signatures)
        source_replaced = "" in recorded and _identity_of(self.root) != recorded[""]
        # Files indexed under the folders that may turn out replaced, to see if the walk finds any.
        folders = [folder for folder in recorded if folder] + ([""] if source_replaced else [])
        watched = {path for path, *_ in signatures if path.startswith(tuple(folders))} if folders else set()
        found_under: set[str] = set()

        def on_skip(path: str, reason: str, detail: str) -> None:
            result.skipped.append((path, reason, detail))

        for signature in walk_source(self.root, self.filter, on_skip, result.mounts.__setitem__):
            indexed_at_ns = unmatched.pop(signature, None)
            if indexed_at_ns is None:
                result.to_read.append(DiskFile._make(signature))
            elif indexed_at_ns - max(signature[1], signature[4]) < RACY_WINDOW_NS:  # its mtime and ctime
                result.to_verify.append(DiskFile._make(signature))
            if signature[0] in watched:
                found_under.update(folder for folder in folders if signature[0].startswith(folder))
        for folder in folders:
            replaced = not folder or result.mounts.get(folder) != recorded[folder]
            indexed = sum(1 for path in watched if path.startswith(folder))
            if not replaced or not indexed or folder in found_under:
                continue
            if not folder:
                raise SourceUnavailableError(
                    str(self.root), f"it is now another folder, holding none of the {indexed} indexed files (an unmounted"
                    " drive?); if that really is the new source, delete the index file to start over",
                )
            on_skip(folder, "unavailable", f"now another folder, holding none of its {indexed} indexed files (unmounted?)")
        # Left unmatched: files changed since (read again above), no longer found by the walk, or in
        # a folder (or themselves) that could not be listed or stat-ed: those are kept.
        unknown = [path for path, reason, _ in result.skipped if reason in KEEP_REASONS]
        kept_exact, kept_under = set(unknown), tuple(path.rstrip("/") + "/" for path in unknown)
        to_read = {disk.path for disk in result.to_read}
        result.to_remove = [
            path for path, *_ in unmatched
            if path not in to_read and path not in kept_exact and not path.startswith(kept_under)
        ]
        return result


def watched_folder(config: ServerConfig) -> Callable[[str], bool]:
    """Whether the watcher watches a folder (a source key, "a/b"): every folder the walk may
    descend into (links are never followed)."""
    index_dir = os.path.realpath(config.index_output_directory)
    root, rules = config.source_directory, file_filter(config)

    def watched(rel: str) -> bool:
        parts = rel.split("/")
        name = parts[-1]
        if name in IGNORED_DIRECTORIES or (name.startswith(".") and not config.include_hidden):
            return False
        return os.path.realpath(root / rel) != index_dir and ignored_by_rules(root, parts, rules, is_dir=True) is None

    return watched


# ---- writing ---------------------------------------------------------------------------------


class TextIndexer:
    """Owns the writer and the scan state; every index change goes through here.

    Every change is made holding the index's write lock (database.WriterLock), so that one
    process writes at a time; a scan holds it throughout and records in the lock file how far it
    got, and what a scan found (its time, skipped files, errors) goes into the index's meta table,
    so every process reads the same status.
    """

    def __init__(self, config: ServerConfig, writer: IndexWriter, stop: threading.Event | None = None) -> None:
        self.config = config
        self.writer = writer
        self.scanner = FileScanner(config)
        self.progress = ScanProgress()
        self.scan_lock = threading.Lock()
        #: Set when the process is stopping: a scan ends after the file being written, and waits
        #: for another process's lock end.
        self.stop = stop or threading.Event()
        #: This process's count of errors, and the latest; the index's meta holds every process's.
        #: The count the meta held when last read stays here too: a rebuilt index starts from it.
        self.errors_encountered = 0
        self.last_error: str | None = None
        self.unsaved_errors = 0
        self.saved_errors = 0
        self._logged_skips: set[tuple[str, str]] = set()
        #: The last scan's reply and when it started: a refresh asked for before then is answered by it.
        self._last_scan: tuple[float, RefreshReply] | None = None
        #: The identities of the source ("") and its mount points, as the scan running now found them.
        self._expected: dict[str, str] = {}
        #: Set when a reader saw the index fail; the next scan checks the file and rebuilds it if damaged.
        self.damage_suspected = False
        #: What this process's watcher reports; each scan records it in the meta (see record_watching).
        self.watching: WatchState | None = None
        #: Why the last write to the index failed (SQLite's message: a full disk, say): status says
        #: "error" until a write succeeds again. The lock file's record says it to other processes.
        self.write_failure: str | None = None
        last = writer.write_lock.last_record()
        self.saved_errors = last.errors if last else 0  # the count survives an index that had to be rebuilt
        if writer.recovered_from:
            self._record_error(f"the index was damaged; moved it to {writer.recovered_from} and rebuilt it")

    def _record_error(self, message: str, exc: BaseException | None = None) -> None:
        self.errors_encountered += 1
        self.unsaved_errors += 1
        self.last_error = message[:MAX_ERROR_CHARS]
        logger.error("%s", message, exc_info=exc)

    def record_problem(self, message: str, exc: BaseException) -> None:
        """A failure outside the index's own work (the watcher's, the loop's): counted, logged with
        its traceback and shown in status as the last error."""
        self._record_error(message, exc)

    def _write_failed(self, exc: Exception) -> None:
        """The index could not be written: status says so (counted once until a write succeeds,
        however often it is retried), here and, through the lock file, in other processes."""
        if str(exc) != self.write_failure:
            self._record_error(write_problem(self.writer.db_path, str(exc)))
        self.write_failure = str(exc)
        self._record_progress()

    def _write_succeeded(self) -> None:
        if self.write_failure is not None:
            logger.info("the index %s can be written again", self.writer.db_path)
            self.write_failure = None
            self._record_progress()

    def _error_meta(self, new_errors: int, last_error: str | None) -> dict[str, str]:
        """Meta values that add this process's unsaved errors and ``new_errors`` to the index's
        count (read inside the caller's transaction, so no process's errors are lost; never below
        what this process saw, so a rebuilt index does not count from zero)."""
        saved = max(int(self.writer.meta().get("errors_encountered") or 0), self.saved_errors)
        self.saved_errors = saved + self.unsaved_errors + new_errors
        self.unsaved_errors = 0
        return {"errors_encountered": str(self.saved_errors), "last_error": (last_error or "")[:MAX_ERROR_CHARS]}

    def _log_skip(self, path: str, reason: str, detail: str) -> None:
        if reason in QUIET_REASONS or (path, reason) in self._logged_skips:
            return
        self._logged_skips.add((path, reason))
        logger.warning("skipped %r: %s%s", path, reason, f" ({detail})" if detail else "")

    def _waiting_for(self, pid: int | None) -> None:
        logger.info("another process (pid %s) is writing the index %s; waiting for it to finish", pid or "?", self.writer.db_path)

    def _stop_check(self, cancelled: Callable[[], bool] | None) -> Callable[[], bool]:
        """Whether to stop waiting: the process is stopping, or the caller gave up."""
        return lambda: self.stop.is_set() or (cancelled is not None and cancelled())

    def check_integrity(self, sections_too: bool = False) -> bool:
        """Run SQLite's quick_check (and, with ``sections_too``, decompress every section's text);
        move a damaged index aside and start empty. True if it was ok."""
        with self.writer.write_lock.held(self._waiting_for, self.stop.is_set):
            try:
                verdict = self.writer.quick_check(sections_too)
            except sqlite3.DatabaseError as exc:
                verdict = str(exc)
            if verdict == "ok":
                return True
            self._carry_error_count()
            self.writer.rebuild_after_corruption(f"integrity check failed: {verdict[:200]}")
        self._record_error(f"the index failed its integrity check; moved it to {self.writer.recovered_from} and rebuilt it")
        return False

    def _carry_error_count(self) -> None:
        """Before the index is replaced: remember its error count, which the new one starts from."""
        try:
            self.saved_errors = max(self.saved_errors, int(self.writer.meta().get("errors_encountered") or 0))
        except sqlite3.Error:
            pass  # unreadable: the count this process last saw stands

    def scan(self, on_progress: Callable[[ScanProgress], None] | None = None, cancelled: Callable[[], bool] | None = None) -> RefreshReply:
        """Bring the whole index up to date with the disk now. One scan runs at a time; it waits
        while another process writes the index. A scan asked for while another one runs waits for
        it, then scans again, unless a scan that started after it was asked for has finished:
        that one answers it. ``cancelled``: the caller gave up (it stops waiting, not a scan)."""
        asked_at = time.monotonic()
        stop = self._stop_check(cancelled)
        while not self.scan_lock.acquire(timeout=database.LOCK_POLL_SECONDS):
            if stop():
                return _stopped("the scan was cancelled before it started")
        try:
            if self._last_scan is not None and self._last_scan[0] > asked_at:
                return self._last_scan[1]
            with self.writer.write_lock.held(self._waiting_for, stop):
                started = time.monotonic()
                reply = self._scan_with_recovery(on_progress)
            self._last_scan = (started, reply)
            return reply
        except Cancelled as exc:
            return _stopped(str(exc), self.progress.files_done)
        finally:
            self.progress.state, self.progress.phase = "idle", "done"
            self.progress.finished_at = time.time()
            self.scan_lock.release()

    def _scan_with_recovery(self, on_progress: Callable[[ScanProgress], None] | None) -> RefreshReply:
        try:
            self._check_index_file()
            return self._scan(on_progress)
        except sqlite3.DatabaseError as exc:
            if not database.is_corruption(exc):
                return self._scan_failed(exc)
            self._record_error(f"the index became unreadable ({exc}); rebuilding it")
            self.writer.rebuild_after_corruption(str(exc))
            try:
                return self._scan(on_progress)
            except sqlite3.DatabaseError as again:
                return self._scan_failed(again)
        except (OSError, SourceUnavailableError) as exc:
            # The source is gone, unlisted or unmounted: nothing is removed; the next scan retries.
            return self._scan_failed(exc)

    def _check_index_file(self) -> None:
        """Reopen an index file deleted or replaced under the writer (one stat per scan), and check
        its integrity then or when a reader saw the index fail."""
        replaced = self.writer.file_replaced()
        if replaced:
            self._carry_error_count()
            self._record_error(f"the index file {self.writer.db_path} was deleted or replaced while in use; reopening it")
            self.writer.reopen()
        if replaced or self.damage_suspected:
            self.damage_suspected = False
            self.check_integrity(sections_too=not replaced)  # a reader saw damage: look everywhere

    def _scan_failed(self, exc: Exception) -> RefreshReply:
        if isinstance(exc, (OSError, SourceUnavailableError)):
            problem = f"scan stopped: {exc}; the index is kept as it was"
            self._record_error(problem)
        else:
            problem = write_problem(self.writer.db_path, str(exc))
            self._write_failed(exc)
        try:
            with self.writer.transaction():
                self.writer.set_meta_values({**self._error_meta(0, self.last_error), "last_error_of": "scan"})
        except sqlite3.Error:
            pass  # the index cannot be written now (disk full, read-only): the error stays unsaved
        self.progress.phase = "done"
        self._record_progress()
        return {"success": False, "files_processed": self.progress.files_done, "files_removed": 0, "errors": [problem[:MAX_ERROR_CHARS]]}

    def _scan(self, on_progress: Callable[[ScanProgress], None] | None) -> RefreshReply:
        progress = self.progress
        progress.state, progress.phase = "indexing", "walking"
        progress.files_done = progress.files_total = 0
        progress.started_at = time.time()
        self._record_progress()
        root = self.config.source_directory
        with self.writer.lock:
            signatures = self.writer.file_signatures()
            meta = self.writer.meta()
            known_problems = {(path, reason) for path, reason, _ in self.writer.skipped_entries(ERROR_REASONS)}
            remembered = self.writer.remembered_skips()
        recorded: dict[str, str] = json.loads(meta.get("mounts") or "{}")
        self._expected = {"": identity(os.stat(root))}
        changes = self.scanner.changes(signatures, recorded)
        signature_of = {disk.path: _skip_signature(disk) for disk in changes.to_read}
        changes.to_read, still_skipped = _unless_skipped_as_they_are(changes.to_read, remembered)
        changes.skipped += still_skipped
        self._expected.update(changes.mounts)
        self._check_source()  # a source swapped or unmounted while it was walked
        unavailable = {path for path, reason, _ in changes.skipped if reason == "unavailable"}
        mounts = {**changes.mounts, **{folder: recorded[folder] for folder in unavailable}, "": self._expected[""]}
        for path, reason, detail in changes.skipped:
            self._log_skip(path, reason, detail)
        progress.skipped = dict(Counter(reason for _, reason, _ in changes.skipped))
        progress.files_total = len(changes.to_read) + len(changes.to_verify) + len(changes.to_remove)
        progress.phase = "indexing"
        self._record_progress()
        if on_progress:
            on_progress(progress)
        removed = self._remove(changes.to_remove, on_progress)
        outcome = self._index_files(changes.to_read + changes.to_verify, on_progress)
        skipped = changes.skipped + outcome.skipped
        problems = [(path, reason, detail) for path, reason, detail in skipped if reason in ERROR_REASONS]
        new_problems = sum(1 for path, reason, _ in problems if (path, reason) not in known_problems)
        with self.writer.transaction():
            self.writer.replace_skipped(
                (path, reason, detail, signature_of.get(path) if reason in REMEMBERED_REASONS else None)
                for path, reason, detail in skipped if reason not in QUIET_REASONS
            )
            self.last_error = _describe_problems(problems)
            self.writer.set_meta_values({
                "last_scan": _now(), "mounts": json.dumps(mounts),
                "skipped_counts": json.dumps(dict(Counter(reason for _, reason, _ in skipped))),
                "settings": json.dumps(self.config.index_settings), "last_error_of": "files",
                **({"watching": self._watching_record()} if self.watching is not None else {}),
                **self._error_meta(new_problems, self.last_error),
            })
        self._write_succeeded()
        self.errors_encountered += new_problems
        progress.skipped = dict(Counter(reason for _, reason, _ in skipped))
        progress.phase = "done"
        self._record_progress()
        removed += outcome.vanished
        changed = outcome.written or removed or outcome.skipped
        try:
            if outcome.written or removed:
                self.writer.release_free_pages()
            if outcome.written or removed or self.writer.wal_bytes() > database.WAL_SIZE_LIMIT:
                self.writer.truncate_wal()
        except sqlite3.Error as exc:  # all is committed: the scan did its work (the WAL may fill a full disk)
            if database.is_corruption(exc):
                raise
            logger.warning("the index %s is up to date, but its WAL could not be folded into it (%s); the next scan"
                           " that writes tries again", self.writer.db_path, exc)
        logger.log(
            logging.INFO if changed else logging.DEBUG,
            "scan done: %d files read, %d removed, %d unchanged verified, skipped %s, %.1fs",
            outcome.written, removed, outcome.verified, progress.skipped or "none", time.time() - (progress.started_at or 0),
        )
        errors = [f"{path}: {reason}{': ' + detail if detail else ''}"[:MAX_ERROR_CHARS] for path, reason, detail in problems]
        return {"success": True, "files_processed": outcome.written, "files_removed": removed, "errors": errors[:MAX_REPLY_ERRORS]}

    def _check_source(self) -> None:
        """Raise SourceUnavailableError if the source, or a mount point in it, is no longer the
        folder this scan walked (replaced, or a drive unmounted): a file missing now may not be
        deleted, so nothing more is written. Called before each commit."""
        changed = self._changed_folder(self._expected)
        if changed is not None:
            raise SourceUnavailableError(
                str(changed), "it was replaced or unmounted during the scan; what was not yet written is left as it was"
            )

    def _changed_folder(self, identities: Mapping[str, str], holding: str = "") -> Path | None:
        """The first of the source's folders in ``identities`` (path -> identity) that holds
        ``holding`` and is no longer that folder, or None."""
        root = self.config.source_directory
        return next(
            (root / folder for folder, was in identities.items() if holding.startswith(folder) and _identity_of(root / folder) != was),
            None,
        )

    def _record_progress(self) -> None:
        progress = self.progress
        errors = self.saved_errors + self.unsaved_errors
        if self.write_failure is not None and progress.phase not in ("walking", "indexing"):  # status elsewhere says "error"
            self.writer.write_lock.record("failed", 0, 0, errors, self.write_failure)
        else:
            self.writer.write_lock.record(progress.phase, progress.files_done, progress.files_total, errors)

    def _remove(self, to_remove: list[str], on_progress: Callable[[ScanProgress], None] | None) -> int:
        for start in range(0, len(to_remove), BATCH_FILES):
            batch = to_remove[start:start + BATCH_FILES]
            with self.writer.transaction():
                for path in batch:
                    current = self.writer.stored_file(path)
                    if current is not None:
                        self.writer.remove_file(current.file_id)
                self._check_source()
            self.progress.files_done += len(batch)
            self._record_progress()
            if on_progress:
                on_progress(self.progress)
        return len(to_remove)

    def _index_files(self, files: list[DiskFile], on_progress: Callable[[ScanProgress], None] | None) -> _Outcome:
        outcome = _Outcome()
        loaded = self._load_ahead(files)
        try:
            for first in loaded:
                self._write_batch(first, loaded, outcome)
                if on_progress:
                    on_progress(self.progress)
                if self.stop.is_set():
                    raise Cancelled("the scan stopped before it finished: the server is stopping")
        finally:
            loaded.close()  # stops the loader processes at once when the scan ends early
        return outcome

    def _load_ahead(self, files: list[DiskFile]) -> Iterator[LoadedFile | FileSkipped]:
        """Load files in order: inline for a few, else in loader processes (see LOADER_PROCESSES)."""
        root, how = self.config.source_directory, reading(self.config)
        if len(files) < PROCESS_LOADING_MIN_FILES or LOADER_PROCESSES < 2:
            return (load_or_skip(root, disk.path, how) for disk in files)
        return _load_in_processes(root, files, how)

    def _write_batch(
        self, first: LoadedFile | FileSkipped, rest: Iterator[LoadedFile | FileSkipped], outcome: _Outcome
    ) -> None:
        """Write ``first`` and then files from ``rest`` in one transaction, up to BATCH_FILES files or
        BATCH_BYTES of text (less if the process is stopping). Files are written as they arrive, so a
        batch is never all in memory."""
        skipped: list[FileSkipped] = []
        count = size = 0
        item: LoadedFile | FileSkipped | None = first
        with self.writer.transaction():
            while item is not None:
                if isinstance(item, FileSkipped):
                    skipped.append(item)
                self._write_one(item, outcome)
                count += 1
                size += item.size if isinstance(item, LoadedFile) else 0
                if count % PROGRESS_EVERY_FILES == 0:
                    self.progress.files_done += PROGRESS_EVERY_FILES
                    self._record_progress()
                full = count >= BATCH_FILES or size >= BATCH_BYTES or self.stop.is_set()
                item = None if full else next(rest, None)
            self._check_source()
        for missing in skipped:
            self._log_skip(missing.path, missing.reason, missing.detail)
        self.progress.files_done += count % PROGRESS_EVERY_FILES
        self._record_progress()

    def _write_one(self, item: LoadedFile | FileSkipped, outcome: _Outcome) -> None:
        current = self.writer.stored_file(item.path)
        if isinstance(item, FileSkipped):
            if current is not None and item.reason not in KEEP_REASONS:
                self.writer.remove_file(current.file_id)
                outcome.vanished += item.reason == "vanished"
            if item.reason != "vanished":
                outcome.skipped.append((item.path, item.reason, item.detail))
                self.writer.set_skipped(item.path, item.reason, item.detail)
        elif current is not None and current.content_hash == item.content_hash and current.size == item.size:
            self.writer.mark_verified(current.file_id, item.read_at_ns, item.mtime_ns, item.inode, item.ctime_ns)
            outcome.verified += 1
        else:
            self.writer.upsert_file(item, current.file_id if current else None)
            self.writer.clear_skipped(item.path)
            outcome.written += 1

    def refresh_file(self, user_path: str, cancelled: Callable[[], bool] | None = None) -> RefreshReply:
        """Index one file now (or remove it if it is gone). Raises UnsafePathError for unsafe paths.
        The file is read holding the write lock: what is written is what the disk holds then."""
        rel = resolve_user_path(self.config.source_directory, user_path, self.config.index_output_directory)
        return self.refresh_files([rel], cancelled)

    def refresh_files(self, rels: Sequence[str], cancelled: Callable[[], bool] | None = None) -> RefreshReply:
        """Index these files (source keys) now, or remove the ones that are gone, in one transaction."""
        with self.writer.write_lock.held(self._waiting_for, self._stop_check(cancelled)):
            for rel in rels:
                self._check_recorded_folders(rel)
            loaded = [self._read_now(rel) for rel in rels]
            try:
                with self.writer.transaction():
                    replies = [self._write_refreshed(rel, item) for rel, item in zip(rels, loaded)]
                    if self.writer.meta().get("last_error_of") != "scan":  # a failed scan's error stands till a scan passes
                        self.last_error = _describe_problems(self.writer.skipped_entries(ERROR_REASONS))
                        self.writer.set_meta("last_error", (self.last_error or "")[:MAX_ERROR_CHARS])
            except sqlite3.Error as exc:
                self._write_failed(exc)
                raise
            self._write_succeeded()
        return {
            "success": all(reply["success"] for reply in replies),
            "files_processed": sum(reply["files_processed"] for reply in replies),
            "files_removed": sum(reply["files_removed"] for reply in replies),
            "errors": [error for reply in replies for error in reply["errors"]],
        }

    def refresh_if_free(self, rels: Sequence[str], seconds: float) -> bool:
        """refresh_files, if no scan of this process runs and no other process writes the index
        for ``seconds``; True if it was done (files that could not be read are skipped as a scan
        would skip them), False if it would have had to wait longer or failed."""
        if not self.scan_lock.acquire(timeout=seconds):
            return False
        deadline = time.monotonic() + seconds
        try:
            self.refresh_files(rels, lambda: time.monotonic() > deadline)
        except (Cancelled, DocSearchError, OSError, sqlite3.Error) as exc:
            logger.info("files found changed by a search were not indexed again: %s", exc)
            return False
        finally:
            self.scan_lock.release()
        return True

    def refresh_changed(self, rels: Sequence[str]) -> None:
        """Index again the files the watcher saw change (see refresh_files), those whose names the
        walk would take; waits for a scan running in this process, then goes ahead."""
        accepts = self.scanner.filter.accepts_name
        wanted = [rel for rel in rels if accepts(rel.rsplit("/", 1)[-1]) and not has_surrogates(rel)]
        if not wanted:
            return
        with self.scan_lock:
            reply = self.refresh_files(wanted, self.stop.is_set)
        logger.debug("changed files indexed again: %s", reply)

    def record_watching(self, state: WatchState) -> None:
        """Keep what the watcher reports in the index's meta now, for status in other processes
        (watching stopped between scans; a scan records it anyway)."""
        self.watching = state
        try:
            with self.writer.transaction():
                self.writer.set_meta("watching", self._watching_record())
        except (sqlite3.Error, Cancelled) as exc:
            logger.debug("watching state not recorded: %s", exc)

    def _watching_record(self) -> str:
        state = self.watching or WatchState()
        return json.dumps({"pid": os.getpid(), "active": state.active, "folders": state.folders, "problem": state.problem})

    def _read_now(self, rel: str) -> LoadedFile | FileSkipped | None:
        """A file read for refresh_files; None if it no longer exists."""
        try:
            disk = check_single_file(self.config.source_directory, rel, self.scanner.filter)
            return load_file(self.config.source_directory, rel, reading(self.config)) if disk else None
        except FileSkipped as skipped:
            return skipped

    def _check_recorded_folders(self, rel: str) -> None:
        """Refuse a one-file refresh under the source, or a mount point in it, that is no longer the
        folder the last scan recorded: the file may be missing only because a drive is unmounted."""
        changed = self._changed_folder(json.loads(self.writer.meta().get("mounts") or "{}"), rel)
        if changed is not None:
            raise SourceUnavailableError(
                str(changed), "it is not the folder the index was made from (replaced or unmounted?); nothing was"
                " changed: refresh everything to check it",
            )

    def _write_refreshed(self, rel: str, loaded: LoadedFile | FileSkipped | None) -> RefreshReply:
        current = self.writer.stored_file(rel)
        if isinstance(loaded, LoadedFile):
            if current is not None and current.content_hash == loaded.content_hash and current.size == loaded.size:
                self.writer.mark_verified(current.file_id, loaded.read_at_ns, loaded.mtime_ns, loaded.inode, loaded.ctime_ns)
            else:
                self.writer.upsert_file(loaded, current.file_id if current else None)
            self.writer.clear_skipped(rel)
            return {"success": True, "files_processed": 1, "files_removed": 0, "errors": []}
        if loaded is None:
            self.writer.clear_skipped(rel)
            if current is None:
                return {"success": False, "files_processed": 0, "files_removed": 0,
                        "errors": [f"{rel}: no such file in the source directory, and not in the index"]}
            self.writer.remove_file(current.file_id)
            return {"success": True, "files_processed": 0, "files_removed": 1, "errors": []}
        removed = current is not None and loaded.reason not in KEEP_REASONS
        if removed:
            self.writer.remove_file(current.file_id)  # type: ignore[union-attr]
        if loaded.reason != "vanished" and loaded.reason not in QUIET_REASONS:
            self.writer.set_skipped(rel, loaded.reason, loaded.detail)
        return {"success": False, "files_processed": 0, "files_removed": int(removed), "errors": [str(loaded)]}


def _skip_signature(disk: DiskFile) -> str | None:
    """What a skip of this file stands for: its signature, unless it changed so recently that it
    may change again within the file system's timestamp granularity (see RACY_WINDOW_NS)."""
    if time.time_ns() - max(disk.mtime_ns, disk.ctime_ns) < RACY_WINDOW_NS:
        return None
    return f"{disk.mtime_ns}:{disk.size}:{disk.inode}:{disk.ctime_ns}"


def _unless_skipped_as_they_are(
    files: list[DiskFile], remembered: Mapping[str, tuple[str, str, str]]
) -> tuple[list[DiskFile], list[tuple[str, str, str]]]:
    """(the files to read, the skips that stand): a file skipped for its content and unchanged since
    is not read again."""
    to_read: list[DiskFile] = []
    standing: list[tuple[str, str, str]] = []
    for disk in files:
        signature, reason, detail = remembered.get(disk.path, (None, "", ""))
        if signature is not None and signature == _skip_signature(disk):
            standing.append((disk.path, reason, detail))
        else:
            to_read.append(disk)
    return to_read, standing


@dataclass
class _Outcome:
    written: int = 0
    verified: int = 0
    #: Indexed files found deleted when they were to be read again: removed.
    vanished: int = 0
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def _stopped(why: str, files_done: int = 0) -> RefreshReply:
    return {"success": False, "files_processed": files_done, "files_removed": 0, "errors": [why]}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _identity_of(folder: Path) -> str | None:
    """file_utils.identity of a folder, or None if there is none there now."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return identity(st) if stat.S_ISDIR(st.st_mode) else None


def write_problem(db_path: Path, detail: str) -> str:
    """What status says while the index cannot be written; ``detail``: SQLite's message."""
    return f"cannot write the index {db_path}: {detail}; what changed is indexed once it can be written again"


def _describe_problems(problems: Sequence[tuple[str, str, str]]) -> str | None:
    """One line for status's last_error about what a scan could not read, or None."""
    if not problems:
        return None
    path, reason, detail = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{path}: {reason}{': ' + detail if detail else ''}{more}; what the index held for it is kept"


def read_status(
    config: ServerConfig, indexer: TextIndexer | None, startup_error: str | None = None, watching: WatchState | None = None
) -> StatusReply:
    """Status as the index and its writer record it (any process reads the same), with this
    process's own scan progress when it is the one scanning, and its own problems (an index it
    cannot open); ``watching``: this process's watcher, else what a server recorded."""
    db_path = config.db_path
    counts: dict = {"indexed_files": 0, "total_documents": 0, "fallback_decoded_files": 0, "meta": {}}
    problem = startup_error
    try:
        counts = database.index_counts(database.reader(db_path))
    except (IndexUnavailableError, sqlite3.Error) as exc:
        database.drop_reader(db_path)
        problem = problem or str(exc)
        if indexer is not None:
            indexer.damage_suspected = True
    meta = counts["meta"]
    lock = indexer.writer.write_lock if indexer else database.WriterLock(database.lock_path(db_path))
    writer = lock.holder()
    own = indexer.progress if indexer else None
    failed = lock.last_record() if indexer is None and writer is None else None
    if failed is not None and failed.phase != "failed":
        failed = None
    detail = indexer.write_failure if indexer else failed.problem if failed else None
    failure = write_problem(db_path, detail) if detail is not None else None
    skipped = json.loads(meta.get("skipped_counts") or "{}")
    if own is not None and own.state == "indexing":
        state, phase, done, total, skipped = "indexing", own.phase, own.files_done, own.files_total, own.skipped
    elif writer is not None and writer.phase in ("walking", "indexing"):  # another process is scanning now
        state, phase, done, total = "indexing", writer.phase, writer.files_done, writer.files_total
    elif (indexer is None and startup_error) or failure:
        state, phase, done, total = "error", "", 0, 0
    elif own.finished_at if own is not None else meta.get("last_scan"):  # a daemon waits for its own first scan
        state, phase, done, total = "idle", "done", 0, 0
    else:
        state, phase, done, total = "starting", "", 0, 0
    if state == "idle" and own is not None:
        done, total = own.files_done, own.files_total
    unsaved = indexer.unsaved_errors if indexer else 0
    if problem or failure:
        last_error: str | None = problem or failure
    elif unsaved:
        last_error = indexer.last_error if indexer else None
    else:
        last_error = meta.get("last_error") or None
    saved = max(int(meta.get("errors_encountered") or 0), indexer.saved_errors if indexer else failed.errors if failed else 0)
    size = sum(p.stat().st_size for p in (db_path, Path(f"{db_path}-wal")) if p.exists())
    return {
        "source_directory": str(config.source_directory),
        "index_path": str(db_path),
        "state": state,
        "progress": {"phase": phase, "files_done": done, "files_total": total},
        "indexed_files": counts["indexed_files"],
        "total_documents": counts["total_documents"],
        "index_size_mb": round(size / (1024 * 1024), 3),
        "last_scan": meta.get("last_scan"),
        "errors_encountered": saved + unsaved + (1 if startup_error else 0),
        "last_error": last_error,
        "skipped_files": skipped,
        "fallback_decoded_files": counts["fallback_decoded_files"],
        "writer_pid": writer.pid if writer is not None else None,
        "watching": _watching_reply(watching, meta.get("watching")),
    }


def _watching_reply(own: WatchState | None, recorded: str | None) -> WatchingReply:
    """This process's watching state; else the one a server recorded, if that server still runs."""
    if own is not None:
        return {"active": own.active, "folders": own.folders, "problem": own.problem}
    try:
        record = json.loads(recorded or "{}")
        pid = int(record.get("pid") or 0)
        if pid > 0:
            os.kill(pid, 0)
            return {"active": bool(record.get("active")), "folders": int(record.get("folders") or 0),
                    "problem": str(record["problem"]) if record.get("problem") else None}
    except (ValueError, TypeError, AttributeError, ProcessLookupError, PermissionError):
        pass
    return {"active": False, "folders": 0, "problem": "no server is running on this index: changes are indexed when one starts"}
