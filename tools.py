"""The MCP server: its tools, the replies they send (only fields that say something), and its instructions."""

import json
import logging
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import PurePosixPath
from typing import Annotated, Any, TypeVar, cast

import database
import index_queries
from daemon import Daemons
from documents import MAX_DOCUMENT_CHARS, document_reply
from exceptions import DocSearchError, IndexUnavailableError, reason_of, writable, writable_reply
from file_utils import MAX_USER_PATH_CHARS
from filters import MAX_EXTENSIONS, MAX_PATH_PATTERN_CHARS, MAX_TAGS, read_filters
from listing import MAX_LIST_LIMIT, MAX_LIST_OFFSET
from listing import list_files as run_listing
from models import VERSION, DocumentReply, FileList, RefreshReply, QueryReading, ScanProgress, SearchHit, SearchReply, ServerConfig, StatusReply
from phrasings import MAX_ALTERNATIVES, alternatives_given, fused_search
from query import STOPWORDS
from schemas import advertise_tools_only, compact_tools
from search import MAX_LIMIT, MAX_OFFSET, Freshness, with_collections
from search import search as run_search
from sources import filter_prefixes, named_sources, source_of
from status import server_status


logger = logging.getLogger("docsearch")
_T = TypeVar("_T")

#: Failures a tool reports as an error message: the daemon's own, and the file system's or
#: SQLite's (an index directory deleted under the server, say), which would otherwise reach the
#: client as a bare "Error executing tool".
TOOL_ERRORS = (DocSearchError, OSError, sqlite3.Error)
#: The MCP instructions, after a line naming what is served (server_instructions).
SERVER_INSTRUCTIONS = """`search` takes keywords or a question and returns the best section of each
file (path, lines, heading, snippet); read one with `get_document(path, heading=...)` (`outline=true`
lists a file's headings)."""
#: A refresh_index of several sources names at most this many errors.
MAX_REFRESH_ERRORS = 20
#: The instructions' last line with several sources.
SEVERAL_SOURCES = """Hits carry `collection` and a `path` in it; pass both to `get_document`. `collection=` narrows
`search` and `list_files` to one or more."""
#: Format names for the instructions' count of files, by extension; others are named by theirs.
FORMAT_NAMES = {".md": "Markdown", ".markdown": "Markdown", ".rst": "reStructuredText", ".txt": "text",
                ".pdf": "PDF", ".ipynb": "notebook", ".html": "HTML", ".htm": "HTML"}
#: The instructions name at most this many formats, the most common first.
MAX_NAMED_FORMATS = 4


async def run_cancellable(work: Callable[[threading.Event], _T]) -> _T:
    """Run ``work(cancelled)`` on a worker thread. If the MCP request is cancelled (the client
    sent notifications/cancelled, or went away), ``cancelled`` is set so the work can stop its
    SQLite statements, and the request ends at once."""
    import anyio

    cancelled = threading.Event()
    try:
        return await anyio.to_thread.run_sync(work, cancelled, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancelled.set()
        raise


def schema_bounds(low: int, high: int | None = None, of: str = "number") -> Any:
    """Bounds written into a tool's input schema (minimum/maximum for a number, minLength/maxLength
    for text, minItems/maxItems for a list) so that clients see them; None: no upper bound. Only
    written: the tools check the same bounds themselves, with messages that name the argument."""
    from pydantic import Field

    lower, upper = {"number": ("minimum", "maximum"), "text": ("minLength", "maxLength"), "list": ("minItems", "maxItems")}[of]
    return Field(json_schema_extra={lower: low} if high is None else {lower: low, upper: high})


# ---- MCP replies ------------------------------------------------------------------------------


def server_instructions(config: ServerConfig) -> str:
    """The MCP instructions: the folders served and what each holds, from the index if there is
    one (without the writer's lock or a scan): the count its last scan kept, else counted now."""
    formats: dict[str, Counter[str]] = {source.name: Counter() for source in config.sources}
    if config.db_path.exists():
        try:
            conn = database.reader(config.db_path)
            meta = index_queries.meta_values(conn)
            for source in config.sources:
                prefix = config.key_prefix(source.name)
                counts = _kept_counts(meta.get(prefix + database.FORMATS_KEY)) or index_queries.suffix_counts(conn, prefix)
                for suffix, count in counts.items():
                    formats[source.name][FORMAT_NAMES.get(suffix, suffix or "other")] += count
        except (IndexUnavailableError, sqlite3.Error):
            formats = {source.name: Counter() for source in config.sources}  # an unreadable index is made anew
        finally:
            database.drop_reader(config.db_path)  # this thread does not search
    if not config.several:
        held = _holding(formats[config.sources[0].name])
        return writable(f"Searches the local folder {config.source_directory}: {held}.\n{SERVER_INSTRUCTIONS}")
    listed = "\n".join(f"- {source.name}: {source.directory} ({_holding(formats[source.name])})" for source in config.sources)
    return writable(f"Searches {len(config.sources)} local folders, each a collection:\n{listed}\n{SERVER_INSTRUCTIONS}\n{SEVERAL_SOURCES}")


def _kept_counts(kept: str | None) -> dict[str, int] | None:
    """The files by extension a scan kept in the meta (indexer._record_scan), if it is there and
    reads as such: counting a million keys again would hold up the server's first answer by seconds."""
    try:
        counts = json.loads(kept) if kept else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(counts, dict) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts.values()):
        return None
    return counts


