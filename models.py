"""Typed records that cross module lines.

Internal records are dataclasses. Tool replies are ``typing_extensions.TypedDict`` so the MCP SDK
derives an output schema from them (a ``typing.TypedDict`` nesting another one silently loses its
schema on Python 3.11); the CLI's ``--json`` prints the very same dictionaries, whole, where the MCP
tools leave out the fields that say nothing (replies.lean_search and the like).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from typing_extensions import NotRequired, TypedDict

#: This release, in one place: sent as the MCP serverInfo.version and shown by --version. It moves
#: with every change set users can see, and CHANGELOG.md's newest heading names it.
VERSION = "0.9.3"
DB_SUFFIX = ".sqlite3"
#: The layout of an index file (database.SCHEMA_VERSION). Part of the file's name, with the
#: settings: two installs of different versions never take each other's index for a damaged one.
#: 5: setext headings, CR line ends and front matter without a title read anew; extracted formats;
#: each section's said key stored. 6: one Markdown parser for files and notebook cells (CommonMark's
#: empty headings and fences; setext headings in cells). 7: files indexed by name and by title
#: (search puts the files a query names first); each file's sketch of its words stored (copies.py).
#: 8: several sources in one index (keys after their names); front matter tags kept per file.
#: 9: each section's outline stored (models.Section): hits name the heading span that answers in
#: every format, in any row. 10: outlines stored as JSON text (zlib gained little on them).
#: 11: code files' definitions are their headings and their docstring or first comment their title.
INDEX_FORMAT = 11


class Source(NamedTuple):
    """A folder served, the name results give it (``collection``), and its identity (see
    identity) when the server started: replies read from that folder only, until a scan records
    another (file_utils.reading_from)."""

    name: str
    directory: Path
    identity: str | None = None
    #: This source's own file-selection settings (SOURCE_SETTINGS: value), over the server's.
    settings: tuple[tuple[str, object], ...] = ()


def identity(st: os.stat_result) -> str:
    """A folder's device and inode: they change when a file system is mounted over it or unmounted
    from it, or the folder is replaced by another."""
    return f"{st.st_dev}:{st.st_ino}"


#: The settings a source may have of its own, in the config file's ``sources``: which files it indexes and how they are read.
SOURCE_SETTINGS = (
    "included_extensions", "excluded_extensions", "max_file_size_mb", "include_hidden", "respect_gitignore",
    "exclude_patterns", "index_notebook_outputs",
)


#: What a source's name may be: it is typed by agents and people, and it never needs quoting.
SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class ServerConfig:
    """Validated settings (see config.py for where each comes from).

    ``sources``: every folder served, in the order given; one index holds them all, so one ranking
    covers them (docs/design.md). ``source_directory``: the folder this config is about: the only
    one, or, in a config made by ``for_source``, that source's.
    """

    source_directory: Path
    index_output_directory: Path
    included_extensions: tuple[str, ...] = (".txt", ".md", ".rst")
    excluded_extensions: tuple[str, ...] = ()
    scan_interval_seconds: float = 300.0
    max_file_size_mb: float = 10.0
    #: Index files and folders whose name starts with a dot (tool state, editors' folders).
    include_hidden: bool = False
    #: Skip what .gitignore and .ignore files in the source, and its .git/info/exclude, exclude.
    respect_gitignore: bool = True
    #: More rules in .gitignore syntax, as at the source's top (file_utils.FileFilter).
    exclude_patterns: tuple[str, ...] = ()
    #: Index the outputs of notebook cells too, not only their sources.
    index_notebook_outputs: bool = False
    sources: tuple[Source, ...] = ()
    #: The config this one was made from by for_source: the index (db_path) is that config's.
    shared: ServerConfig | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.sources:
            object.__setattr__(self, "sources", (Source(default_source_name(self.source_directory), self.source_directory),))

    @property
    def several(self) -> bool:
        """More than one source: results then name theirs (``collection``)."""
        return len(self.sources) > 1

    @property
    def source(self) -> Source:
        """The source this config is about (see source_directory)."""
        return next((s for s in self.sources if s.directory == self.source_directory), self.sources[0])

    def for_source(self, source: Source) -> ServerConfig:
        """This config, about ``source``, with the source's own settings: what its indexer, watcher
        and get_document use. Its index is this config's."""
        shared = self.shared or self
        return replace(shared, source_directory=source.directory, shared=shared, **dict(source.settings))

    def key(self, collection: str, path: str) -> str:
        """The index's key of a file: its path, after its source's name when there are several."""
        return f"{collection}/{path}" if self.several else path

    def key_prefix(self, collection: str) -> str:
        """What every key of a source's files starts with."""
        return f"{collection}/" if self.several else ""

    def split_key(self, key: str) -> tuple[str, str]:
        """(collection, path) of an index key."""
        if not self.several:
            return self.sources[0].name, key
        collection, _, path = key.partition("/")
        return collection, path

    def source_named(self, name: str) -> Source | None:
        return next((s for s in self.sources if s.name == name), None)

    @property
    def max_file_size_bytes(self) -> int:
        return int(self.max_file_size_mb * 1024 * 1024)

    @property
    def index_settings(self) -> dict[str, object]:
        """The settings that decide which files an index holds (and so are part of its identity)."""
        settings: dict[str, object] = {
            "included_extensions": sorted(self.included_extensions),
            "excluded_extensions": sorted(self.excluded_extensions),
            "max_file_size_bytes": self.max_file_size_bytes,
            "index_format": INDEX_FORMAT,
        }
        if self.include_hidden:  # only then: the default's index keeps the name it had
            settings["include_hidden"] = True
        if not self.respect_gitignore:  # these three too
            settings["respect_gitignore"] = False
        if self.exclude_patterns:
            settings["exclude_patterns"] = list(self.exclude_patterns)
        if self.index_notebook_outputs:
            settings["index_notebook_outputs"] = True
        if any(source.settings for source in self.sources):
            settings["sources"] = {source.name: dict(source.settings) for source in self.sources if source.settings}
        return settings

    @property
    def db_path(self) -> Path:
        """The index file: ``<folder name>-<hash of the source path>-<hash of index_settings>``;
        with several sources, their names and a hash of every (name, folder).

        Sources sharing an index directory never collide, and two servers on one source with
        different settings (or index formats) each keep their own index instead of rewriting
        each other's. Servers with the same sources share one (one writer at a time).
        """
        if self.shared is not None:
            return self.shared.db_path
        if self.several:
            identity = json.dumps(sorted((s.name, str(s.directory)) for s in self.sources), ensure_ascii=True)
            stem = "+".join(sorted(s.name for s in self.sources))
        else:
            identity, stem = str(self.sources[0].directory), self.sources[0].directory.name
        digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        settings = json.dumps(self.index_settings, sort_keys=True, ensure_ascii=True)
        settings_digest = hashlib.sha256(settings.encode("ascii")).hexdigest()[:8]
        stem = re.sub(r"[^A-Za-z0-9_.+-]+", "_", stem)[:40] or "root"
        return self.index_output_directory / f"{stem}-{digest}-{settings_digest}{DB_SUFFIX}"


