"""One Markdown heading parser (markup.py) for plain files and notebook cells: both find the same
headings, as CommonMark reads them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats import extract
from sections import file_content


def file_headings(text: str) -> list[tuple[int, int, str]]:
    """(line, level, name) of each heading of ``text`` read as a Markdown file."""
    content = file_content("note.md", text.encode())
    return [(content.padded.count("\n", 0, at) + 1, level, name) for at, level, name in content.headings]


def cell_headings(text: str) -> list[tuple[int, int, str]]:
    """(line, level, name) of each heading of ``text`` read as a notebook's one markdown cell."""
    notebook = {"cells": [{"cell_type": "markdown", "source": text}], "nbformat": 4}
    extracted = extract("note.ipynb", json.dumps(notebook).encode())
    assert extracted is not None
    return [(heading.line, heading.level, heading.name) for heading in extracted.headings]


# Each text has no run of blank lines (a notebook's text keeps one blank line of a run), so both
# number its lines alike.
CASES = {
    "atx with closing sequences": ("# One #\ntext\n## Two ##########\n### foo ### b\n# foo#", [(1, 1, "One"), (3, 2, "Two"), (4, 3, "foo ### b"), (5, 1, "foo#")]),
    # CommonMark: "ATX headings can be empty": "## ", "#" and "### ###"; a heading with no text names nothing.
    "empty atx headings name nothing": ("# #\ntext\n## \n#\n### ###\n# Real", [(6, 1, "Real")]),
    "setext headings": ("Title\n=====\n\nSome text\nSub\n---\n- item\n---", [(1, 1, "Title"), (5, 2, "Sub")]),
    "a fence closes only on a line of fence characters alone": ("```\n# no\n```python\n# still code\n```\n# yes", [(6, 1, "yes")]),
    "a longer fence of the same character closes": ("````\n```\n# no\n`````\n# yes", [(5, 1, "yes")]),
    "tildes and backticks do not close each other": ("~~~\n```\n# no\n~~~\n# yes", [(5, 1, "yes")]),
    "a backtick fence's info string holds no backtick": ("```a`b\n# heading", [(2, 1, "heading")]),
    "a fence never closed runs to the end": ("# before\n```\n# no\nTitle\n===", [(1, 1, "before")]),
    "four spaces of indent are code": ("    # code\n    Title\n    ===\nok", []),
    "no space after the hashes is no heading": ("#hashtag\n#5 bolt\n####### seven", []),
}


@pytest.mark.parametrize("text, expected", CASES.values(), ids=CASES.keys())
def test_plain_files_and_notebook_cells_find_the_same_headings(text: str, expected: list[tuple[int, int, str]]) -> None:
    assert file_headings(text) == expected
    assert cell_headings(text) == expected


LINES = [
    "# A", "## B ##", "# #", "#", "### ###", "# foo#", "#hashtag", "text", "Para", "  Sub", "===", "---", "- item",
    "> quote", "| t |", "```", "```py", "```a`b", "````", "~~~", "~~~~", "    # indented", "1. one", " ", "",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=30))
def test_any_markdown_gives_the_same_headings_in_a_file_and_in_a_cell(lines: list[str]) -> None:
    text = "\n".join(["intro", *lines])  # a first line of text: a file's front matter never starts it
    assert [heading[1:] for heading in file_headings(text)] == [heading[1:] for heading in cell_headings(text)]
