"""Work that a file of the source tree or a tool argument could make grow with the square of its
size (a search or a get_document call running for minutes, past the 10 s a search is promised, on a
worker thread that a cancel cannot stop), and replies that said less than they should: the hostile
review attack16's finds (fa5e1ee), each failing on the code before its fix (0.9.1), and a path
filter ending in "/." from its review attack17 (ef43f63, failing on 7618ca4).

Each test bounds the work it waits for by a hang guard only (a subprocess's timeout, or a
client-side timeout on one MCP call), never by timing the call: the code answers in well under a
second on these inputs, 0.9.1 took minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from exceptions import ArgumentError, DocSearchError
from filters import read_filters
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import PROJECT_DIR, write
from tests.mcp_client import call, server_params, wait_for

#: A subprocess still working after this long has hung (the fixed code takes well under a second).
HANG_GUARD_SECONDS = 60


def _in_subprocess(code: str, *args: str) -> Any:
    """Run ``code`` (which prints one JSON value) in a fresh interpreter with the project importable,
    ``sys.argv[1:]`` being ``args``; its printed value. A run still going after HANG_GUARD_SECONDS
    fails the test (the work is killed with the subprocess, not left burning CPU in this one)."""
    prologue = f"import json, sys\nsys.path.insert(0, {str(PROJECT_DIR)!r})\n"
    try:
        done = subprocess.run([sys.executable, "-c", prologue + code, *args], capture_output=True, text=True,
                              timeout=HANG_GUARD_SECONDS, cwd=PROJECT_DIR)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {HANG_GUARD_SECONDS} s: the work grows with the square of the input")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


#: get_document in a subprocess: argv source, index folder, path, then the arguments as JSON; prints
#: the reply, or {"error": name, "message": ...} for an ArgumentError.
_GET_DOCUMENT = """
from pathlib import Path
from documents import document_reply
from exceptions import ArgumentError
from models import ServerConfig
config = ServerConfig(source_directory=Path(sys.argv[1]).resolve(), index_output_directory=Path(sys.argv[2]).resolve())
try:
    print(json.dumps(document_reply(config, sys.argv[3], **json.loads(sys.argv[4]))))
except ArgumentError as refused:
    print(json.dumps({"error": refused.name, "message": str(refused)}))
