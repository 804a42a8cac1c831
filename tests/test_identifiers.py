"""Identifiers found by their parts and as written: camelCase, snake_case, kebab-case and dotted
names match the query of their words and themselves; ticket ids and versions match as written;
the words added to the index never show in a snippet."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from identifiers import identifier_parts
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import write

FORMS = {
    "camel.md": "The helper parseQueryString reads it.",
    "snake.md": "The helper parse_query_string reads it.",
    "kebab.md": "The helper parse-query-string reads it.",
    "dotted.md": "The helper Parse.Query.String reads it.",
}


def paths(config: ServerConfig, query: str) -> set[str]:
    return {hit["path"] for hit in search(config.db_path, query, 20)["results"]}


@pytest.fixture
def indexed(config: ServerConfig, source: Path) -> ServerConfig:
    for name, text in FORMS.items():
        write(source, name, text)
    write(source, "decisions.md", "We chose SQLite in DEC-0054 for release 1.0.21, replacing v2.3 of the cache.")
    write(source, "other.md", "DEC 54 was about 1.0 and 21 other things; v2 had 3 caches. HTTPAdapter pools.")
    writer = IndexWriter(config.db_path)
    assert TextIndexer(config, writer).scan()["success"]
    writer.close()
    return config


def test_every_form_of_an_identifier_matches_its_words(indexed: ServerConfig) -> None:
    assert set(FORMS) <= paths(indexed, "parse query string")
    assert set(FORMS) <= paths(indexed, '"parse query string"')


def test_each_identifier_matches_itself(indexed: ServerConfig) -> None:
    assert "camel.md" in paths(indexed, "parseQueryString")
    assert {"snake.md"} <= paths(indexed, "parse_query_string")
    assert {"kebab.md"} <= paths(indexed, "parse-query-string")
    assert {"dotted.md"} <= paths(indexed, "Parse.Query.String")


@pytest.mark.parametrize("written", ["DEC-0054", "1.0.21", "v2.3"])
def test_ids_and_versions_match_as_written(indexed: ServerConfig, written: str) -> None:
    assert paths(indexed, written) == {"decisions.md"}


def test_added_words_are_not_shown(indexed: ServerConfig) -> None:
    hit = next(h for h in search(indexed.db_path, "parse query string", 20)["results"] if h["path"] == "camel.md")
    assert "Query String" not in hit["snippet"] and "parse Query" not in hit["snippet"]
    hit = search(indexed.db_path, "http adapter", 5)["results"][0]
    assert hit["path"] == "other.md" and "HTTP Adapter" not in hit["snippet"]


def test_a_match_inside_an_identifier_names_its_definition_and_shows_it(config: ServerConfig, source: Path) -> None:
    code = replace(config, included_extensions=(".js",))
    write(source, "ident.js", 'function parseQueryString(s) {\n  return s.split("&");\n}\n\n'
          "function XMLHttpRequestHandlerFactory() {\n  return new Handler();\n}\n")
    write(source, "other.js", "function unrelated() {\n  return 1;\n}\n")
    writer = IndexWriter(code.db_path)
    assert TextIndexer(code, writer).scan()["success"]
    writer.close()
    for query, heading in [("parse query string", "function parseQueryString"), ("xml http request handler factory", "function XMLHttpRequestHandlerFactory")]:
        hit = search(code.db_path, query, 5)["results"][0]
        assert (hit["path"], hit["heading"]) == ("ident.js", heading)
        assert heading.split()[1] in hit["snippet"].replace("**", "") and "**" in hit["snippet"], hit["snippet"]
        assert "\x1f" not in hit["snippet"]
    shown = search(code.db_path, "query string", 5)["results"][0]["snippet"]
    assert "parse**QueryString**(s)" in shown  # the parts that match, side by side, highlighted as one


def test_parts_of_identifiers() -> None:
    assert identifier_parts("parseQueryString HTTPAdapter getV2Config plain words") == "parse Query String HTTP Adapter get V 2 Config"
    assert identifier_parts("no identifiers here. None At All") == ""
    assert identifier_parts("x" * 200 + "Yz") == ""  # a run too long for an identifier


@pytest.mark.parametrize("text", ["aB" * 5_000_000, "a" * 10_000_000, "Ab " * 3_000_000])
def test_hostile_text_is_read_once(text: str) -> None:
    started = time.process_time()
    identifier_parts(text)
    assert time.process_time() - started < 5


def test_a_changed_file_forgets_its_identifiers_parts(indexed: ServerConfig, source: Path) -> None:
    write(source, "camel.md", "Nothing of the kind now.")
    write(source, "dotted.md", "Nothing of the kind here either.")
    writer = IndexWriter(indexed.db_path)
    assert TextIndexer(indexed, writer).scan()["success"]
    writer.close()
    assert paths(indexed, "parse query string") == {"snake.md", "kebab.md"}
    assert paths(indexed, "parseQueryString") == set()
