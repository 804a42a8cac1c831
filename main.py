"""Command line and MCP server: a thin layer wiring config, indexer and search together.

Installed, the command is `docsearch`; from a clone, `python main.py`: the same subcommands and flags.

    python main.py [serve] --source DIR      MCP server on stdio (indexes in the background)
    python main.py serve --transport http --source DIR [--host H] [--port P]
    python main.py index   --source DIR      bring the index up to date once, then exit
    python main.py search "QUERY" --source DIR [--limit N] [--json]
    python main.py get PATH --source DIR [--heading H] [--lines A:B] [--max-chars N]
    python main.py status  --source DIR [--json]

The MCP SDK is imported only by ``serve``, so the other subcommands start fast.
"""


import argparse
import difflib
import json
import logging
import os
import re
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import database
from config import CONFIG_ENV_VAR, ENV_VARS, FLAGS, load_config
from database import IndexWriter
from documents import MAX_DOCUMENT_CHARS, document_reply
from exceptions import ArgumentError, Cancelled, ConfigError, DocSearchError, IndexUnavailableError, writable
from file_utils import MAX_USER_PATH_CHARS
from filters import MAX_EXTENSIONS, MAX_PATH_PATTERN_CHARS, read_filters
from http_server import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV_VAR, HttpSettings, http_settings, listening_socket, serve_http
from indexer import TextIndexer, watched_folder
from models import VERSION, DocumentReply, ScanProgress, ServerConfig, StatusReply, WatchState
from search import MAX_LIMIT, MAX_OFFSET, Freshness
from search import search as run_search
from snippets import ESCAPED_HIGHLIGHT, HIGHLIGHT
from status import read_status
from watcher import MAX_BATCH_FILES, Batch, Pacing, SourceWatcher, WatchUnavailable

logger = logging.getLogger("docsearch")
_T = TypeVar("_T")

COMMANDS = ("serve", "index", "search", "get", "status")
#: The name messages start with: the installed command's, or main.py's when run from a clone.
#: The name messages start with: the command as it was run (main.py in a clone, or either console script).
PROG = Path(sys.argv[0]).name if Path(sys.argv[0]).name in ("main.py", "docsearch") else "docsearch-mcp"
#: While the index directory cannot be written, retry opening it this often (seconds).
WRITER_RETRY_SECONDS = 30.0
#: On exit, how long the rescan loop may take to finish the file it is writing (seconds).
STOP_WAIT_SECONDS = 5.0
#: What a failed write left (a full disk) is tried again after RETRY_FIRST_SECONDS, the wait
#: doubling while it keeps failing, up to RETRY_MAX_SECONDS; so is the loop after a failure.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
#: Failures a tool reports as an error message: the daemon's own, and the file system's or
#: SQLite's (an index directory deleted under the server, say), which would otherwise reach the
#: client as a bare "Error executing tool".
TOOL_ERRORS = (DocSearchError, OSError, sqlite3.Error)
#: A search or get_document that finds files changed since they were indexed indexes them again
#: first when the index's writer is free within this time and they are at most this many; else
#: they are returned marked stale (and the next rescan catches up).
FRESHNESS_WAIT_SECONDS = 0.25
MAX_FRESHNESS_FILES = 20
#: Signals that stop the server or an index run, closing the index first (its WAL truncated).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

SERVER_INSTRUCTIONS = """Full-text search over the user's local text files (notes, docs, source).
Use `search` with keywords or a natural-language question; it returns at most one hit per file with
the path, the matching lines (line_start-line_end), the heading and a snippet with matched words in
**bold**. Supports "exact phrases", prefix*, and -excluded words; narrow with `path` (a glob such as
guides/**/*.md, or a folder), `extensions`, `modified_after`/`modified_before`; page with `offset`.
Then read with `get_document(path, heading=...)` or a line range: it returns the file's outline too.
`get_index_status` tells whether the first index is still running. `refresh_index` re-reads one file
(path relative to the source) or everything, right now."""


