"""What one query may cost and what one reply may hold: words are capped across and within every
part of a query, prefixes need enough letters, a cancelled or runaway search stops its SQLite work,
and snippets and replies are bounded whatever the files hold. (bench/worst_query.py measures the
worst query these bounds allow; no test here times anything.)"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import query as query_module
import search as search_module
from exceptions import Cancelled, IndexUnavailableError, QueryError
from indexer import TextIndexer
from tools import run_cancellable
from models import ServerConfig
from query import MAX_PHRASE_WORDS, MAX_PREFIXES, MAX_QUERY_CHARS, MAX_QUERY_TERMS, parse_query
from reliability_helpers import RelStdioServer
from search import MAX_REPLY_CHARS, search
from snippets import ELLIPSIS, SNIPPET_MAX_CHARS, _MARK_CLOSE, _MARK_OPEN, bounded_snippet
from tests.conftest import write


def words_in(parsed: query_module.ParsedQuery) -> int:
    return sum(len(part) for part in parsed.terms + parsed.phrases + parsed.excluded) + len(parsed.prefixes)


@pytest.mark.parametrize(
    ("query", "phrase_words", "warning"),
    [
        ('"' + "a b " * 250_000 + '"', MAX_PHRASE_WORDS, "characters of the query"),
        ('"' + "a b " * 20 + '"', MAX_PHRASE_WORDS, "was searched as its first"),
        ("-".join(["the", "a"] * 2500), MAX_PHRASE_WORDS, "was searched as its first"),
        ("-".join(["the", "a"] * 10), MAX_PHRASE_WORDS, "was searched as its first"),
        ('-"' + "x y " * 30 + '" word', MAX_PHRASE_WORDS, "was searched as its first"),
    ],
)
def test_a_phrase_or_compound_is_capped_within_itself(query: str, phrase_words: int, warning: str) -> None:
    parsed = parse_query(query)
    longest = max(len(part) for part in parsed.terms + parsed.phrases + parsed.excluded)
    assert longest == phrase_words
    assert words_in(parsed) <= MAX_QUERY_TERMS
    assert any(warning in text for text in parsed.warnings), parsed.warnings


@pytest.mark.parametrize(
    "query",
    [
        " ".join(f"word{n}" for n in range(200)),
        " ".join(f'"w{n} x{n} y{n}"' for n in range(60)),
        " ".join(f"a{n}-b{n}-c{n}" for n in range(60)),
        "keep " + " ".join(f"-drop{n}" for n in range(200)),
        " ".join(f"pre{n}*" for n in range(100)),
    ],
)
def test_words_are_capped_across_every_part_of_a_query(query: str) -> None:
    parsed = parse_query(query)
    assert words_in(parsed) == MAX_QUERY_TERMS
    assert any(f"first {MAX_QUERY_TERMS} words" in text for text in parsed.warnings), parsed.warnings


def test_prefixes_need_three_letters_and_a_query_takes_four() -> None:
    parsed = parse_query("a* bc* cde* defg* efgh* fghi* ghij*")
    assert parsed.prefixes == ["cde", "defg", "efgh", "fghi"] and len(parsed.prefixes) == MAX_PREFIXES
    assert parsed.terms == [["a"], ["bc"], ["ghij"]]
    assert len(parsed.warnings) == 3 and "needs 3 characters" in parsed.warnings[0]


def test_a_query_within_the_bounds_is_read_whole() -> None:
    parsed = parse_query('install "exact phrase here" conf* -draft e-mail')
    assert parsed.warnings == []
    assert parsed.terms == [["install"], ["e", "mail"]] and parsed.phrases == [["exact", "phrase", "here"]]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> ServerConfig:
    """400 real files, enough rows that SQLite checks for a stop many times during one query."""
    from index_writer import IndexWriter

    root = tmp_path_factory.mktemp("bounds")
    source = root / "notes"
    for n in range(400):
        write(source, f"d{n % 5}/n{n}.md", f"# Note {n}\n\nthe a common words about things, note {n}\n\nmore common text\n")
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=(root / "idx").resolve())
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    return config


@pytest.mark.parametrize(
    "query",
    [
        '"' + "a b " * 250_000 + '"',
        "-".join(["the", "a"] * 2500),
        " ".join(["the", "of", "and", "to", "a", "in", "is", "it"] * 8),
        "a* b* c* d* e* f* g* common*",
        "common " + " ".join(f"-w{n}" for n in range(500)),
    ],
)
def test_the_issues_runaway_queries_answer_with_what_was_searched(index: ServerConfig, query: str) -> None:
    reply = search(index.db_path, query, 100)
    assert len(reply["query"]) <= MAX_QUERY_CHARS
    assert reply["warnings"], reply["warnings"]
    assert isinstance(reply["results"], list)


def test_a_question_that_would_score_too_many_sections_leaves_its_commonest_words_out(
    index: ServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "common common common 11 12 13 14 15 16 17"  # "common" is in all 400 files, each number in one
    whole = search(index.db_path, question, 10)
    assert whole["warnings"] == [] and whole["files_matched"] == 400
    monkeypatch.setattr(query_module, "QUESTION_MAX_COST", 2_000)
    fitted = search(index.db_path, question, 10)
    assert any("counted once" in text for text in fitted["warnings"]), fitted["warnings"]
    assert any(text.endswith("were left out: common") for text in fitted["warnings"]), fitted["warnings"]
    assert {hit["path"] for hit in fitted["results"][:7]} == {f"d{n % 5}/n{n}.md" for n in range(11, 18)}
    monkeypatch.setattr(query_module, "QUESTION_MAX_COST", 0)
    alone = search(index.db_path, question, 10)
    assert alone["results"][0]["path"] == "d1/n11.md", "one word is kept, however small the budget"


def test_a_cancelled_search_stops_and_its_connection_is_still_usable(index: ServerConfig) -> None:
    with pytest.raises(Cancelled):
        search(index.db_path, "common words about", 10, cancelled=lambda: True)
    assert search(index.db_path, "common words about", 10)["results"], "the stop handler was left installed"


def test_a_search_ranked_in_parts_is_stopped_in_every_part(index: ServerConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "SEARCH_PARTS", 2)
    monkeypatch.setattr(search_module, "PARALLEL_MIN_ROWS", 0)
    asked = threading.Event()

    def cancelled() -> bool:
        if threading.current_thread().name.startswith("search-part"):
            asked.set()  # a part's own connection asked
        return asked.is_set()

    with pytest.raises(Cancelled):
        search(index.db_path, "common", 10, cancelled=cancelled)
    assert asked.is_set(), "the part running on another thread was never asked to stop"
    assert search(index.db_path, "common", 10)["results"]


def test_a_search_past_the_time_limit_is_refused_with_advice(index: ServerConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_module, "SEARCH_TIME_LIMIT_SECONDS", -1.0)
    with pytest.raises(QueryError, match="search for fewer, rarer words"):
        search(index.db_path, "common things", 10)


@pytest.mark.anyio
async def test_a_cancelled_mcp_request_sets_the_flag_its_work_polls() -> None:
    started, seen = threading.Event(), threading.Event()

    def work(cancelled: threading.Event) -> str:
        started.set()
        if cancelled.wait(30):
            seen.set()
        return "finished"

    with anyio.move_on_after(30) as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(run_cancellable, work)
            await anyio.to_thread.run_sync(started.wait, 30)
            group.cancel_scope.cancel()
    assert not scope.cancelled_caught
    await anyio.to_thread.run_sync(seen.wait, 30)
    assert seen.is_set()


def test_a_cancelled_request_over_stdio_leaves_the_server_answering(index: ServerConfig) -> None:
    args = ("--source", str(index.source_directory), "--index-dir", str(index.index_output_directory), "--scan-interval", "0")
    with RelStdioServer(*args) as server:
        server.wait_for_scan()
        for n in range(5):
            request_id = 1000 + n
            server._send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                          "params": {"name": "search", "arguments": {"query": "common words about things note", "limit": 100}}})
            server._send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}})
        reply = server.call("search", {"query": "note"})
        assert not reply["isError"] and reply["structuredContent"]["results"]
        assert server.close() == 0
        assert "Traceback" not in server.stderr, server.stderr


# ---- bounded snippets and replies -----------------------------------------------------------------


def test_snippets_of_long_unbroken_tokens_are_bounded(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    """The issue's case: a snippet falling back to a whole section of long tokens was 32,004 characters."""
    for n in range(100):
        # "needles" as typed is not in the text, only a form FTS5 matches: the snippet is cut from the
        # whole section, not from a window around the word.
        write(source, f"n{n}.txt", "needle " + " ".join(f"{n}" + "y" * 999 for _ in range(31)) + "\n")
    indexer.scan()
    reply = search(config.db_path, "needles", 100)
    assert len(reply["results"]) == 100
    assert all(len(hit["snippet"]) <= SNIPPET_MAX_CHARS + 8 and "**needle**" in hit["snippet"] for hit in reply["results"])
    assert len(json.dumps(reply)) < MAX_REPLY_CHARS