def _holding(formats: Counter[str]) -> str:
    """What a source holds, as the instructions say it: its files by format, the most common first."""
    named = formats.most_common(MAX_NAMED_FORMATS)
    held = [f"{count:,} {name} file{'s' if count > 1 else ''}" for name, count in named]
    others = sum(formats.values()) - sum(count for _, count in named)
    if others:
        held.append(f"{others:,} other files")
    return ", ".join(held) if held else "its files are being indexed now (searches find more as it goes)"


def tool_result(reply: Mapping[str, Any]) -> Any:
    """A tool's reply as sent: the structured content, and the same as compact JSON for the text
    content (the SDK's own text is indented: a third more characters, paid for by the agent)."""
    from mcp.types import CallToolResult, TextContent

    text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(reply))


def _said(reply: Mapping[str, Any], optional: tuple[str, ...]) -> dict[str, Any]:
    """``reply`` without those of its ``optional`` fields that say nothing (false, 0, empty, None)."""
    return {key: value for key, value in reply.items() if value or key not in optional}


_TYPED_WORD = re.compile(r"[^\W_]+")


def read_differently(query: str, reading: QueryReading) -> bool:
    """Whether ``query`` was read other than as the words typed: phrases, exclusions (a command
    line's -Option), feedback words, a query of stopwords, or words other than stopwords dropped."""
    if reading["phrases"] or reading["excluded"] or reading["feedback"] or reading["mode"] == "stopwords":
        return True
    searched = set(_TYPED_WORD.findall(" ".join(reading["required"] + reading["optional"] + reading["prefixes"]).lower()))
    return set(_TYPED_WORD.findall(query.lower())) - STOPWORDS != searched - STOPWORDS


def lean_search(reply: SearchReply, query: str, explain: bool = False) -> SearchReply:
    """The search reply an agent is sent: the fields that say nothing left out (docs/tools.md);
    ``query_read`` only when the query was read differently or ``explain``."""
    lean = _said(reply, ("indexing", "offset", "next_offset", "warnings", "suggestions"))
    if reply["query"] == query:
        del lean["query"]
    if explain or read_differently(query, reply["query_read"]):
        lean["query_read"] = cast(QueryReading, _said(reply["query_read"], ("required", "optional", "phrases", "prefixes", "excluded", "feedback")))
    else:
        del lean["query_read"]
    lean["results"] = [lean_hit(hit) for hit in reply["results"]]
    return cast(SearchReply, lean)


