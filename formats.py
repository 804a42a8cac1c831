"""Text extraction for files that are not plain text: HTML, Jupyter notebooks, Office and e-book
archives (docx, odt, pptx, epub) and PDF. Markdown and reST headings, of plain files and notebook
cells alike, are found by markup.py, this layer's one parser per markup.

``extract`` takes the bytes of one file and returns its title, its readable text in document order
and its headings, each with the line of ``text`` it stands on. Files come from folders nobody
vetted, so any input bytes end in an Extracted or in FileSkipped, never in another exception:

- Archives are opened only with at most MAX_ARCHIVE_MEMBERS members, and their parts are read
  through a bounded read against one budget for the whole archive: MAX_COMPRESSION_RATIO times
  its size (at least RATIO_CHECK_BYTES) and at most MAX_UNPACKED_BYTES; a part that claims to
  inflate past what is left is not inflated. A part listed many times (an e-book's spine, a
  deck's slide list) is read once.
- A file's text is capped while it is built (extract's max_text_chars): past the cap the file is
  too_large, before more memory goes into it. So are its headings (max_headings, at most
  markup.MAX_HEADINGS): past theirs, headings are read as text lines.
- XML parts that declare a document type are refused before parsing (entity expansion: billion
  laughs, external entities), and so are tags of more than MAX_TAG_ATTRIBUTES attributes. Parts
  are parsed as a stream that keeps one block (paragraph, table row, shape) at a time, of at most
  MAX_BLOCK_ELEMENTS elements and attributes, nested at most MAX_XML_DEPTH deep; all the parts of
  one archive hold at most MAX_ARCHIVE_ELEMENTS elements (this bounds the work).
- HTML is read by a one-pass tokenizer here: html.parser is quadratic on unclosed constructs.
- Nothing recurses over the input: trees are walked with explicit stacks, so 100,000-deep
  nesting is as cheap as flat input; ``json`` does recurse, and its RecursionError is caught.
- PDF goes through poppler's pdftotext, found only in PATH's absolute folders (the working
  directory is an indexed folder and must never choose what runs), with a time limit, a CPU
  limit, a cap on its output, bound to die with the process that started it, and reading the
  file from an unnamed temporary copy on its stdin (nothing left behind by a crash).
"""

from __future__ import annotations

import codecs
import ctypes
import functools
import io
import json
import lzma
import os
import posixpath
import re
import resource
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html import unescape
from typing import IO, NamedTuple
from urllib.parse import unquote

import markup
from exceptions import FileSkipped, writable
from file_utils import decode_text


@dataclass(frozen=True)
class Heading:
    line: int  # 1-based line of the heading in Extracted.text
    level: int  # 1..6 (deeper levels clamp to 6)
    name: str  # the heading's text, one line, stripped


@dataclass(frozen=True)
class Extracted:
    title: str  # "" if none; at most MAX_TITLE_CHARS; one line
    text: str  # plain text, "\n" line ends only
    headings: tuple[Heading, ...]


#: Why a file of one of these formats is not indexed, besides file_utils.SKIP_REASONS ("binary"
#: for HTML that is not text, "too_large" for an archive past the guards or a text past its cap).
FORMAT_SKIP_REASONS = (
    "malformed",  # a corrupt archive, bad XML or JSON, a missing required part, a failing PDF
    "no_extractor",  # a PDF while pdftotext (poppler-utils) is not installed
)
MAX_TITLE_CHARS = 200
#: An archive with more members than this is refused without being opened (zipfile would build
#: an object per member first).
MAX_ARCHIVE_MEMBERS = 10_000
#: Bytes that all the parts read from one archive may unpack to.
MAX_UNPACKED_BYTES = 200 << 20
#: The parts read from one archive may unpack to RATIO_CHECK_BYTES whatever its size, and beyond
#: that to no more than this many times the archive's size: more is a zip bomb (text and XML
#: compress ten- or twentyfold, a run of zeros a thousandfold).
MAX_COMPRESSION_RATIO = 200
RATIO_CHECK_BYTES = 1 << 20
#: XML parts are fed to the parser in pieces of this many characters, and read a block (paragraph,
#: table row, shape) at a time; a block holding more elements and attributes than this is refused.
XML_CHUNK_CHARS = 1 << 16
MAX_BLOCK_ELEMENTS = 250_000
#: Elements open at once, in blocks or not: each is kept until it ends. Real documents nest a few
#: dozen deep (Word stops nesting tables at 64).
MAX_XML_DEPTH = 10_000
#: Elements in all the XML parts read from one archive (a thousand-page document holds about a
#: million): bounds the time spent on an archive of empty elements.
MAX_ARCHIVE_ELEMENTS = 2_000_000
#: A tag with more attributes than this is refused before the part is parsed: the parser builds
#: them all at once, a dict entry each (20 times the tag's size). Counted as the "=" between a "<"
#: and the next "<", so that one pass over the part finds it.
MAX_TAG_ATTRIBUTES = 10_000
_CROWDED_TAG = re.compile(rf"<(?:[^<=]*=){{{MAX_TAG_ATTRIBUTES}}}")
#: An ODF run of spaces (<text:s text:c="N"/>) is at most this long: N comes from the file.
MAX_SPACE_RUN = 100
#: The program that reads PDF, how long it may take, how much text it may print, and how much of
#: its error output is kept (the last lines say why it failed).
PDF_PROGRAM = "pdftotext"
PDF_TIMEOUT_SECONDS = 60
MAX_PDF_TEXT_BYTES = 64 << 20
MAX_PDF_ERROR_BYTES = 4096
NO_PDF_EXTRACTOR = "install poppler-utils (pdftotext) to index PDFs"

_LINE_BREAK = re.compile(r"\r\n?|\n")
#: Whitespace that one_line collapses; other spaces (U+3000 between CJK words) are text.
_SPACE_RUN = re.compile(r"[ \t\n\r\f\v]+")


# ---- the text being built ----------------------------------------------------------------------


def _one_line(text: str) -> str:
    return _SPACE_RUN.sub(" ", text).strip()


class _TextTooLarge(Exception):
    """The text being built passed its cap (extract says which file and which cap)."""


class _Limits(NamedTuple):
    """What a text being built may hold: characters (more is _TextTooLarge), and headings (more
    are text lines, not headings)."""

    chars: int
    headings: int


