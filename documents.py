"""get_document: a file read from disk now as the index reads it, a part at a time (its outline if asked).

read_document reads a file the walk would index (with file_content, as a loader does), so its
lines and headings are the ones search results name; document_part picks the lines asked for (a
heading's section, a range, from a character on) within a size budget; document_reply checks the
arguments and says whether the index holds what the disk holds now.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import code_outline
import database
import index_queries
from exceptions import ArgumentError, FileSkipped, IndexUnavailableError
from file_utils import check_single_file, read_regular_file, reading_from, resolve_user_path, whitespace_twin
from formats import MAX_TITLE_CHARS
from indexer import file_filter
from models import DocumentReply, OutlineEntry, ServerConfig, modified_time
from sections import Content, file_content
from snippets import visible_text
from sources import indexed_folders

#: get_document returns at most this many characters at once, and lists at most
#: MAX_OUTLINE_HEADINGS headings of a file (a heading asked for is looked up among all the index
#: holds, markup.MAX_HEADINGS).
MAX_DOCUMENT_CHARS = 100_000
MAX_OUTLINE_HEADINGS = 1000
#: An unknown heading's error lists at most this many of the file's headings.
MAX_HEADINGS_LISTED = 40
#: A heading asked for is at most this long: a hit names one in at most 200 characters, the outline
#: by its path; looking a longer one up among 100,000 headings would only cost time.
MAX_HEADING_ARGUMENT_CHARS = 4_096
#: A path that is no file: its error names at most MAX_PATHS_SUGGESTED indexed paths it may have
#: meant, chosen among at most PATHS_COMPARED of each kind looked up (see _paths_meant).
MAX_PATHS_SUGGESTED = 5
PATHS_COMPARED = 200
#: How alike (difflib's ratio) a name must be to the name asked for to be suggested.
NEAR_NAME = 0.8


@dataclass(frozen=True)
class Document:
    """A file as the index reads it, from disk now."""

    path: str
    title: str
    lines: list[str]
    #: The headings read: the first MAX_OUTLINE_HEADINGS + 1, or all of them when one is looked up.
    outline: list[OutlineEntry]
    content_hash: str
    mtime_ns: int


def file_outline(content: Content, lines: list[str]) -> list[OutlineEntry]:
    """The headings of a file (as many as ``content`` was read with), each named by its path as
    search results name sections ("Install > Linux"), with the lines it spans (its subsections
    included; a definition of code without what closes the block holding it)."""
    total_lines = len(lines)
    padded, headings = content.padded, content.headings
    entries: list[OutlineEntry] = []
    path: list[tuple[int, str]] = []
    open_entries: list[OutlineEntry] = []
    line = counted = 0
    for at, level, heading in headings:
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
    if content.code:
        for entry in entries:
            entry["line_end"] = code_outline.definition_end(lines, entry["line_start"], entry["line_end"])
    return entries


def text_lines(text: str) -> list[str]:
    """The lines of ``text`` as the index numbers them (from 1; only \\n ends a line)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_document(config: ServerConfig, user_path: str, every_heading: bool = False) -> Document:
    """The file at ``user_path`` read from disk now, if the index would read it: the path rules of
    refresh_index (UnsafePathError), then the walk's (ArgumentError naming why not). Its outline
    holds the first MAX_OUTLINE_HEADINGS + 1 headings, or with ``every_heading`` all the index holds."""
    root = config.source_directory
    rel = resolve_user_path(root, user_path, config.index_output_directory)
    folders = indexed_folders(config, config.source)
    with reading_from(folders.get(""), folders):
        return _read_checked(config, rel, None if every_heading else MAX_OUTLINE_HEADINGS + 1)


def _read_checked(config: ServerConfig, rel: str, most: int | None) -> Document:
    """read_document of the source key ``rel``, once the path is known safe."""
    root = config.source_directory
    try:
        if check_single_file(root, rel, file_filter(config)) is None:
            twin = whitespace_twin(root, rel)
            key = config.key(config.source.name, rel)
            near = [] if twin else _paths_meant(config.db_path, key)
            meant = [_shown_key(config, path) for path in near if path != key]
            hint = f"; did you mean {twin!r} (the path given has white space around a name)?" if twin else ""
            hint = "; it was deleted since it was indexed" if key in near else hint
            hint += f"; indexed paths it may mean: {', '.join(meant)}" if meant else ""
            raise ArgumentError("path", f"{rel}: no such file in the source directory{hint}")
        raw = read_regular_file(root, rel, config.max_file_size_bytes)
        content = file_content(rel, raw.data, config.index_notebook_outputs, most, config.max_file_size_bytes)
    except FileSkipped as skipped:
        detail = f": {skipped.detail}" if skipped.detail else ""
        raise ArgumentError("path", f"{rel} is not a file the index reads ({skipped.reason}{detail}); nothing was returned") from None
    lines = text_lines(content.text)
    return Document(rel, visible_text(content.title), lines, file_outline(content, lines), raw.content_hash, raw.mtime_ns)


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
        inside = start_line is not None and entry["line_start"] <= start_line <= entry["line_end"]
        first = start_line if inside else entry["line_start"]
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
    max_chars: int = 20_000, refresh: Callable[[list[str]], bool] | None = None, start_char: int = 0, outline: bool = False,
) -> DocumentReply:
    """get_document: a file read from disk now (see read_document and document_part), with its
    outline if ``outline`` (it can be most of a reply: only when asked). If it differs from what the index holds, ``refresh([path])`` is asked to index it
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
    if heading is not None and len(heading) > MAX_HEADING_ARGUMENT_CHARS:
        raise ArgumentError("heading", f"must be at most {MAX_HEADING_ARGUMENT_CHARS:,} characters (a heading as a hit or the outline names it), got {len(heading):,}")
    document = read_document(config, user_path, every_heading=bool(heading))
    part = document_part(document, heading, start_line, end_line, max_chars, start_char)
    key = config.key(config.source.name, document.path)
    changed = _indexed_hash(config.db_path, key) != document.content_hash
    stale = changed and not (refresh is not None and refresh([key]))
    reply: DocumentReply = {
        **({"collection": config.source.name} if config.several else {}),  # type: ignore[typeddict-item]
        "path": document.path, "title": document.title, "text": visible_text(part.text), "line_start": part.first,
        "line_end": part.last, "total_lines": len(document.lines), "truncated": part.next_line is not None,
        "next_start_line": part.next_line, "next_start_char": part.next_char,
        "changed_since_indexed": changed, "stale": stale,
        "last_modified": modified_time(document.mtime_ns),
    }
    if outline:
        entries = outline_within(document.outline[:MAX_OUTLINE_HEADINGS], max_chars)
        reply.update(outline=entries, outline_truncated=len(entries) < len(document.outline))
    return reply


def outline_within(outline: list[OutlineEntry], max_chars: int) -> list[OutlineEntry]:
    """The first entries of ``outline`` that fit in ``max_chars`` characters of a reply (as compact
    JSON): the outline has the text's budget too, so a file of many headings cannot fill a reply."""
    used = 0
    for count, entry in enumerate(outline):
        used += len(json.dumps(entry, ensure_ascii=False, separators=(",", ":"))) + 1
        if used > max_chars:
            return outline[:count]
    return outline