def default_source_name(directory: Path) -> str:
    """A source's name when none is given: its folder's, in the characters SOURCE_NAME allows."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", directory.name).strip("-.")[:64]
    return name if SOURCE_NAME.fullmatch(name or "") else "source"


def modified_time(mtime_ns: int) -> str:
    """A file's modification time as replies write it: ISO 8601 in UTC, to the second, with a Z
    ("2026-11-29T01:02:03Z"; "unknown" for a time past what datetime holds)."""
    try:
        return datetime.fromtimestamp(mtime_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "unknown"


@dataclass(frozen=True)
class Section:
    """One FTS row: a bounded run of a file's lines, with the heading path it sits under, and its
    outline: (line, level, name) of the headings open where it starts, then of those in it."""

    start_line: int
    end_line: int
    heading: str
    body: str
    outline: tuple[tuple[int, int, str], ...] = ()


class StoredFile(NamedTuple):
    """What the index remembers about a file, to tell whether its content changed."""

    file_id: int
    mtime_ns: int
    size: int
    inode: int
    ctime_ns: int
    content_hash: str
    indexed_at_ns: int


#: (path, mtime_ns, size, inode, ctime_ns): what a rescan compares to tell whether a file changed.
#: The ctime is there because the mtime can be set back (``touch -r``, ``cp -p``, ``rsync -t``) and
#: the ctime cannot. The walk yields these and the index keeps one per file; plain tuples, since a
#: rescan makes one per file and a named tuple costs several times more to build. A DiskFile equals
#: the tuple of its values.
Signature = tuple[str, int, int, int, int]


class DiskFile(NamedTuple):
    """A file found on disk by the walk that passed the name and size filters."""

    path: str  # relative to the source, '/'-separated
    mtime_ns: int
    size: int
    inode: int
    ctime_ns: int


#: A section as the index stores it: (start_line, end_line, heading, the body as FTS5 is given it
#: (database.indexed_text: made by the loader, off the writer's path), the body compressed
#: (database.compress), its said key (sections.said_key: copies of a text share it, so a search
#: groups them without reading their text), its outline as stored (database.outline_text)).
#: A plain tuple: loader processes send thousands of them, and a tuple is the cheapest to pickle.
StoredSection = tuple[int, int, str, str, bytes, bytes, str]


@dataclass(frozen=True)
class LoadedFile:
    """A file's decoded text split into sections, ready to be written."""

    path: str
    mtime_ns: int
    size: int
    inode: int
    ctime_ns: int
    content_hash: str
    read_at_ns: int
    encoding: str
    fallback_decoded: bool
    title: str
    #: Its sections as the index stores them (StoredSection), made by the loader, off the writer's path.
    sections: list[StoredSection]
    #: The sketch of the file's words (copies.sketch): a search folds the files whose sketches say
    #: they are near-copies (versions of a page) into one result.
    sketch: bytes
    #: Its front matter's tags (markup.front_matter_tags).
    tags: tuple[str, ...] = ()