class _Lines:
    """Text built line by line, never two blank lines in a row, with the headings among its lines;
    _TextTooLarge once it holds more than ``limit.chars`` characters, and at most ``limit.headings``
    headings."""

    def __init__(self, limit: _Limits) -> None:
        self.lines: list[str] = []
        self.headings: list[Heading] = []
        self.limit = limit.chars
        self.most_headings = limit.headings
        self.size = 0  # characters held, line ends included

    def room(self) -> _Limits:
        """How many more characters and headings it may hold."""
        return _Limits(self.limit - self.size, self.most_headings - len(self.headings))

    def add_text(self, text: str) -> None:
        for line in _LINE_BREAK.split(text):
            if line.strip():
                self._append(line)
            else:
                self.add_blank()

    def add_blank(self) -> None:
        if self.lines and self.lines[-1]:
            self._append("")

    def _append(self, line: str) -> None:
        self._count(len(line) + 1)
        self.lines.append(line)

    def _count(self, characters: int) -> None:
        self.size += characters
        if self.size > self.limit:
            raise _TextTooLarge

    def add_heading(self, level: int, name: str, line: str = "") -> None:
        """Add a heading on a line of its own: its name, or ``line`` holding the name as it is written
        there (a Markdown "## Name")."""
        name = name.strip() if line else _one_line(name)
        if not name:
            self.add_text(line)
            return
        self._append(line.strip() or name)
        if len(self.headings) < self.most_headings:
            self.headings.append(Heading(len(self.lines), min(max(level, 1), 6), name))

    def add_document(self, part: Extracted) -> None:
        """Append another extraction (an e-book's chapter) after a blank line, its headings moved down."""
        if not part.text:
            return
        self.add_blank()
        self._count(len(part.text) + 1)
        offset = len(self.lines)
        self.lines.extend(part.text.split("\n"))
        room = self.most_headings - len(self.headings)
        self.headings.extend(Heading(h.line + offset, h.level, h.name) for h in part.headings[:max(room, 0)])

    def first_heading(self, level: int | None = None) -> str:
        return next((h.name for h in self.headings if level is None or h.level == level), "")

    def result(self, title: str) -> Extracted:
        while self.lines and not self.lines[-1]:
            self.lines.pop()
        return Extracted(_one_line(title)[:MAX_TITLE_CHARS].rstrip(), "\n".join(self.lines), tuple(self.headings))


# ---- HTML ----------------------------------------------------------------------------------------

#: Elements whose content is not shown text. <head> is not among them: what it holds gives no text
#: (title, meta, link, script, style), and dropping it would lose the page when </head> is omitted.
_DROPPED_TAGS = frozenset({"script", "style", "nav", "template", "noscript", "svg"})
#: Raw text: their content is not markup, and it runs to their end tag (else to the end of input,
#: where a browser hides it too).
_RAW_TEXT_TAGS = frozenset({"script", "style"})
_HEADING_LEVELS = {f"h{n}": n for n in range(1, 7)}
#: Blocks set off by a blank line; the other blocks start and end a line.
_PARAGRAPH_TAGS = frozenset({"p", "pre", "blockquote", "table", "hr", "figure"})
_LINE_TAGS = frozenset(
    "address article aside body caption center dd details dialog dir div dl dt fieldset figcaption"
    " footer form frame frameset header hgroup html legend li main menu ol option section summary"
    " tbody tfoot thead tr ul".split()
)
_CELL_TAGS = frozenset({"td", "th"})
#: A line's text is kept in pieces (a few characters between two inline tags), each an object
#: many times its size: every this many pieces are joined into one.
_LINE_PIECES = 1024
_HTML_SPACE = re.compile(r"[ \t\n\r\f\xa0]+")
#: The start of a start or end tag, to the end of its name; _tag_end finds where the tag ends.
_TAG_NAME = re.compile(r"<(/?)([a-zA-Z][^\t\n\f\r />]*)")
#: Where an attribute's quoted value starts: a quote right after "=" (and spaces).
_QUOTED_VALUE = re.compile(r"""=\s*(["'])""")
_COMMENT_END = re.compile(r"--!?>")
_RAW_TEXT_END = {tag: re.compile(rf"</{tag}[\t\n\f\r />]", re.I) for tag in (*_RAW_TEXT_TAGS, "title")}
#: A charset declared in the first bytes: <meta charset=...>, <meta http-equiv ... charset=...> or
#: an XML declaration's encoding.
_DECLARED_CHARSET = re.compile(rb"<(?:meta|\?xml)[^>]*?(?:charset|encoding)\s*=\s*[\"']?\s*([A-Za-z0-9._:-]+)", re.I)
_CHARSET_SNIFF_BYTES = 1024
#: Declared charsets that add nothing to decode_text's UTF-8 or its Windows-1252 fallback (which
#: HTML uses for the Latin-1 and ASCII labels too); HTML ignores a declared UTF-16 or UTF-32.
_FALLBACK_CHARSETS = frozenset({"iso8859-1", "ascii", "cp1252"})


class _Token(NamedTuple):
    kind: str  # "text", "start", "end"
    value: str  # the text, or the tag's name in lower case
    self_closing: bool = False


def _html_tokens(text: str) -> Iterator[_Token]:
    """Text (entities decoded) and tags of an HTML page, in one pass: comments, declarations and
    processing instructions are left out. html.parser.HTMLParser is not used because it takes
    quadratic time on unclosed constructs (240 KB of "<a b='" takes minutes on Python 3.11)."""
    position, end = 0, len(text)
    unclosed_from: dict[str, int] = {}  # no end tag for this raw text element from here on
    while position < end:
        start = text.find("<", position)
        if start < 0:
            start = end
        if start > position:
            yield _Token("text", unescape(text[position:start]))
        if start == end:
            return
        tag = _TAG_NAME.match(text, start)
        if tag:
            tag_end = _tag_end(text, tag.end())
            position = tag_end or end
            if tag_end is None:
                continue  # cut off by the end of input: dropped, as a browser does
            name = tag.group(2).lower()
            if tag.group(1):
                yield _Token("end", name)
                continue
            self_closing = text.startswith("/>", tag_end - 2)
            yield _Token("start", name, self_closing)
            if name in _RAW_TEXT_END and not self_closing:
                position = _raw_text_end(text, name, position, unclosed_from)
                raw = text[tag_end:position]
                yield _Token("text", raw if name in _RAW_TEXT_TAGS else unescape(raw))
        elif text.startswith("<!--", start):
            closing = _COMMENT_END.search(text, start + 2)  # "<!-->" is a whole comment
            position = closing.end() if closing else end
        elif text.startswith("<![CDATA[", start):  # XHTML: text as it is
            closing_at = text.find("]]>", start)
            position = closing_at + 3 if closing_at >= 0 else end
            yield _Token("text", text[start + 9:closing_at if closing_at >= 0 else end])
        elif text.startswith(("<!", "<?", "</"), start):  # a declaration or a bogus comment: to ">"
            closing_at = text.find(">", start + 2)
            position = closing_at + 1 if closing_at >= 0 else end
        else:
            yield _Token("text", "<")
            position = start + 1


