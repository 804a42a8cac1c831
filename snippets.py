"""What a reply shows of a section: the heading span that answers, its clean snippet, text safe to show.

answering_spans narrows each of the first hits to the heading span of its file (sections.heading_spans)
that holds the searched words best; clean_snippet takes the Markdown that is not text out of a snippet.

A snippet is cut by FTS5 (index_queries.snippets) from the section, or from a window of a long one
(snippet_window), with the matches between private-use markers; the markers become ``**`` once the
snippet's lines are located, and the file's own ``**`` is shown escaped.
"""

from __future__ import annotations

import bisect
import math
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence

import index_queries
from models import SearchHit, modified_time
from query import highlight_match
from sections import HeadingSpan, heading_spans

#: A snippet shows at most this many characters of the file: the run of them holding the most
#: different matched words (bounded_snippet), about two sentences. An agent pays for every one.
SNIPPET_MAX_CHARS = 160
SNIPPET_TOKENS = 32
#: FTS5 tokenizes a section twice to make its snippet (into a temporary index, then to cut the
#: snippet), ~0.2 ms per 1,000 words. A section longer than 2 * SNIPPET_WINDOW_CHARS is shown from a
#: window of that many characters: around the first place where the most distinct searched words
#: are found within SNIPPET_CLUSTER_CHARS (about the snippet's length), looking at the first
#: SNIPPET_MAX_FINDS places each word starts a word in the text. Only the words as typed are looked
#: for; a section where FTS5 matched other forms of them only ("indexes" for "indexing") is
#: tokenized whole, as is one whose window FTS5 does not match (a find was "cupboard" for "cup").
SNIPPET_WINDOW_CHARS = 800
SNIPPET_CLUSTER_CHARS = 200
SNIPPET_MAX_FINDS = 50
#: A window is placed by the first SNIPPET_MAX_WORDS different words searched (a question's first).
SNIPPET_MAX_WORDS = 16
ELLIPSIS = "…"
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"  # private-use markers, replaced by ** after locating lines
#: Between the parts of an identifier when a snippet is made from them (a control: no shown text holds one).
_PARTS_APART = "\x1f"
HIGHLIGHT = "**"
#: The file's own "**" (Markdown bold, Python's **kwargs) is shown escaped, so that a bare "**"
#: in a snippet always marks a match.
ESCAPED_HIGHLIGHT = r"\*\*"

_SPACE = re.compile(r"\s")
_WORDS = re.compile(r"[^\W_]+")


def section_snippets(conn: sqlite3.Connection, highlights: Sequence[Sequence[str]], sections: dict[int, dict]) -> dict[int, str]:
    """Each section's snippet, highlighting the first of ``highlights`` (lists of quoted words,
    phrases and prefix* terms) that it matches; from a window of a long section (see
    SNIPPET_WINDOW_CHARS)."""
    shown: dict[int, str] = {}
    for parts in highlights:
        bodies = {rowid: section["body"] for rowid, section in sections.items() if rowid not in shown}
        if not parts or not bodies:
            continue
        match = highlight_match(parts)
        words = list(dict.fromkeys(part.strip('*"').split(" ")[0].lower() for part in parts))[:SNIPPET_MAX_WORDS]
        windows = {rowid: snippet_window(body, words) for rowid, body in bodies.items()}
        while windows:
            texts = {
                rowid: (sections[rowid]["title"], sections[rowid]["heading"], bodies[rowid][start:end])
                for rowid, (start, end) in windows.items()
            }
            for rowid, text in index_queries.snippets(conn, match, texts, (_MARK_OPEN, _MARK_CLOSE), SNIPPET_TOKENS).items():
                shown[rowid] = _with_ellipses(text, windows[rowid], len(bodies[rowid]))
            # A window FTS5 does not match (its finds were other words) is tried again whole.
            windows = {
                rowid: (0, len(bodies[rowid]))
                for rowid, window in windows.items()
                if rowid not in shown and window != (0, len(bodies[rowid]))
            }
        # A text the words match only inside its identifiers (parseQueryString for "parse query"):
        # its snippet is made from it with the identifiers' parts apart.
        texts = {rowid: (sections[rowid]["title"], sections[rowid]["heading"], body) for rowid, body in bodies.items() if rowid not in shown}
        shown.update(index_queries.snippets(conn, match, texts, (_MARK_OPEN, _MARK_CLOSE), SNIPPET_TOKENS, _PARTS_APART))
    return shown


