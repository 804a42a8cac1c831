"""What a reply shows of a section: its snippet, cut and highlighted, and text safe to show.

A snippet is cut by FTS5 (database.snippets) from the section, or from a window of a long one
(snippet_window), with the matches between private-use markers; the markers become ``**`` once the
snippet's lines are located, and the file's own ``**`` is shown escaped.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone

import database
from models import SearchHit
from query import highlight_match

#: A snippet shows at most this many characters of the file.
SNIPPET_MAX_CHARS = 500
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
HIGHLIGHT = "**"
#: The file's own "**" (Markdown bold, Python's **kwargs) is shown escaped, so that a bare "**"
#: in a snippet always marks a match.
ESCAPED_HIGHLIGHT = r"\*\*"

_SPACE = re.compile(r"\s")


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
            for rowid, text in database.snippets(conn, match, texts, (_MARK_OPEN, _MARK_CLOSE), SNIPPET_TOKENS).items():
                shown[rowid] = _with_ellipses(text, windows[rowid], len(bodies[rowid]))
            # A window FTS5 does not match (its finds were other words) is tried again whole.
            windows = {
                rowid: (0, len(bodies[rowid]))
                for rowid, window in windows.items()
                if rowid not in shown and window != (0, len(bodies[rowid]))
            }
    return shown


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


def visible_text(text: str) -> str:
    """``text`` as a reply may show it (_UNSHOWABLE)."""
    return text.translate(_UNSHOWABLE) if _HAS_UNSHOWABLE.search(text) else text


def showable(section: dict[str, object]) -> dict[str, object]:
    """A loaded section with its text, heading and title as a reply may show them (visible_text)."""
    return {key: visible_text(value) if key in ("body", "title", "heading") else value for key, value in section.items()}


def section_hit(section: dict, snippet: str, score: float) -> SearchHit:
    """The hit a reply shows for a loaded section: its ``snippet`` cut (bounded_snippet) and
    highlighted with ``**``, the lines that it shows, and its ``score``."""
    body: str = section["body"]
    start, end = _snippet_lines(body, snippet, section["start_line"], section["end_line"])
    # The file's own "**" is escaped before the cut, so the cut bounds what is shown.
    text = bounded_snippet(" ".join(snippet.split()).replace(HIGHLIGHT, ESCAPED_HIGHLIGHT))
    text = text.replace(_MARK_OPEN, HIGHLIGHT).replace(_MARK_CLOSE, HIGHLIGHT)
    modified = datetime.fromtimestamp(section["mtime_ns"] / 1e9, tz=timezone.utc).isoformat(timespec="seconds")
    return {
        "path": section["path"],
        "title": section["title"],
        "heading": section["heading"],
        "snippet": text,
        "score": round(max(score, 1e-6), 6),
        "line_start": start,
        "line_end": end,
        "last_modified": modified,
        "stale": False,
        "also_in": [],
        "also_in_count": 0,
    }


def bounded_snippet(text: str) -> str:
    """``text`` (a snippet with its matches between the private markers) cut to SNIPPET_MAX_CHARS
    characters around its first match, at spaces where there are any, with … at each cut; a
    match cut in two is closed. FTS5 cuts snippets by tokens, and a token can be very long."""
    if len(text) <= SNIPPET_MAX_CHARS:
        return text
    first = max(text.find(_MARK_OPEN), 0)
    # start <= first < end: the first match is always shown.
    start = max(0, min(first - SNIPPET_MAX_CHARS // 4, len(text) - SNIPPET_MAX_CHARS))
    end = start + SNIPPET_MAX_CHARS
    if start > 0:
        space = text.find(" ", start, first)
        start = space + 1 if space >= 0 else start
    if end < len(text):
        space = text.rfind(" ", first, end)
        end = space if space > first else end
    cut = text[start:end].strip(ELLIPSIS)
    if cut.count(_MARK_OPEN) > cut.count(_MARK_CLOSE):
        cut += _MARK_CLOSE
    lead = ELLIPSIS if start > 0 or text.startswith(ELLIPSIS) else ""
    tail = ELLIPSIS if end < len(text) or text.endswith(ELLIPSIS) else ""
    return lead + cut + tail


def _snippet_lines(body: str, snippet: str, first: int, last: int) -> tuple[int, int]:
    """Lines of the file that the snippet shows; the section's range if it cannot be located."""
    clean = snippet.replace(_MARK_OPEN, "").replace(_MARK_CLOSE, "").strip("…").strip()
    at = body.find(clean) if clean else -1
    if at < 0:
        return first, last
    start = first + body.count("\n", 0, at)
    return start, min(last, start + clean.count("\n"))