def _tag_end(text: str, position: int) -> int | None:
    """Where a tag whose name ends at ``position`` ends (just after its ">"), None if the end of
    input cuts it off. A quoted attribute value may hold ">". Each step jumps to the next quoted
    value or ">" and never looks back, so a tag of millions of attributes takes one pass and no
    memory (a regex repeating a group over them keeps a backtracking record per attribute)."""
    closing = text.find(">", position)
    while closing >= 0:
        quoted = _QUOTED_VALUE.search(text, position, closing)
        if quoted is None:
            return closing + 1
        value_end = text.find(quoted.group(1), quoted.end())
        if value_end < 0:
            return None
        position = value_end + 1
        if closing < position:
            closing = text.find(">", position)
    return None


def _raw_text_end(text: str, name: str, start: int, unclosed_from: dict[str, int]) -> int:
    """Where the content of a script, style or title that starts at ``start`` ends. A title never
    closed ends at the next "<", so that it does not take the page with it. ``unclosed_from``
    remembers failed searches: many unclosed titles must not each search to the end."""
    closing = None if start >= unclosed_from.get(name, len(text) + 1) else _RAW_TEXT_END[name].search(text, start)
    if closing:
        return closing.start()
    unclosed_from[name] = min(start, unclosed_from.get(name, start))
    if name == "title":
        next_tag = text.find("<", start)
        return next_tag if next_tag >= 0 else len(text)
    return len(text)


class _HtmlText:
    """Shown text of an HTML page: blocks on lines of their own, headings on theirs."""

    def __init__(self, dropped: frozenset[str], limit: _Limits) -> None:
        self.out = _Lines(limit)
        self.dropped = dropped
        self.open_dropped: dict[str, int] = {}
        self.dropping = 0
        self.line: list[str] = []
        self.line_chunks: list[str] = []  # the line's earlier pieces, joined LINE_PIECES at a time
        self.line_has_text = False
        self.cell_pending = False  # a cell started on a line with text: " | " goes before its text
        self.pre = 0
        self.heading = 0  # the level of the heading being read
        self.title_parts: list[str] | None = None  # while inside the first <title>
        self.title = ""

    def read(self, text: str) -> Extracted:
        for token in _html_tokens(text):
            if token.kind == "text":
                self.data(token.value)
            elif token.kind == "end":
                self.end_tag(token.value)
            else:
                self.start_tag(token.value)
                if token.self_closing and token.value != "br":  # <br/> is one line break, not two
                    self.end_tag(token.value)
        self._end_title()
        self._break(blank=False, force=True)
        return self.out.result(self.title or self.out.first_heading(1))

    def unclosed(self) -> frozenset[str]:
        """Dropped elements still open at the end."""
        return frozenset(tag for tag, count in self.open_dropped.items() if count)

    def start_tag(self, tag: str) -> None:
        if tag in self.dropped:
            self.open_dropped[tag] = self.open_dropped.get(tag, 0) + 1
            self.dropping += 1
            return
        if self.dropping:
            return
        self._end_title()
        if tag == "title":
            if not self.title:
                self.title_parts = []
        elif tag in _HEADING_LEVELS:
            self._break(blank=True, force=True)
            self.heading = _HEADING_LEVELS[tag]
        elif tag == "br":
            self._line_break()
        elif tag in _CELL_TAGS:
            self.cell_pending = self.line_has_text and not self.heading
        elif tag in _PARAGRAPH_TAGS or tag in _LINE_TAGS:
            self._break(blank=tag in _PARAGRAPH_TAGS)
            self.pre += tag == "pre"

    def end_tag(self, tag: str) -> None:
        if tag in self.dropped:
            if self.open_dropped.get(tag):
                self.open_dropped[tag] -= 1
                self.dropping -= 1
            return
        if self.dropping:
            return
        if tag == "title":
            self._end_title()
        elif tag in _HEADING_LEVELS:
            self._break(blank=True, force=True)
        elif tag == "br":  # browsers read a stray </br> as <br>
            self._line_break()
        elif tag in _PARAGRAPH_TAGS or tag in _LINE_TAGS:
            self._break(blank=tag in _PARAGRAPH_TAGS)
            if tag == "pre" and self.pre:
                self.pre -= 1

    def data(self, text: str) -> None:
        if self.dropping:
            return
        if self.title_parts is not None:
            self.title_parts.append(text)
            return
        if not text.isspace():
            if self.cell_pending:  # not before an empty cell
                self.line.append(" | ")
                self.cell_pending = False
            self.line_has_text = True
        self.line.append(text)
        if len(self.line) >= _LINE_PIECES:
            self.line_chunks.append("".join(self.line))
            self.line.clear()

    def _end_title(self) -> None:
        if self.title_parts is not None:
            self.title = _one_line("".join(self.title_parts))
            self.title_parts = None

    def _line_break(self) -> None:
        if self.heading:
            self.line.append(" ")
        elif self.pre:
            self.line.append("\n")
        else:
            empty = not self.line_has_text
            self._end_line()
            if empty:  # <br><br> leaves a blank line
                self.out.add_blank()

    def _break(self, blank: bool, force: bool = False) -> None:
        # A block inside a heading ends it once it has text: a heading left open must not take
        # the rest of the page onto its line. Before that, the block is part of the heading.
        if self.heading and not self.line_has_text and not force:
            return
        self._end_line()
        if blank:
            self.out.add_blank()

    def _end_line(self) -> None:
        raw = "".join(self.line_chunks) + "".join(self.line)
        self.line.clear()
        self.line_chunks.clear()
        self.line_has_text = self.cell_pending = False
        if self.heading:
            self.out.add_blank()
            self.out.add_heading(self.heading, raw)
            self.heading = 0
        elif self.pre:
            for line in _LINE_BREAK.split(raw):
                self.out.add_text(line.rstrip())
        else:
            text = _HTML_SPACE.sub(" ", raw).strip(" ")
            if text:
                self.out.add_text(text)


