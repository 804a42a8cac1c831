"""Which files a search may return: its path, extension and date filters, read and applied.

A path filter is a glob relative to the source (read_filters says how it reads); it runs as a prefix
or a GLOB inside SQLite first and as a regular expression on the paths that pass. A filter that
lets no file through only because of case gets a hint naming the spellings that would
(case_hint). search_scope adds the query's -exclusions.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

import index_queries
from exceptions import ArgumentError
from file_utils import has_surrogates
from query import MatchPlan


@dataclass(frozen=True)
class Filters:
    """Which files a search may return, as read_filters makes it from the caller's arguments.

    ``prefix``: every path starts with it (read from the index on paths). ``glob``: an SQLite GLOB
    that every path matches, looser than ``pattern`` (its * also crosses /), run inside SQLite
    first; ``pattern``: the exact rule, run in Python on the paths the GLOB let through.
    ``extensions``: lowercase, with their dot. ``modified``: mtime in ns, from (inclusive) and until
    (exclusive). ``path``: the path filter these were read from (see _path_text), for messages."""

    prefix: str = ""
    glob: str | None = None
    pattern: re.Pattern[str] | None = None
    extensions: tuple[str, ...] = ()
    modified: tuple[int | None, int | None] = (None, None)
    path: str | None = None
    #: Files must hold every one of these front matter tags (any case).
    tags: tuple[str, ...] = ()
    #: With several sources: (prefix, glob, pattern) per source searched, a path passing any one.
    alternatives: tuple[tuple[str, str | None, re.Pattern[str] | None], ...] = ()
    #: With several sources: the key prefixes of those searched (``path`` is relative to each).
    within: tuple[str, ...] = ()

    @property
    def narrows(self) -> bool:
        return self != NO_FILTERS


NO_FILTERS = Filters()
MAX_PATH_PATTERN_CHARS = 1024
MAX_EXTENSIONS = 50
MAX_TAGS = 20
MAX_TAG_CHARS = 100
#: A * matches within one folder or file name, and ** any number of folders. A regular expression
#: tries every split of a name among its *s, and every split of a path among its **s: bounded
#: here, a glob costs at most about (path length) x (name length)^2 steps per path, never the
#: exponential time a hostile pattern could take over a deep hostile tree.
MAX_STARS_PER_SEGMENT = 2
MAX_FOLDER_SPANS = 1
_EXTENSION = re.compile(r"\.[^\s/\\*?\[\]]{1,32}")


def read_filters(
    path: str | None = None, extensions: Sequence[str] | None = None, modified_after: str | None = None, modified_before: str | None = None,
    under: Sequence[str] | None = None, tags: Sequence[str] | None = None,
) -> Filters:
    """The Filters of a search's arguments; ArgumentError names the one that is wrong.

    ``path``: a glob relative to the source, matched against the whole path: ``*`` and ``?`` within
    one segment, ``**`` any number of segments (none too), ``[abc]`` one of those characters. Without
    any of them it is a folder or a file: ``guides/`` and ``guides`` hold guides/install.md.
    ``extensions``: ".md" or "md", any case. Dates: ISO 8601, a date or a date and time; without a
    timezone, UTC. Paths are compared in their case (see case_hint). ``under``: with several
    sources, the key prefixes of those searched (see ServerConfig.key_prefix); the path filter is
    relative to each."""
    text = _path_text(path) if path is not None else None
    modified = (_instant("modified_after", modified_after), _instant("modified_before", modified_before))
    if under is not None and len(under) == 1:  # one source's files: its keys' prefix, then the path filter
        prefix, glob, pattern = _path_filter(under[0] + (text or ""), path or under[0])
    elif under:  # each source's: its keys' prefix, then the path filter
        alternatives = tuple(_path_filter(each + (text or ""), path or each) for each in under)
        return Filters(extensions=_extensions(extensions), modified=modified, path=text or None, tags=_tags(tags),
                       alternatives=alternatives, within=tuple(under))
    else:
        prefix, glob, pattern = _path_filter(text, path) if text else ("", None, None)
    return Filters(prefix, glob, pattern, _extensions(extensions), modified, text or None, _tags(tags), within=tuple(under or ()))


def _tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    """The tags a file must hold, checked: a list of names, a leading # dropped."""
    if tags is None:
        return ()
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags):
        raise ArgumentError("tags", f'must be a list of tags, e.g. ["project-x"], got {tags!r}'[:300])
    if len(tags) > MAX_TAGS:
        raise ArgumentError("tags", f"at most {MAX_TAGS} tags, got {len(tags)}")
    kept = tuple(dict.fromkeys(tag.strip().removeprefix("#").strip() for tag in tags))
    if any(not tag or len(tag) > MAX_TAG_CHARS or "\x00" in tag or has_surrogates(tag) for tag in kept):
        raise ArgumentError("tags", f"each tag must be 1 to {MAX_TAG_CHARS} characters of text, got {list(tags)!r}"[:300])
    return kept


