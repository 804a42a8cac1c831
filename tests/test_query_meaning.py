"""What a query means, per file, on real files: exclusions and required words across sections,
command lines, the reply's reading of the query, CJK substrings, scores in a tiny folder, and
suggestions when nothing matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer import TextIndexer
from models import ServerConfig
from query import MAX_REPEATS, build_match, parse_query
from search import search
from sections import split_sections
from tests.conftest import write

FILLER = "\n".join(f"Line {n}: nothing of note is written on this line." for n in range(600))


def ranked(config: ServerConfig, query: str) -> list[str]:
    return [hit["path"] for hit in search(config.db_path, query)["results"]]


@pytest.fixture
def fruit(indexer: TextIndexer, source: Path, config: ServerConfig) -> ServerConfig:
    # spread.md: "cherry" on line 3, "only" on line ~608, sections apart.
    write(source, "spread.md", f"# Spread\n\nA cherry here.\n\n{FILLER}\n\n## Much later\n\nThe only mention.\n")
    write(source, "cherry.md", "# Cherries\n\ncherry cherry cherry, and cherry again.\n")
    write(source, "together.md", "# Together\n\nThe only cherry in the bowl.\n")
    write(source, "mixed.md", f"# Mixed\n\nbanana bread.\n\n{FILLER}\n\n## Apples\n\nAn apple a day.\n")
    write(source, "apple.md", "# Apple\n\nOne apple, no other fruit.\n")
    indexer.scan()
    return config


def test_an_excluded_word_leaves_out_the_whole_file(fruit: ServerConfig) -> None:
    # mixed.md holds "apple" in its second section and "banana" only in its first.
    assert ranked(fruit, "apple") [-1:] and "mixed.md" in ranked(fruit, "apple")
    assert ranked(fruit, "apple -banana") == ["apple.md"]
    assert search(fruit.db_path, "apple -banana")["query_read"]["excluded"] == ["banana"]


def test_keywords_are_required_in_the_file_not_in_one_section(fruit: ServerConfig) -> None:
    order = ranked(fruit, "cherry only")
    # Both words in one section, then both in the file, then only one of them.
    assert order[:3] == ["together.md", "spread.md", "cherry.md"]


@pytest.mark.parametrize(
    ("query", "required"),
    [
        ("Get-ChildItem -Recurse", ["get childitem", "recurse"]),
        ("git commit --amend", ["git", "commit", "amend"]),
        ("ls -la", ["ls", "la"]),
        ("Remove-Item -Recurse -Force", ["remove item", "recurse", "force"]),
        ("apple -Pears", ["apple", "pears"]),
    ],
)
def test_pasted_command_lines_keep_their_options_as_words(fruit: ServerConfig, query: str, required: list[str]) -> None:
    reply = search(fruit.db_path, query)
    assert reply["query_read"]["required"] == required
    assert reply["query_read"]["excluded"] == []
    assert any("searched as a word" in warning for warning in reply["warnings"])


def test_the_reply_says_how_a_question_was_read(fruit: ServerConfig) -> None:
    reply = search(fruit.db_path, 'which "apple day" fruit bowl cherr* recipes do people like -banana')
    read = reply["query_read"]
    assert read["mode"] == "question"
    assert read["required"] == []
    assert {"fruit", "bowl", "recipes", "people", "like", "apple", "day"} <= set(read["optional"])
    assert read["phrases"] == ["apple day"] and read["prefixes"] == ["cherr*"] and read["excluded"] == ["banana"]


def test_a_hyphenated_first_word_is_no_command(fruit: ServerConfig) -> None:
    read = search(fruit.db_path, "e-mail -banana")["query_read"]
    assert read["excluded"] == ["banana"] and read["required"] == ["e mail"]


def test_cjk_is_read_as_typed(fruit: ServerConfig) -> None:
    assert search(fruit.db_path, "获取 -日本語")["query_read"]["required"] == ["获取"]
    read = search(fruit.db_path, "获取子项 日本語 ファイル名 検索 目录")["query_read"]
    assert read["mode"] == "question" and read["optional"] == ["获取子项", "日本語", "ファイル名", "検索", "目录"]


def test_the_reply_says_how_keywords_were_read(fruit: ServerConfig) -> None:
    read = search(fruit.db_path, '"apple a day" cherr* e-mail')["query_read"]
    assert (read["mode"], read["required"], read["phrases"], read["prefixes"]) == ("keywords", ["e mail"], ["apple a day"], ["cherr*"])


def test_a_quoted_phrase_in_a_question_also_counts_word_by_word() -> None:
    plan = build_match(parse_query('papers about "boundary layer transition" in supersonic flow'))
    assert '"boundary layer transition"' in plan.precise
    assert all(f'"{word}"' in plan.precise for word in ("boundary", "layer", "transition"))


def test_a_word_repeated_in_a_question_counts_at_most_max_repeats_times() -> None:
    plan = build_match(parse_query("shape shapes shape shape shape of the wing body in supersonic flow"))
    assert plan.precise.count('"shape') == MAX_REPEATS


def test_a_line_alone_is_the_text_not_its_title() -> None:
    assert split_sections("\nJust one short line of text.\n", "a.txt")[0] == ""
    assert split_sections("A title\n\nThen the text.\n", "a.txt")[0] == "A title"


CJK = "获取子项目录列表。日本語のファイル名を検索します。"
MIXED = "Use Get-ChildItem获取子项 to list. API接口文档 v2版本."


@pytest.mark.parametrize("query", ["获取", "日本語", "検索", "目录列表", "ファイル名", "表", "接口", "版本"])
def test_chinese_and_japanese_are_found_by_substring(indexer: TextIndexer, source: Path, config: ServerConfig, query: str) -> None:
    write(source, "cjk.md", f"# 说明\n\n{CJK}\n")
    write(source, "mixed.md", f"{MIXED}\n")  # CJK glued to Latin letters and digits
    write(source, "english.md", "# English\n\nA list of the files of a folder.\n")
    indexer.scan()
    reply = search(config.db_path, query)
    assert {hit["path"] for hit in reply["results"]} == {name for name, text in (("cjk.md", CJK), ("mixed.md", MIXED)) if query in text}
    for hit in reply["results"]:
        assert f"**{query}**" in hit["snippet"] and "\u200b" not in hit["snippet"]
        assert hit["snippet"].replace("**", "").rstrip("…").removeprefix("说明 ") in CJK + MIXED  # the text as written


def test_a_cjk_string_that_is_not_in_the_text_finds_nothing(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    write(source, "cjk.md", f"{CJK}\n")
    indexer.scan()
    assert ranked(config, "获得") == [] and ranked(config, "录目") == []


@pytest.fixture
def three_notes(indexer: TextIndexer, source: Path, config: ServerConfig) -> ServerConfig:
    write(source, "a.md", "# Meeting notes\n\nMeeting with the project team. Meeting again on Friday about the project.\n")
    write(source, "b.md", "# Shopping\n\nMilk, eggs and bread for the meeting.\n")
    write(source, "c.md", "# Kickoff\n\nProject kickoff meeting: a longer note, with many more words in it than the others have.\n")
    indexer.scan()
    return config


@pytest.mark.parametrize("query", ["meeting", "project", "meeting project", "notes about the meeting with the project team"])
def test_scores_in_a_tiny_folder_are_sane_and_ordered(three_notes: ServerConfig, query: str) -> None:
    results = search(three_notes.db_path, query)["results"]
    scores = [hit["score"] for hit in results]
    assert len(results) >= 2
    assert all(score > 0.01 for score in scores), scores
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores), scores
    assert results[0]["path"] == "a.md"  # the note that says it most, in the fewest words


def test_a_query_that_finds_nothing_gets_the_index_words_close_to_it(three_notes: ServerConfig) -> None:
    reply = search(three_notes.db_path, "meetnig")
    assert reply["results"] == [] and reply["suggestions"][0].lower() == "meeting"
    assert search(three_notes.db_path, "kikcoff")["suggestions"][0] == "Kickoff"  # as the file spells it
    assert search(three_notes.db_path, "projetcs")["suggestions"][0].lower() == "project"
    assert search(three_notes.db_path, "meeting")["suggestions"] == []
    assert search(three_notes.db_path, "zzqxv")["suggestions"] == []


def test_feedback_never_adds_a_form_of_the_questions_own_words(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    for n in range(12):
        write(source, f"sys{n}.md", f"# Note {n}\n\nSystems of sorting algorithms: the system sorts, algorithm {n} merges quicksort heapsort.\n")
    for n in range(30):
        write(source, f"other{n}.md", f"# Other {n}\n\nGardening and cooking, nothing else {n}.\n")
    indexer.scan()
    read = search(config.db_path, "which system uses the fastest algorithm for sorting records")["query_read"]
    assert read["mode"] == "question" and read["feedback"]
    assert not {"systems", "system", "algorithms", "algorithm", "sorts", "sorting"} & set(read["feedback"])
    assert "quicksort" in read["feedback"]


def test_a_stem_the_porter_stemmer_cut_mid_character_breaks_nothing(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    # Porter drops "ing" from "a빹ing", then one byte of the "doubled consonant" 0xB9 0xB9 that ends
    # 빹 (EB B9 B9): the index then holds a stem that is not UTF-8.
    for n in range(12):
        write(source, f"odd{n}.md", f"# Odd {n}\n\nThe a빹ing and b빹ing words beside quicksort heapsort mergesort {n}.\n")
    indexer.scan()
    assert ranked(config, "a빹ing")[:1] and ranked(config, "a빹ing")[0].startswith("odd")
    assert search(config.db_path, "aa빹ing")["results"] == []  # suggestions read the index's stems near "a"
    read = search(config.db_path, "which words sit beside quicksort and heapsort here")["query_read"]
    assert read["mode"] == "question"  # feedback stems the top files' words, a빹ing among them