def _html_text(text: str, limit: _Limits) -> Extracted:
    """The shown text of a decoded page. An element that is dropped but never closed (a <nav>
    without </nav>) would hide the rest of the page: then it is read again keeping those."""
    reader = _HtmlText(_DROPPED_TAGS, limit)
    extracted = reader.read(text)
    unclosed = reader.unclosed() - _RAW_TEXT_TAGS
    return _HtmlText(_DROPPED_TAGS - unclosed, limit).read(text) if unclosed else extracted


def _decode_html(name: str, data: bytes) -> str:
    """Decode a page: a byte-order mark or valid UTF-8 first (decode_text), else the charset the
    page declares, else Windows-1252. Raises FileSkipped(binary) for bytes that are not text."""
    text, _, fallback = decode_text(name, data)
    declared = _DECLARED_CHARSET.search(data, 0, _CHARSET_SNIFF_BYTES) if fallback else None
    if declared:
        try:
            codec = codecs.lookup(declared.group(1).decode("ascii")).name
            if codec not in _FALLBACK_CHARSETS and not codec.startswith("utf") and not codec.endswith("unicode_escape"):
                text = data.decode(codec, errors="replace")
        except (LookupError, UnicodeError):  # unknown, not a text encoding, or no "replace"
            pass
    return text


def _html(name: str, data: bytes, limit: _Limits) -> Extracted:
    return _html_text(_decode_html(name, data), limit)


# ---- Jupyter notebooks --------------------------------------------------------------------------


def _notebook(name: str, data: bytes, outputs: bool, limit: _Limits) -> Extracted:
    """Cells in order: markdown (its headings are headings, see markup.py), code, raw; outputs' text if asked."""
    try:
        notebook = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise FileSkipped(name, "malformed", f"not JSON: {str(exc)[:200]}") from None
    cells = _notebook_cells(notebook)
    if cells is None:
        raise FileSkipped(name, "malformed", "not a Jupyter notebook: no list of cells")
    out = _Lines(limit)
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type")
        source = _joined(cell.get("source", cell.get("input")))
        out.add_blank()
        if kind == "markdown":
            _add_markdown(out, source)
        elif kind == "heading" and isinstance(cell.get("level"), int):  # nbformat 3
            out.add_heading(cell["level"], source)
        else:
            out.add_text(source)
        if outputs and isinstance(cell.get("outputs"), list):
            for output in cell["outputs"]:
                out.add_blank()
                out.add_text(_output_text(output))
    metadata = notebook.get("metadata")
    fallback = metadata.get("title") if isinstance(metadata, dict) else None
    return out.result(out.first_heading(1) or (fallback if isinstance(fallback, str) else ""))


def _notebook_cells(notebook: object) -> list[object] | None:
    """The cells of nbformat 4 (``cells``) or 3 (``worksheets[].cells``), None if neither."""
    if not isinstance(notebook, dict):
        return None
    if isinstance(notebook.get("cells"), list):
        return notebook["cells"]
    worksheets = notebook.get("worksheets")
    if not isinstance(worksheets, list):
        return None
    sheets = [sheet["cells"] for sheet in worksheets if isinstance(sheet, dict) and isinstance(sheet.get("cells"), list)]
    return [cell for cells in sheets for cell in cells]


def _joined(value: object) -> str:
    """A notebook's multi-line string: one string, or a list of strings (other items are left out)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(item for item in value if isinstance(item, str))
    return ""


def _output_text(output: object) -> str:
    """The text of a stream or of a result's text/plain; never images or other data."""
    if not isinstance(output, dict):
        return ""
    kind = output.get("output_type")
    if kind == "stream":
        return _joined(output.get("text"))
    if kind in ("execute_result", "display_data", "pyout"):
        data = output.get("data")
        return _joined(data.get("text/plain")) if isinstance(data, dict) else _joined(output.get("text"))
    return ""


def _add_markdown(out: _Lines, source: str) -> None:
    """Add a markdown cell line by line, its headings (markup.markdown_heading_lines) as headings."""
    lines = _LINE_BREAK.split(source)
    room = out.room().headings
    headings = markup.markdown_heading_lines(lines, room) if room > 0 else {}
    for number, line in enumerate(lines):
        heading = headings.get(number)
        if heading:
            out.add_heading(*heading, line)
        else:
            out.add_text(line)


# ---- archives -------------------------------------------------------------------------------------

#: What zipfile, zlib, lzma and bz2 raise on a corrupt, truncated, encrypted or exotic archive.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,  # a compression method it does not have
    RuntimeError,  # an encrypted member ("password required")
    EOFError,
    OSError,
    ValueError,  # also UnicodeDecodeError of a member's name
    KeyError,
    IndexError,
    struct.error,
    zlib.error,
    lzma.LZMAError,
)
_CENTRAL_DIRECTORY_ENTRY = b"PK\x01\x02"


