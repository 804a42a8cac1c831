"""Hostile queries: any text, through the search function (10,000 hypothesis examples) and through
the MCP tool over stdio (500+ calls), returns results or a clear error; nothing crashes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reliability_helpers import RelStdioServer, rel_run_main

from exceptions import QueryError
from query import MAX_QUERY_CHARS
from search import search

DOCS = {
    "ops.md": "# Operators\nAND OR NOT NEAR title body heading column filter caret star quote\n",
    "unicode.md": "# Ünïcödé\ncafé naïve 東京 Ελληνικά emoji 🎉 e-mail foo_bar C++ x86-64\n",
    "plain.txt": "river stone lantern orbit maple harbor cipher meadow\n",
}
FTS5_PIECES = [
    '"', "'", "*", "^", ":", "(", ")", "{", "}", "+", "-", ",", ".", "NEAR(", "NEAR/2", "AND", "OR", "NOT",
    "title:", "body:", "heading:", "{title body}:", "-title:", "^river", "river*", '"river', 'stone"', "*river",
    "\x00", "\n", "\t", "\r", "\u200b", "\ufeff", "\ud800", "\udfff", "🎉", "東京", "café", "river", "stone",
    "e-mail", "C++", "rowid", "sections_fts", ";", "--", "/*", "*/", "\\", "%", "_", "''", '""', "NEAR(river stone, 5)",
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("queries")
    source, index_dir = base / "src", base / "idx"
    source.mkdir()
    for name, text in DOCS.items():
        (source / name).write_text(text, encoding="utf-8")
    done = rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir))
    assert done.returncode == 0, done.stderr
    from reliability_helpers import rel_db_path

    return rel_db_path(source, index_dir)


any_char = st.characters(codec=None)  # every code point, surrogates and controls included
hostile_text = st.one_of(
    st.text(any_char, max_size=200),
    st.lists(st.sampled_from(FTS5_PIECES), max_size=30).map(" ".join),
    st.lists(st.sampled_from(FTS5_PIECES), max_size=30).map("".join),
    st.lists(st.one_of(st.sampled_from(FTS5_PIECES), st.text(any_char, max_size=5)), max_size=40).map("".join),
    st.tuples(st.text(any_char, min_size=1, max_size=8), st.sampled_from(FTS5_PIECES), st.sampled_from([1_000, 100_000, 1_000_000])).map(
        lambda parts: ((parts[0] + " " + parts[1] + " ") * parts[2])[: parts[2]]
    ),
)


def check_reply(query: str, limit: int, db: Path) -> None:
    try:
        reply = search(db, query, limit)
    except QueryError as exc:
        assert str(exc).startswith("query ") and exc.reason
        return
    assert reply["query"] == query[:MAX_QUERY_CHARS]
    assert (len(query) > MAX_QUERY_CHARS) == any("characters of the query" in w for w in reply["warnings"])
    assert isinstance(reply["results"], list) and len(reply["results"]) <= limit
    assert reply["files_matched"] >= len(reply["results"])
    for hit in reply["results"]:
        assert hit["path"] in DOCS and hit["line_start"] <= hit["line_end"]


@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(query=hostile_text, limit=st.integers(min_value=1, max_value=100))
@example(query="x" * 1_000_000, limit=10)
@example(query='"' * 1_000_000, limit=10)
@example(query="river " * 200_000, limit=100)
@example(query="-river " * 200_000, limit=1)
@example(query="NEAR(" * 200_000, limit=5)
@example(query="\ud800river\udfff", limit=10)
@example(query="title:river OR body:stone", limit=10)
@example(query="{title body}: ^river NEAR(stone lantern, 2) *", limit=10)
def test_any_text_gives_results_or_a_query_error(db: Path, query: str, limit: int) -> None:
    check_reply(query, limit, db)


def test_operator_words_are_searched_as_words(db: Path) -> None:
    assert [hit["path"] for hit in search(db, "NEAR", 10)["results"]] == ["ops.md"]
    assert [hit["path"] for hit in search(db, "title: AND", 10)["results"]] == ["ops.md"]
    assert [hit["path"] for hit in search(db, "東京", 10)["results"]] == ["unicode.md"]


#: JSON on the wire must be valid Unicode; lone surrogates are covered by the hypothesis test above
#: and by test_a_request_the_sdk_cannot_parse_does_not_stop_the_server below.
WIRE_PIECES = [piece for piece in FTS5_PIECES if not "\ud800" <= piece[0] <= "\udfff"]
ODD_CHARS = "\x00\x01\x1b\x7f\u0085\u2028\u2029\ufeff\ufffe\uffff\U0010ffff\U000e0001\u0301\u200d"


def random_code_point(rng: random.Random) -> str:
    while True:
        code = rng.choice([rng.randrange(0x20), rng.randrange(0x110000)])
        if not 0xD800 <= code < 0xE000:
            return chr(code)


def random_hostile(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return "".join(random_code_point(rng) for _ in range(rng.randrange(60)))
    if kind == 1:
        return " ".join(rng.choice(WIRE_PIECES) for _ in range(rng.randrange(1, 30)))
    if kind == 2:
        return "".join(rng.choice(WIRE_PIECES) for _ in range(rng.randrange(1, 30)))
    if kind == 3:
        return (rng.choice(WIRE_PIECES) + " ") * rng.randrange(1, 20_000)
    return "".join(rng.choice(ODD_CHARS + "river ") for _ in range(rng.randrange(1, 40)))


def test_hostile_queries_over_mcp_stdio_never_kill_the_server(db: Path) -> None:
    source = db.parent.parent / "src"
    rng = random.Random(555)
    queries = [random_hostile(rng) for _ in range(560)] + ["x" * 1_000_000, "NEAR(" * 200_000]
    odd_arguments = [
        {"query": "river", "limit": 0}, {"query": "river", "limit": -1}, {"query": "river", "limit": 10**12},
        {"query": "river", "limit": 1.5}, {"query": "river", "limit": "ten"}, {"query": "river", "limit": None},
        {"query": None}, {"query": 42}, {"query": ["river"]}, {}, {"query": "river", "extra": 1},
    ]
    outcomes = {"results": 0, "tool_error": 0}
    with RelStdioServer("--source", str(source), "--index-dir", str(db.parent), "--scan-interval", "0") as server:
        server.wait_for_scan()
        for arguments in [{"query": q, "limit": rng.randint(1, 100)} for q in queries] + odd_arguments:
            result = server.call("search", arguments)
            if result.get("isError"):
                text = result["content"][0]["text"]
                assert text.startswith("Error executing tool search: ") and len(text) > 30, (arguments, text)
                outcomes["tool_error"] += 1
            else:
                assert isinstance(result["structuredContent"]["results"], list), result
                outcomes["results"] += 1
        assert server.status()["indexed_files"] == len(DOCS)
        assert server.call("search", {"query": "river"})["structuredContent"]["results"]
        assert server.close() == 0
    print(f"\nRELIABILITY queries over MCP: {sum(outcomes.values())} calls, {outcomes}")
    assert sum(outcomes.values()) >= 500


def test_a_request_the_sdk_cannot_parse_does_not_stop_the_server(db: Path) -> None:
    """A JSON-escaped lone surrogate is valid JSON syntax but not Unicode: the SDK's parser
    (pydantic-core) drops that message without a reply. The server must keep answering."""
    source = db.parent.parent / "src"
    with RelStdioServer("--source", str(source), "--index-dir", str(db.parent), "--scan-interval", "0") as server:
        server.wait_for_scan()
        for n, query in enumerate(["\ud800", "river \udfff", "\udbff\udfff\ud800"]):
            server._send({"jsonrpc": "2.0", "id": 10_000 + n, "method": "tools/call",
                          "params": {"name": "search", "arguments": {"query": query}}})
        assert server.call("search", {"query": "river"})["structuredContent"]["results"]
        assert server.close() == 0