# ---- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    described = {
        "source_directory": ("DIR", "directory to index"),
        "index_output_directory": ("DIR", "where index files go"),
        "included_extensions": ("EXTS", "comma-separated, e.g. .md,.txt"),
        "excluded_extensions": ("EXTS", "comma-separated, e.g. .log"),
        "scan_interval_seconds": ("S", "seconds between rescans (0: only at start)"),
        "max_file_size_mb": ("N", "skip larger files"),
        "include_hidden": ("BOOL", "true: also index files and folders whose name starts with a dot"),
        "respect_gitignore": ("BOOL", "false: also index what .gitignore, .ignore and .git/info/exclude exclude"),
        "exclude_patterns": ("GLOBS", "comma-separated .gitignore patterns relative to the source, e.g. 'drafts/**,*.tmp'"),
        "index_notebook_outputs": ("BOOL", "true: also index the outputs of notebook cells"),
    }
    for key, flag in FLAGS.items():
        metavar, text = described[key]
        common.add_argument(flag, dest=key, metavar=metavar, help=text)
    common.add_argument(
        "--config", metavar="FILE", help=f"JSON config file (default: ${CONFIG_ENV_VAR}, else config.json beside main.py in a clone, ~/.config/docsearch/config.json installed)"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    env_help = "environment: " + ", ".join(ENV_VARS.values())
    parser = argparse.ArgumentParser(prog=PROG, description="Local full-text search over MCP (stdio or Streamable HTTP).", epilog=env_help)
    parser.add_argument("--version", action="version", version=f"docsearch-mcp {VERSION}")
    sub = parser.add_subparsers(dest="command")
    serve_parser = sub.add_parser("serve", parents=[common], help="run the MCP server, on stdio unless told (default)")
    serve_parser.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default), or Streamable HTTP at /mcp")
    serve_parser.add_argument("--host", help=f"http: address to listen on (default {DEFAULT_HOST}; another needs --allow-remote)")
    serve_parser.add_argument("--port", type=int, help=f"http: port (default {DEFAULT_PORT}; 0: any free port)")
    serve_parser.add_argument("--allow-remote", action="store_true", help="http: allow a non-loopback --host (needs a token)")
    serve_parser.add_argument("--token-file", metavar="FILE", help=f"http: require this bearer token (a file only you can read; else ${TOKEN_ENV_VAR})")
    serve_parser.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help="http: also accept this Host header name (how clients reach the server)"
    )
    sub.add_parser("index", parents=[common], help="update the index once and exit")
    search_parser = sub.add_parser("search", parents=[common], help="search the index")
    search_parser.add_argument("query", help='words, "a phrase", prefix*, -excluded (a query may start with -; one that is an option\'s name goes last, after --)')
    search_parser.add_argument("--limit", type=int, default=10)
    search_parser.add_argument("--offset", type=int, default=0, help="skip this many results (paging)")
    search_parser.add_argument("--path", metavar="GLOB", help="only files matching this glob or under this folder, e.g. 'guides/**/*.md'")
    search_parser.add_argument("--ext", metavar="EXTS", help="only files with these extensions, comma-separated, e.g. .md,.rst")
    search_parser.add_argument("--after", metavar="DATE", help="only files modified at or after this ISO 8601 date or datetime")
    search_parser.add_argument("--before", metavar="DATE", help="only files modified before this ISO 8601 date or datetime")
    search_parser.add_argument("--all-copies", action="store_true", help="one result per file, also for files of the same text")
    search_parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    get_parser = sub.add_parser("get", parents=[common], help="print a file's text, or one section of it, read from disk now")
    get_parser.add_argument("path", metavar="PATH", help="relative to the source, as search prints it, or absolute inside it")
    get_parser.add_argument("--heading", metavar="H", help='one section, named as search names it ("Install > Linux"; "Examples#2": the second "Examples")')
    get_parser.add_argument(
        "--lines", metavar="A:B", type=line_range, help="lines A to B (from 1, inclusive; A: or :B leaves an end open), within --heading's section if given"
    )
    get_parser.add_argument("--max-chars", type=int, metavar="N", help=f"at most N characters (1-{MAX_DOCUMENT_CHARS:,}; default 20,000), cut at a line end")
    get_parser.add_argument("--start-char", type=int, default=0, metavar="N", help="start N characters into the first line (reading on inside a long line)")
    get_parser.add_argument("--json", action="store_true", help="print the reply as JSON (with the outline)")
    status_parser = sub.add_parser("status", parents=[common], help="show index status")
    status_parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    argv = command_first(argv, parser)
    if argv[0] == "search":
        argv = ["search", *query_first(argv[1:], search_parser)]
    return parser.parse_args(argv)