class _Archive:
    """A zip archive whose parts are read within the guards (see the module's docstring)."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        # Every member has a central directory entry starting with this signature, so the count
        # bounds the members before zipfile builds one object for each.
        if data.count(_CENTRAL_DIRECTORY_ENTRY) > MAX_ARCHIVE_MEMBERS:
            raise FileSkipped(name, "too_large", f"the archive holds more than {MAX_ARCHIVE_MEMBERS} files")
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            self.names = frozenset(self.zip.namelist())
        except _ZIP_ERRORS as exc:
            raise FileSkipped(name, "malformed", f"not a readable zip archive: {str(exc)[:200]}") from None
        # The ratio is taken over all that is read, not part by part: many parts just under a
        # per-part check, or one part listed many times, add up.
        self.ratio_bound = MAX_COMPRESSION_RATIO * len(data) < MAX_UNPACKED_BYTES
        self.budget = min(MAX_UNPACKED_BYTES, max(RATIO_CHECK_BYTES, MAX_COMPRESSION_RATIO * len(data)))
        self.elements_left = MAX_ARCHIVE_ELEMENTS

    def read(self, part: str) -> bytes:
        """The bytes of a part; FileSkipped if it is missing, corrupt, or past the guards."""
        if part not in self.names:
            raise FileSkipped(self.name, "malformed", f"{part} is missing")
        info = self.zip.getinfo(part)
        if info.file_size > self.budget:
            raise self._too_large()
        try:
            with self.zip.open(info) as member:
                data = member.read(self.budget + 1)  # the header's size is not trusted
        except _ZIP_ERRORS as exc:
            raise FileSkipped(self.name, "malformed", f"{part}: {str(exc)[:200]}") from None
        if len(data) > self.budget:
            raise self._too_large()
        self.budget -= len(data)
        return data

    def check_sizes(self, parts: list[str]) -> None:
        """Refuse now, before any is read, parts that the archive says add up to more than the
        budget (a part whose size it understates fails its checksum when read)."""
        if sum(self.zip.getinfo(part).file_size for part in parts if part in self.names) > self.budget:
            raise self._too_large()

    def xml_blocks(self, part: str, blocks: frozenset[str], required: bool = True) -> Iterator[ET.Element]:
        """The outermost elements of an XML part whose tag is in ``blocks``, in document order, each
        complete. The part is parsed as a stream that keeps nothing but the open elements (at most
        MAX_XML_DEPTH) and the block being read, so memory follows the largest block (at most
        MAX_BLOCK_ELEMENTS elements and attributes), not the part.
        Nothing if the part is missing and not ``required``."""
        if not required and part not in self.names:
            return
        text = self._xml_text(part)
        parser = ET.XMLPullParser(events=("start", "end"))
        open_elements: list[ET.Element] = []
        outside = 0  # how many of the open elements are outside blocks: the first ones
        held = 0  # elements and attributes in the block being read
        try:
            for events in _parse_chunks(parser, text):
                for event, element in events:
                    is_block = element.tag in blocks
                    if event == "end":
                        open_elements.pop()
                        outside = min(outside, len(open_elements))
                        if is_block and outside == len(open_elements):
                            yield element
                            held = 0
                        continue
                    self.elements_left -= 1
                    if outside == len(open_elements) and not is_block:
                        outside += 1
                    else:  # keys(), not attrib: that would give every element a dict
                        held += 1 + len(element.keys())
                    open_elements.append(element)
                    self._check_bounds(part, len(open_elements), held)
                # Finished elements outside blocks are dropped a chunk at a time, not one by one
                # (each removal would shift the rest of a long list of siblings).
                for depth, parent in enumerate(open_elements[:outside]):
                    del parent[:-1 if depth + 1 < len(open_elements) else None]
        except ET.ParseError as exc:
            raise FileSkipped(self.name, "malformed", f"{part}: bad XML: {exc}") from None

    def _check_bounds(self, part: str, depth: int, held: int) -> None:
        """FileSkipped(too_large) once the part nests too deep, holds too large a block, or the
        archive too many elements."""
        if held > MAX_BLOCK_ELEMENTS:
            raise FileSkipped(self.name, "too_large", f"{part} has a block of more than {MAX_BLOCK_ELEMENTS} elements and attributes")
        if depth > MAX_XML_DEPTH:
            raise FileSkipped(self.name, "too_large", f"{part} nests elements more than {MAX_XML_DEPTH} deep")
        if self.elements_left < 0:
            raise FileSkipped(self.name, "too_large", f"its XML parts hold more than {MAX_ARCHIVE_ELEMENTS} elements")

    def _xml_text(self, part: str) -> str:
        """A part decoded, refused if it declares a document type: the parts of these formats never
        need one, and its entities are how XML bombs and external entities get in. Decoded here,
        not by the parser, so that no other encoding can spell "<!DOCTYPE" past the check."""
        data = self.read(part)
        encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            raise FileSkipped(self.name, "malformed", f"{part} is not UTF-8 or UTF-16 text") from None
        if "<!DOCTYPE" in text or "<!ENTITY" in text:
            raise FileSkipped(self.name, "malformed", f"{part} declares a document type or entities (refused)")
        if _CROWDED_TAG.search(text):
            raise FileSkipped(self.name, "too_large", f"{part} has a tag of more than {MAX_TAG_ATTRIBUTES} attributes")
        return text

    def _too_large(self) -> FileSkipped:
        if self.ratio_bound:
            return FileSkipped(self.name, "too_large", f"it unpacks to more than {MAX_COMPRESSION_RATIO} times its size")
        return FileSkipped(self.name, "too_large", f"it unpacks to more than {MAX_UNPACKED_BYTES >> 20} MB")


def _parse_chunks(parser: ET.XMLPullParser, text: str) -> Iterator[Iterator[tuple[str, ET.Element]]]:
    """The parser's events, one iterator per piece of XML_CHUNK_CHARS fed to it."""
    for start in range(0, len(text), XML_CHUNK_CHARS):
        parser.feed(text[start:start + XML_CHUNK_CHARS])
        yield parser.read_events()
    parser.close()
    yield parser.read_events()


def _first_text(archive: _Archive, part: str, tags: frozenset[str]) -> str:
    """The text of the first element with one of these tags in an optional part, on one line."""
    found = next(archive.xml_blocks(part, tags, required=False), None)
    return _one_line("".join(found.itertext())) if found is not None else ""


def _descendants(root: ET.Element, stop: frozenset[str] = frozenset(), skip: frozenset[str] = frozenset()) -> Iterator[ET.Element]:
    """root's descendants in document order, without recursion. Elements in ``skip`` are left out
    with all they hold; those in ``stop`` are yielded but not entered."""
    stack = list(reversed(root))
    while stack:
        node = stack.pop()
        if node.tag in skip:
            continue
        yield node
        if node.tag not in stop:
            stack.extend(reversed(node))


def _outermost(root: ET.Element, tags: frozenset[str], skip: frozenset[str] = frozenset()) -> Iterator[ET.Element]:
    """The elements under root with a tag in ``tags`` that are not inside another such element."""
    return (node for node in _descendants(root, tags, skip) if node.tag in tags)


class _RunTags(NamedTuple):
    """The elements that make a paragraph's text in one OOXML vocabulary."""

    text: str
    tab: str
    breaks: frozenset[str]
    paragraph: str
    skip: frozenset[str]  # left out with their content: properties, fallbacks, deleted text


def _runs_text(root: ET.Element, tags: _RunTags) -> str:
    """The text of an OOXML paragraph or cell; paragraphs nested in it are set off by a space."""
    parts: list[str] = []
    for node in _descendants(root, skip=tags.skip):
        if node.tag == tags.text:
            parts.append(node.text or "")
        elif node.tag == tags.tab:
            parts.append("\t")
        elif node.tag in tags.breaks:
            parts.append("\n")
        elif node.tag == tags.paragraph and parts:
            parts.append(" ")
    return "".join(parts)


def _row_line(row: ET.Element, cell_tag: str, cell_text: Callable[[ET.Element], str]) -> str:
    """A table row as one line, its cells' text joined by " | " (a table in a cell goes into its text)."""
    cells = (_one_line(cell_text(cell)) for cell in _outermost(row, frozenset({cell_tag})))
    return " | ".join(cell for cell in cells if cell)