def test_a_reply_over_its_size_leaves_results_out_and_says_so(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    folder = "/".join(["f" * 200] * 3)
    for n in range(100):
        write(source, f"{folder}/{'n' * 200}{n}.md", f"{'Title words ' * 16}{n}\n\nneedle {'text ' * 200}\n")
    indexer.scan()
    reply = search(config.db_path, "needle", 100)
    assert 0 < len(reply["results"]) < 100
    assert len(json.dumps(reply)) < MAX_REPLY_CHARS * 1.2
    assert any(f"{100 - len(reply['results'])} more results were left out" in text for text in reply["warnings"]), reply["warnings"]


marked_text = st.lists(
    st.one_of(st.text(alphabet=st.characters(blacklist_characters=_MARK_OPEN + _MARK_CLOSE), max_size=300),
              st.text(alphabet="xy ", min_size=1, max_size=40).map(lambda word: _MARK_OPEN + word + _MARK_CLOSE)),
    max_size=30,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=marked_text)
def test_a_bounded_snippet_is_short_balanced_and_shows_a_match(text: str) -> None:
    cut = bounded_snippet(text)
    assert len(cut) <= SNIPPET_MAX_CHARS + 3  # two ellipses and a closing marker
    assert cut.count(_MARK_OPEN) == cut.count(_MARK_CLOSE)
    assert (_MARK_OPEN in text) == (_MARK_OPEN in cut)
    if len(text) <= SNIPPET_MAX_CHARS:
        assert cut == text
    else:
        inner = cut.strip(ELLIPSIS)
        assert inner.rstrip(_MARK_CLOSE) in text or inner[:-1] in text


# ---- words as FTS5 reads them -------------------------------------------------------------------


def test_letters_that_fts5_reads_as_separators_cannot_smuggle_words_past_the_caps() -> None:
    """U+19B0 is a letter to Python and a separator to FTS5's tokenizer: the caps count FTS5's words."""
    glued = "\u19b0".join(["the"] * 50)
    parsed = parse_query(f'"{glued}" "{glued}"')
    assert [len(phrase) for phrase in parsed.phrases] == [MAX_PHRASE_WORDS]  # the same phrase twice counts once
    assert any("was searched as its first" in text for text in parsed.warnings)
    smuggled = parse_query("t\u19b0\u19b0* w\u19b0\u19b0*")
    assert smuggled.prefixes == [], "a one-letter prefix in disguise"


def test_a_word_searched_decomposed_or_glued_finds_what_fts5_indexed(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    write(source, "accents.md", "a na\u00efve caf\u00e9\n")
    write(source, "emoji.md", "foo\U0001f970bar here\n")
    write(source, "plain.md", "foo bar here\n")
    write(source, "isolated.md", "the \u2066kangaroo\u2069 jumped\n")
    indexer.scan()

    def paths(query: str) -> list[str]:
        return sorted(hit["path"] for hit in search(config.db_path, query, 10)["results"])

    assert paths("nai\u0308ve") == ["accents.md"]  # decomposed in the query, composed in the file
    assert paths("foo\U0001f970bar") == ["emoji.md"]
    assert paths("here -foo\U0001f970bar") == ["plain.md"]
    assert paths("kangaroo") == ["isolated.md"]


def test_an_exclusion_leaves_out_the_whole_file(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    """The README promises -word excludes files: a file with the word in one section and the
    searched word in another is left out."""
    filler = "\n\n".join(f"paragraph {n} " + "filler words " * 100 for n in range(40))
    write(source, "long.md", f"# One\n\napple pie\n\n{filler}\n\n# Two\n\nbanana split\n")
    write(source, "short.md", "apple crumble\n")
    indexer.scan()
    assert len(database_sections(config, "long.md")) > 1
    reply = search(config.db_path, "apple -banana", 10)
    assert [hit["path"] for hit in reply["results"]] == ["short.md"] and reply["files_matched"] == 1
    inch = search(config.db_path, '12" apple -banana', 10)
    assert all(hit["path"] != "long.md" for hit in inch["results"]), "a quote inside a word opened a phrase"


def database_sections(config: ServerConfig, path: str) -> list[int]:
    import database

    conn = database.reader(config.db_path)
    file_id = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()[0]
    low, high = database.section_id(file_id, 0), database.section_id(file_id + 1, 0)
    return [row[0] for row in conn.execute("SELECT id FROM sections WHERE id >= ? AND id < ?", (low, high))]


def test_costly_phrases_are_loosened_and_say_so(index: ServerConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    phrase = '"the common the common the common"'
    assert search(index.db_path, phrase, 10)["warnings"] == []
    monkeypatch.setattr(query_module, "PHRASE_MAX_COST", 100)
    loose = search(index.db_path, f"note {phrase} -\"more common text\"", 10)
    assert any("was searched as its rarest word" in text for text in loose["warnings"]), loose["warnings"]
    assert any('-"more common text" was not applied' in text for text in loose["warnings"]), loose["warnings"]
    assert loose["files_matched"] == 400
    stopwords = search(index.db_path, "the a the a the a the a", 10)
    assert any("not searched as a phrase" in text for text in stopwords["warnings"]), stopwords["warnings"]


def test_text_a_reply_shows_cannot_fake_a_match_or_grow_in_json(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    write(source, "fake.md", f"zebrafish \ue000notamatch\ue001 and \x1b[31mred\x07 {'koala ' + '*' * 60} koala\n")
    indexer.scan()
    hit = search(config.db_path, "zebrafish", 10)["results"][0]
    assert "**notamatch**" not in hit["snippet"] and "\ufffdnotamatch\ufffd" in hit["snippet"]
    assert "\x1b" not in hit["snippet"] and "\x07" not in hit["snippet"]
    stars = search(config.db_path, "koala", 10)["results"][0]
    assert len(stars["snippet"]) <= SNIPPET_MAX_CHARS + 8, len(stars["snippet"])


def test_a_questions_plan_comes_from_the_index_never_from_the_clock(index: ServerConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """However slowly the machine runs a question, it ranks the same words and returns the same files."""
    question = "common words things note text 11 12 com*"
    idle = search(index.db_path, question, 10)
    ticks = itertools.count()
    monkeypatch.setattr(search_module, "SEARCH_TIME_LIMIT_SECONDS", 1e12)
    monkeypatch.setattr(search_module.time, "monotonic", lambda: 0.3 * next(ticks))  # 0.3 s gone at every look
    busy = search(index.db_path, question, 10)
    assert [hit["path"] for hit in busy["results"]] == [hit["path"] for hit in idle["results"]]
    assert busy["warnings"] == idle["warnings"] == []


def test_a_question_whose_word_fills_its_sections_leaves_that_word_out_first(
    config: ServerConfig, indexer: TextIndexer, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word in few sections but thousands of times in each costs bm25 more than one in many
    sections once: the estimate counts its positions (from the index, before the search runs)."""
    for n in range(4):
        write(source, f"dense{n}.md", "dense " * 2000 + "\n")
    for n in range(40):
        write(source, f"spread{n}.md", f"spread filler{n}\n")
    write(source, "unique.md", "unique spread dense\n")
    indexer.scan()
    question = "dense spread unique extra"
    assert search(config.db_path, question, 10)["warnings"] == []
    monkeypatch.setattr(query_module, "QUESTION_MAX_COST", 240)  # sections x parts 180, dense's positions ~125 (sampled)
    fitted = search(config.db_path, question, 10)
    assert any(text.endswith("were left out: dense") for text in fitted["warnings"]), fitted["warnings"]
    assert fitted["results"][0]["path"] == "unique.md"


@pytest.mark.parametrize(
    ("query", "excluded", "warned"),
    [
        ("Get-ChildItem -Recurse", None, "-Recurse was searched as a word"),
        ("git commit --amend", None, "--amend was searched as a word"),
        ("ls -la", None, "-la was searched as a word"),
        ("curl -sSL", None, "-sSL was searched as a word"),
        ("apples -pears", '("pears")', None),
        ('Get-Process -"name"', '("name")', None),
        ("?? -draft", None, "only words to leave out"),
        ("Get-Child*", None, "a prefix* is one word"),
    ],
)
def test_command_lines_keep_their_options_and_every_reading_is_named(query: str, excluded: str | None, warned: str | None) -> None:
    parsed = parse_query(query)
    plan = query_module.build_match(parsed)
    assert plan.excluded == excluded
    assert (warned is None and parsed.warnings == []) or any(warned in text for text in parsed.warnings if warned), parsed.warnings


def test_a_damaged_section_is_reported_and_the_next_scan_rebuilds_the_index(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    import sqlite3

    for n in range(5):
        write(source, f"n{n}.md", f"zqsharedqz note {n}\n")
    indexer.scan()
    damaged = sqlite3.connect(config.db_path)
    damaged.execute("UPDATE sections SET body = zeroblob(40) WHERE id = (SELECT min(id) FROM sections)")
    damaged.commit()
    damaged.close()
    with pytest.raises(IndexUnavailableError, match="stored text is damaged"):
        search(config.db_path, "zqsharedqz", 10)
    indexer.damage_suspected = True  # what the MCP tool does when a search fails so
    assert indexer.scan()["success"]
    assert indexer.writer.recovered_from is not None
    assert len(search(config.db_path, "zqsharedqz", 10)["results"]) == 5


def test_copies_named_in_also_in_count_toward_the_reply_budget(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    """Thirty texts, each copied into six long, different folder trees: also_in names five paths of
    over a thousand characters for every hit."""
    trees = ["/".join([f"{letter * 240}{depth}" for depth in range(5)]) for letter in "abcdef"]
    for n in range(30):
        for tree in trees:
            write(source, f"{tree}/doc{n}.md", f"# Doc {n}\n\nkiwi text number {n} " + f"word{n} " * 20 + "\n")
    indexer.scan()
    reply = search(config.db_path, "kiwi", 100)
    assert all(len(hit["also_in"]) == 5 for hit in reply["results"])
    assert len(json.dumps(reply)) < MAX_REPLY_CHARS * 1.2, len(json.dumps(reply))
    assert any("more results were left out" in text for text in reply["warnings"]), reply["warnings"]