def command_first(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with its command first: ``serve`` when it starts with an option or is empty
    (``main.py --source DIR``). A first word that is no command stops the program (exit 2),
    naming the command it most resembles."""
    if argv and argv[0] in (*COMMANDS, "-h", "--help", "--version"):
        return argv
    if not argv or argv[0].startswith("-"):
        return ["serve", *argv]
    meant = difflib.get_close_matches(argv[0], COMMANDS, n=1)
    hint = f"did you mean '{meant[0]}'?" if meant else f"the commands are {', '.join(COMMANDS)} ({PROG} --help)"
    parser.exit(2, printable(f"{PROG}: unknown command '{argv[0]}'; {hint}") + "\n")


def line_range(text: str) -> tuple[int | None, int | None]:
    """``get --lines``: "A:B", "A:" or ":B" as (start_line, end_line), an open end as None; get_document checks the numbers."""
    found = re.fullmatch(r"\s*([0-9]*)\s*:\s*([0-9]*)\s*", text)
    if not found or not any(found.groups()):
        raise argparse.ArgumentTypeError(f"{text!r} is not A:B, A: or :B (line numbers, from 1)")
    start, end = (int(number) if number else None for number in found.groups())
    return start, end


def query_first(words: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``search`` arguments with a query that starts with "-" (an excluded word: "-draft notes")
    moved after "--", where argparse takes it as the query rather than an unknown option. Such a
    word is the query when it is none of the options, no query came before it, and it starts with
    one dash only ("--li" stays argparse's, which reads it as --limit)."""
    takes_value = {flag: action.nargs != 0 for action in parser._actions for flag in action.option_strings}
    kept: list[str] = []
    query, positional, index = None, False, 0
    while index < len(words):
        word = words[index]
        name = word.split("=", 1)[0]
        if word == "--":  # the user placed the query already
            kept += words[index:]
            break
        if name in takes_value:
            kept.append(word)
            if takes_value[name] and "=" not in word and index + 1 < len(words):
                index += 1
                kept.append(words[index])
        elif word.startswith("-") and not word.startswith("--") and query is None and not positional:
            query = word
        else:
            positional = True
            kept.append(word)
        index += 1
    return kept if query is None else [*kept, "--", query]


def config_flags(args: argparse.Namespace) -> dict[str, Any]:
    keys = ENV_VARS.keys()
    return {key: getattr(args, key) for key in keys if getattr(args, key, None) is not None}


#: Control characters (C0, DEL, C1) and the bidirectional overrides: a file name or title holding
#: them could move the cursor, retitle or clear the terminal, or make text read other than it is.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, keep: str = "") -> str:
    """``text`` with control characters (but those in ``keep``) shown as escapes, for a terminal
    (and writable: see exceptions.writable)."""
    return _UNPRINTABLE.sub(lambda found: found.group() if found.group() in keep else ascii(found.group())[1:-1], writable(text))


def writable_reply(reply: _T) -> _T:
    """``reply`` with every text in it writable (exceptions.writable): a path under a folder
    whose name is not UTF-8 must not stop a reply being written, and with it the stdio server."""
    if isinstance(reply, str):
        return cast(_T, writable(reply))
    if isinstance(reply, dict):
        return cast(_T, {key: writable_reply(value) for key, value in reply.items()})
    if isinstance(reply, list):
        return cast(_T, [writable_reply(item) for item in reply])
    return reply


class _PrintableMessages(logging.Filter):
    """Log messages (which name files of the source) as printable text."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = printable(record.getMessage()), None
        return True


def configure_logging(level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_PrintableMessages())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=[handler])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    quiet = args.command in ("search", "get", "status")
    configure_logging(logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO)
    try:
        config = load_config(config_flags(args), Path(args.config) if args.config else None)
    except ConfigError as exc:
        print(printable(f"{PROG}: config error: {exc}"), file=sys.stderr)
        return 2
    handlers = {"serve": cmd_serve, "index": cmd_index, "search": cmd_search, "get": cmd_get, "status": cmd_status}
    try:
        return handlers[args.command](config, args)
    except KeyboardInterrupt as exc:
        return 128 + getattr(exc, "signum", signal.SIGINT)
    except BrokenPipeError:  # stdout closed early (`get ... | head`): stop quietly, as a shell's tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that flushing it at exit cannot fail again
        return 128 + signal.SIGPIPE


def cmd_index(config: ServerConfig, args: argparse.Namespace) -> int:
    def waiting(pid: int | None) -> None:
        print(f"another process (pid {pid or '?'}) is writing this index; waiting for it to finish", file=sys.stderr)

    try:
        writer = IndexWriter(config.db_path, on_wait=waiting)
    except Exception as exc:  # noqa: BLE001 - any failure to open is reported the same way
        print(printable(f"{PROG}: cannot open the index {config.db_path}: {exc}"), file=sys.stderr)
        return 1
    indexer = TextIndexer(config, writer)
    for number in STOP_SIGNALS:  # stop where the scan is (a transaction rolls back), then close
        signal.signal(number, _interrupt)
    reporter = ProgressPrinter()
    try:
        reply = indexer.scan(reporter)
    finally:
        reporter.end()
        writer.close()
    status = read_status(config, indexer)
    skipped = ", ".join(f"{reason} {count}" for reason, count in sorted(status["skipped_files"].items())) or "none"
    print(printable(
        f"indexed {reply['files_processed']} files, removed {reply['files_removed']}, skipped: {skipped};"
        f" {status['indexed_files']} files in the index ({status['index_size_mb']:.1f} MB) in"
        f" {time.monotonic() - reporter.started:.1f}s -> {config.db_path}"
    ), file=sys.stderr)
    for error in reply["errors"]:
        print(f"  error: {printable(error)}", file=sys.stderr)
    return 0 if reply["success"] else 1


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised where the main thread is, so that cleanup runs on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


class ProgressPrinter:
    """Index progress on stderr: a bar redrawn in place on a terminal (10 times a second), else a
    line of counts once a second, for logs. On a terminal a log line takes the bar's place, and the
    bar is drawn again below it at the next update."""

    BAR_WIDTH = 30

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr  # None when stderr is closed (2>&-)
        self.on_terminal = self.stream is not None and self.stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.drawn = False
        if self.on_terminal:
            for handler in logging.getLogger().handlers:
                handler.addFilter(self._clear_bar)

    def _clear_bar(self, record: logging.LogRecord) -> bool:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False
        return True

    def __call__(self, progress: ScanProgress) -> None:
        now = time.monotonic()
        finished = progress.files_done >= progress.files_total
        if self.stream is None or (now - self.last < (0.1 if self.on_terminal else 1.0) and not finished):
            return
        self.last = now
        rate = progress.files_done / max(now - self.started, 1e-9)
        counts = f"{progress.files_done:,}/{progress.files_total:,} files ({rate:,.0f} files/s)"
        if not self.on_terminal:
            print(f"{progress.phase}: {counts}", file=self.stream)
            return
        filled = self.BAR_WIDTH * progress.files_done // max(progress.files_total, 1)
        bar = "#" * filled + "." * (self.BAR_WIDTH - filled)
        line = f"{progress.phase:<8} [{bar}] {counts}"
        self.stream.write(f"\r\x1b[K{line[:self.width() - 1]}")  # a line that wraps could not be redrawn in place
        self.stream.flush()
        self.drawn = True

    def width(self) -> int:
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            columns = 0
        return max(columns, 20) if columns else 80  # 0: a terminal that does not say

    def end(self) -> None:
        """Leave the line the bar was drawn on, so that what follows starts on its own."""
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._clear_bar)
        if self.drawn:
            self.stream.write("\n")
            self.drawn = False


def cmd_search(config: ServerConfig, args: argparse.Namespace) -> int:
    try:
        extensions = [part for part in args.ext.split(",") if part.strip()] if args.ext is not None else None
        reply = writable_reply(run_search(
            config.db_path, args.query, args.limit, filters=read_filters(args.path, extensions, args.after, args.before),
            offset=args.offset, collapse_duplicates=not args.all_copies, freshness=Freshness(config.source_directory),
        ))
    except DocSearchError as exc:
        print(printable(f"{PROG}: {exc}{other_settings_hint(config)}"), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(reply, ensure_ascii=False, indent=2))
        return 0
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    for hit in reply["results"]:
        stale = "  (changed since indexed)" if hit["stale"] else ""
        print(printable(f"{hit['path']}:{hit['line_start']}-{hit['line_end']}  [{hit['score']:.4g}]  {hit['title']}{stale}"))
        print(f"    {shown_snippet(hit['snippet'], bold)}")
        if hit["also_in_count"]:
            print(printable(f"    same text in: {', '.join(hit['also_in'])}{' ...' if hit['also_in_count'] > len(hit['also_in']) else ''}"))
    for warning in reply["warnings"]:
        print(printable(f"note: {warning}"), file=sys.stderr)
    more = f"; more with --offset {reply['next_offset']}" if reply["has_more"] else ""
    print(f"{len(reply['results'])} of {reply['files_matched']} matching files{more}", file=sys.stderr)
    return 0


#: A search snippet's match markers, and the file's own "**" as the snippet escapes it.
_SNIPPET_MARKS = re.compile(f"{re.escape(ESCAPED_HIGHLIGHT)}|{re.escape(HIGHLIGHT)}")
BOLD, NOT_BOLD = "\x1b[1m", "\x1b[0m"


def shown_snippet(snippet: str, bold: bool) -> str:
    """A search snippet for a person: printable, without the ``**`` around matches (in bold on a
    terminal, when ``bold``), and with the file's own ``**`` as the file has it."""
    shown: list[str] = []
    matched, at = False, 0
    for mark in _SNIPPET_MARKS.finditer(snippet):
        shown.append(printable(snippet[at:mark.start()]))
        if mark.group() == HIGHLIGHT:
            matched = not matched
            shown.append((BOLD if matched else NOT_BOLD) if bold else "")
        else:
            shown.append(HIGHLIGHT)
        at = mark.end()
    shown.append(printable(snippet[at:]))
    if matched and bold:  # a match the snippet left open must not leave the terminal bold
        shown.append(NOT_BOLD)
    return "".join(shown)


def cmd_get(config: ServerConfig, args: argparse.Namespace) -> int:
    """get_document's reply on stdout: the text, or with --json all of it; a truncated text ends
    with a line on stderr saying how to read on."""
    start_line, end_line = args.lines or (None, None)
    given: dict[str, Any] = {} if args.max_chars is None else {"max_chars": args.max_chars}  # else get_document's default
    try:
        reply = writable_reply(document_reply(config, args.path, args.heading, start_line, end_line, start_char=args.start_char, **given))
    except TOOL_ERRORS as exc:
        bad = exc if isinstance(exc, ArgumentError) and exc.name != "path" else None  # a wrong path is "no such file"
        shown = str(exc) if bad is None else f"{_GET_FLAGS.get(bad.name, bad.name)}: {bad.problem}"
        print(printable(f"{PROG}: {shown}"), file=sys.stderr)
        return 1 if bad is None else 2
    if args.json:
        print(json.dumps(reply, ensure_ascii=False, indent=2))
        return 0
    if reply["text"]:
        print(printable(reply["text"], keep="\n\t"))
    if reply["truncated"]:
        print(read_on_hint(reply, end_line), file=sys.stderr)
    return 0


#: get_document's arguments as ``get`` spells them, for its messages.
_GET_FLAGS = {"heading": "--heading", "start_line": "--lines", "end_line": "--lines", "max_chars": "--max-chars", "start_char": "--start-char"}


def read_on_hint(reply: DocumentReply, end_line: int | None) -> str:
    """The line after a truncated ``get``: what was shown, and the arguments that read on."""
    lines = f"--lines {reply['next_start_line']}:{'' if end_line is None else end_line}"
    within = "" if reply["next_start_char"] is None else f" --start-char {reply['next_start_char']}"
    return (
        f"{PROG}: lines {reply['line_start']}-{reply['line_end']} of {reply['total_lines']} shown;"
        f" read on with {lines}{within} and the same other arguments"
    )


def other_settings_hint(config: ServerConfig) -> str:
    """When this source has no index for these settings but has one for others, say so."""
    if config.db_path.exists():
        return ""
    others = database.other_settings_indexes(config.db_path)
    if not others:
        return ""
    return (
        f"; this source has an index built with other settings ({others[0].name}): give the same"
        " --include-ext, --exclude-ext and --max-file-size-mb as the server that built it"
    )


def cmd_status(config: ServerConfig, args: argparse.Namespace) -> int:
    status = writable_reply(advised(read_status(config, None)))
    hint = other_settings_hint(config)
    if hint and status["last_error"]:
        status["last_error"] += hint
    unopened = unopened_state(status, config.db_path.exists())
    if args.json:
        print(json.dumps(status, ensure_ascii=False, indent=2))
    else:
        for label, value in status_lines(status, unopened):
            print(printable(f"{label:<10} {value}"))
    return 1 if unopened and unopened.startswith("cannot be read") else 0


def advised(status: StatusReply) -> StatusReply:
    """``status`` with a ``hint`` when it shows something the user can fix: PDFs skipped because
    pdftotext is missing."""
    pdfs = status["skipped_files"].get("no_extractor", 0)
    if pdfs:
        status["hint"] = (
            f"{pdfs:,} PDF{'s' if pdfs > 1 else ''} not indexed: pdftotext is missing or could not run. Install"
            f" poppler-utils (or put pdftotext in a folder on PATH); the next scan reads {'them' if pdfs > 1 else 'it'}."
        )
    return status


def unopened_state(status: StatusReply, index_exists: bool) -> str | None:
    """Why no process has the index open, when none has: not made yet, or not readable."""
    if status["state"] != "starting" or status["writer_pid"] is not None:
        return None
    return f"cannot be read: {status['last_error']}" if index_exists else "not indexed yet (run index, or start the server)"


def status_lines(status: StatusReply, unopened: str | None = None) -> list[tuple[str, str]]:
    """get_index_status as (label, text) lines for a person; --json gives every field as is."""
    progress, watching = status["progress"], status["watching"]
    state = unopened or {"idle": "up to date", "error": "error"}.get(status["state"], status["state"])
    if status["state"] == "indexing":
        state = f"indexing ({progress['phase']}): {progress['files_done']:,} of {progress['files_total']:,} files"
    if status["writer_pid"] is not None:
        state += f"; written by process {status['writer_pid']}"
    skipped = ", ".join(f"{reason} {count:,}" for reason, count in sorted(status["skipped_files"].items()))
    lines = [
        ("source", status["source_directory"]),
        ("index", f"{status['index_path']} ({status['index_size_mb']:.1f} MB)"),
        ("state", state),
        ("last scan", status["last_scan"] or "never"),
        ("files", f"{status['indexed_files']:,} indexed"
         + (f", {status['fallback_decoded_files']:,} read as Windows-1252 (not UTF-8)" if status["fallback_decoded_files"] else "")),
        ("skipped", skipped or "none"),
        ("watching", f"{watching['folders']:,} folders" if watching["active"] else f"no: {watching['problem']}"),
    ]
    if status["errors_encountered"]:
        lines.append(("errors", f"{status['errors_encountered']:,}; last: {status['last_error'] or '-'}"))
    if "hint" in status:
        lines.append(("hint", status["hint"]))
    return lines


# ---- the daemon ------------------------------------------------------------------------------


class Backoff:
    """A wait that doubles with each failure in a row, from RETRY_FIRST_SECONDS to RETRY_MAX_SECONDS."""

    def __init__(self) -> None:
        self.failures = 0

    def delay(self) -> float:
        """The wait after one more failure."""
        self.failures += 1
        return min(RETRY_FIRST_SECONDS * 2 ** min(self.failures - 1, 30), RETRY_MAX_SECONDS)

    def reset(self) -> None:
        self.failures = 0


class Daemon:
    """Owns the writer and the background rescan loop; the MCP tools call into it.

    Nothing here touches the index before the loop thread runs: opening it may wait for another
    process that is writing it, and the MCP handshake must not wait for that.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.indexer: TextIndexer | None = None
        self.startup_error: str | None = None
        self.first_scan_done = threading.Event()
        self.stopping = threading.Event()
        self.watcher: SourceWatcher | None = None
        self.watch_state = WatchState(False, 0, "the index is not open yet")
        self._thread = threading.Thread(target=self._loop, name="rescan", daemon=True)
        self._checked = False  # the index's integrity, once per run
        self._pacing = Pacing()
        #: Files the watcher reported that a failed write left unindexed, a rescan a failed write
        #: left to do, and when to try again (see RETRY_FIRST_SECONDS).
        self._pending: set[str] = set()
        self._rescan_wanted = False
        self._retry_at: float | None = None
        self._write_backoff = Backoff()
        self._loop_backoff = Backoff()

    def _open_writer(self) -> None:
        def waiting(pid: int | None) -> None:
            logger.info("another process (pid %s) is writing %s; serving searches from it meanwhile", pid or "?", self.config.db_path)

        try:
            writer = IndexWriter(self.config.db_path, on_wait=waiting, stop=self.stopping.is_set)
        except Cancelled:
            return
        except Exception as exc:  # noqa: BLE001 - the server must keep answering whatever happened
            self.startup_error = f"cannot open or create the index {self.config.db_path}: {exc}"
            logger.error("%s; retrying every %.0fs", self.startup_error, WRITER_RETRY_SECONDS)
            return
        self.indexer = TextIndexer(self.config, writer, self.stopping)
        self.startup_error = None

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        """The rescan thread. Whatever escapes a turn is logged with its traceback and shown in
        status, the watcher is dropped, and after a pause (longer while failures repeat) the loop
        goes on with a rescan and a new watcher: it ends only when the server stops."""
        while not self.stopping.is_set():
            try:
                self._turn()
                self._loop_backoff.reset()
            except Cancelled:
                break
            except Exception as exc:  # noqa: BLE001 - the one place nothing may get past
                self._turn_failed(exc)
        if self.watcher is not None:
            self.watcher.close()

    def _turn(self) -> None:
        """Open the index if it is not open, scan, then index what the watcher reports until the
        next rescan is due."""
        if self.indexer is None:
            self._open_writer()
        indexer = self.indexer
        if indexer is None:
            self._wait_for_changes(min(self.config.scan_interval_seconds or WRITER_RETRY_SECONDS, WRITER_RETRY_SECONDS))
            return
        try:
            if not self._checked:
                indexer.check_integrity()
                self._checked = True
            if self.watcher is None:
                self._start_watching()  # before the scan: edits made during it are caught too
                indexer.watching = self.watch_state  # the scan records it
            self._scan(indexer)
        finally:
            self.first_scan_done.set()  # searches stop saying "indexing" even if the first scan failed
        self._wait_for_changes(self.config.scan_interval_seconds or None)

    def _turn_failed(self, exc: Exception) -> None:
        message = f"the background indexing failed ({type(exc).__name__}: {exc}); it goes on with a rescan and a new watcher"
        if self.indexer is not None:
            self.indexer.record_problem(message, exc)
        else:
            logger.error("%s", message, exc_info=exc)
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
            self.watch_state = WatchState(False, 0, "stopped by a failure (see last_error); watching again after the next rescan")
        self.stopping.wait(self._loop_backoff.delay())

    def _scan(self, indexer: TextIndexer, why: str | None = None) -> None:
        """A full scan; it also covers the files a failed write left pending. If it could not
        write the index, it is tried again later (see _retry_later)."""
        if why:
            logger.info("rescanning: %s", why)
        reply = indexer.scan()
        self._rescan_wanted = False
        if indexer.write_failure is not None:
            self._retry_later(rescan=True)
            return
        if reply["success"] or not self._pending:
            self._caught_up()
        if not self.first_scan_done.is_set():
            logger.info("first scan finished: %d files read, %d removed; serving %s",
                        reply["files_processed"], reply["files_removed"], self.config.source_directory)

    def _start_watching(self) -> None:
        try:
            self.watcher = SourceWatcher(self.config.source_directory, watched_folder(self.config))
            self.watcher.start()
        except (WatchUnavailable, OSError) as exc:
            if str(exc) != self.watch_state.problem:
                logger.warning("not watching %s for changes: %s", self.config.source_directory, exc)
            self.watch_state = WatchState(False, 0, str(exc))
            self.watcher = None  # tried again after the next rescan
        else:
            self.watch_state = self.watcher.state
            logger.info("watching %d folders for changes", self.watcher.state.folders)

    def _wait_for_changes(self, seconds: float | None) -> None:
        """Until the next periodic rescan (``seconds``; None: none), index what the watcher reports
        as it comes (a hot file when its wait ends, see watcher.Pacing), and retry what a failed
        write left when its time comes; return early for a rescan that is to be retried. Without
        a watcher, just wait (the rescan that follows catches up)."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self.stopping.is_set():
            now = time.monotonic()
            retry_due = self._retry_at is not None and self._retry_at <= now
            if (deadline is not None and deadline <= now) or (self._rescan_wanted and retry_due):
                return
            timers = [at for at in (deadline, self._retry_at) if at is not None]
            watcher, indexer = self.watcher, self.indexer
            if watcher is None or indexer is None or not watcher.state.active:
                self.stopping.wait(max(0.0, min(timers) - now) if timers else None)
                return
            hot = self._pacing.next_due()
            wake = timers + ([hot] if hot is not None else [])
            batch = watcher.next_batch(max(0.0, min(wake) - now) if wake else None)
            if self.stopping.is_set():
                return
            if batch is not None and batch.rescan:
                self._scan(indexer, batch.rescan)
                if self.watcher is not None:
                    self.watcher.rewatch()  # folders a changed rule lets in now
            else:
                self._index_changed(indexer, batch or Batch())
            if not watcher.state.active:  # a watch limit reached: the periodic rescan takes over
                self.watch_state, self.watcher = watcher.state, None
                indexer.record_watching(self.watch_state)

    def _index_changed(self, indexer: TextIndexer, batch: Batch) -> None:
        """Index the files that changed, unless they are hot (they wait, see watcher.Pacing), with
        the hot files whose wait ended and, when it is time, the ones a failed write left."""
        now = time.monotonic()
        todo = self._pacing.changed(batch.paths - batch.gone, now) | batch.gone
        retry_due = self._retry_at is not None and self._retry_at <= now
        if todo or retry_due:
            todo |= self._pending
        if not todo:
            if retry_due:
                self._caught_up()  # nothing was left to retry
            return
        try:
            indexer.refresh_changed(sorted(todo))
        except Cancelled:
            return
        except Exception as exc:  # noqa: BLE001 - nothing the watcher reported may be lost
            self._pending |= todo
            if indexer.write_failure is not None:  # the index cannot be written (a full disk): status says so
                self._retry_later()
            else:  # the source or a file in a state nobody foresaw: a rescan sorts it out
                indexer.record_problem(f"indexing {len(todo)} changed files failed ({type(exc).__name__}: {exc}); rescanning", exc)
                self._retry_later(rescan=True)
        else:
            self._caught_up()

    def _retry_later(self, rescan: bool = False) -> None:
        """Try again what a failed write left (the pending files; a rescan if asked, or if they
        are too many to refresh one by one), later and later while it keeps failing."""
        self._rescan_wanted = self._rescan_wanted or rescan or len(self._pending) > MAX_BATCH_FILES
        if self._rescan_wanted:
            self._pending.clear()  # the rescan reads them all
        delay = self._write_backoff.delay()
        self._retry_at = time.monotonic() + delay
        logger.info("trying again in %.0fs to %s", delay, "rescan" if self._rescan_wanted else f"index {len(self._pending)} changed files")

    def _caught_up(self) -> None:
        """What failed before is written now (or there was nothing left): no retry is due, unless
        a rescan still is."""
        self._pending.clear()
        if not self._rescan_wanted:
            self._retry_at = None
            self._write_backoff.reset()

    def refresh_found(self, paths: list[str]) -> bool:
        """Index again files a search or get_document found changed, if that can be done now (see
        FRESHNESS_WAIT_SECONDS); True if it was."""
        indexer = self.indexer
        if indexer is None or len(paths) > MAX_FRESHNESS_FILES:
            return False
        return indexer.refresh_if_free(paths, FRESHNESS_WAIT_SECONDS)

    def wait_for_indexer(self, cancelled: threading.Event) -> TextIndexer:
        """The indexer, once the loop has opened the index (it may be waiting for another process
        that is writing it); raises if it cannot be opened or the caller gives up."""
        while self.indexer is None:
            if self.startup_error:
                raise DocSearchError(self.startup_error)
            if cancelled.wait(0.05) or self.stopping.is_set():
                raise Cancelled("cancelled while waiting for the index to open")
        return self.indexer

    def close(self) -> None:
        """Stop the rescan loop (a scan ends after the file it is writing) and close the index,
        truncating its WAL."""
        self.stopping.set()
        if self.watcher is not None:
            self.watcher.wake()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_SECONDS)
        if self.indexer is not None and not self._thread.is_alive():
            self.indexer.writer.close()


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