def _path_text(path: str) -> str:
    """The path filter ``path`` checked, with / for \\, and without spaces around or "." segments
    ("./docs", "docs/." and "docs/./" are docs); "" for the whole source."""
    if not isinstance(path, str):
        raise ArgumentError("path", f"must be a string, got {type(path).__name__}")
    text = path.strip().replace("\\", "/")
    if len(text) > MAX_PATH_PATTERN_CHARS:
        raise ArgumentError("path", f"is longer than {MAX_PATH_PATTERN_CHARS} characters")
    if "\x00" in text:
        raise ArgumentError("path", "contains a NUL byte")
    if has_surrogates(text):
        raise ArgumentError("path", "is not valid Unicode (a lone surrogate)")
    if text.startswith("/"):
        raise ArgumentError("path", f"{path!r} is absolute: give a glob relative to the source directory, e.g. 'guides/**/*.md'")
    segments = text.split("/")
    if ".." in segments:
        raise ArgumentError("path", f"{path!r}: '..' is not allowed; the filter is relative to the source directory")
    if "." in segments:  # "." is the folder it is in: "docs/." and "docs/./" are the folder docs, "." the source
        folder = segments[-1] in (".", "")
        text = "/".join(segment for segment in segments if segment != ".")
        text += "/" if folder and text and not text.endswith("/") else ""
    return text if text.strip("/") else ""


def _path_filter(text: str, path: str) -> tuple[str, str | None, re.Pattern[str] | None]:
    """(prefix, glob, pattern) of Filters for the path filter ``text`` (see _path_text), which
    the caller gave as ``path``."""
    wild = _WILDCARD.search(text)
    if wild is not None and text.endswith("/"):
        text += "**"  # a glob of folders ("docs/*/", "docs/*/."): the files under them
    segments = text.split("/")
    if wild is None:
        folder = text.rstrip("/")
        return (folder + "/", None, None) if text.endswith("/") else (folder, None, re.compile(_path_regex(text), re.S))
    for segment in segments:
        if segment != "**" and len(re.findall(r"\*+", segment)) > MAX_STARS_PER_SEGMENT:
            raise ArgumentError("path", f"{path!r}: at most {MAX_STARS_PER_SEGMENT} * in one folder or file name")
    spans = [segment for segment, _ in itertools.groupby(segments[:-1]) if segment == "**"]  # a last ** costs nothing
    if len(spans) > MAX_FOLDER_SPANS:
        raise ArgumentError("path", f"{path!r}: at most {MAX_FOLDER_SPANS} ** before the last folder")
    try:
        pattern = re.compile(_path_regex(text), re.S)
    except re.error as exc:
        raise ArgumentError("path", f"{path!r} is not a valid glob: {exc}") from None
    loose = None if "[" in text else re.sub(r"\*+/?", "*", text)
    if _GLOB_SAYS_IT.fullmatch(text):
        return text[:wild.start()], loose, None  # SQLite's GLOB alone is exact, and runs in C
    return text[:wild.start()], loose, pattern


#: Globs that SQLite's GLOB (whose * crosses /) reads exactly as _glob_regex does once ** and */
#: become *: a folder and all under it (guides/**), or all under it ending in a name's last
#: characters (**/*.md, guides/**/*.md).
_GLOB_SAYS_IT = re.compile(r"[^*?\[]*\*\*(?:/\*[^*?\[/]*)?")


#: What makes a path filter a glob rather than a folder or a file.
_WILDCARD = re.compile(r"[*?\[]")


def _path_regex(text: str, grouped: bool = False) -> str:
    """A regular expression for the path filter ``text`` (see read_filters): a glob, or a folder or
    file. ``grouped``: each piece that matches by case is a group (see _segment_pieces)."""
    if _WILDCARD.search(text) is None:
        return _glob_regex(text.rstrip("/").split("/"), grouped) + ("/.*" if text.endswith("/") else "(?:/.*)?")
    return _glob_regex(text.split("/"), grouped)


def _glob_regex(segments: list[str], grouped: bool = False) -> str:
    """A regular expression for a glob split at its slashes (see read_filters)."""
    parts: list[str] = []
    for number, segment in enumerate(segments):
        last = number == len(segments) - 1
        if segment == "**":
            if parts and parts[-1] == "(?:[^/]*/)*":
                parts.pop()  # **/** is **
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        pieces = "".join(f"({regex})" if grouped and cased else regex for _, regex, cased in _segment_pieces(segment))
        parts.append(pieces + ("" if last else "/"))
    return "".join(parts)