def _paths_meant(db_path: Path, rel: str) -> list[str]:
    """Up to MAX_PATHS_SUGGESTED indexed paths that ``rel`` (no such file) may have meant: files of
    its name (any case) first, then of names close to it (difflib, NEAR_NAME), the nearest path
    first among each name's; looked for among at most PATHS_COMPARED of each kind that
    index_queries.paths_near finds."""
    try:
        candidates = index_queries.paths_near(database.reader(db_path), rel, PATHS_COMPARED)
    except IndexUnavailableError:
        return []
    by_name: dict[str, list[str]] = {}
    for path in sorted(candidates, key=lambda path: -difflib.SequenceMatcher(None, rel, path).ratio()):
        by_name.setdefault(path.rpartition("/")[2].casefold(), []).append(path)
    name = rel.rpartition("/")[2].casefold()
    close = difflib.get_close_matches(name, [other for other in by_name if other != name], MAX_PATHS_SUGGESTED, NEAR_NAME)
    return [path for near in [name, *close] for path in by_name.get(near, [])][:MAX_PATHS_SUGGESTED]


def _shown_key(config: ServerConfig, key: str) -> str:
    """An index key as replies name a file: its path, after ``collection:`` when there are several sources."""
    collection, path = config.split_key(key)
    return f"{collection}:{path}" if config.several else path


def _indexed_hash(db_path: Path, rel: str) -> str | None:
    """The content hash the index holds for the file ``rel``; None if it holds none (or there is no index yet)."""
    try:
        stored = index_queries.stored_file(database.reader(db_path), rel)
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
        raise ArgumentError("heading", f"{wanted[:200]!r} is not a heading of {document.path}; its headings: {listed}")
    chosen = found
    if nth is not None:
        if not 1 <= nth <= len(found):
            raise ArgumentError("heading", f"{document.path} has {len(found)} headings named {base[:200]!r}, not {nth}: {_occurrences(base, found)}")
        chosen = [found[nth - 1]]
    if line is not None:
        holding = [entry for entry in chosen if entry["line_start"] <= line <= entry["line_end"]]
        if holding:
            return holding[-1]  # of nested ones holding the line, the innermost
        # A search hit's lines may start at the headings over its own (a page title with no text
        # of its own goes with the span after it): only headings and blank lines lie between.
        headed = {entry["line_start"] for entry in document.outline}
        last = max(entry["line_start"] for entry in chosen)
        # The first line from ``line`` on that is neither a heading nor blank: found once, not again
        # for each heading of the name (a file of 100,000 of one name took minutes).
        stop = next((number for number in range(line, last) if number not in headed and document.lines[number - 1].strip()), last)
        below = [entry for entry in chosen if line < entry["line_start"] <= stop]
        if not below:
            raise ArgumentError("start_line", f"start_line {line} is in no section named {wanted[:200]!r}: {_occurrences(base, found)}")
        return below[0]
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
        asked = key(wanted)  # once: the argument may be long, the outline too
        found = [entry for entry in document.outline if key(entry["heading"]) == asked]
        if found:
            return found
    own = wanted.strip().casefold()
    return [entry for entry in document.outline if entry["heading"].rsplit(" > ", 1)[-1].casefold() == own]


def _occurrences(base: str, entries: list[OutlineEntry]) -> str:
    """Each of ``entries`` (headings of one name) with its lines and the name that asks for it."""
    listed = [
        f"{entry['heading'][:200]} at lines {entry['line_start']}-{entry['line_end']} ({base[:200]}#{number})"
        for number, entry in enumerate(entries[:MAX_HEADINGS_LISTED], 1)
    ]
    return "; ".join(listed) + (f"; ... ({len(entries)} in all)" if len(entries) > MAX_HEADINGS_LISTED else "")