#: A hit is named by the heading whose own lines hold the query's words best (answering_spans),
#: among the MAX_FILE_SECTIONS sections of its file around its own (from MAX_FILE_SECTIONS // 2
#: before it): a word in the span's heading counts HEADING_WEIGHT times more. Only the first
#: MAX_ANSWERING_HITS hits are (~1-2 ms each).
HEADING_WEIGHT = 2.0
MAX_ANSWERING_HITS = 10
MAX_FILE_SECTIONS = 8


def answering_spans(conn: sqlite3.Connection, highlights: Sequence[Sequence[str]], sections: dict[int, dict]) -> dict[int, dict]:
    """``sections`` (loaded with their text, best first), the first MAX_ANSWERING_HITS each replaced
    by the heading span of its file (sections.HeadingSpan) that holds the words of the first of
    ``highlights`` it matches best (_span_scores): its heading, lines and text. A section is kept as
    it is when its file has no headings or no span matches."""
    words = list(dict.fromkeys(part for parts in highlights for part in parts))
    spans: dict[int, list[HeadingSpan]] = {}
    rows_of: dict[int, list[tuple[int, int, int, str, list]]] = {}
    for rowid, section in list(sections.items())[:MAX_ANSWERING_HITS] if words else ():
        if section.get("headless"):
            continue  # the file is this one section, with no heading: no span to name
        rows = index_queries.file_sections(conn, rowid, MAX_FILE_SECTIONS // 2, MAX_FILE_SECTIONS)
        found = heading_spans([(start, end, visible_text(body), _visible_outline(outline)) for _, start, end, body, outline in rows])
        if found:
            spans[rowid], rows_of[rowid] = found, rows
    # A prefix is expanded again by each lookup of the index (~0.4 ms each): its spans are all looked at.
    if spans and not any(word.endswith("*") for word in words):
        matched = index_queries.sections_matching(conn, words, [(rows[0][0], rows[-1][0]) for rows in rows_of.values()])
        looked_at = {rowid: _may_match(spans[rowid], rows, matched) for rowid, rows in rows_of.items()}
    else:
        looked_at = {rowid: [True] * len(found) for rowid, found in spans.items()}
    narrowed = dict(sections)
    for parts in highlights:
        if not parts or not spans:
            continue
        scores = _span_scores(conn, list(dict.fromkeys(parts)), spans, looked_at)
        for rowid in {rowid for rowid, _ in scores}:
            best = max(range(len(spans[rowid])), key=lambda number: (*scores.get((rowid, number), (0.0, 0.0)), -number))
            span = spans.pop(rowid)[best]
            narrowed[rowid] = {
                **sections[rowid], "heading": span.heading, "start_line": span.start_line, "end_line": span.end_line, "body": span.text,
            }
    return narrowed


def _may_match(spans: list[HeadingSpan], rows: Sequence[tuple[int, int, int, str, list]], matched: set[int]) -> list[bool]:
    """Whether each of a file's ``spans`` may hold a searched word, given the ``matched`` ids of its
    ``rows`` (index_queries.file_sections) the index found one in: a span inside one section that holds
    none holds none either. A span over several sections (a phrase may run across their boundary)
    or at the first row's start (its heading may lie before the rows read) may, whatever."""
    top = rows[0][1]
    may = []
    for span in spans:
        over = [rowid in matched for rowid, start, end, _, _ in rows if span.start_line <= end and span.end_line >= start]
        may.append(span.start_line <= top or len(over) != 1 or over[0])
    return may


def _span_scores(
    conn: sqlite3.Connection, words: list[str], spans: dict[int, list[HeadingSpan]], looked_at: dict[int, list[bool]]
) -> dict[tuple[int, int], tuple[float, float]]:
    """(score, share) of each span that ``words`` (FTS5 expressions) match, by (hit, span number).

    A word counts by its rarity among its file's spans, HEADING_WEIGHT times more in the span's
    heading words: its own heading's, and, when that holds a word the headings over it do not,
    theirs too. The words a page title shares with every section under it thus name none of them;
    a heading that adds a word of its own is named with its context (the deepest heading whose text
    matched). ``share``, for equal scores: how much of the span's own heading the words make."""
    keys = [(rowid, number) for rowid, found in spans.items() for number in range(len(found))]
    own_names = [spans[rowid][number].path[-1] if spans[rowid][number].path else "" for rowid, number in keys]
    over = list(dict.fromkeys(name for rowid, number in keys for name in spans[rowid][number].path[:-1]))
    texts = {
        index: (own_names[index], spans[rowid][number].text)
        for index, (rowid, number) in enumerate(keys) if looked_at[rowid][number]
    }
    texts.update({len(keys) + index: (name, "") for index, name in enumerate(over)})  # the headings over spans, alone
    in_text: dict[int, set[int]] = {}  # text -> the words it holds, in its heading or body
    in_heading: dict[int, set[int]] = {}  # text -> the words its heading holds
    rarities = []
    for word, (anywhere, headed) in enumerate(index_queries.matching_texts(conn, texts, words)):
        for index in anywhere:
            in_text.setdefault(index, set()).add(word)
        for index in headed:
            in_heading.setdefault(index, set()).add(word)
        holding = Counter(keys[index][0] for index in anywhere if index < len(keys))
        # A word in every span of its file tells none apart.
        rarities.append({rowid: math.log(1 + len(spans[rowid]) / count) for rowid, count in holding.items()})
    over_at = {name: len(keys) + index for index, name in enumerate(over)}
    scores: dict[tuple[int, int], tuple[float, float]] = {}
    for index, (rowid, number) in enumerate(keys):
        if index not in in_text:
            continue  # nothing in its text or its own heading: the headings over it alone name nothing
        own = in_heading.get(index, set())
        above = set().union(*(in_heading.get(over_at[name], ()) for name in spans[rowid][number].path[:-1]))
        heading = own | above if own - above else own
        found = heading | in_text.get(index, set())
        if found:
            score = sum(rarities[word].get(rowid, math.log(2)) * (1 + HEADING_WEIGHT * (word in heading)) for word in sorted(found))
            scores[(rowid, number)] = (score, len(own) / max(1, len(_WORDS.findall(own_names[index]))))
    return scores


def _visible_outline(outline: list[list]) -> list[tuple[int, int, str]]:
    """A stored outline with its names as a reply may show them (visible_text): looked for in all
    the names at once, since nearly every outline has nothing to replace."""
    if not _has_unshowable("".join(name for _, _, name in outline)):
        return [(line, level, name) for line, level, name in outline]
    return [(line, level, visible_text(name)) for line, level, name in outline]


def _with_ellipses(text: str, window: tuple[int, int], length: int) -> str:
    """FTS5 marks only the cuts it made; a window's own cuts are marked here."""
    start, end = window
    lead = ELLIPSIS if start > 0 and not text.startswith(ELLIPSIS) else ""
    tail = ELLIPSIS if end < length and not text.endswith(ELLIPSIS) else ""
    return lead + text + tail


def snippet_window(body: str, words: Sequence[str]) -> tuple[int, int]:
    """(start, end) of the part of ``body`` to make a snippet from: all of it if it is short or if
    none of ``words`` (lowercase) starts a word in it (see SNIPPET_WINDOW_CHARS)."""
    if len(body) <= 2 * SNIPPET_WINDOW_CHARS:
        return 0, len(body)
    lowered = body.lower()
    if len(lowered) != len(body):  # a few characters change length in lower(): offsets would differ
        return 0, len(body)
    finds: list[tuple[int, int]] = []
    for number, word in enumerate(words):
        at, found = lowered.find(word), 0
        while at >= 0 and found < SNIPPET_MAX_FINDS:
            if at == 0 or not lowered[at - 1].isalnum():
                finds.append((at, number))
                found += 1
            at = lowered.find(word, at + len(word))
    if not finds:
        return 0, len(body)
    finds.sort()
    # The finds within SNIPPET_CLUSTER_CHARS of each find, counted per word as the span slides.
    best, best_distinct, last = 0, 0, 0
    in_span: Counter[int] = Counter()
    for at, number in finds:
        while last < len(finds) and finds[last][0] < at + SNIPPET_CLUSTER_CHARS:
            in_span[finds[last][1]] += 1
            last += 1
        if len(in_span) > best_distinct:  # ties go to the earliest, as in FTS5's own choice
            best, best_distinct = at, len(in_span)
        in_span[number] -= 1
        if not in_span[number]:
            del in_span[number]
    start = min(max(0, best - (SNIPPET_WINDOW_CHARS - SNIPPET_CLUSTER_CHARS) // 2), len(body) - SNIPPET_WINDOW_CHARS)
    end = start + SNIPPET_WINDOW_CHARS
    # Cut at whitespace, so that no word is shown in part.
    space = _SPACE.search(body, start, best) if start > 0 else None
    start = space.end() if space else start
    last_space = max(body.rfind(" ", best, end), body.rfind("\n", best, end))
    end = last_space if end < len(body) and last_space > best else end
    return start, end


#: Characters a reply shows as U+FFFD: controls (but tab and line ends), which JSON would spell out
#: six times longer and which mean nothing to a reader, and the private-use characters that mark
#: matches here, so that a file's own copy of them never reads as a match. One for one: offsets hold.
_UNSHOWABLE = dict.fromkeys([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0), ord(_MARK_OPEN), ord(_MARK_CLOSE)], "\ufffd")
#: Finds one of them: most text has none, and a search is far cheaper than translate() over it.
_HAS_UNSHOWABLE = re.compile("[" + "".join(map(chr, _UNSHOWABLE)) + "]")
#: The ASCII ones, as bytes: in ASCII text (most text) deleting them is a C loop ~4x quicker than the search.
_UNSHOWABLE_ASCII = bytes(code for code in _UNSHOWABLE if code < 0x80)


def visible_text(text: str) -> str:
    """``text`` as a reply may show it (_UNSHOWABLE)."""
    return text.translate(_UNSHOWABLE) if _has_unshowable(text) else text


def _has_unshowable(text: str) -> bool:
    if text.isascii():
        encoded = text.encode("ascii")
        return len(encoded.translate(None, _UNSHOWABLE_ASCII)) != len(encoded)
    return _HAS_UNSHOWABLE.search(text) is not None


def showable(section: dict[str, object]) -> dict[str, object]:
    """A loaded section with its text, heading and title as a reply may show them (visible_text)."""
    return {key: visible_text(value) if key in ("body", "title", "heading") else value for key, value in section.items()}


def section_hit(section: dict, snippet: str, score: float) -> SearchHit:
    """The hit a reply shows for a loaded section: its ``snippet`` without the heading it starts
    with (without_heading), cut (bounded_snippet) and highlighted with ``**``, the lines that it
    shows, and its ``score``."""
    body: str = section["body"]
    start, end, at = _snippet_lines(body, snippet, section["start_line"], section["end_line"])
    # The file's own "**" left after cleaning (in code) is escaped before the cut, so the cut
    # bounds what is shown.
    text = " ".join(clean_snippet(snippet, _in_fence(body, at)).split()).replace(HIGHLIGHT, ESCAPED_HIGHLIGHT)
    text = bounded_snippet(without_heading(text, section["heading"]))
    text = text.replace(_MARK_OPEN, HIGHLIGHT).replace(_MARK_CLOSE, HIGHLIGHT)
    return {
        "path": section["path"],
        "title": section["title"],
        "heading": section["heading"],
        "snippet": text,
        "score": shown_score(score),
        "line_start": start,
        "line_end": end,
        "last_modified": modified_time(section["mtime_ns"]),
        "stale": False,
        "also_in": [],
        "also_in_count": 0,
    }


def shown_score(score: float) -> float:
    """A hit's score as a reply shows it: six decimals, and above 0 (bm25 of a match can round to 0)."""
    return round(max(score, 1e-6), 6)


def bare_hit(section: dict, score: float) -> SearchHit:
    """The hit for a loaded section without its text (search.searched_page's bare results): its
    heading and lines, no snippet."""
    shown = showable(section)
    return {
        "path": section["path"], "title": shown["title"], "heading": shown["heading"], "snippet": "", "score": shown_score(score),
        "line_start": section["start_line"], "line_end": section["end_line"], "last_modified": modified_time(section["mtime_ns"]),
        "stale": False, "also_in": [], "also_in_count": 0,
    }


_FENCE = re.compile(r"[^\S\n]*(?:`{3,}|~{3,})[^\n]*")
_FENCE_LINE = re.compile(r"^[^\S\n]*(?:`{3,}|~{3,})", re.M)
_FRONT_MATTER_LINES = re.compile(r"\A[^\S\n]*---[^\S\n]*\n.*?\n[^\S\n]*(?:---|\.\.\.)[^\S\n]*(?:\n|\Z)", re.S)
_SETEXT_OR_RULE = re.compile(r"[^\S\n]*(?:=+|-{3,}|\*{3,}|_{3,})[^\S\n]*")
_TABLE_DELIMITER = re.compile(r"[^\S\n]*\|?(?:[^\S\n]*:?-+:?[^\S\n]*\|)+(?:[^\S\n]*:?-+:?[^\S\n]*)?")
_LINE_LEAD = re.compile(r"[^\S\n]*(?:>[^\S\n]*)*(?:#{1,6}[^\S\n]+|[-*+][^\S\n]+)?")
_CLOSING_HASHES_AT_END = re.compile(r"[^\S\n]+#+[^\S\n]*$")
_HTML = re.compile(
    r"<!--.*?(?:-->|$)|</?(?:a|abbr|b|blockquote|br|code|dd|del|details|div|dl|dt|em|h[1-6]|hr|i|img|ins|kbd|li|ol|p|pre"
    r"|s|small|span|strong|sub|summary|sup|table|tbody|td|th|thead|tr|u|ul)(?:\s[^<>]*)?/?>",
    re.I | re.S,
)
_IMAGE_OR_LINK = re.compile(r"!?\[([^\[\]\n]*)\](?:\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"]*\")?\)|\[[^\[\]\n]*\])")
#: What is left of a link whose text the snippet's start cut off, or whose target its end cut off.
_LINK_TARGET = re.compile(r"\]\((?:[^()\s]|\([^()\s]*\))*(?:\)|$)")
_AUTOLINK = re.compile(r"<((?:https?|mailto|ftp):[^<>\s]*)>")
_CODE_SPAN = re.compile(r"(`+)[^`]*?\1|`+")
#: A link, its text `code` or not ([`Get-Item`](xref:...)), outside code spans.
_CODE_OR_LINK = re.compile(f"{_CODE_SPAN.pattern}|{_IMAGE_OR_LINK.pattern}")
#: A GitHub alert's marker line (> [!NOTE]), shown as NOTE:.
_ALERT = re.compile(r"\[!([A-Za-z]+)\][^\S\n]*")
#: Emphasis: a run of * or _ that opens before a non-space and closes after one; _ not inside a word.
_EMPHASIS = re.compile(
    r"(?<![\\*])(\*{1,3})(?=[^\s*])(.+?)(?<=[^\s\\*])\1(?!\*)"
    # _ next to a highlight marker is inside a word (http_get_url with its parts highlighted)
    f"|(?<![\\w\\\\{_MARK_OPEN}{_MARK_CLOSE}])(_{{1,3}})(?=[^\\s_])(.+?)(?<=[^\\s\\\\_])\\3(?![\\w_{_MARK_OPEN}{_MARK_CLOSE}])"
)
_TABLE_PIPE = re.compile(r"(?<!\\)\|")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def clean_snippet(text: str, in_fence: bool = False) -> str:
    """``text`` (a snippet's lines) without the Markdown that is not text: front matter, heading and
    list markers, setext underlines and rules, code fences, emphasis markers, link targets, HTML
    tags and comments, table pipes (cells are separated by "; "); an escaped character is the
    character. Code keeps its text as written: inside a fence (``in_fence``: the text starts in
    one), and inside `code spans`."""
    lead = ELLIPSIS if text.startswith(ELLIPSIS) else ""
    tail = ELLIPSIS if text.endswith(ELLIPSIS) and len(text) > len(lead) else ""
    text = _FRONT_MATTER_LINES.sub("", text[len(lead):len(text) - len(tail)], count=1)
    lines: list[str] = []
    for line in text.split("\n"):
        if _FENCE.fullmatch(line):
            in_fence = not in_fence
        elif in_fence:
            lines.append(line)
        elif not (_SETEXT_OR_RULE.fullmatch(line) or _TABLE_DELIMITER.fullmatch(line)):
            lines.append(_clean_line(line))
    return lead + "\n".join(lines) + tail


def _clean_line(line: str) -> str:
    """A line of Markdown outside code fences as text (see clean_snippet)."""
    heading = line.lstrip().startswith("#")
    line = line[_LINE_LEAD.match(line).end():]
    alert = _ALERT.fullmatch(line)
    if alert:
        return alert[1] + ":"
    if heading:
        line = _CLOSING_HASHES_AT_END.sub("", line)
    if line.strip().startswith("|") or line.rstrip().endswith("|"):
        cells = _TABLE_PIPE.split(line.strip().strip("|"))
        return "; ".join(cleaned for cleaned in (_clean_cell(cell) for cell in cells) if cleaned)
    return _clean_cell(line)


def _clean_cell(text: str) -> str:
    """Text outside code fences as text (see clean_snippet); `code spans` are left as they are.
    (Each expression is tried only on text holding the character it starts with: most text has none.)"""
    if "`" not in text and "[" not in text:
        return _clean_prose(text).strip()
    text = _CODE_OR_LINK.sub(lambda found: found[0] if found[2] is None else found[2], text)
    parts: list[str] = []
    at = 0
    for code in _CODE_SPAN.finditer(text):
        parts.append(_clean_prose(text[at:code.start()]))
        parts.append(code.group())
        at = code.end()
    parts.append(_clean_prose(text[at:]))
    return "".join(parts).strip()


def _clean_prose(text: str) -> str:
    if "<" in text:
        text = _HTML.sub(" ", _AUTOLINK.sub(r"\1", text))  # a tag may part words (<br>): a space
    if "](" in text:
        text = _LINK_TARGET.sub("", text)
    while "*" in text or "_" in text:
        unmarked = _EMPHASIS.sub(lambda found: found[2] if found[1] else found[4], text)
        if unmarked == text:
            break
        text = unmarked
    return _ESCAPE.sub(r"\1", text) if "\\" in text else text


def without_heading(text: str, heading: str) -> str:
    """``text`` (a clean snippet with its matches between the private markers) without the
    heading path's last parts that it starts with (a section's text starts with its heading line,
    which the hit's ``heading`` shows already), unless that leaves no match to show."""
    parts = heading.split(" > ") if heading else []
    for first in range(len(parts)):  # the section may start at any of the path's headings
        at = 0
        for part in parts[first:]:
            at = _after(text, part, at)
            if at < 0:
                break
        if at > 0:
            rest = text[at:].lstrip(" ")
            return rest if _MARK_OPEN in rest and text.count(_MARK_OPEN, 0, at) == text.count(_MARK_CLOSE, 0, at) else text
    return text


def _after(text: str, words: str, at: int) -> int:
    """Where ``text`` goes on after ``words`` (then a space or its end) read from ``at``, with
    markers anywhere between them; -1 if it does not say them there."""
    while text.startswith(" ", at):
        at += 1
    for char in words.strip():
        while text.startswith((_MARK_OPEN, _MARK_CLOSE), at):
            at += 1
        if not text.startswith(char, at):
            return -1
        at += 1
    while text.startswith(_MARK_CLOSE, at):
        at += 1
    return at if at == len(text) or text[at] == " " else -1


_MATCH = re.compile(f"{_MARK_OPEN}[^{_MARK_OPEN}{_MARK_CLOSE}]*(?:{_MARK_CLOSE}|$)")


def bounded_snippet(text: str) -> str:
    """``text`` (a snippet with its matches between the private markers, its spaces single) cut to
    SNIPPET_MAX_CHARS characters around the run of matches that holds the most different matched
    words (_densest), a third of the room left before it and the rest after, at spaces outside
    matches where there are any, with … at each cut; a match longer than that is cut and closed.
    FTS5 cuts snippets by tokens, and a token can be very long."""
    if len(text) <= SNIPPET_MAX_CHARS:
        return text
    matches = [(found.start(), found.end()) for found in _MATCH.finditer(text)]
    first, last = _densest(matches, text)
    if last - first >= SNIPPET_MAX_CHARS:
        start, end = first, first + SNIPPET_MAX_CHARS
    else:
        room = SNIPPET_MAX_CHARS - (last - first)
        start = max(0, min(first - room // 3, len(text) - SNIPPET_MAX_CHARS))
        end = start + SNIPPET_MAX_CHARS
        starts = [begin for begin, _ in matches]
        low, high = max(start - 1, 0), end + 1  # where a cut may be: a space outside the matches
        if start > 0:
            at = _space_outside(text, matches, starts, low, min(high, first))
            start = first if at is None else at + 1
        if end < len(text):
            at = _space_outside(text, matches, starts, max(low, last), high, last=True)
            end = end if at is None else at
            if _inside(matches, starts, end):  # no space to cut at, and a match there: end before it
                end = starts[bisect.bisect_right(starts, end) - 1]
    cut = text[start:end].strip(" " + ELLIPSIS)
    if cut.count(_MARK_OPEN) > cut.count(_MARK_CLOSE):
        cut += _MARK_CLOSE
    lead = ELLIPSIS if start > 0 or text.startswith(ELLIPSIS) else ""
    tail = ELLIPSIS if end < len(text) or text.endswith(ELLIPSIS) else ""
    return lead + cut + tail


def _densest(matches: list[tuple[int, int]], text: str) -> tuple[int, int]:
    """(start, end) of the run of ``matches`` within SNIPPET_MAX_CHARS (or of one longer match)
    holding the most different matched words, then the most matches, the first of equals; (0, 0)
    if there are none."""
    best, span = (0, 0), (0, 0)
    for number, (first, _) in enumerate(matches):
        run = [match for match in matches[number:] if match[1] - first <= SNIPPET_MAX_CHARS] or [matches[number]]
        found = (len({text[begin:end].strip(_MARK_OPEN + _MARK_CLOSE).lower() for begin, end in run}), len(run))
        if found > best:
            best, span = found, (first, run[-1][1])
    return span


def _space_outside(text: str, matches: list[tuple[int, int]], starts: list[int], low: int, high: int, last: bool = False) -> int | None:
    """The first (or ``last``) space of ``text[low:high]`` outside ``matches``, if any."""
    at = text.rfind(" ", low, high) if last else text.find(" ", low, high)
    while at >= 0 and _inside(matches, starts, at):
        at = text.rfind(" ", low, at) if last else text.find(" ", at + 1, high)
    return at if at >= 0 else None


def _inside(matches: list[tuple[int, int]], starts: list[int], at: int) -> bool:
    """Whether offset ``at`` is inside one of ``matches`` (their ``starts`` in order), past its start."""
    number = bisect.bisect_left(starts, at) - 1
    return number >= 0 and at < matches[number][1]


def _snippet_lines(body: str, snippet: str, first: int, last: int) -> tuple[int, int, int]:
    """Lines of the file that the snippet shows, and where in ``body`` it starts; the section's
    range and 0 if it cannot be located."""
    clean = snippet.replace(_MARK_OPEN, "").replace(_MARK_CLOSE, "").strip("…").strip()
    at = body.find(clean) if clean else -1
    if at < 0:
        return first, last, 0
    start = first + body.count("\n", 0, at)
    return start, min(last, start + clean.count("\n")), at


def _in_fence(body: str, at: int) -> bool:
    """Whether offset ``at`` of ``body`` is inside a fenced code block (an odd number of fence lines before it)."""
    return len(_FENCE_LINE.findall(body, 0, at)) % 2 == 1
