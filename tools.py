"""The MCP server: its instructions and its tools, one function registering each (replies.py shapes what they send)."""

import json
import logging
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, TypeVar

import database
import index_queries
from daemon import Daemons
from documents import MAX_DOCUMENT_CHARS, document_reply
from exceptions import DocSearchError, IndexUnavailableError, reason_of, writable, writable_reply
from file_utils import MAX_USER_PATH_CHARS
from filters import MAX_EXTENSIONS, MAX_PATH_PATTERN_CHARS, MAX_TAGS, read_filters
from listing import MAX_LIST_LIMIT, MAX_LIST_OFFSET
from listing import list_files as run_listing
from models import VERSION, DocumentReply, FileList, RefreshReply, ScanProgress, SearchReply, ServerConfig, StatusReply
from phrasings import MAX_ALTERNATIVES, alternatives_given, fused_search
from replies import lean_document, lean_listing, lean_search, lean_status, merged_refresh, refused_refresh, tool_result
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


# ---- MCP instructions ------------------------------------------------------------------------


def server_instructions(config: ServerConfig) -> str:
    """The MCP instructions: the folders served and what each holds, from the index if there is
    one (without the writer's lock or a scan): the count its last scan kept, else counted now."""
    formats: dict[str, Counter[str]] = {source.name: Counter() for source in config.sources}
    if os.path.exists(config.db_path):  # False, not an error, where the index folder cannot be entered
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


def whole_number() -> Any:
    """Marks an integer argument: true or false given for it is refused, naming it, where the
    SDK's validation would read them as 1 and 0 (`max_chars: true` read one character)."""
    from pydantic import BeforeValidator

    return BeforeValidator(_refuse_true_false)


def _refuse_true_false(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"a whole number is needed, not {json.dumps(value)}")
    return value


def described(text: str) -> Any:
    """A parameter's description in a tool's input schema."""
    from pydantic import Field

    return Field(description=text)


async def run_tool(work: Callable[[threading.Event], _T], failed: Callable[[BaseException], None] | None = None) -> _T:
    """run_cancellable, a failure of TOOL_ERRORS told to the client as the tool's error message
    (after ``failed(exc)``)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return await run_cancellable(work)
    except TOOL_ERRORS as exc:
        if failed is not None:
            failed(exc)
        raise ToolError(reason_of(exc)) from exc


def build_server(daemon: Daemons) -> Any:
    """The MCP server object with its tools, in the order tools/list gives them (imports the SDK)."""
    from mcp.server import MCPServer

    server = MCPServer("docsearch", version=VERSION, instructions=server_instructions(daemon.config))
    for register in (add_search, add_get_document, add_list_files, add_get_index_status, add_refresh_index):
        register(server, daemon)
    compact_tools(server)
    advertise_tools_only(server)
    return server


def add_search(server: Any, daemon: Daemons) -> None:
    """The search tool: one search, or one fused over the query's alternatives."""
    from mcp.types import CallToolResult, ToolAnnotations

    config = daemon.config

    def damaged(exc: BaseException) -> None:
        if isinstance(exc, IndexUnavailableError):
            daemon.suspect_damage()

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def search(
        query: Annotated[str, described('Keywords or a question; "exact phrase", prefix*, -excluded word.')],
        limit: Annotated[int, whole_number(), schema_bounds(1, MAX_LIMIT), described("At most this many files.")] = 10,
        path: Annotated[str | None, schema_bounds(0, MAX_PATH_PATTERN_CHARS, "text"), described(
            "Only files under this folder or matching this glob (guides/**/*.md).")] = None,
        extensions: Annotated[list[str] | None, schema_bounds(0, MAX_EXTENSIONS, "list"), described(
            'Only these extensions, e.g. [".md"].')] = None,
        modified_after: Annotated[str | None, described(
            "Only files modified since this ISO 8601 date/time.")] = None,
        modified_before: Annotated[str | None, described("Only files modified before this ISO 8601 date/time.")] = None,
        offset: Annotated[int, whole_number(), schema_bounds(0, MAX_OFFSET), described("The previous reply's next_offset, for more.")] = 0,
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

        reply = await run_tool(work, damaged)
        problem = daemon.write_problem()
        if problem:
            reply["warnings"].append(problem)
        return tool_result(writable_reply(lean_search(reply, query, explain)))


def add_get_document(server: Any, daemon: Daemons) -> None:
    """The get_document tool: a file, a section or lines of it, read from disk now."""
    from mcp.types import CallToolResult, ToolAnnotations

    config = daemon.config

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_document(
        path: Annotated[str, schema_bounds(1, MAX_USER_PATH_CHARS, "text"), described(
            "The file's path, as a hit gives it.")],
        heading: Annotated[str | None, described(
            'Only this section, as a hit names it ("Examples#2": the 2nd of that name).')] = None,
        start_line: Annotated[int | None, whole_number(), schema_bounds(1), described(
            "First line (from 1); to read on: next_start_line.")] = None,
        end_line: Annotated[int | None, whole_number(), schema_bounds(1), described("Last line to read (inclusive).")] = None,
        max_chars: Annotated[int, whole_number(), schema_bounds(1, MAX_DOCUMENT_CHARS), described(
            "At most this many characters; truncated says more follows.")] = 20_000,
        start_char: Annotated[int, whole_number(), schema_bounds(0), described(
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

        return tool_result(writable_reply(lean_document(await run_tool(work))))


def add_list_files(server: Any, daemon: Daemons) -> None:
    """The list_files tool: the indexed files by path, filtered like search."""
    from mcp.types import CallToolResult, ToolAnnotations

    config = daemon.config

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
        limit: Annotated[int, whole_number(), schema_bounds(1, MAX_LIST_LIMIT), described("At most this many files.")] = 100,
        offset: Annotated[int, whole_number(), schema_bounds(0, MAX_LIST_OFFSET), described("The previous reply's next_offset, for more.")] = 0,
    ) -> Annotated[CallToolResult, FileList]:
        """Browse the indexed files by path: title, size, modified time, tags; `total` match."""

        def work(cancelled: threading.Event) -> FileList:
            return run_listing(config, path, collection, extensions, modified_after, modified_before, tags, limit, offset)

        return tool_result(writable_reply(lean_listing(await run_tool(work))))


def add_get_index_status(server: Any, daemon: Daemons) -> None:
    """The get_index_status tool: how current the index is and what it holds."""
    from mcp.types import CallToolResult, ToolAnnotations

    config = daemon.config

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_index_status() -> Annotated[CallToolResult, StatusReply]:
        """Whether the index is up to date (or how far a scan got), files indexed and skipped, problems met."""
        return tool_result(writable_reply(lean_status(server_status(config, daemon))))


def add_refresh_index(server: Any, daemon: Daemons) -> None:
    """The refresh_index tool: one file, one source or every source indexed again now, with progress."""
    import anyio
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, ToolAnnotations

    config = daemon.config

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
            return tool_result(writable_reply(await run_tool(work)))
        except ToolError as exc:  # refused or failed: still the spec's fields, success false
            return refused_refresh(str(exc))