def build_server(daemon: Daemon) -> Any:
    """The MCP server object with its tools (imports the SDK)."""
    import anyio
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    from models import DocumentReply, RefreshReply, SearchReply, StatusReply

    server = MCPServer("docsearch", version=VERSION, instructions=SERVER_INSTRUCTIONS)
    config = daemon.config

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))
    async def search(
        query: str,
        limit: Annotated[int, schema_bounds(1, MAX_LIMIT)] = 10,
        path: Annotated[str | None, schema_bounds(0, MAX_PATH_PATTERN_CHARS, "text")] = None,
        extensions: Annotated[list[str] | None, schema_bounds(0, MAX_EXTENSIONS, "list")] = None,
        modified_after: str | None = None,
        modified_before: str | None = None,
        offset: Annotated[int, schema_bounds(0, MAX_OFFSET)] = 0,
        collapse_duplicates: bool = True,
    ) -> SearchReply:
        """Full-text search of the indexed files. Returns the best-matching section of each file
        (at most `limit` files, 1-100): path, title, heading, snippet (matches in **bold**; a ** in
        the file itself shows as \\*\\*), score (higher is better), line_start/line_end,
        last_modified. Accepts keywords or a question; "exact phrase", prefix*, and -exclude work.
        Filters, applied inside the ranking: `path`, a glob relative to the source (`guides/**/*.md`:
        * and ? stay within a folder, ** spans folders) or a folder (`guides/`), case-sensitive as
        file names are (one that matches no file but would ignoring case gets a warning naming the
        spelling that matches, `**/About/**` for `**/about/**`); `extensions`
        ([".md"]); `modified_after`/`modified_before`, ISO 8601 dates or datetimes (UTC unless
        given). `offset` pages (`has_more`, `next_offset`). Files whose best section is the same text
        are one result, the others in `also_in` (`collapse_duplicates=false`: one result each).
        Each file returned is checked on disk: deleted ones are left out, changed ones are indexed
        again first, or marked `stale`."""

        def work(cancelled: threading.Event) -> SearchReply:
            return run_search(
                config.db_path, query, limit, indexing=not daemon.first_scan_done.is_set(), cancelled=cancelled.is_set,
                filters=read_filters(path, extensions, modified_after, modified_before), offset=offset,
                collapse_duplicates=collapse_duplicates, freshness=Freshness(config.source_directory, daemon.refresh_found),
            )

        try:
            return writable_reply(await run_cancellable(work))
        except TOOL_ERRORS as exc:
            if isinstance(exc, IndexUnavailableError) and daemon.indexer is not None:
                daemon.indexer.damage_suspected = True
            raise ToolError(writable(str(exc))) from exc

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))
    async def get_document(
        path: Annotated[str, schema_bounds(1, MAX_USER_PATH_CHARS, "text")],
        heading: str | None = None,
        start_line: Annotated[int | None, schema_bounds(1)] = None,
        end_line: Annotated[int | None, schema_bounds(1)] = None,
        max_chars: Annotated[int, schema_bounds(1, MAX_DOCUMENT_CHARS)] = 20_000,
        start_char: Annotated[int, schema_bounds(0)] = 0,
    ) -> DocumentReply:
        """Read an indexed file from disk now (`path` relative to the source, as search returns it).
        `heading`: one section, named as search results name it ("Install > Linux"; its subsections
        included); a name several headings share takes "#2" for the second ("Examples#2"), or
        `start_line` (any line of the one wanted). `start_line`/`end_line`: a line range (1-based,
        inclusive), within the heading's section if one is named. Neither: the file from the top.
        At most `max_chars` (1-100000) characters, cut at a line end, or inside a line longer than
        that: when `truncated`, ask again with the same arguments and `start_line=next_start_line`,
        plus `start_char=next_start_char` (characters of that line already read) when it is set.
        `outline` lists every heading with its lines. `changed_since_indexed`: the file differs from
        what the index held (it is indexed again)."""

        def work(cancelled: threading.Event) -> DocumentReply:
            return document_reply(config, path, heading, start_line, end_line, max_chars, daemon.refresh_found, start_char)

        try:
            return writable_reply(await run_cancellable(work))
        except TOOL_ERRORS as exc:
            raise ToolError(writable(str(exc))) from exc

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def get_index_status() -> StatusReply:
        """How many files are indexed, when the last scan finished, whether a scan is running (in
        this process or another one writing the same index) and how far it got, the index size, and
        how many files were skipped for which reason."""
        return writable_reply(advised(read_status(config, daemon.indexer, daemon.startup_error, daemon.watch_state)))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False))
    async def refresh_index(
        ctx: Context, filepath: Annotated[str | None, schema_bounds(1, MAX_USER_PATH_CHARS, "text")] = None
    ) -> RefreshReply:
        """Make the index current now. With `filepath` (relative to the source directory, or
        absolute inside it): re-read that one file, or drop it if it was deleted. Without: rescan
        everything (waits for a scan already running, then scans again)."""

        def report(progress: ScanProgress) -> None:
            try:
                anyio.from_thread.run(ctx.report_progress, progress.files_done, progress.files_total or None, progress.phase)
            except Exception:  # noqa: BLE001 - a client gone or a cancelled call must not stop the scan
                logger.debug("progress not sent", exc_info=True)

        def work(cancelled: threading.Event) -> RefreshReply:
            indexer = daemon.wait_for_indexer(cancelled)
            if filepath is not None:
                return indexer.refresh_file(filepath, cancelled.is_set)
            return indexer.scan(report, cancelled.is_set)

        try:
            return writable_reply(await run_cancellable(work))
        except TOOL_ERRORS as exc:
            raise ToolError(writable(str(exc))) from exc

    return server