_DC_TITLE = frozenset({"{http://purl.org/dc/elements/1.1/}title"})


def _int(value: str | None) -> int | None:
    try:
        return int(value or "")
    except ValueError:  # also past int's limit on digits
        return None


# ---- docx -------------------------------------------------------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_DOCX_RUNS = _RunTags(
    text=_W + "t",
    tab=_W + "tab",
    breaks=frozenset({_W + "br", _W + "cr"}),
    paragraph=_W + "p",
    # properties hold tab stops (<w:tab>) that are not text; moved-from text is also in moved-to;
    # a fallback repeats its text box
    skip=frozenset({_W + "pPr", _W + "rPr", _W + "del", _W + "moveFrom", _MC_FALLBACK}),
)
#: Blocks of word/document.xml: paragraphs and table rows (a paragraph in a cell is in its row).
_DOCX_BLOCKS = frozenset({_W + "p", _W + "tr"})
_STYLE_HEADING = re.compile(r"heading\s*([1-9])", re.I)
#: The level recorded for the Title style: no heading, the document's title.
_TITLE_STYLE = 0
#: OOXML outline levels count from 0; 9 is body text.
_BODY_OUTLINE_LEVEL = 9


def _docx(name: str, data: bytes, limit: _Limits) -> Extracted:
    """Paragraphs and table rows of word/document.xml; headings from paragraph styles and outline
    levels; the title from docProps/core.xml, else the first Title paragraph, else the first heading."""
    archive = _Archive(name, data)
    styles = _docx_styles(archive)
    title = _first_text(archive, "docProps/core.xml", _DC_TITLE)
    out = _Lines(limit)
    for block in archive.xml_blocks("word/document.xml", _DOCX_BLOCKS):
        if block.tag == _W + "tr":
            out.add_text(_row_line(block, _W + "tc", _docx_text))
            continue
        text = _docx_text(block)
        level = _docx_level(block, styles)
        if level is None or level == _TITLE_STYLE:
            if level == _TITLE_STYLE and not title:  # the title, not a heading: it names no section
                title = text
            out.add_text(text)
            continue
        out.add_blank()
        out.add_heading(level, text)
    return out.result(title or out.first_heading())


def _docx_text(element: ET.Element) -> str:
    return _runs_text(element, _DOCX_RUNS)


def _docx_styles(archive: _Archive) -> dict[str, int]:
    """Paragraph style ids that make headings, with their level (_TITLE_STYLE for Title). Ids are
    localized ("berschrift2"); the names are not ("heading 2")."""
    levels: dict[str, int] = {}
    for style in archive.xml_blocks("word/styles.xml", frozenset({_W + "style"}), required=False):
        style_id = style.get(_W + "styleId")
        name = style.find(_W + "name")
        level = _style_level(name.get(_W + "val", "") if name is not None else "")
        if level is None:
            level = _outline_level(style.find(f"{_W}pPr/{_W}outlineLvl"))
        if style_id and level is not None:
            levels[style_id] = level
    return levels


def _style_level(name: str) -> int | None:
    """The heading level a style's name or id stands for ("heading 2", "Heading2", "Title")."""
    name = name.strip()
    if name.lower() == "title":
        return _TITLE_STYLE
    matched = _STYLE_HEADING.fullmatch(name)
    return int(matched.group(1)) if matched else None


def _outline_level(element: ET.Element | None) -> int | None:
    level = _int(element.get(_W + "val")) if element is not None else None
    return level + 1 if level is not None and 0 <= level < _BODY_OUTLINE_LEVEL else None


def _docx_level(paragraph: ET.Element, styles: dict[str, int]) -> int | None:
    """The heading level of a paragraph (_TITLE_STYLE for a Title), or None for body text."""
    properties = paragraph.find(_W + "pPr")
    if properties is None:
        return None
    direct = _outline_level(properties.find(_W + "outlineLvl"))
    if direct is not None:
        return direct
    style = properties.find(_W + "pStyle")
    style_id = style.get(_W + "val", "") if style is not None else ""
    return styles[style_id] if style_id in styles else _style_level(style_id)


# ---- odt --------------------------------------------------------------------------------------------

_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
#: Blocks of content.xml; tracked changes hold deleted paragraphs and are left out.
_ODT_BLOCKS = frozenset({_TEXT + "h", _TEXT + "p", _TABLE + "table-row", _TEXT + "tracked-changes"})
#: Inline elements that are not the text: comments, and a footnote's number.
_ODT_SKIPPED = frozenset({_OFFICE + "annotation", _TEXT + "note-citation"})


def _odt(name: str, data: bytes, limit: _Limits) -> Extracted:
    """Headings, paragraphs, lists and table rows of content.xml; the title from meta.xml."""
    archive = _Archive(name, data)
    title = _first_text(archive, "meta.xml", _DC_TITLE)
    out = _Lines(limit)
    for block in archive.xml_blocks("content.xml", _ODT_BLOCKS):
        if block.tag == _TEXT + "h":
            out.add_blank()
            out.add_heading(_int(block.get(_TEXT + "outline-level")) or 1, _odf_text(block))
        elif block.tag == _TEXT + "p":
            out.add_text(_odf_text(block))
        elif block.tag == _TABLE + "table-row":
            out.add_text(_row_line(block, _TABLE + "table-cell", _odf_text))
    return out.result(title or out.first_heading())


def _odf_text(root: ET.Element) -> str:
    """The text of an ODF paragraph or cell, mixed content in order; nested paragraphs (in frames,
    notes, cells) are set off by a space."""
    parts: list[str] = []
    stack: list[ET.Element | str] = [root]  # elements to enter, and the text after an element
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            parts.append(node)
            continue
        tag = node.tag
        if tag == _TEXT + "s":
            parts.append(" " * min(max(_int(node.get(_TEXT + "c")) or 1, 1), MAX_SPACE_RUN))
        elif tag == _TEXT + "tab":
            parts.append("\t")
        elif tag == _TEXT + "line-break":
            parts.append("\n")
        elif tag not in _ODT_SKIPPED:
            if tag in (_TEXT + "p", _TEXT + "h") and parts:
                parts.append(" ")
            parts.append(node.text or "")
            for child in reversed(node):
                stack.append(child.tail or "")
                stack.append(child)
    return "".join(parts)


