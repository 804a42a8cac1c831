"""A file's text as the index reads it: its title and headings, and the sections (FTS rows) it is cut into.

file_content turns a file's bytes into a Content: formats.py extracts the formats it knows, other
files are decoded text whose Markdown or reST headings markup.py finds, or whose definitions
code_outline.py finds in a code file. sections() cuts a Content
at its headings, else at blank lines, into rows of bounded size, each with the headings over and in
it; heading_spans reads a search hit's rows back as each heading's own lines. said_key tells copies
of a section's text apart from texts that differ.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import code_outline
import database
import formats
import markup
from file_utils import decode_text
from formats import MAX_TITLE_CHARS
from models import Section

#: Sections aim for TARGET_SECTION_CHARS, cut at a blank line, and never exceed MAX_SECTION_CHARS;
#: a heading starts a new one once the current one has MIN_SECTION_CHARS.
TARGET_SECTION_CHARS = 16000
MIN_SECTION_CHARS = TARGET_SECTION_CHARS // 2
MAX_SECTION_CHARS = 32000
#: In a code file a definition starts a new section once the current one holds this much: a
#: definition's own row puts its name in the heading column and its words in a short row, where
#: bm25 ranks them. bench/code_search.py (36 questions, four code bases): at 8000 (as prose) the
#: first hit is in the right file for 23 and at the right definition for 21; at 200, 28 and 26,
#: the index 0.97x the floor's size; at 0, 30 and 26 but 1.05x.
CODE_MIN_SECTION_CHARS = 200
_BLANK_LINE = re.compile(r"\n(?=[^\S\n]*\n)")
_NOT_SPACE = re.compile(r"\S")
_CARRIAGE_RETURN = re.compile(r"\r\n?")

#: What leads a section before what it says: YAML front matter, Markdown heading lines, blank lines.
_LEAD = re.compile(r"(?:\s*---[^\S\n]*\n.*?\n(?:---|\.\.\.)[^\S\n]*(?:\n|\Z))?(?:[^\S\n]*(?:#{1,6}(?:[^\S\n][^\n]*)?)?(?:\n|\Z))*", re.S)
#: How far into a section its lead (front matter, headings) is looked for.
MAX_LEAD_CHARS = 4096


@dataclass(frozen=True)
class Content:
    """A file as the index reads it: its text, title and headings, whatever its format.

    A heading is (boundary, level, name); a boundary is the offset of the newline before the
    heading's line in ``padded``, the text between two added newlines (see sections()): kept as
    made while finding the headings, so that splitting does not copy a large text again."""

    padded: str
    title: str
    headings: list[markup.HeadingAt]
    encoding: str = "utf-8"
    fallback_decoded: bool = False
    #: A code file (code_outline.py): its headings are definitions.
    code: bool = False

    @property
    def text(self) -> str:
        return self.padded[1:-1]


def file_content(rel: str, data: bytes, notebook_outputs: bool = False, most: int | None = None, max_text: int | None = None) -> Content:
    """The Content of a file's bytes: a format formats.py extracts, else decoded text (Markdown and
    reST headings found in it); the first ``most`` headings if given, at most markup.MAX_HEADINGS
    (found no further). Raises FileSkipped, as too_large when an extracted text is longer than
    ``max_text`` characters."""
    extracted = formats.extract(rel, data, notebook_outputs=notebook_outputs, max_text_chars=max_text, max_headings=most)
    if extracted is None:
        text, encoding, fallback = decode_text(rel, data)
        if "\r" in text:  # CR LF and old Mac CR-only line ends: lines end with \n alone here
            text = _CARRIAGE_RETURN.sub("\n", text)
        return text_content(text, rel, most, encoding, fallback)
    padded = f"\n{extracted.text}\n"
    headings = _boundaries(padded, extracted.headings)
    title = _title(padded, extracted.title or next((name for _, level, name in headings if level == 1), ""), bool(headings))
    return Content(padded, title, headings, f"extracted:{rel.rsplit('.', 1)[-1].lower()}")


def text_content(text: str, name: str, most: int | None = None, encoding: str = "utf-8", fallback: bool = False) -> Content:
    """The Content of a text: headings for Markdown and reST (by ``name``), a code file's
    definitions (code_outline.py), none for other files."""
    padded = f"\n{text}\n"
    code = code_outline.is_code(name)
    if code:
        headings, title = code_outline.outline(padded, name, most)
    else:
        headings, title = markup.text_headings(padded, name, most)
    return Content(padded, _title(padded, title, bool(headings)), headings, encoding, fallback, code)


def _boundaries(padded: str, headings: Sequence[formats.Heading]) -> list[markup.HeadingAt]:
    """Extracted headings (by line number) as (boundary, level, name)."""
    found: list[markup.HeadingAt] = []
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
    least = CODE_MIN_SECTION_CHARS if content.code else MIN_SECTION_CHARS
    last = len(padded) - 1
    ends = [at for at, _, _ in headings[1:]] + [last]
    start, start_heading = 0, ""
    for (at, level, heading), block_end in zip(headings, ends):
        while path and path[-1][0] >= level:  # levels rise along the path: the closed ones are last
            path.pop()
        path.append((level, heading))
        current = at - start
        if current >= least or (current and block_end - start > TARGET_SECTION_CHARS):
            pieces.extend(_bounded_pieces(padded, start, at, start_heading, max_chars))
            start, start_heading = at, ""
        if not start_heading:  # a new section, or a short preamble that goes with the first heading
            start_heading = " > ".join(h for _, h in path)[:MAX_TITLE_CHARS]
    pieces.extend(_bounded_pieces(padded, start, last, start_heading, max_chars))
    return _numbered(padded, pieces, headings)


def _title(padded: str, title: str, has_headings: bool) -> str:
    """The title of a file: its headings' (or front matter's), else its first line."""
    if not title:
        body = markup.front_matter(padded)[0]  # front matter without a title: the title is not its "---"
        line = _first_text_line(padded, body)
        title = line.strip().lstrip("#").strip()
        if not title.strip("-=*_~+ \t") or (len(title) > 120 and not has_headings) or line.strip() == padded[body:].strip():
            title = ""  # a long first line is prose; a line alone is the text itself, not its title
    return title[:MAX_TITLE_CHARS]


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


def _numbered(padded: str, pieces: list[tuple[int, str, str]], headings: Sequence[markup.HeadingAt]) -> list[Section]:
    """Sections from (offset, heading, body) in text order, counting each newline once, each with
    its outline (models.Section): the headings are the file's, whatever its format, so that a
    search names the heading of any line without reading the file again."""
    heading_lines: list[int] = []
    line = counted = 0  # newlines in padded[:counted]: the line number there, as padded starts with one
    for at, _, _ in headings:
        line += padded.count("\n", counted, at + 1)
        counted = at + 1
        heading_lines.append(line)
    sections: list[Section] = []
    above: list[tuple[int, int, str]] = []  # the headings open after the text read so far
    line = counted = number = 0
    for offset, heading, body in pieces:
        line += padded.count("\n", counted, offset)
        end_line = line + body.count("\n")
        outline = list(above)
        while number < len(headings) and headings[number][0] < offset + len(body):
            _, level, name = headings[number]
            mark = (heading_lines[number], level, name)
            outline.append(mark)
            while above and above[-1][1] >= level:
                above.pop()
            above.append(mark)
            number += 1
        sections.append(Section(line, end_line, heading, body, tuple(outline)))
        line, counted = end_line, offset + len(body)
    return sections


class HeadingSpan(NamedTuple):
    """A heading's own lines: from its line to the next heading of any level (or the end of the
    rows read), named by its path as search results and get_document name it. ``path`` holds the
    names along it, the span's own heading last (none before a file's first heading). A named
    tuple: a search makes a few hundred of them."""

    heading: str
    path: tuple[str, ...]
    start_line: int
    end_line: int
    text: str


def heading_spans(rows: Sequence[tuple[int, int, str, Sequence[tuple[int, int, str]]]]) -> list[HeadingSpan]:
    """The heading spans of consecutive sections ``rows`` (start_line, end_line, body, outline as
    models.Section has it) of one file, the first under the headings open where the first row
    starts; none if no heading is open or found there. Front matter is in no span."""
    if not rows or not any(outline for *_, outline in rows):
        return []
    top = rows[0][0]  # lines[0] is line top
    lines: list[str] = []
    marks: list[tuple[int, int, str]] = []
    last_end = 0
    for number, (first, end, text, outline) in enumerate(rows):
        pieces = text.split("\n")
        if lines and first == last_end:  # a piece of a long line cut in several sections
            lines[-1] += pieces.pop(0)
        lines.extend([""] * (first - top - len(lines)))
        lines.extend(pieces)
        last_end = end
        after = max(first, marks[-1][0] + 1) if marks else first  # a later row's open headings are read already
        marks.extend((line, level, name) for line, level, name in outline if not number or line >= after)
    spans: list[HeadingSpan] = []
    levels: list[int] = []  # the open headings' levels and names, outermost first
    names: list[str] = []
    # A heading with no text of its own (a page title over its first subsection) goes with the
    # span after it: that span starts at its line.
    opened = top
    if top == 1:  # the first line after front matter
        opened = 1 + rows[0][2].count("\n", 0, markup.front_matter(f"\n{rows[0][2]}\n")[0])
    heading_lines: set[int] = set()
    # What the lines from ``opened`` up to ``looked`` hold: one that says something, one not blank.
    # Each line is looked at once: a run of headings with no text between them stays open, and
    # reading it again at each heading took minutes for a file of 100,000 of them.
    looked, says, filled = opened, False, False
    for line, level, heading in marks:
        if line > opened:  # the heading closes the span before it, if that says something
            for number, text in enumerate(lines[looked - top:line - top], looked):
                if number not in heading_lines and text.strip(_UNDERLINE_CHARACTERS):
                    says = True  # the span closes here: the lines after this one are not needed
                    break
                filled = filled or bool(text.strip())
            looked = max(looked, line)
            if says:
                _add_span(spans, names, opened, lines[opened - top:line - top])
            if says or not filled:
                opened, heading_lines, looked, says, filled = line, set(), line, False, False
        while levels and levels[-1] >= level:
            levels.pop()
            names.pop()
        levels.append(level)
        names.append(heading)
        heading_lines.add(line)
    _add_span(spans, names, opened, lines[opened - top:])
    return spans


def _add_span(spans: list[HeadingSpan], names: list[str], first: int, lines: list[str]) -> None:
    """Add the span of ``lines`` from line ``first`` under the headings ``names``, less its trailing
    blank lines, to ``spans`` if that leaves any text."""
    text = "\n".join(lines).rstrip()
    if text:
        path = tuple(names)
        spans.append(HeadingSpan(" > ".join(path)[:MAX_TITLE_CHARS], path, first, first + text.count("\n"), text))


#: A line of underline or overline characters (setext and reST headings): not text of a span's own.
_UNDERLINE_CHARACTERS = " \t=-`:'\"~^_*+#<>."


def said_key(body: str) -> bytes:
    """A short digest of what a section says (_said): sections whose keys are equal are copies of
    one text. Made when a file is indexed, so a search groups copies without reading them."""
    return hashlib.blake2b(_said(body).encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _said(body: str) -> str:
    """What a section says, to tell copies apart: its text after its front matter and heading lines
    (versioned copies of a page differ in a date or a title holding the version); the text itself
    if nothing else is left. Only the start is looked at: a section starts at its heading."""
    said = body[_LEAD.match(body, 0, MAX_LEAD_CHARS).end():].rstrip()
    return said or body