def _segment_pieces(segment: str) -> Iterator[tuple[str, str, bool]]:
    """A folder or file name of a glob, piece by piece: its text, its regular expression, and
    whether what it matches depends on case (a character, or a [class])."""
    at = 0
    while at < len(segment):
        char = segment[at]
        if char == "*":
            start = at
            while at + 1 < len(segment) and segment[at + 1] == "*":
                at += 1
            yield segment[start:at + 1], "[^/]*", False
        elif char == "?":
            yield char, "[^/]", False
        elif char == "[" and "]" in segment[at + 2:]:
            end = segment.index("]", at + 2)
            inner = segment[at + 1:end]
            negated = inner[:1] in ("!", "^")
            body = re.sub(r"([\\\]\[^])", r"\\\1", inner[1:] if negated else inner)
            yield segment[at:end + 1], f"[^/{body}]" if negated else f"(?!/)[{body}]", True  # a range such as [--0] holds "/"
            at = end
        else:
            yield char, re.escape(char), True
        at += 1


#: A path filter that lets no file through is tried on the files again ignoring case, up to this
#: many files that it then lets through; the reply names at most MAX_CASE_HINTS spellings of it.
CASE_PROBE_FILES = 50
MAX_CASE_HINTS = 3


def case_hint(conn: sqlite3.Connection, filters: Filters) -> str | None:
    """For filters that let no file through: if their path filter would, ignoring case, a warning
    naming its spellings that do. Paths are compared in their case, as the file system does
    (docs/ and Docs/ may both be there) and as the index on paths is ordered."""
    if filters.path is None:
        return None
    probe = _path_regex(filters.path, grouped=True)
    within = "(?:" + "|".join(map(re.escape, filters.within)) + ")" if filters.within else ""  # a source's name keeps its case
    like = ("%" if within else "") + _caseless_like(filters.path)
    condition = index_queries.file_condition("", None, filters.extensions, filters.modified, within + "(?i:" + probe + ")", like, filters.tags)
    found = index_queries.paths_passing(conn, condition, CASE_PROBE_FILES)
    matches = [re.fullmatch(within + "(?i:" + probe + ")", path, re.S) for path in found]
    spellings = list(dict.fromkeys(_spelled_as(filters.path, match) for match in matches if match))
    if not spellings:
        return None
    named = ", ".join(map(repr, spellings[:MAX_CASE_HINTS])) + (", ..." if len(spellings) > MAX_CASE_HINTS else "")
    return f"path {filters.path!r} matches no file: paths are case-sensitive; ignoring case it matches {named}"


def _caseless_like(text: str) -> str:
    """An SQLite LIKE pattern looser than the path filter ``text`` read ignoring case
    (re.IGNORECASE), so that SQLite passes over most paths (as fast as a GLOB) before the regular
    expression runs on the rest. LIKE takes an ASCII letter in either case; i, k and s, which
    re.IGNORECASE also takes for İ, ı, K (Kelvin) and ſ, any other character, and a [class] are
    one character (_)."""
    folder = _WILDCARD.search(text) is None
    segments = text.rstrip("/").split("/") if folder else text.split("/")
    like = ""
    for number, segment in enumerate(segments):
        if segment == "**":
            like += "%"  # any folders or none: the slash after it is its own
            continue
        for piece, _, cased in _segment_pieces(segment):
            if not cased:
                like += "%" if piece.startswith("*") else "_"
            elif len(piece) > 1 or not piece.isascii() or piece.lower() in "iks":
                like += "_"
            else:
                like += "\\" + piece if piece in "%_\\" else piece
        like += "/" if number < len(segments) - 1 else ""
    return like + "%" if folder else like


def _spelled_as(text: str, found: re.Match[str]) -> str:
    """The path filter ``text`` spelled as the path ``found`` (by _path_regex(text, grouped=True),
    ignoring case) has it: each character as there, a [class] that does not hold it replaced by it."""
    matched = iter(found.groups())
    segments: list[str] = []
    for segment in text.split("/"):
        spelled = ""
        for piece, regex, cased in [] if segment == "**" else _segment_pieces(segment):
            there = next(matched) if cased else piece
            spelled += there if cased and not re.fullmatch(regex, there, re.S) else piece
        segments.append(spelled or segment)
    return "/".join(segments)


