"""Search: any text is a valid query; phrases, prefixes, exclusions; ranking and bounded replies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exceptions import ArgumentError, QueryError
from indexer import TextIndexer
from models import ServerConfig
from query import build_match, parse_query
from search import search
from snippets import SNIPPET_WINDOW_CHARS, snippet_window
from tests.conftest import write


@pytest.mark.parametrize(
    ("query", "precise", "broad", "excluded"),
    [
        ("firewall", '("firewall")', None, None),
        ("firewall port", '("firewall" AND "port")', '(("firewall" OR "port"))', None),
        ("how do I open a port in the firewall?", '("open" OR "port" OR "firewall")', None, None),  # more than three words: a question
        ('"open port" ufw', '("open port" AND "ufw")', None, None),
        ("config*", '("config"*)', None, None),
        ("apples -pears", '("apples")', None, '("pears")'),
        ('apples -"green pears" -draft* -pears -pears', '("apples")', None, '("green pears" OR "pears" OR "draft"*)'),
        ("-pears", '("pears")', None, None),
        ("-draft*", '("draft"*)', None, None),
        ("e-mail", '("e mail")', None, None),
        ("to be or not to be", '("to be or not to be")', '("to" AND "be" AND "or" AND "not")', None),
        ('12" pizza -pepperoni', '("12" AND "pizza")', '(("12" OR "pizza"))', '("pepperoni")'),  # an inch mark opens no phrase
        ('alpha "b c" omega', '("b c" AND "alpha" AND "omega")', '("b c" AND ("alpha" OR "omega"))', None),
        ("title:secret", '("title secret")', None, None),
        ("NEAR(a b)", '("near a" AND "b")', '(("near a" OR "b"))', None),
        ("x AND y", '("x" AND "and" AND "y")', '(("x" OR "and" OR "y"))', None),  # a short query needs every word
        ('"unbalanced quote', '("unbalanced quote")', None, None),
        ("^caret (paren)", '("caret" AND "paren")', '(("caret" OR "paren"))', None),
        ("Café NAI\u0308VE", '("cafe" AND "naive")', '(("cafe" OR "naive"))', None),  # as FTS5 folds them
        ("foo\U0001f970bar", '("foo\U0001f970bar")', None, None),  # one word to FTS5, as indexed
        ("the\u19b0the\u19b0the", '("the the the")', None, None),  # FTS5 splits there; Python would not
    ],
)
def test_user_text_becomes_a_quoted_expression(query: str, precise: str, broad: str | None, excluded: str | None) -> None:
    plan = build_match(parse_query(query))
    assert (plan.precise, plan.broad, plan.excluded) == (precise, broad, excluded)


@pytest.mark.parametrize(
    ("query", "intersects"),
    [
        ("firewall", False), ("config*", False), ("apples -pears", False),
        ("firewall port", True), ('"open port"', True), ("e-mail", True), ("config* port", True),
        ("to be or not to be", True), ("how would one open a port in the firewall at night?", False),
    ],
)
def test_a_plan_knows_when_its_precise_expression_needs_several_words_together(query: str, intersects: bool) -> None:
    assert build_match(parse_query(query)).intersects is intersects


@pytest.mark.parametrize("query", ["", "   ", "!!!", "\"\"", "*", "-", "☺☺", "\x00\n\t", "---"])
def test_queries_without_words_are_a_clear_error(query: str) -> None:
    with pytest.raises(QueryError, match="no words to search for"):
        build_match(parse_query(query))


@pytest.fixture
def notes(indexer: TextIndexer, source: Path, config: ServerConfig) -> ServerConfig:
    write(source, "network/firewall.md", "# Firewall ports\n\nTo allow SSH, run `ufw allow 22` on the host.\n\nPorts are closed by default.\n")
    write(source, "garden.md", "# Garden\n\nPlant apples and pears in spring. The green pears ripen late.\n")
    write(source, "orchard.md", "# Orchard\n\nApples only. Apple trees need pruning.\n")
    write(source, "recipes.txt", "Apple pie\n\nconfiguration of the oven: 200 degrees\n")
    write(source, "shakespeare.txt", "Hamlet\n\nTo be, or not to be, that is the question.\n")
    indexer.scan()
    return config


def paths(config: ServerConfig, query: str, limit: int = 10) -> list[str]:
    return [hit["path"] for hit in search(config.db_path, query, limit)["results"]]


def test_natural_language_question_finds_the_note(notes: ServerConfig) -> None:
    assert paths(notes, "how do I open a port in the firewall?")[0] == "network/firewall.md"


def test_keyword_and_phrase_and_prefix_and_exclusion(notes: ServerConfig) -> None:
    assert set(paths(notes, "apples")) == {"garden.md", "orchard.md", "recipes.txt"}
    assert paths(notes, '"green pears"') == ["garden.md"]
    assert paths(notes, "config*") == ["recipes.txt"]
    assert set(paths(notes, "apples -pears")) == {"orchard.md", "recipes.txt"}
    assert paths(notes, "to be or not to be") == ["shakespeare.txt"]


def test_and_matches_rank_above_partial_matches(notes: ServerConfig) -> None:
    reply = search(notes.db_path, "apples pruning", 10)
    assert [hit["path"] for hit in reply["results"]][0] == "orchard.md"
    scores = [hit["score"] for hit in reply["results"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert reply["files_matched"] == 3


def test_the_files_own_double_asterisks_are_escaped_so_bare_ones_mark_matches(source: Path, indexer: TextIndexer) -> None:
    write(source, "fw.md", "# Rules\n\nUse **Windows Firewall: Allow local port exceptions** and call `f(**kwargs) or 2**8`.\n")
    indexer.scan()
    snippet = search(indexer.config.db_path, "firewall port", 5)["results"][0]["snippet"]
    assert "Use Windows **Firewall**: Allow local **port** exceptions and" in snippet  # Markdown bold is no longer shown
    assert r"`f(\*\*kwargs) or 2\*\*8`" in snippet  # code keeps its own ** (escaped)
    assert snippet.replace(r"\*\*", "").count("**") == 4  # two matches, two markers each


def test_hits_carry_location_snippet_and_metadata(notes: ServerConfig) -> None:
    hit = search(notes.db_path, "ufw", 5)["results"][0]
    assert hit["path"] == "network/firewall.md"
    assert hit["title"] == "Firewall ports"
    assert "**ufw**" in hit["snippet"]
    lines = (notes.source_directory / hit["path"]).read_text().split("\n")
    assert hit["line_start"] <= 3 <= hit["line_end"]  # "ufw" is on line 3
    assert "ufw" in "\n".join(lines[hit["line_start"] - 1:hit["line_end"]])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", hit["last_modified"])


def test_one_result_per_file_and_limit(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    write(source, "many.md", "".join(f"# Part {i}\n\nneedle text {i}\n\n" for i in range(50)))
    for i in range(5):
        write(source, f"other{i}.md", f"needle {i}")
    indexer.scan()
    assert paths(config, "needle", 3) == paths(config, "needle", 3)  # deterministic
    results = paths(config, "needle", 10)
    assert len(results) == 6 and len(set(results)) == 6
    assert len(paths(config, "needle", 2)) == 2


def test_snippets_are_bounded_for_huge_files(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    write(source, "huge.txt", ("filler words here\n" * 400_000) + "the rare zebra line\n")  # ~7 MB
    indexer.scan()
    hit = search(config.db_path, "zebra", 5)["results"][0]
    assert len(hit["snippet"]) < 1000
    assert hit["line_start"] <= 400_001 == hit["line_end"]
    assert hit["line_end"] - hit["line_start"] < 20


def filler(lines: int, word: str = "lorem") -> str:
    return "".join(f"{word} ipsum dolor sit amet line {n}\n" for n in range(lines))


def shown_text(snippet: str) -> str:
    """A snippet as the file's text: no markers, no ellipses, no escapes, spaces collapsed."""
    return " ".join(snippet.replace(r"\*\*", "**").replace("**", "").strip("…").split())


