"""Headings of Markdown and reST text: one parser per markup, for plain files and notebook cells alike.

Part of the format layer (formats.py reads notebook cells with it). A heading is (boundary, level,
name): a boundary is the offset of the newline before the heading's line in ``padded``, the text
between two added newlines, so that every line sits between two newlines and the regexes jump from
newline to newline (Python code runs per heading, not per line).

Markdown follows CommonMark where the two parsers this replaces disagreed: a closing sequence of
``#`` is stripped even when nothing else is left (``# #`` is an empty heading, not one named "#"),
a heading with no text names nothing and is left out, a fence closes only on a line of fence
characters alone, a backtick fence's info string holds no backtick, and setext headings count in
notebook cells as in files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

#: A heading: (boundary, level, name).
HeadingAt = tuple[int, int, str]

MARKDOWN_EXTENSIONS = (".md", ".markdown", ".mdx")
#: Headings kept of one text: past them a file of millions of one-line headings would take many
#: times its size; its text is cut at blank lines and by size from the last one kept on.
MAX_HEADINGS = 100_000
RST_EXTENSIONS = (".rst", ".rest")

# The regexes run on the text between two added newlines. [^\S\n] is the whitespace that
# str.strip() removes, less the newline.
_HEADING_OR_FENCED_BLOCK = re.compile(
    r"\n(?=[ #`~])"  # rejects most lines at once, faster than trying each branch on them
    r" {0,3}(?:(#{1,6})[ \t]+([^\n]*)"  # an ATX heading
    # a fenced block, to a line holding only a fence of the same character at least as long; the
    # lookaheads make the whole run open it (a possessive quantifier, which 3.10 lacks), so that a
    # shorter fence cannot close it after backtracking; a backtick fence's info string holds no backtick
    r"|(`{3,}(?=[^`\n]*\n)|~{3,}(?!~))[^\n]*\n(?:[^\n]*\n)*? {0,3}\3(?:(?<=`)`*|(?<=~)~*)[^\S\n]*(?=\n)"
    r"|(?:`{3,}(?=[^`\n]*\n)|~{3})[\s\S]*)"  # a fenced block that is never closed: to the end
)
#: A closing sequence: after the opening one's spaces (nothing else left) or after spaces.
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
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

#: Tags kept of one front matter, and the longest tag kept (a longer one is left out).
MAX_TAGS = 100
MAX_TAG_CHARS = 100
#: Tokens of one front matter read for tags: past them a hostile front matter (megabytes of "[" or
#: "a,") is left unread, so Python code runs a bounded number of times; a hundred tags take hundreds.
_MAX_TAG_TOKENS = 10_000
#: A key whose value holds tags, in any case as for the title: "tags" (Jekyll, Hugo, Obsidian),
#: "tag" (Obsidian) and "keywords" (Hugo); YAML ends a key at a colon before a space or the line's end.
_TAG_KEY = re.compile(r"(?:[Tt][Aa][Gg][Ss]?|[Kk][Ee][Yy][Ww][Oo][Rr][Dd][Ss])[^\S\n]*:(?=\s|$)")
#: A line that starts with such a key, at any indent: a front matter without one has no tags.
_ANY_TAG_KEY = re.compile(r"\n *" + _TAG_KEY.pattern)
#: A block sequence's item: a dash before a space or the line's end.
_TAG_ITEM = re.compile(r"-(?:\s|$)")
#: A value's tokens: spaces (newlines too), a double-quoted and a single-quoted string closed on its
#: line, a flow indicator, a word (quotes and "#" inside it are its own). Each alternative is
#: linear: an escape or a doubled quote is the only repeat inside a string.
_TAG_TOKEN = re.compile(
    r"(\s+)"
    r'|"([^"\\\n]*(?:\\.[^"\\\n]*)*)"'
    r"|'([^'\n]*(?:''[^'\n]*)*)'"
    r"|([\[\]{},])"
    r"|([^\s\[\]{},]+)"
)
_SPACE, _DOUBLE_QUOTED, _SINGLE_QUOTED, _PUNCTUATION, _WORD = range(1, 6)
#: Ends a value's tokens: a quote never closed on its line, or the token budget spent.
_UNREAD = 0
#: A token: (kind, as written, its text: a quoted string's unquoted).
_Token = tuple[int, str, str]
#: The escapes of a double-quoted string that are read; others are kept as written.
_DOUBLE_QUOTED_ESCAPE = re.compile(r'\\(["\\/])')
#: What YAML does not start a plain scalar with: a collection, block scalar, anchor, alias, tag,
#: directive, reserved character, nested sequence, complex key or empty key.
_NOT_PLAIN_START = re.compile(r"[\[\]{},|>&*!%@`]|[-?:](?:\s|$)")
#: The plain scalars YAML reads as null, not as a string.
_YAML_NULLS = frozenset(("~", "null", "Null", "NULL"))
#: A mapping's "key: value" (YAML reads it as a mapping, or as an error, never as a string).
_MAPPING = re.compile(r":(?:\s|$)")
#: Characters no tag keeps: C0 and C1 controls, lone surrogates (SQLite takes no surrogate), and
#: U+FFFD (bytes that did not decode: no one typed that tag).
_NOT_IN_TAG = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffd]")


def text_headings(padded: str, name: str, most: int | None = None) -> tuple[list[HeadingAt], str]:
    """The headings of a Markdown or reST file (by ``name``), none for other files, and the title
    they give; the first ``most`` if given, at most MAX_HEADINGS."""
    most = MAX_HEADINGS if most is None else min(most, MAX_HEADINGS)
    lowered = name.lower()
    if lowered.endswith(MARKDOWN_EXTENSIONS):
        return markdown(padded, most)
    if lowered.endswith(RST_EXTENSIONS):
        return rst(padded, most)
    return [], ""


def markdown(padded: str, most: int | None = None) -> tuple[list[HeadingAt], str]:
    """The headings of a Markdown file after its front matter (see markdown_headings), and its
    title: the front matter's, else its first level-1 heading, else its first heading."""
    start, title = front_matter(padded)
    headings = markdown_headings(padded, start, most)
    if not title:
        title = next((heading for _, level, heading in headings if level == 1), headings[0][2] if headings else "")
    return headings, title