def cmd_serve(config: ServerConfig, args: argparse.Namespace) -> int:
    try:
        http = http_listener(args)
    except ConfigError as exc:
        print(printable(f"{PROG}: {exc}"), file=sys.stderr)
        return 2
    daemon = Daemon(config)
    for number in STOP_SIGNALS:  # first: Ctrl-C must work from the start
        signal.signal(number, _stopper(daemon.close))
    server = build_server(daemon)
    daemon.start()
    if http is not None:
        serve_http(server, *http)  # returns on a stop signal
    else:
        if sys.stdin.isatty():
            logger.info("serving %s over MCP stdio; this is meant to be started by an MCP client (Ctrl-C stops)", config.source_directory)
        server.run()  # returns when the client closes stdin
    daemon.close()
    return 0


def http_listener(args: argparse.Namespace) -> tuple[HttpSettings, socket.socket] | None:
    """With --transport http, the checked settings and the socket, bound before anything starts;
    None for stdio, where the HTTP flags are refused rather than ignored."""
    if args.transport == "http":
        settings = http_settings(
            DEFAULT_HOST if args.host is None else args.host, DEFAULT_PORT if args.port is None else args.port,
            args.allow_remote, Path(args.token_file) if args.token_file else None, args.allow_host, os.environ,
        )
        return settings, listening_socket(settings)
    http_only = {"--host": args.host, "--port": args.port, "--allow-remote": args.allow_remote or None,
                 "--token-file": args.token_file, "--allow-host": args.allow_host or None}
    given = [flag for flag, value in http_only.items() if value is not None]
    if given:
        raise ConfigError(given[0], "is for --transport http; this server talks over stdio")
    return None


def _stopper(close: Callable[[], None]) -> Callable[[int, object], None]:
    def stop(signum: int, frame: object) -> None:
        # The SDK reads stdin on a worker thread that stays blocked in read() on a terminal, so a
        # cancelled event loop would wait for it forever: close the index and leave at once. The
        # index is crash-safe, so even a close that cannot finish in time loses nothing.
        logger.info("%s; stopping", signal.Signals(signum).name)
        close()
        logging.shutdown()
        os._exit(128 + signum)

    return stop


if __name__ == "__main__":
    sys.exit(main())