# ---- pptx -------------------------------------------------------------------------------------------

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_RELATIONSHIP = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
_SLIDE_PART = re.compile(r"ppt/slides/slide([0-9]{1,9})\.xml")
_TITLE_PLACEHOLDERS = frozenset({"title", "ctrTitle"})
_PPTX_RUNS = _RunTags(
    text=_A + "t", tab=_A + "tab", breaks=frozenset({_A + "br"}), paragraph=_A + "p", skip=frozenset({_MC_FALLBACK})
)
#: Blocks of a slide: shapes with text, and frames holding tables.
_PPTX_SHAPES = frozenset({_P + "sp", _P + "graphicFrame"})
_PPTX_TEXT = frozenset({_A + "p", _A + "tr"})


def _pptx(name: str, data: bytes, limit: _Limits) -> Extracted:
    """Slides in presentation order, each under its title (a level-1 heading, "Slide N" if none)."""
    archive = _Archive(name, data)
    title = _first_text(archive, "docProps/core.xml", _DC_TITLE)
    out = _Lines(limit)
    slides = _slide_parts(archive)
    archive.check_sizes(slides)
    for number, part in enumerate(slides, 1):
        slide_title, lines = _slide(archive, part)
        if number == 1 and not title:
            title = slide_title
        out.add_blank()
        out.add_heading(1, slide_title or f"Slide {number}")
        for line in lines:
            out.add_text(line)
    return out.result(title)


def _slide_parts(archive: _Archive) -> list[str]:
    """The slides' part names in presentation order (sldIdLst through the relationships), each
    once however often it is listed; else by number."""
    relationships = archive.xml_blocks("ppt/_rels/presentation.xml.rels", frozenset({_RELATIONSHIP}), required=False)
    targets = {rel.get("Id"): rel.get("Target") or "" for rel in relationships}
    slide_ids = archive.xml_blocks("ppt/presentation.xml", frozenset({_P + "sldId"}), required=False)
    parts = [_part_path("ppt", targets[slide_id]) for slide_id in (s.get(_R_ID) for s in slide_ids) if slide_id in targets]
    if parts:
        return list(dict.fromkeys(parts))
    numbered = [found for found in map(_SLIDE_PART.fullmatch, archive.names) if found]
    return [found.group(0) for found in sorted(numbered, key=lambda found: int(found.group(1)))]


def _part_path(folder: str, target: str) -> str:
    """A relationship's or manifest's target as a part name: relative to folder unless absolute."""
    target = unquote(target.partition("#")[0])
    return posixpath.normpath(target if target.startswith("/") else posixpath.join(folder, target)).lstrip("/")


def _slide(archive: _Archive, part: str) -> tuple[str, list[str]]:
    """A slide's title, and the lines of its other shapes (paragraphs, table rows) in order."""
    title, lines = "", []
    for shape in archive.xml_blocks(part, _PPTX_SHAPES):
        if not title and _is_title_shape(shape):
            title = _one_line(_pptx_text(shape))
            continue
        for block in _outermost(shape, _PPTX_TEXT, _PPTX_RUNS.skip):
            lines.append(_row_line(block, _A + "tc", _pptx_text) if block.tag == _A + "tr" else _pptx_text(block))
    return title, lines


def _pptx_text(element: ET.Element) -> str:
    return _runs_text(element, _PPTX_RUNS)


def _is_title_shape(shape: ET.Element) -> bool:
    placeholder = shape.find(f"{_P}nvSpPr/{_P}nvPr/{_P}ph")
    return placeholder is not None and placeholder.get("type") in _TITLE_PLACEHOLDERS


# ---- epub -------------------------------------------------------------------------------------------

_OPF = "{http://www.idpf.org/2007/opf}"
_CONTAINER_ROOTFILE = frozenset({"{urn:oasis:names:tc:opendocument:xmlns:container}rootfile"})
_OPF_ITEMS = frozenset({_OPF + "item", _OPF + "itemref", *_DC_TITLE})
_HTML_MEDIA_TYPES = frozenset({"application/xhtml+xml", "text/html"})


def _epub(name: str, data: bytes, limit: _Limits) -> Extracted:
    """The spine's XHTML documents in reading order, each read as HTML; the title from the OPF."""
    archive = _Archive(name, data)
    rootfile = next(archive.xml_blocks("META-INF/container.xml", _CONTAINER_ROOTFILE), None)
    package = rootfile.get("full-path") if rootfile is not None else None
    if not package:
        raise FileSkipped(name, "malformed", "META-INF/container.xml names no package document")
    manifest: dict[str | None, ET.Element] = {}
    spine: list[str | None] = []
    title = ""
    for element in archive.xml_blocks(package, _OPF_ITEMS):
        if element.tag == _OPF + "item":
            manifest[element.get("id")] = element
        elif element.tag == _OPF + "itemref":
            spine.append(element.get("idref"))
        elif not title:
            title = _one_line(element.text or "")
    out = _Lines(limit)
    chapters = _chapter_parts(package, manifest, spine)
    archive.check_sizes(chapters)
    for part in chapters:
        out.add_document(_chapter(name, part, archive.read(part), out.room()))
    return out.result(title or out.first_heading())


def _chapter_parts(package: str, manifest: dict[str | None, ET.Element], spine: list[str | None]) -> list[str]:
    """The spine's XHTML parts in reading order, each once however often the spine lists it."""
    parts = []
    for idref in spine:
        item = manifest.get(idref)
        if item is not None and item.get("media-type") in _HTML_MEDIA_TYPES and item.get("href"):
            parts.append(_part_path(posixpath.dirname(package), item.get("href", "")))
    return list(dict.fromkeys(parts))


def _chapter(name: str, part: str, data: bytes, limit: _Limits) -> Extracted:
    try:
        return _html(name, data, limit)
    except FileSkipped as exc:  # "binary" would misname a broken chapter in a book
        raise FileSkipped(name, "malformed", f"{part}: {exc.detail}") from None


# ---- PDF --------------------------------------------------------------------------------------------


def pdf_extractor() -> str | None:
    """The path of pdftotext, looked up in PATH's absolute folders only; None if it is not there."""
    for folder in _absolute_path_folders():
        candidate = os.path.join(folder, PDF_PROGRAM)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _absolute_path_folders() -> list[str]:
    # "", "." and relative entries name the working directory, an indexed folder anyone may have
    # put a "pdftotext" into.
    return [folder for folder in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(folder)]