def lean_hit(hit: SearchHit) -> SearchHit:
    """A search hit without what says nothing: a title that repeats the heading's first part or
    the file's name, ``stale`` when false, ``also_in`` when empty, an ``also_in_count`` that is
    its length; versioned copies in ``also_in`` named by the folder that differs (named_copies).
    The score keeps 3 significant digits; the spec's fields are always there."""
    lean = _said(hit, ("heading", "stale", "also_in", "tags"))
    lean["score"] = float(f"{hit['score']:.3g}")
    if hit["also_in_count"] == len(hit["also_in"]):
        del lean["also_in_count"]
    if hit["title"] in ("", hit["heading"].split(" > ")[0], PurePosixPath(hit["path"]).stem):
        del lean["title"]
    if lean.get("also_in"):
        del lean["also_in"]
        lean.update(named_copies(hit["path"], hit["also_in"]))
    return cast(SearchHit, lean)


def named_copies(path: str, also_in: list[str]) -> dict[str, Any]:
    """A hit's ``also_in`` as a reply names it. When every entry is ``path`` with one and the same
    folder or file name changed (the version folder of versioned copies), that name is found in
    ``path`` only there, and it is shorter: in ``also_in`` what each entry has instead, and that
    name as ``also_in_replaces`` (an entry's path is ``path`` with also_in_replaces replaced by
    the entry); else ``also_in`` as it is."""
    named: dict[str, Any] = {"also_in": also_in}
    parts = path.split("/")
    changed: set[int] = set()
    for other in also_in:
        theirs = other.split("/")
        differ = [n for n, (mine, its) in enumerate(zip(parts, theirs)) if mine != its] if len(theirs) == len(parts) else []
        if len(differ) != 1:
            return named
        changed.add(differ[0])
    if len(changed) != 1:
        return named
    (at,) = changed
    if path.count(parts[at]) != 1:  # a plain replace of it in path must change that name only
        return named
    short = {"also_in": [other.split("/")[at] for other in also_in], "also_in_replaces": parts[at]}
    return short if len(json.dumps(short, ensure_ascii=False)) < len(json.dumps(named, ensure_ascii=False)) else named


def lean_document(reply: DocumentReply) -> DocumentReply:
    """A get_document reply without what says nothing: flags that are false, read-on positions
    when there is nothing more, and a title that is the file's name."""
    lean = _said(reply, ("truncated", "next_start_line", "next_start_char", "changed_since_indexed", "stale", "outline_truncated"))
    if reply["title"] in ("", PurePosixPath(reply["path"]).stem):
        del lean["title"]
    return cast(DocumentReply, lean)


def lean_status(status: Mapping[str, Any], part: bool = False) -> StatusReply:
    """A get_index_status reply (or with ``part``, a source's part of it) without what says
    nothing: counts that are 0, values never set, and ``progress`` when no scan is running. The
    spec's fields are in every reply: only a part leaves out a last_scan never set and no errors."""
    spec_fields = ("last_scan", "errors_encountered") if part else ()
    lean = _said(status, (*spec_fields, "last_error", "skipped_files", "fallback_decoded_files", "writer_pid"))
    if status["state"] != "indexing":
        lean.pop("progress", None)
    lean["watching"] = _said(status["watching"], ("problem",))
    if "sources" in status:
        lean["sources"] = [lean_status(part, part=True) for part in status["sources"]]
    return cast(StatusReply, lean)


def merged_refresh(replies: Mapping[str, RefreshReply]) -> RefreshReply:
    """One refresh_index reply for the scans of several sources (by name): each error after its source's name."""
    return {
        "success": all(reply["success"] for reply in replies.values()),
        "files_processed": sum(reply["files_processed"] for reply in replies.values()),
        "files_removed": sum(reply["files_removed"] for reply in replies.values()),
        "errors": [f"{name}: {error}" for name, reply in replies.items() for error in reply.get("errors", [])][:MAX_REFRESH_ERRORS],
    }


def described(text: str) -> Any:
    """A parameter's description in a tool's input schema."""
    from pydantic import Field

    return Field(description=text)