def _extensions(extensions: Sequence[str] | None) -> tuple[str, ...]:
    if extensions is None:
        return ()
    if isinstance(extensions, str) or not isinstance(extensions, Sequence):
        raise ArgumentError("extensions", f"must be a list of extensions such as [\".md\"], got {extensions!r}"[:200])
    if len(extensions) > MAX_EXTENSIONS:
        raise ArgumentError("extensions", f"at most {MAX_EXTENSIONS} extensions, got {len(extensions)}")
    read = []
    for extension in extensions:
        dotted = extension.strip().lower() if isinstance(extension, str) else ""
        dotted = dotted if dotted.startswith(".") else "." + dotted
        if not _EXTENSION.fullmatch(dotted) or has_surrogates(dotted):
            raise ArgumentError("extensions", f"{extension!r} is not an extension such as \".md\""[:200])
        read.append(dotted)
    return tuple(dict.fromkeys(read))


if sys.version_info >= (3, 11):
    _fromisoformat = datetime.fromisoformat
else:
    # 3.10's fromisoformat reads only what isoformat() writes; this reads what 3.11's reads too:
    # basic and week dates, times and offsets without colons, fractions of any length.
    _ISO_DATETIME = re.compile(
        r"([0-9]{4})(?:(-?)W([0-9]{2})(?:\2([0-9]))?|(-?)([0-9]{2})\5([0-9]{2}))(?:.([^Z+-]+)(?:(Z)|([+-])(.+))?)?", re.S
    )
    _ISO_CLOCK = re.compile(r"([0-9]{2})(?:(:?)([0-9]{2})(?:\2([0-9]{2}))?)?(?:[.,]([0-9]+))?")

    def _clock(text: str) -> tuple[int, int, int, int]:
        parts = _ISO_CLOCK.fullmatch(text)
        if parts is None:
            raise ValueError(f"Invalid isoformat time: {text!r}")
        hour, _, minute, second, fraction = parts.groups()
        return int(hour), int(minute or 0), int(second or 0), int((fraction or "")[:6].ljust(6, "0"))

    def _fromisoformat(text: str) -> datetime:
        try:
            return datetime.fromisoformat(text)  # what it reads, it reads as 3.11's does
        except ValueError:
            pass
        parts = _ISO_DATETIME.fullmatch(text)
        if parts is None:
            raise ValueError(f"Invalid isoformat string: {text!r}")
        year, _, week, weekday, _, month, day, clock, utc, sign, offset = parts.groups()
        when = date.fromisocalendar(int(year), int(week), int(weekday or 1)) if week else date(int(year), int(month), int(day))
        zone = timezone.utc if utc else None
        if sign:
            hours, minutes, seconds, microseconds = _clock(offset)
            zone = timezone((-1 if sign == "-" else 1) * timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=microseconds))
        return datetime(when.year, when.month, when.day, *(_clock(clock) if clock else ()), tzinfo=zone)


def _instant(name: str, value: str | None) -> int | None:
    """An ISO 8601 date or datetime as ns since the epoch (UTC unless it names a timezone)."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    try:
        when = _fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
    except ValueError:
        raise ArgumentError(name, f"{value!r} is not an ISO 8601 date or datetime, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"[:200]) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    # Nanoseconds fit SQLite's integers from 1677 to 2262; any file's mtime is within.
    try:
        return min(max(int(when.timestamp() * 1_000_000) * 1000, -(2**63)), 2**63 - 1)
    except OverflowError:  # a zone that moves it past year 1 or 9999
        return -(2**63) if when.year < 5000 else 2**63 - 1


#: A filter letting through at most this many files is applied as the list of them, with the
#: rowid range they span (FTS5 skips the rest of every doclist); a wider one by looking up the file
#: of each section that matches, which costs nothing for a rare word and about what listing the
#: files would for a common one (bench/run.py).
MAX_LISTED_FILES = 5000


def search_scope(conn: sqlite3.Connection, plan: MatchPlan, filters: Filters) -> tuple[index_queries.Scope, str | None]:
    """The files this search may return: those the filters let through, but the ones the plan's
    -exclusions match, in this snapshot; and a warning when the filters let none through only
    because of case (see case_hint)."""
    excluded = index_queries.matching_files(conn, plan.excluded) if plan.excluded else []
    if not filters.narrows:
        return index_queries.scope_of(excluded, None), None
    condition = file_condition_of(filters)
    allowed = index_queries.files_passing(conn, condition, MAX_LISTED_FILES)
    return index_queries.scope_of(excluded, allowed, condition), case_hint(conn, filters) if allowed == [] else None


def file_condition_of(filters: Filters) -> index_queries.FileCondition:
    """The SQL condition on ``files`` that ``filters`` make."""
    pattern = filters.pattern.pattern if filters.pattern is not None else None
    alternatives = tuple((prefix, glob, rule.pattern if rule else None) for prefix, glob, rule in filters.alternatives)
    return index_queries.file_condition(filters.prefix, filters.glob, filters.extensions, filters.modified, pattern, tags=filters.tags,
                                   alternatives=alternatives)
