"""The command line: arguments, the index/search/get/list/status commands, and serve, which starts the
background loop (daemon.py) and the MCP server (tools.py) over stdio or HTTP.

Installed, the command is `docsearch-mcp` (or `docsearch`); from a clone, `python main.py`: the same
subcommands and flags.

    python main.py [serve] --source DIR      MCP server on stdio (indexes in the background)
    python main.py serve --transport http --source DIR [--host H] [--port P]
    python main.py index   --source DIR      bring the index up to date once, then exit
    python main.py search "QUERY" --source DIR [--limit N] [--json]
    python main.py get PATH --source DIR [--heading H] [--lines A:B] [--max-chars N]
    python main.py list    --source DIR [--path GLOB] [--tags T] [--json]
    python main.py status  --source DIR [--json]

The MCP SDK is imported only by ``serve``, so the other subcommands start fast.
"""

import argparse
import difflib
import gc
import json
import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import database
import index_files
from config import CONFIG_ENV_VAR, ENV_VARS, FLAGS, load_config
from daemon import Daemons
from documents import MAX_DOCUMENT_CHARS, document_reply
from exceptions import ArgumentError, ConfigError, DocSearchError, reason_of, writable, writable_reply
from filters import read_filters
from http_server import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV_VAR, HttpSettings, http_settings, listening_socket, serve_http
from index_writer import IndexWriter, SourceWriter
from indexer import TextIndexer
from listing import list_files
from models import VERSION, DocumentReply, ScanProgress, ServerConfig, StatusReply
from phrasings import alternatives_given, fused_search
from search import Freshness, with_collections
from search import search as run_search
from snippets import ESCAPED_HIGHLIGHT, HIGHLIGHT
from sources import filter_prefixes, source_of
from status import read_status, server_status
from tools import TOOL_ERRORS, build_server


logger = logging.getLogger("docsearch")

COMMANDS = ("serve", "index", "search", "get", "list", "status")
#: The name messages start with: the command as it was run (main.py in a clone, or either console script).
PROG = Path(sys.argv[0]).name if Path(sys.argv[0]).name in ("main.py", "docsearch") else "docsearch-mcp"
#: Signals that stop the server or an index run, closing the index first (its WAL truncated).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)



