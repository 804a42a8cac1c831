"""A path filter in the wrong case: it stays case-sensitive (as the file system is), and a search it
leaves without any file says which spelling of it would match."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from exceptions import ArgumentError
import filters as filters_module
from filters import read_filters
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import write


@pytest.fixture
def about(indexer: TextIndexer, source: Path) -> None:
    write(source, "Docs/About/team.md", "# Team\n\nthe walrus team\n")
    write(source, "Docs/About/history.md", "# History\n\nwalrus history\n")
    write(source, "Archive/ABOUT/old.md", "# Old\n\nan old walrus page\n")
    write(source, "notes/walrus.txt", "walrus notes\n")
    indexer.scan()


def hints(reply: dict) -> list[str]:
    return [warning for warning in reply["warnings"] if "case" in warning]


@pytest.mark.usefixtures("about")
@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("**/about/**", ["**/About/**", "**/ABOUT/**"]),
        ("docs/", ["Docs/"]),
        ("docs", ["Docs"]),
        ("docs/about/team.md", ["Docs/About/team.md"]),
        ("docs/*/t?am.MD", ["Docs/*/t?am.md"]),
        ("**/[a]bout/*.md", ["**/About/*.md", "**/ABOUT/*.md"]),  # a [class] the letter is not in is spelled out
        ("docs/[aA]bout/*.md", ["Docs/[aA]bout/*.md"]),  # one that does is kept
    ],
)
def test_a_filter_matching_no_file_names_the_spellings_that_would(config: ServerConfig, path: str, named: list[str]) -> None:
    reply = search(config.db_path, "walrus", filters=read_filters(path))
    assert reply["results"] == []
    [hint] = hints(reply)
    assert all(repr(glob) in hint for glob in named), hint
    for glob in named:
        assert search(config.db_path, "walrus", filters=read_filters(glob))["results"], glob


@pytest.mark.usefixtures("about")
@pytest.mark.parametrize(
    ("path", "extensions"),
    [("Docs/About/**", None), ("**/nowhere/**", None), ("**/about/**", [".txt"]), ("notes/", None)],
)
def test_no_hint_when_the_case_is_not_why(config: ServerConfig, path: str, extensions: list[str] | None) -> None:
    reply = search(config.db_path, "walrus", filters=read_filters(path, extensions))
    assert hints(reply) == []


def test_the_hint_holds_when_filters_are_looked_up_per_section(
    about: None, config: ServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filters_module, "MAX_LISTED_FILES", 0)
    assert "'Docs/**'" in hints(search(config.db_path, "walrus", filters=read_filters("docs/**")))[0]
    reply = search(config.db_path, "walrus", filters=read_filters("Docs/**"))
    assert len(reply["results"]) == 2 and hints(reply) == []


FILTER_CHARS = list("aAiIkKsSıİſ\u212aéÉ*?[]!/%_\\x")
#: Characters that a character of a filter may stand for in a path, ignoring case (or as a wildcard).
SPELLINGS = {"a": "aA", "i": "iIıİ", "k": "kK\u212a", "s": "sSſ", "é": "éÉ", "*": ["", "x", "a/", "ſS"], "?": "xİ/", "[": "[a", "]": "]a", "!": "!a"}


@st.composite
def filter_and_path(draw: st.DrawFn) -> tuple[str, str]:
    """A path filter, and a path that is mostly that filter in other cases (so that it often matches)."""
    text = draw(st.text(st.sampled_from(FILTER_CHARS), min_size=1, max_size=12))
    spell = st.sampled_from([c for c in FILTER_CHARS if c not in "*?[]!"])
    path = "".join(draw(st.sampled_from(list(SPELLINGS.get(c.lower(), c))) | spell) for c in text)
    return text, path


@settings(max_examples=1000, deadline=None)
@given(asked=filter_and_path())
@example(asked=("**/ABOUT/**", "docs/About/x"))
@example(asked=("s%_\\", "ſ%_\\"))
def test_the_case_probe_is_loose_in_sqlite_and_the_spelling_it_names_is_exact(asked: tuple[str, str]) -> None:
    text, path = asked
    try:
        filters = read_filters(text)
    except ArgumentError:
        return
    if filters.path is None:
        return
    probe = filters_module._path_regex(filters.path, grouped=True)
    found = re.fullmatch(probe, path, re.S | re.I)
    if found is None:
        return
    like = filters_module._caseless_like(filters.path)
    assert sqlite3.connect(":memory:").execute("SELECT ? LIKE ? ESCAPE '\\'", (path, like)).fetchone()[0], like
    spelled = filters_module._spelled_as(filters.path, found)
    assert re.fullmatch(filters_module._path_regex(spelled), path, re.S), spelled
