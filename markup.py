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