"""


def _get_document(source: Path, tmp_path: Path, path: str, **arguments: Any) -> dict[str, Any]:
    return _in_subprocess(_GET_DOCUMENT, str(source), str(tmp_path / "idx"), path, json.dumps(arguments))


# ---- 1. get_document(heading=..., start_line=...): quadratic in the file's headings ---------------


def test_get_document_heading_with_start_line_before_many_same_named_headings_is_not_quadratic(source: Path, tmp_path: Path) -> None:
    """documents._heading_named, when no heading of that name holds ``start_line``, tests for each of
    the N headings of that name every line between start_line and the heading (``below``): N^2/2
    line checks. A 250 KB Markdown file of 50,000 ``# E`` headings after a blank first line, asked
    for ``heading="E", start_line=1`` (a search hit's line_start may lie before the heading it
    names, docs/tools.md), took 230 s over MCP stdio; the 500 KB file here, with 100,000 (the
    outline's bound, markup.MAX_HEADINGS), takes about 15 minutes. Expected: the first heading below
    line 1 (lines 2-3), at once."""
    write(source, "same.md", "\n" + "# E\n\n" * 100_000)
    reply = _get_document(source, tmp_path, "same.md", heading="E", start_line=1, max_chars=100)
    assert (reply.get("line_start"), reply.get("text")) == (2, "# E\n"), reply


# ---- 2. get_document(heading=...): an unbounded argument times the file's headings ---------------


def test_a_long_heading_argument_costs_no_more_than_its_length_plus_the_files_headings(source: Path, tmp_path: Path) -> None:
    """``heading`` has no bound in the input schema nor in document_reply (``query`` is cut at 10,000
    characters, ``alternatives`` at 10,000 each, ``path`` at 4,096), and _headings_named recomputes
    the argument's loose form (split at every '>', strip, join, casefold) once per heading of the
    file: its length times the file's headings. Over MCP stdio, ``'>' * 10_000`` on a file of 20,000
    headings took 16 s, ``'> ' * 20_000`` 28 s; here ``'>' * 100_000`` on 100,000 headings takes
    hours. Expected: refused as too long, or looked up at the cost of its length plus the headings;
    either way an error naming ``heading``, and a short one."""
    write(source, "many.md", "".join(f"# h{i}\n" for i in range(100_000)))
    reply = _get_document(source, tmp_path, "many.md", heading=">" * 100_000, max_chars=100)
    assert reply.get("error") == "heading" and len(reply["message"]) < 5_000, reply


def test_heading_spans_of_a_run_of_bare_headings_is_linear_in_them() -> None:
    """The root of the next test: sections.heading_spans calls _says_something on the lines from the
    last span that said something to each next heading; over a run of headings with no text between
    them that start never moves, so each heading re-reads every heading before it (N^2/2 lines).
    Measured here: 5,000 headings 2 s, 10,000 5 s, 20,000 21 s; the 100,000 below, about 9 minutes.
    Expected: one pass."""
    headings = _in_subprocess(
        "from sections import heading_spans\n"
        "count = 100_000\n"
        "rows = [(1, count, '# a\\n' * count, [(line, 1, 'a') for line in range(1, count + 1)])]\n"
        "print(json.dumps([span.heading for span in heading_spans(rows)]))\n"
    )
    assert headings == ["a"], headings[:3]


# ---- 3. search: a file of headings without text makes the search take minutes -------------------


@pytest.mark.anyio
async def test_a_search_hitting_files_of_bare_headings_answers_or_stops_within_its_time_limit(source: Path, tmp_path: Path) -> None:
    """heading_spans (above) names the span each of the first 10 hits answers from, among the 8
    index rows around it: about 30,000 lines of a file of bare headings (``# zq`` repeated). It runs
    in Python after SQLite is done, so the 10 s limit (docs/tools.md: "A search still running after
    10 s is stopped with an error") never sees it, and a cancelled call's worker thread runs on.
    Measured over MCP stdio: one 160 KB file of ``# zq`` lines made ``search("zq")`` take 11.6 s;
    30 of them, 113 s (the first ten read). Anything in the tree matching the query pays this: a
    ``# install`` file makes every search for "install" take two minutes. Here 12 such files,
    the default limit. Expected: the reply, or the "stopped after 10 s" error, within the guard."""
    for number in range(12):
        write(source, f"bare/h{number}.md", f"intro{number} alone{number}\n" + "# zq\n" * 40_000)
    async with Client(server_params(source, tmp_path / "idx")) as client:
        async def indexed() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 12

        await wait_for(indexed, 120)
        with anyio.move_on_after(45) as guard:  # a hang guard: the fixed search takes well under a second
            result = await client.call_tool("search", {"query": "zq"})
        assert not guard.cancelled_caught, "search('zq') on 12 files of bare headings was still running after 45 s"
        if result.is_error:
            assert "stopped after 10 s" in result.content[0].text, result.content[0].text
        else:
            assert result.structured_content["results"], result.structured_content


# ---- 4. small contract breaks -------------------------------------------------------------------


def test_an_out_of_range_limit_is_refused_with_a_message_that_starts_with_limit(indexer: TextIndexer, config: ServerConfig,
                                                                               source: Path) -> None:
    """docs/tools.md, Errors: a malformed or out-of-range argument's message starts with the
    argument's name (``offset: must be ...`` does). ``limit`` is refused as
    ``query 'alpha': limit must be a whole number from 1 to 100, got 0``: it blames the query."""
    write(source, "a.md", "# A\n\nalpha\n")
    indexer.scan()
    for limit in (0, 101, -1):
        with pytest.raises(DocSearchError) as raised:
            search(config.db_path, "alpha", limit)
        assert str(raised.value).startswith("limit:"), str(raised.value)


def _filtered(config: ServerConfig, path: str) -> tuple[list[str], list[str]] | None:
    """The paths a search for "alpha" returns under the path filter ``path``, and its warnings;
    None when the filter is refused with an error naming ``path``."""
    try:
        reply = search(config.db_path, "alpha", 10, filters=read_filters(path))
    except ArgumentError as refused:
        assert refused.name == "path"
        return None
    return sorted(hit["path"] for hit in reply["results"]), reply["warnings"]


@pytest.mark.parametrize("path", [".", "docs/.", "./docs/.", "docs/./"])
def test_a_path_filter_naming_a_folder_with_a_dot_segment_is_that_folder_not_nothing(
    indexer: TextIndexer, config: ServerConfig, source: Path, path: str
) -> None:
    """A path filter without a wildcard is a folder or a file (docs/tools.md); ``./docs`` and ``./``
    are read as ``docs`` and the whole source (filters._path_text drops a leading ``./``), but
    ``.`` (the folder itself, the commonest way to say "here"), ``docs/.`` and ``docs/./`` match no
    file at all, and the reply says nothing: files_matched 0, no warning, as if nothing matched the
    query. Expected: the folder's files (or an error naming ``path``)."""
    write(source, "docs/a.md", "# A\n\nalpha apples\n")
    write(source, "docs/b.md", "# B\n\nalpha bananas, two texts (one would be the other's copy)\n")
    write(source, "other/c.md", "# C\n\nalpha cherries\n")
    indexer.scan()
    found = _filtered(config, path)
    expected = ["docs/a.md", "docs/b.md", "other/c.md"] if path == "." else ["docs/a.md", "docs/b.md"]
    assert found is None or found[0] == expected or found[1], found


@pytest.mark.parametrize("path", ["docs/*/.", "docs/**/.", "**/."])
def test_a_glob_ending_in_a_dot_segment_is_not_silently_nothing(
    indexer: TextIndexer, config: ServerConfig, source: Path, path: str
) -> None:
    """12fa60a: a '.' segment is the folder it is in, so ``docs/.`` is now ``docs/`` (the folder's
    files). But a glob ending in '/.' becomes a glob ending in '/' (``docs/*/``, ``**/``), whose
    pattern only a path ending in '/' could match: no file ever does, and the reply says nothing
    (files_matched 0, no warning), the very silence the fix was for. ``docs/*/.`` = the folders in
    docs. Expected: the files under them (``docs/**/.``, ``**/.``: all of docs, all files), or an
    ArgumentError naming ``path``, or a warning. Got: 0 results, no warning."""
    write(source, "docs/x/a.md", "# A\n\nalpha apples\n")
    write(source, "docs/y/b.md", "# B\n\nalpha bananas, a second text\n")
    indexer.scan()
    found = _filtered(config, path)
    assert found is None or found[0] == ["docs/x/a.md", "docs/y/b.md"] or found[1], found