def _pdf(name: str, data: bytes, limit: _Limits) -> Extracted:
    """The text pdftotext prints, pages set off by a blank line; no headings; the first line is the title."""
    program = pdf_extractor()
    if program is None:
        raise FileSkipped(name, "no_extractor", NO_PDF_EXTRACTOR)
    try:
        status, output, errors = _pdftotext(name, program, data)
    except OSError as exc:  # no room for the copy, no process to be had
        raise FileSkipped(name, "no_extractor", f"cannot run {program}: {exc.strerror or exc}") from None
    if status != 0:
        lines = errors.decode("utf-8", "replace").strip().splitlines()
        reason = f": {lines[-1][:200]}" if lines else ""
        raise FileSkipped(name, "malformed", f"pdftotext failed (exit status {status}){reason}")
    out = _Lines(limit)
    out.add_text(output.decode("utf-8", "replace").replace("\f", "\n\n"))
    return out.result(next((line for line in out.lines if line), ""))


def _pdftotext(name: str, program: str, data: bytes) -> tuple[int, bytes, bytes]:
    """Run pdftotext on the bytes, handed to it as its stdin from a temporary file that has no name
    (O_TMPFILE; elsewhere unlinked as soon as it is made): no copy outlives the process, however
    it ends."""
    with tempfile.TemporaryFile(prefix="docsearch-") as copy:
        copy.write(data)
        copy.flush()
        copy.seek(0)
        return _run_pdftotext(name, [program, "-enc", "UTF-8", "-", "-"], copy)


def _run_pdftotext(name: str, argv: list[str], stdin: IO[bytes]) -> tuple[int, bytes, bytes]:
    """Run it without a shell or the daemon's environment, in its own session so that a kill
    reaches it, bound to die with this process and within its CPU limit even if left behind;
    return (status, output, last error bytes)."""
    deadline = time.monotonic() + PDF_TIMEOUT_SECONDS
    environment = {"PATH": os.pathsep.join(_absolute_path_folders()), "LC_ALL": "C.UTF-8"}
    with subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd="/",
        close_fds=True, start_new_session=True, preexec_fn=_child_bounds(),
    ) as process:
        try:
            output, errors = _read_bounded(name, process, deadline)
            return process.wait(max(deadline - time.monotonic(), 0)), output, errors
        except subprocess.TimeoutExpired:
            raise _pdf_timeout(name) from None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _child_bounds() -> Callable[[], None]:
    """What pdftotext's process runs before the program starts: its CPU time is capped (SIGXCPU,
    then SIGKILL a second later), it dumps no core, and on Linux it gets SIGKILL when this process
    dies, even by SIGKILL or the OOM killer. Everything is worked out here, before the fork: the
    child only makes system calls."""
    parent = os.getpid()
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]  # a limit above it could not be set
    soft_cpu, hard_cpu = (seconds if hard == resource.RLIM_INFINITY else min(seconds, hard) for seconds in (PDF_TIMEOUT_SECONDS, PDF_TIMEOUT_SECONDS + 1))
    prctl = _linux_prctl()

    def bound() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, hard_cpu))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # it died before the line above: no signal will come
                os.kill(os.getpid(), signal.SIGKILL)

    return bound


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@functools.lru_cache(maxsize=1)
def _linux_prctl() -> Callable[..., int] | None:
    """libc's prctl on Linux, None elsewhere or if it cannot be found."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _read_bounded(name: str, process: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes]:
    """Read the program's output until it closes it, at most MAX_PDF_TEXT_BYTES, until the deadline."""
    output = bytearray()
    errors = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        selector.register(process.stderr, selectors.EVENT_READ)  # type: ignore[arg-type]
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _pdf_timeout(name)
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.fileobj is process.stdout:
                    output += chunk
                    if len(output) > MAX_PDF_TEXT_BYTES:
                        raise FileSkipped(name, "too_large", f"its text is more than {MAX_PDF_TEXT_BYTES >> 20} MB")
                else:
                    errors = (errors + chunk)[-MAX_PDF_ERROR_BYTES:]
    return bytes(output), errors


def _pdf_timeout(name: str) -> FileSkipped:
    return FileSkipped(name, "malformed", f"pdftotext took longer than {PDF_TIMEOUT_SECONDS} s")


# ---- dispatch ---------------------------------------------------------------------------------------

#: Extension (lower case, with dot) -> what reads it. Notebooks take an option and are read apart.
_READERS: dict[str, Callable[[str, bytes, _Limits], Extracted]] = {
    ".html": _html,
    ".htm": _html,
    ".xhtml": _html,
    ".docx": _docx,
    ".odt": _odt,
    ".pptx": _pptx,
    ".epub": _epub,
    ".pdf": _pdf,
}
EXTRACTED_FORMATS: frozenset[str] = frozenset({*_READERS, ".ipynb"})


def extract(
    name: str, data: bytes, *, notebook_outputs: bool = False, max_text_chars: int | None = None, max_headings: int | None = None
) -> Extracted | None:
    """Title, text and headings of one file, or None when ``name``'s extension is not one of
    EXTRACTED_FORMATS (the caller reads it as text). Raises FileSkipped when the file cannot or
    must not be read; never another exception, whatever the bytes. A text of more than
    ``max_text_chars`` characters (the size limit for a file) is too_large, found out while the
    text is built; None: only the archives' and pdftotext's own bounds hold. Headings past the first
    ``max_headings`` (at most markup.MAX_HEADINGS) are not collected."""
    extension = os.path.splitext(name)[1].lower()
    reader = _READERS.get(extension)
    if reader is None and extension != ".ipynb":
        return None
    limit = _Limits(
        sys.maxsize if max_text_chars is None else max_text_chars,
        markup.MAX_HEADINGS if max_headings is None else min(max_headings, markup.MAX_HEADINGS),
    )
    try:
        extracted = _notebook(name, data, notebook_outputs, limit) if reader is None else reader(name, data, limit)
    except _TextTooLarge:
        raise FileSkipped(name, "too_large", f"its text is more than {round(limit.chars / (1 << 20), 3):g} MB, the size limit for a file (max_file_size_mb)") from None
    return _without_surrogates(extracted)


def _without_surrogates(extracted: Extracted) -> Extracted:
    """Lone surrogates (a notebook's "\\ud800", a page in a codec that makes them) shown as U+FFFD:
    they cannot be stored as UTF-8, and a file's text must not stop a scan."""
    return Extracted(
        writable(extracted.title), writable(extracted.text),
        tuple(Heading(h.line, h.level, writable(h.name)) for h in extracted.headings),
    )