def markdown_headings(padded: str, start: int = 0, most: int | None = None) -> list[HeadingAt]:
    """Each heading from boundary ``start`` on, ATX (``# X``) and setext (``X`` over ``===`` or
    ``---``), outside fenced blocks, the first ``most`` if given."""
    headings: list[HeadingAt] = []
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
        if heading:
            headings.append((match.start(), len(hashes), heading))
    setext = _setext_headings(padded, start, fences, most)
    if setext:
        headings = sorted(headings + setext)[:most]
    return headings


def markdown_heading_lines(lines: list[str], most: int | None = None) -> dict[int, tuple[int, str]]:
    """The headings of a Markdown text given as its lines (a notebook cell): line index -> (level,
    name); the first ``most`` if given."""
    padded = "\n" + "\n".join(lines) + "\n"
    found: dict[int, tuple[int, str]] = {}
    line = counted = 0
    for at, level, name in markdown_headings(padded, most=most):
        line += padded.count("\n", counted, at)  # newlines before the boundary: the line's index
        counted = at
        found[line] = (level, name)
    return found


def _setext_headings(padded: str, start: int, fences: list[tuple[int, int]], most: int | None) -> list[HeadingAt]:
    """Headings underlined with ``===`` (level 1) or ``---`` (level 2): the underline follows a
    line of paragraph text (not a list item, quote, ATX heading or indented code) outside fences."""
    found: list[HeadingAt] = []
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


def front_matter(padded: str) -> tuple[int, str]:
    """The boundary after YAML front matter (0 without any) and its title field."""
    found = _FRONT_MATTER.match(padded)
    if not found:
        return 0, ""
    closed = found[1] is not None
    values = [value.strip() for value in _TITLE_FIELD.findall(padded, *found.span(1 if closed else 2))]
    title = next((value.strip("'\"") for value in reversed(values) if value), "")
    return (found.end() if closed else 0), title