@dataclass
class ScanProgress:
    """Where the current (or last) scan is; updated by the writer thread, read by status."""

    state: str = "starting"  # starting | indexing | idle
    phase: str = ""
    files_total: int = 0
    files_done: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class WatchState:
    """What status says about watching."""

    #: True while edits are picked up as they happen.
    active: bool = False
    folders: int = 0
    #: Why not (or no longer) watching, and what to do about it; None while watching.
    problem: str | None = None


class SearchHit(TypedDict):
    """A search result. search.search fills every field; the MCP tool leaves out those that say
    nothing (replies.lean_hit, docs/tools.md): hence NotRequired. The fields the spec names (path,
    snippet, score, last_modified) are in every hit."""

    #: The name of the source (folder) the file is in; only when the server serves several. ``path``
    #: is relative to it; get_document and refresh_index take both.
    collection: NotRequired[str]
    path: str
    title: NotRequired[str]
    heading: NotRequired[str]
    snippet: str
    score: float
    line_start: int
    line_end: int
    last_modified: str
    #: The file changed on disk since it was indexed and could not be indexed again in time: the
    #: snippet and lines are from the indexed text.
    stale: NotRequired[bool]
    #: Other files that say the same: their best section is the same text (sections.said_key), or
    #: their whole text nearly is (copies.NEAR_COPY: versions of a page). Best first, at most 5;
    #: also_in_count counts them all among the files ranked. In the MCP reply, when all of them
    #: differ from ``path`` in one and the same folder or file name (versions: 7.4/ and 5.1/), found
    #: in ``path`` only there, and that is shorter: each entry is its name there, and
    #: ``also_in_replaces`` is ``path``'s; an entry's path is ``path`` with also_in_replaces
    #: replaced by the entry (replies.named_copies). Without also_in_replaces, the entries are paths.
    also_in: NotRequired[list[str]]
    also_in_replaces: NotRequired[str]
    also_in_count: NotRequired[int]
    #: The file's tags (its front matter's tags and keywords); only when it has some.
    tags: NotRequired[list[str]]


class QueryReading(TypedDict):
    """How a query was read. ``keywords``: a file must hold every one of ``required``, ``phrases``
    and ``prefixes``. ``question``: nothing is required; ``optional`` words, ``phrases`` and
    ``prefixes`` rank files, with ``feedback`` words found in the best of them. ``stopwords``: a
    query of stopwords only, searched as the phrase of them first, then as ``required`` words.
    Files holding any of ``excluded`` are left out in every mode. A word FTS5 reads as several
    (``e-mail``) is shown as they are, space-separated (CJK characters side by side), and matches
    as a phrase."""

    mode: str
    #: search.search fills every list; the MCP tool leaves out the empty ones (replies.lean_search).
    required: NotRequired[list[str]]
    optional: NotRequired[list[str]]
    phrases: NotRequired[list[str]]
    prefixes: NotRequired[list[str]]
    excluded: NotRequired[list[str]]
    feedback: NotRequired[list[str]]