# ---- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    described = {
        "source_directory": ("[NAME=]DIR", "a folder to index; give it again for more (NAME: results' collection, default the folder's name)"),
        "index_output_directory": ("DIR", "where index files go"),
        "included_extensions": ("EXTS", "comma-separated, e.g. .md,.txt; @code: a source tree's code, docs and config files"),
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
        common.add_argument(flag, dest=key, metavar=metavar, help=text, **({"action": "append"} if key == "source_directory" else {}))
    common.add_argument(
        "--config", metavar="FILE", help=f"JSON config file (default: ${CONFIG_ENV_VAR}, else config.json beside main.py in a clone, ~/.config/docsearch/config.json installed);"
        ' each of its sources may have settings of its own: {"sources": {"app": {"path": "~/src/app", "included_extensions": "@code"}}}'
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
    add_filter_options(search_parser, limit=10, paging="results")
    search_parser.add_argument("--all-copies", action="store_true", help="one result per file, also for files of the same text")
    search_parser.add_argument("--alt", action="append", metavar="QUERY", help="another phrasing of the same need, fused with the query (up to 4)")
    search_parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    get_parser = sub.add_parser("get", parents=[common], help="print a file's text, or one section of it, read from disk now")
    get_parser.add_argument("path", metavar="PATH", help="relative to the source, as search prints it, or absolute inside it")
    get_parser.add_argument("--heading", metavar="H", help='one section, named as search names it ("Install > Linux"; "Examples#2": the second "Examples")')
    get_parser.add_argument(
        "--lines", metavar="A:B", type=line_range, help="lines A to B (from 1, inclusive; A: or :B leaves an end open), within --heading's section if given"
    )
    get_parser.add_argument("--max-chars", type=int, metavar="N", help=f"at most N characters (1-{MAX_DOCUMENT_CHARS:,}; default 20,000), cut at a line end")
    get_parser.add_argument("--start-char", type=int, default=0, metavar="N", help="start N characters into the first line (reading on inside a long line)")
    get_parser.add_argument("--collection", metavar="NAME", help="the file's source (with several sources, when more than one has the path)")
    get_parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    get_parser.add_argument("--outline", action="store_true", help="with --json: the file's headings and their lines too")
    list_parser = sub.add_parser("list", parents=[common], help="list the indexed files, by path")
    add_filter_options(list_parser, limit=100, paging="files")
    list_parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    status_parser = sub.add_parser("status", parents=[common], help="show index status")
    status_parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    argv = command_first(argv, parser)
    if argv[0] in ("search", "get"):
        argv = [argv[0], *query_first(argv[1:], search_parser if argv[0] == "search" else get_parser)]
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "get":
        get_parser.error(f"one PATH only; also given: {' '.join(extra)} (after '--', every word is the path: options go before it)")
    if extra:
        parser.parse_args(argv)  # argparse's own message for what it does not know
    return args


def add_filter_options(parser: argparse.ArgumentParser, limit: int, paging: str) -> None:
    """The options search and list share: paging, and the filters of which files."""
    parser.add_argument("--limit", type=int, default=limit)
    parser.add_argument("--offset", type=int, default=0, help=f"skip this many {paging} (paging)")
    parser.add_argument("--path", metavar="GLOB", help="only files matching this glob or under this folder, e.g. 'guides/**/*.md'")
    parser.add_argument("--ext", metavar="EXTS", help="only files with these extensions, comma-separated, e.g. .md,.rst")
    parser.add_argument("--after", metavar="DATE", help="only files modified at or after this ISO 8601 date or datetime")
    parser.add_argument("--before", metavar="DATE", help="only files modified before this ISO 8601 date or datetime")
    parser.add_argument("--collection", metavar="NAMES", help="only these sources' files, comma-separated (with several sources)")
    parser.add_argument("--tags", metavar="TAGS", help="only files holding every one of these front matter tags, comma-separated")


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
                value = words[index]
                if value.startswith("-") and word.startswith("--"):  # "--alt -draft": argparse would read an option
                    kept[-1] = f"{word}={value}"
                else:
                    kept.append(value)
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
    quiet = args.command in ("search", "get", "list", "status")
    configure_logging(logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO)
    try:
        config = load_config(config_flags(args), Path(args.config) if args.config else None)
    except ConfigError as exc:
        print(printable(f"{PROG}: config error: {exc}"), file=sys.stderr)
        return 2
    handlers = {"serve": cmd_serve, "index": cmd_index, "search": cmd_search, "get": cmd_get, "list": cmd_list, "status": cmd_status}
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
        print(printable(f"{PROG}: cannot open the index {config.db_path}: {database.problem_of(exc, config.db_path)}"), file=sys.stderr)
        return 1
    for number in STOP_SIGNALS:  # stop where the scan is (a transaction rolls back), then close
        signal.signal(number, _interrupt)
    reporter = ProgressPrinter()
    replies = []
    try:
        for source in config.sources:
            each = config.for_source(source)
            prefix = config.key_prefix(source.name)
            indexer = TextIndexer(each, SourceWriter(writer, prefix) if prefix else writer)
            reply = indexer.scan(reporter)
            replies.append((source, reply, read_status(each, indexer)))
    finally:
        reporter.end()
        writer.close()
    for source, reply, status in replies:
        skipped = ", ".join(f"{reason} {count}" for reason, count in sorted(status["skipped_files"].items())) or "none"
        named = f"{source.name}: " if config.several else ""
        print(printable(
            f"{named}indexed {reply['files_processed']} files, removed {reply['files_removed']}, skipped: {skipped};"
            f" {status['indexed_files']} files in the index"
        ), file=sys.stderr)
        for error in reply["errors"]:
            print(f"  error: {printable(named + error)}", file=sys.stderr)
    size = index_files.index_bytes(config.db_path) / (1024 * 1024)
    print(f"{size:.1f} MB in {time.monotonic() - reporter.started:.1f}s -> {printable(str(config.db_path))}", file=sys.stderr)
    return 0 if all(reply["success"] for _, reply, _ in replies) else 1


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


def comma_list(text: str | None, flag: str) -> list[str] | None:
    """A comma-separated option's items (empty ones dropped); None if the option was not given. An
    option given with no item (``--tags ,,,``) is an ArgumentError: it would filter nothing."""
    if text is None:
        return None
    items = [part for part in text.split(",") if part.strip()]
    if not items:
        raise ArgumentError(flag, f"{text!r} names nothing: give one or more, comma-separated")
    return items


def cmd_search(config: ServerConfig, args: argparse.Namespace) -> int:
    try:
        extensions, collection, tags = comma_list(args.ext, "--ext"), comma_list(args.collection, "--collection"), comma_list(args.tags, "--tags")
        under = filter_prefixes(config, collection, args.path)
        phrasings = alternatives_given(args.alt, args.query)
        run = partial(fused_search, alternatives=phrasings) if phrasings else run_search
        reply = writable_reply(with_collections(run(
            config.db_path, args.query, args.limit, filters=read_filters(args.path, extensions, args.after, args.before, under, tags),
            offset=args.offset, collapse_duplicates=not args.all_copies, freshness=Freshness.of(config),
        ), config))
    except DocSearchError as exc:
        print(printable(f"{PROG}: {exc}{other_settings_hint(config)}"), file=sys.stderr)
        return 1
    if args.json:
        print_json(reply)
        return 0
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    for hit in reply["results"]:
        stale = "  (changed since indexed)" if hit["stale"] else ""
        print(printable(f"{located(hit)}:{hit['line_start']}-{hit['line_end']}  [{hit['score']:.4g}]  {hit['title']}{stale}"))
        print(f"    {shown_snippet(hit['snippet'], bold)}")
        if hit["also_in_count"]:
            print(printable(f"    same text in: {', '.join(hit['also_in'])}{' ...' if hit['also_in_count'] > len(hit['also_in']) else ''}"))
    suggested = [f"did you mean: {', '.join(reply['suggestions'])}?"] if reply["suggestions"] else []
    page_end(reply["warnings"] + suggested, f"{len(reply['results'])} of {reply['files_matched']} matching files", reply)
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
        where, within = source_of(config, args.collection, args.path)
        reply = writable_reply(document_reply(where, within, args.heading, start_line, end_line, start_char=args.start_char, outline=args.outline, **given))
    except TOOL_ERRORS as exc:
        bad = exc if isinstance(exc, ArgumentError) and exc.name != "path" else None  # a wrong path is "no such file"
        shown = reason_of(exc) if bad is None else f"{_GET_FLAGS.get(bad.name, bad.name)}: {bad.problem}"
        print(printable(f"{PROG}: {shown}"), file=sys.stderr)
        return 1 if bad is None else 2
    if args.json:
        print_json(reply)
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
    if os.path.exists(config.db_path):  # False, not an error, where the folder cannot be entered
        return ""
    others = index_files.other_settings_indexes(config.db_path)
    if not others:
        return ""
    return (
        f"; this source has an index built with other settings ({others[0].name}): give the same"
        " --include-ext, --exclude-ext and --max-file-size-mb as the server that built it"
    )


def cmd_list(config: ServerConfig, args: argparse.Namespace) -> int:
    """list_files' reply: a line per file (path, size, modified, tags), or with --json all of it."""
    try:
        reply = writable_reply(list_files(
            config, args.path, comma_list(args.collection, "--collection"), comma_list(args.ext, "--ext"), args.after, args.before,
            comma_list(args.tags, "--tags"),
            args.limit, args.offset,
        ))
    except DocSearchError as exc:
        print(printable(f"{PROG}: {exc}"), file=sys.stderr)
        return 2
    if args.json:
        print_json(reply)
        return 0
    for file in reply["files"]:
        tags = f"  #{' #'.join(file['tags'])}" if file["tags"] else ""
        print(printable(f"{located(file)}  {file['size']:,} B  {file['modified']}{tags}"))
    page_end(reply["warnings"], f"{len(reply['files'])} of {reply['total']:,} files", reply)
    return 0


def print_json(reply: Mapping[str, Any]) -> None:
    """A reply as ``--json`` prints it: indented, non-ASCII as is."""
    print(json.dumps(reply, ensure_ascii=False, indent=2))


def located(item: Mapping[str, Any]) -> str:
    """A hit's or listed file's path as the command line prints it: after ``collection:`` when it has one."""
    return f"{item['collection']}:{item['path']}" if "collection" in item else item["path"]


def page_end(warnings: list[str], shown: str, reply: Mapping[str, Any]) -> None:
    """On stderr, after a page of search or list: the warnings, what was shown, and how to read on."""
    for warning in warnings:
        print(printable(f"note: {warning}"), file=sys.stderr)
    more = f"; more with --offset {reply['next_offset']}" if reply["has_more"] else ""
    print(f"{shown}{more}", file=sys.stderr)


def cmd_status(config: ServerConfig, args: argparse.Namespace) -> int:
    status = writable_reply(server_status(config, None))
    hint = other_settings_hint(config)
    if hint and status["last_error"]:
        status["last_error"] += hint
    unopened = unopened_state(status, os.path.exists(config.db_path))
    if args.json:
        print_json(status)
    else:
        for label, value in status_lines(status, unopened):
            print(printable(f"{label:<10} {value}"))
    return 1 if status["state"] == "error" else 0


def unopened_state(status: StatusReply, index_exists: bool) -> str | None:
    """Why no process has the index open and it is not up to date, when none has: not made yet,
    or (with several sources) some never scanned, each with its error if it had one. (An index
    that cannot be read is in state error.)"""
    if status["state"] != "starting" or status["writer_pid"] is not None:
        return None
    parts = status.get("sources") or []
    if not index_exists or not any(part["last_scan"] for part in parts):
        return "not indexed yet (run index, or start the server)"
    waiting = [f"{part['name']}{' (' + part['last_error'] + ')' if part.get('last_error') else ''}" for part in parts if not part["last_scan"]]
    return f"not indexed yet: {', '.join(waiting)} (run index, or start the server)"


def status_lines(status: StatusReply, unopened: str | None = None) -> list[tuple[str, str]]:
    """get_index_status as (label, text) lines for a person; --json gives every field as is."""
    progress = status["progress"]
    state = unopened or {"idle": "up to date", "error": "error"}.get(status["state"], status["state"])
    if status["state"] == "indexing":
        state = f"indexing ({progress['phase']}): {progress['files_done']:,} of {progress['files_total']:,} files"
    if status["writer_pid"] is not None:
        state += f"; written by process {status['writer_pid']}"
    lines = [("index", f"{status['index_path']} ({status['index_size_mb']:.1f} MB)"), ("state", state)]
    if "sources" not in status:
        source, *rest = _source_lines(status)
        lines = [source, *lines, *rest]
        if status["errors_encountered"]:
            lines.append(("errors", f"{status['errors_encountered']:,}; last: {status['last_error'] or '-'}"))
        return lines
    for part in status["sources"]:
        lines.append((f"[{part['name']}]", {"idle": "up to date"}.get(part["state"], part["state"])))
        lines += _source_lines(part)
    return lines


def _source_lines(part: Any) -> list[tuple[str, str]]:
    """A source's lines of ``status``: its folder, last scan, files, skips, watching, errors, hint."""
    skipped = ", ".join(f"{reason} {count:,}" for reason, count in sorted(part["skipped_files"].items()))
    watching = part["watching"]
    lines = [
        ("source", part["source_directory"]),
        ("last scan", part["last_scan"] or "never"),
        ("files", f"{part['indexed_files']:,} indexed"
         + (f", {part['fallback_decoded_files']:,} read as Windows-1252 (not UTF-8)" if part["fallback_decoded_files"] else "")),
        ("skipped", skipped or "none"),
        ("watching", f"{watching['folders']:,} folders" if watching["active"] else f"no: {watching['problem']}"),
    ]
    if "name" in part and part.get("errors_encountered"):
        lines.append(("errors", f"{part['errors_encountered']:,}; last: {part['last_error'] or '-'}"))
    if "hint" in part:
        lines.append(("hint", part["hint"]))
    return lines


def cmd_serve(config: ServerConfig, args: argparse.Namespace) -> int:
    try:
        http = http_listener(args)
    except ConfigError as exc:
        print(printable(f"{PROG}: {exc}"), file=sys.stderr)
        return 2
    daemon = Daemons(config)
    for number in STOP_SIGNALS:  # first: Ctrl-C must work from the start
        signal.signal(number, _stopper(daemon.close))
    server = build_server(daemon)
    # What the imports and the server built (~90,000 objects, most of them the SDK's) lives as long
    # as the process: kept out of the collector's full passes, which took 30-70 ms in the middle
    # of a search every few hundred calls (docs/measurements.md, "Starting, stdio and HTTP").
    gc.freeze()
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