def front_matter_tags(padded: str) -> tuple[str, ...]:
    """The tags of a file's YAML front matter, read without a YAML library; never raises.

    ``padded`` as for front_matter (a BOM after its first newline is passed over). Only a closed
    front matter counts, and in it only the least indented keys ``tags``, ``tag`` and ``keywords``
    (any case), merged in the order they come. A value is a flow sequence (``[a, "b, c"]``, over
    several lines too), a block sequence (``- a`` lines, any indent) or a string cut at commas
    (``a, b c``; a quoted piece is whole, but a value that is one quoted string is cut too). A
    sequence item is one tag; a collection, mapping, null, block scalar, anchor or alias is none. A
    piece whose words all start with "#" (``"#a #b"``, as Obsidian writes) is one tag per word;
    unquoted, `` #`` starts a YAML comment. Each tag: stripped, then one leading "#" and whitespace
    stripped, whitespace runs one space outside quotes; left out when empty, longer than
    MAX_TAG_CHARS or holding a control character or lone surrogate; the first spelling of tags equal
    but for case kept; at most MAX_TAGS, in order of first appearance. What cannot be read (tab
    indentation, a quote or "[" never closed, junk) ends its value, keeping the tags read before it.
    The work is linear in the front matter's size; at most _MAX_TAG_TOKENS tokens are read."""
    if padded.startswith("\n\ufeff"):
        padded = "\n" + padded[2:]
    found = _FRONT_MATTER.match(padded)
    if not found or found[1] is None or not _ANY_TAG_KEY.search(found[1]):
        return ()
    reader = _TagReader()
    lines = found[1].split("\n")[1:]  # the fields start with the newline of their first line
    indents = [_tag_line_indent(line) for line in lines]
    top = min((indent for indent in indents if indent is not None and indent >= 0), default=0)
    at = 0
    while at < len(lines) and not reader.full():
        key = _TAG_KEY.match(lines[at], top) if indents[at] == top else None
        at += 1
        if key is None:
            continue
        rest = lines[at - 1][key.end():]
        empty = rest.lstrip()[:1] in ("", "#")
        end = at  # the value goes on over deeper lines, and over items at the key's indent after an empty rest
        while end < len(lines) and (
            indents[end] is None or indents[end] > top or (empty and indents[end] == top and _TAG_ITEM.match(lines[end], top))
        ):
            end += 1
        first = next((line for indent, line in zip(indents[at:end], lines[at:end]) if indent is not None), "")
        if empty and _TAG_ITEM.match(first.lstrip(" ")):
            _read_block_sequence(reader, lines[at:end], indents[at:end])
        else:
            _read_tag_value(reader, "\n".join([rest, *lines[at:end]]))
        at = end
    return tuple(reader.tags)


def _tag_line_indent(line: str) -> int | None:
    """A front matter line's indent: None for a blank or comment line, -1 for one indented with a tab
    (which YAML refuses: it is no key and ends a value)."""
    text = line.lstrip(" ")
    if not text.strip() or text.startswith("#"):
        return None
    return -1 if text[0].isspace() else len(line) - len(text)


class _TagReader:
    """The tags of one front matter as they are read: in order, deduplicated, bounded."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.seen: set[str] = set()
        self.budget = _MAX_TAG_TOKENS

    def full(self) -> bool:
        return len(self.tags) >= MAX_TAGS or self.budget <= 0

    def add(self, text: str | None) -> None:
        """Keep the tag (or the tags, for words that all start with "#") of a scalar's text."""
        if text is None:
            return
        words = self.split(text, None) if text.lstrip().startswith("#") else []
        for tag in words if len(words) > 1 and all(word.startswith("#") for word in words) else [text]:
            tag = tag.strip()
            if tag.startswith("#"):
                tag = tag[1:].strip()
            if tag and len(tag) <= MAX_TAG_CHARS and not _NOT_IN_TAG.search(tag) and tag.casefold() not in self.seen and len(self.tags) < MAX_TAGS:
                self.seen.add(tag.casefold())
                self.tags.append(tag)

    def split(self, text: str, separator: str | None) -> list[str]:
        """``text`` cut at ``separator`` (None: whitespace), each piece charged to the budget; the rest
        of the text when it is spent is left out (no list of millions of pieces is made)."""
        pieces = text.split(separator, max(self.budget, 0))
        del pieces[max(self.budget, 0):]
        self.budget -= len(pieces)
        return pieces

    def tokens(self, text: str) -> Iterator[_Token]:
        """The tokens of a value, comments left out; the last is _UNREAD when a quote is never closed
        on its line or the budget is spent before the text ends."""
        at = 0
        while at < len(text):
            if self.budget <= 0:
                yield _UNREAD, "", ""
                return
            self.budget -= 1
            found = _TAG_TOKEN.match(text, at)
            assert found is not None and found.lastindex is not None  # every character starts an alternative
            kind, written = found.lastindex, found[0]
            if kind == _WORD and written[0] in "\"'":  # the string alternatives did not match: never closed
                yield _UNREAD, "", ""
                return
            if kind == _WORD and written[0] == "#" and (at == 0 or text[at - 1].isspace()):
                newline = text.find("\n", at)
                at = len(text) if newline < 0 else newline
                continue
            at = found.end()
            if kind == _DOUBLE_QUOTED:
                yield _DOUBLE_QUOTED, written, _DOUBLE_QUOTED_ESCAPE.sub(r"\1", found[2])
            elif kind == _SINGLE_QUOTED:
                yield _SINGLE_QUOTED, written, found[3].replace("''", "'")
            else:
                yield kind, written, written