def test_a_long_sections_snippet_is_cut_from_around_its_match(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    text = filler(100) + "the zebra grazes here\n" + filler(100, "dolor")  # one section of ~6,000 characters
    write(source, "long.txt", text)
    indexer.scan()
    hit = search(config.db_path, "zebra", 5)["results"][0]
    assert "**zebra**" in hit["snippet"]
    assert hit["snippet"].startswith("…") and hit["snippet"].endswith("…")
    shown = shown_text(hit["snippet"])
    assert shown in " ".join(text.split())  # one piece of the file
    assert {shown.split()[0], shown.split()[-1]} <= set(text.split())  # no word cut in part
    assert hit["line_start"] <= 101 <= hit["line_end"] and hit["line_end"] - hit["line_start"] < 10


def test_a_window_shorter_than_the_snippet_is_marked_as_cut_at_both_ends(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    # 32 words of ~40 characters are longer than the window: FTS5 shows all of it, and marks no cut.
    words = [f"{n:04d}" + "w" * 36 for n in range(200)]
    text = " ".join(words[:100]) + " zebra " + " ".join(words[100:]) + "\n"
    write(source, "long-words.txt", text)
    indexer.scan()
    snippet = search(config.db_path, "zebra", 5)["results"][0]["snippet"]
    assert "**zebra**" in snippet and snippet.startswith("…") and snippet.endswith("…")
    shown = shown_text(snippet).split()
    assert shown[0] in words and shown[-1] in words  # cut between words


def test_the_window_is_where_most_of_the_searched_words_are(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    write(source, "both.txt", "alpha alone\n" + filler(60) + "alpha and beta together\n" + filler(60) + "beta alone\n")
    indexer.scan()
    snippet = search(config.db_path, "alpha beta", 5)["results"][0]["snippet"]
    assert "**alpha** and **beta** together" in snippet


def test_a_section_with_other_forms_of_the_word_only_is_shown_whole(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    write(source, "forms.txt", filler(60) + "the files were indexed overnight\n" + filler(60))
    indexer.scan()
    assert "**indexed**" in search(config.db_path, "indexing", 5)["results"][0]["snippet"]


def test_a_window_fts5_does_not_match_is_tried_again_whole(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    # "cupboard" is found first for "cup", but it is not the word "cup" to FTS5.
    write(source, "kitchen.txt", "the cupboard door\n" + filler(80) + "a cup of tea\n" + filler(20))
    indexer.scan()
    snippet = search(config.db_path, "cup", 5)["results"][0]["snippet"]
    assert "**cup** of tea" in snippet and "cupboard" not in snippet


@pytest.mark.parametrize(
    ("body", "words", "whole"),
    [
        ("short text with needle", ["needle"], True),  # too short to cut
        (filler(100), ["absent"], True),  # nothing found: FTS5 may have matched another form
        ("\u0130" + filler(100) + "needle", ["needle"], True),  # lower() changes the length
        (filler(100) + "needle", ["needle"], False),
        ("haystackneedle " + filler(100) + "needle", ["needle"], False),  # only where a word starts
    ],
)
def test_snippet_window_cases(body: str, words: list[str], whole: bool) -> None:
    start, end = snippet_window(body, words)
    assert ((start, end) == (0, len(body))) is whole
    if not whole:
        assert end - start <= SNIPPET_WINDOW_CHARS and re.search(r"\bneedle\b", body[start:end])


@given(body=st.text(min_size=1, max_size=5000), words=st.lists(st.text(max_size=8), min_size=1, max_size=5))
def test_snippet_window_is_always_a_span_of_the_body(body: str, words: list[str]) -> None:
    start, end = snippet_window(body, [w.lower() for w in words])
    assert 0 <= start < end <= len(body)
    assert (start, end) == (0, len(body)) or end - start <= SNIPPET_WINDOW_CHARS


@pytest.mark.parametrize("limit", [0, -1, 101, 2.5, True])
def test_bad_limit_is_a_clear_error(notes: ServerConfig, limit: object) -> None:
    with pytest.raises(ArgumentError, match="^limit: must be a whole number from 1 to 100"):
        search(notes.db_path, "apples", limit)  # type: ignore[arg-type]


def test_search_answers_while_the_index_is_empty(config: ServerConfig, indexer: TextIndexer) -> None:
    assert search(config.db_path, "anything", 10)["results"] == []


HOSTILE = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(list('"\'*-^:()[]{}+~ \n\t\x00\\') + ["NEAR(", "AND", "OR", "NOT", "title:", "body:", "apples"]), max_size=30).map("".join),
    st.lists(st.sampled_from(["apples", "pears", '"', "-", "*", "OR", "NOT", "NEAR(", ")", "^", "title:", ":", "🙂"]), max_size=12).map(" ".join),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=HOSTILE)
def test_any_text_returns_results_or_a_clear_error(notes: ServerConfig, query: str) -> None:
    try:
        reply = search(notes.db_path, query, 10)
    except QueryError as exc:
        assert "no words to search for" in str(exc)
    else:
        assert len(reply["results"]) <= 10
        assert all(hit["score"] > 0 for hit in reply["results"])


def test_a_megabyte_query_is_bounded(notes: ServerConfig) -> None:
    reply = search(notes.db_path, "apples " + "zzz " * 250_000, 10)
    assert reply["results"] == [] or reply["results"][0]["path"]