def build_server(daemon: Daemons) -> Any:
    """The MCP server object with its tools (imports the SDK)."""
    import anyio
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, ToolAnnotations

    server = MCPServer("docsearch", version=VERSION, instructions=server_instructions(daemon.config))
    config = daemon.config

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search(
        query: Annotated[str, described('Keywords or a question; "exact phrase", prefix*, -excluded word.')],
        limit: Annotated[int, schema_bounds(1, MAX_LIMIT), described("At most this many files.")] = 10,
        path: Annotated[str | None, schema_bounds(0, MAX_PATH_PATTERN_CHARS, "text"), described(
            "Only files under this folder or matching this glob (guides/**/*.md).")] = None,
        extensions: Annotated[list[str] | None, schema_bounds(0, MAX_EXTENSIONS, "list"), described(
            'Only these extensions, e.g. [".md"].')] = None,
        modified_after: Annotated[str | None, described(
            "Only files modified since this ISO 8601 date/time.")] = None,
        modified_before: Annotated[str | None, described("Only files modified before this ISO 8601 date/time.")] = None,
        offset: Annotated[int, schema_bounds(0, MAX_OFFSET), described("The previous reply's next_offset, for more.")] = 0,
        collapse_duplicates: Annotated[bool, described(
            "false: each copy of a text its own result (else in also_in).")] = True,
        explain: Annotated[bool, described(
            "true: always say how the query was read (query_read).")] = False,
        collection: Annotated[str | list[str] | None, described(
            "Only these sources' files (a hit's collection).")] = None,
        tags: Annotated[list[str] | None, schema_bounds(0, MAX_TAGS, "list"), described(
            "Only files with all these front matter tags.")] = None,
        alternatives: Annotated[list[str] | None, schema_bounds(0, MAX_ALTERNATIVES, "list"), described(
            "Other phrasings of the need (synonyms, likely document terms), fused with the query into one list.")] = None,
    ) -> Annotated[CallToolResult, SearchReply]:
        """Find the sections that answer a query, best first: each file's best section with path,
        heading, lines and snippet; a text in several files is one hit (`also_in`; with
        `also_in_replaces`, each is `path` with that part replaced). Use the words the documents
        likely use, not the user's; if unsure of them or a search came back weak, add `alternatives`."""

        def work(cancelled: threading.Event) -> SearchReply:
            under = filter_prefixes(config, collection, path)
            phrasings = alternatives_given(alternatives, query)
            run = partial(fused_search, alternatives=phrasings) if phrasings else run_search
            return with_collections(run(
                config.db_path, query, limit, indexing=not daemon.first_scans_done(), cancelled=cancelled.is_set,
                filters=read_filters(path, extensions, modified_after, modified_before, under, tags), offset=offset,
                collapse_duplicates=collapse_duplicates, freshness=Freshness.of(config, daemon.refresh_found),
            ), config)

        try:
            reply = await run_cancellable(work)
        except TOOL_ERRORS as exc:
            if isinstance(exc, IndexUnavailableError):
                daemon.suspect_damage()
            raise ToolError(reason_of(exc)) from exc
        problem = daemon.write_problem()
        if problem:
            reply["warnings"].append(problem)
        return tool_result(writable_reply(lean_search(reply, query, explain)))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_document(
        path: Annotated[str, schema_bounds(1, MAX_USER_PATH_CHARS, "text"), described(
            "The file's path, as a hit gives it.")],
        heading: Annotated[str | None, described(
            'Only this section, as a hit names it ("Examples#2": the 2nd of that name).')] = None,
        start_line: Annotated[int | None, schema_bounds(1), described(
            "First line (from 1); to read on: next_start_line.")] = None,
        end_line: Annotated[int | None, schema_bounds(1), described("Last line to read (inclusive).")] = None,
        max_chars: Annotated[int, schema_bounds(1, MAX_DOCUMENT_CHARS), described(
            "At most this many characters; truncated says more follows.")] = 20_000,
        start_char: Annotated[int, schema_bounds(0), described(
            "To read on inside a long line: next_start_char.")] = 0,
        outline: Annotated[bool, described("true: also list the file's headings and their lines.")] = False,
        collection: Annotated[str | None, described(
            "The hit's collection, when several sources have this path.")] = None,
    ) -> Annotated[CallToolResult, DocumentReply]:
        """Read a file, or one section or line range of it, from disk now. If `truncated`, call
        again with `start_line=next_start_line` (and `start_char=next_start_char`)."""

        def work(cancelled: threading.Event) -> DocumentReply:
            where, within = source_of(config, collection, path)
            return document_reply(where, within, heading, start_line, end_line, max_chars, daemon.refresh_found, start_char, outline)

        try:
            return tool_result(writable_reply(lean_document(await run_cancellable(work))))
        except TOOL_ERRORS as exc:
            raise ToolError(reason_of(exc)) from exc

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def list_files(
        path: Annotated[str | None, schema_bounds(0, MAX_PATH_PATTERN_CHARS, "text"), described(
            "Only files under this folder (guides/) or matching this glob.")] = None,
        collection: Annotated[str | list[str] | None, described("Only these sources' files.")] = None,
        extensions: Annotated[list[str] | None, schema_bounds(0, MAX_EXTENSIONS, "list"), described('Only these extensions.')] = None,
        modified_after: Annotated[str | None, described("Only files modified since this ISO 8601 date/time.")] = None,
        modified_before: Annotated[str | None, described("Only files modified before this ISO 8601 date/time.")] = None,
        tags: Annotated[list[str] | None, schema_bounds(0, MAX_TAGS, "list"), described(
            "Only files with all these front matter tags.")] = None,
        limit: Annotated[int, schema_bounds(1, MAX_LIST_LIMIT), described("At most this many files.")] = 100,
        offset: Annotated[int, schema_bounds(0, MAX_LIST_OFFSET), described("The previous reply's next_offset, for more.")] = 0,
    ) -> Annotated[CallToolResult, FileList]:
        """Browse the indexed files by path: title, size, modified time, tags; `total` match."""

        def work(cancelled: threading.Event) -> FileList:
            return run_listing(config, path, collection, extensions, modified_after, modified_before, tags, limit, offset)

        try:
            reply = await run_cancellable(work)
        except TOOL_ERRORS as exc:
            raise ToolError(reason_of(exc)) from exc
        lean = _said(reply, ("next_offset", "warnings"))
        lean["files"] = [_said(listed, ("title", "tags")) for listed in reply["files"]]
        return tool_result(writable_reply(lean))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_index_status() -> Annotated[CallToolResult, StatusReply]:
        """Whether the index is up to date (or how far a scan got), files indexed and skipped, problems met."""
        return tool_result(writable_reply(lean_status(server_status(config, daemon))))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    async def refresh_index(
        ctx: Context, filepath: Annotated[str | None, schema_bounds(1, MAX_USER_PATH_CHARS, "text"), described(
            "One file to index again (or drop if deleted); none: rescan all.")] = None,
        collection: Annotated[str | None, described(
            "filepath's collection; without filepath: rescan only that source.")] = None,
    ) -> Annotated[CallToolResult, RefreshReply]:
        """Make the index current now (a full rescan waits for one already running)."""

        def report(progress: ScanProgress) -> None:
            try:
                anyio.from_thread.run(ctx.report_progress, progress.files_done, progress.files_total or None, progress.phase)
            except Exception:  # noqa: BLE001 - a client gone or a cancelled call must not stop the scan
                logger.debug("progress not sent", exc_info=True)

        def work(cancelled: threading.Event) -> RefreshReply:
            if filepath is not None:
                where, within = source_of(config, collection, filepath)
                return daemon.loop_of(where.source).wait_for_indexer(cancelled).refresh_file(within, cancelled.is_set)
            replies = {
                source.name: daemon.loop_of(source).wait_for_indexer(cancelled).scan(report, cancelled.is_set)
                for source in named_sources(config, collection)
            }
            return merged_refresh(replies) if config.several else replies[config.sources[0].name]

        try:
            reply = await run_cancellable(work)
        except TOOL_ERRORS as exc:
            raise ToolError(reason_of(exc)) from exc
        return tool_result(writable_reply(reply))

    compact_tools(server)
    advertise_tools_only(server)
    return server