def _read_tag_value(reader: _TagReader, text: str) -> None:
    """Read a key's value other than a block sequence: a flow sequence, or a string cut at commas."""
    tokens = reader.tokens(text)
    first = next((token for token in tokens if token[0] != _SPACE), None)
    if first is None or first[0] == _UNREAD:
        return
    if first[1] == "[":
        _read_flow_sequence(reader, tokens)
        return
    if _NOT_PLAIN_START.match(first[1]):  # left before its tokens are read
        return
    pieces: list[list[_Token]] = [[first]]
    for token in tokens:
        if token[0] == _UNREAD:
            break
        if token[1] == ",":
            pieces.append([])
        else:
            pieces[-1].append(token)
    else:  # the value was read to its end: its last piece is whole
        if len(pieces) == 1 and first[0] in (_DOUBLE_QUOTED, _SINGLE_QUOTED) and all(token[0] == _SPACE for token in pieces[0][1:]):
            for text_piece in reader.split(first[2], ","):
                reader.add(text_piece)
            return
        pieces.append([])
    for piece in pieces[:-1]:  # the last piece is unfinished
        reader.add(_scalar(piece, node=False))


def _read_flow_sequence(reader: _TagReader, tokens: Iterator[_Token]) -> None:
    """Read the items of a flow sequence whose "[" is read, to its "]": an item holding a collection
    is left out, and so is one never ended by "," or "]"."""
    piece: list[_Token] = []
    depth = 0  # of collections open inside the item
    nested = False
    for token in tokens:
        kind, written, _ = token
        if kind == _UNREAD:
            return
        if kind != _PUNCTUATION:
            if not depth:
                piece.append(token)
        elif written in "[{":
            depth += 1
            nested = True
        elif depth:
            depth -= written in "]}"
        else:
            if not nested:
                reader.add(_scalar(piece, node=True))
            if written != ",":
                return
            piece, nested = [], False


def _read_block_sequence(reader: _TagReader, lines: list[str], indents: list[int | None]) -> None:
    """Read the items of a block sequence, each a tag: the lines opening with "- " at most as deep
    as its first (deeper lines continue an item or nest a collection: left out)."""
    deepest = next(indent for indent in indents if indent is not None)
    for line, indent in zip(lines, indents):
        item = _TAG_ITEM.match(line, indent) if indent is not None and indent <= deepest else None
        if item is None:
            continue
        if reader.full():
            return
        text = line[item.end():].lstrip()
        if _NOT_PLAIN_START.match(text):  # a collection or junk: left before its tokens are read
            continue
        tokens = list(reader.tokens(text))
        if not any(kind == _UNREAD for kind, _, _ in tokens):
            reader.add(_scalar(tokens, node=True))


def _scalar(piece: list[_Token], node: bool) -> str | None:
    """The text of a scalar's tokens: a lone quoted string's, else as written with each run of
    whitespace one space; None when empty, for a mapping, or, when ``node`` (the piece opens a YAML
    node), when it opens with what YAML opens no plain scalar with."""
    words = [token for token in piece if token[0] != _SPACE]
    if not words:
        return None
    if len(words) == 1 and words[0][0] in (_DOUBLE_QUOTED, _SINGLE_QUOTED):
        return words[0][2]
    if node and _NOT_PLAIN_START.match(words[0][1]):
        return None
    text = "".join(" " if kind == _SPACE else written for kind, written, _ in piece)
    return None if _MAPPING.search(text) or text.strip() in _YAML_NULLS else text


def rst(padded: str, most: int | None = None) -> tuple[list[HeadingAt], str]:
    """The headings of a reST text (a line over an underline at least as long, maybe overlined:
    each style a level, in the order they appear), the first ``most`` if given; and the title."""
    headings: list[HeadingAt] = []
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