class SearchReply(TypedDict):
    """search.search fills every field; the MCP tool leaves out those that say nothing (replies.lean_search)."""

    query: NotRequired[str]
    results: list[SearchHit]
    files_matched: int
    indexing: NotRequired[bool]
    #: Where this page starts among the results; whether more follow, and the offset of the next page.
    offset: NotRequired[int]
    has_more: bool
    next_offset: NotRequired[int | None]
    #: What of the query was not searched as typed (over a bound), and results left out of the reply.
    warnings: NotRequired[list[str]]
    #: How the query was read, after those cuts.
    query_read: NotRequired[QueryReading]
    #: When nothing matched: words of the index close to the query's words (a typo, another
    #: spelling), best first; else empty.
    suggestions: NotRequired[list[str]]


class ListedFile(TypedDict):
    """A file list_files names."""

    collection: NotRequired[str]
    path: str
    title: NotRequired[str]
    size: int
    modified: str
    tags: NotRequired[list[str]]


class FileList(TypedDict):
    """list_files: the files that match, by path; ``total`` of them in all."""

    files: list[ListedFile]
    total: int
    has_more: bool
    next_offset: NotRequired[int | None]
    warnings: NotRequired[list[str]]


class OutlineEntry(TypedDict):
    """A heading, named by its path as search results name sections, and the lines it spans."""

    heading: str
    level: int
    line_start: int
    line_end: int


class DocumentReply(TypedDict):
    """documents.document_reply fills every field but the outline's; the MCP tool leaves out
    those that say nothing (replies.lean_document)."""

    #: The file's source, with several (see SearchHit).
    collection: NotRequired[str]
    path: str
    title: NotRequired[str]
    text: str
    #: The lines returned (1-based, inclusive); 0 and 0 for an empty file.
    line_start: int
    line_end: int
    total_lines: int
    #: More of what was asked for follows: ask again from next_start_line (and next_start_char,
    #: set when the cut is inside that line: a line longer than max_chars).
    truncated: NotRequired[bool]
    next_start_line: NotRequired[int | None]
    next_start_char: NotRequired[int | None]
    #: The file's headings, as many as fit in max_chars (at most 1000; outline_truncated says when
    #: there are more); only when asked for (get_document's ``outline``).
    outline: NotRequired[list[OutlineEntry]]
    outline_truncated: NotRequired[bool]
    #: The file on disk differs from what the index held; it was indexed again (unless stale).
    changed_since_indexed: NotRequired[bool]
    #: It changed, and could not be indexed again in time: searches still see the old text.
    stale: NotRequired[bool]
    last_modified: str


class ScanProgressReply(TypedDict):
    phase: str
    files_done: int
    files_total: int


class WatchingReply(TypedDict):
    #: Edits are picked up as they happen (inotify); false: only by the periodic rescan.
    active: bool
    #: Folders watched.
    folders: int
    #: Why not watching, and what to do about it.
    problem: NotRequired[str | None]


class SourceStatus(TypedDict):
    """One source's status, in a server's of several (status.server_status)."""

    name: str
    source_directory: str
    state: str
    progress: NotRequired[ScanProgressReply]
    indexed_files: int
    last_scan: NotRequired[str | None]
    errors_encountered: NotRequired[int]
    last_error: NotRequired[str | None]
    skipped_files: NotRequired[dict[str, int]]
    fallback_decoded_files: NotRequired[int]
    watching: WatchingReply
    hint: NotRequired[str]


class StatusReply(TypedDict):
    """status.read_status fills every field but the hint; the MCP tool leaves out those that say
    nothing (replies.lean_status). With several sources (status.server_status): the totals, and each
    source's own in ``sources`` (then no ``source_directory`` here)."""

    source_directory: NotRequired[str]
    index_path: str
    state: str
    progress: NotRequired[ScanProgressReply]
    indexed_files: int
    total_documents: int
    index_size_mb: float
    #: The spec's fields (indexed_files, last_scan, index_size_mb, total_documents,
    #: errors_encountered) are in every reply; last_scan is null until a scan has finished.
    last_scan: str | None
    errors_encountered: int
    last_error: NotRequired[str | None]
    skipped_files: NotRequired[dict[str, int]]
    fallback_decoded_files: NotRequired[int]
    writer_pid: NotRequired[int | None]
    watching: WatchingReply
    #: What the user can do about something above (PDFs skipped for want of pdftotext); only then.
    hint: NotRequired[str]
    sources: NotRequired[list[SourceStatus]]


class RefreshReply(TypedDict):
    """refresh_index: the spec's fields (success, files_processed, errors) are in every reply."""

    success: bool
    files_processed: int
    files_removed: int
    errors: list[str]
