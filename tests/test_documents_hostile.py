"""get_document without dead ends: a heading that occurs twice, a line longer than max_chars, and
the continuation a reply gives, followed to the end on any file (in process, then over MCP stdio,
with a search whose path filter is in the wrong case: see test_path_case_hostile.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client

from documents import document_reply, read_document
from exceptions import ArgumentError
from models import ServerConfig
from tests.conftest import write
from tests.mcp_client import call, server_params, wait_for

TWICE = """# Guide

## Examples

first example

## Setup

setup steps

## Examples

second example

## Issue #2

the issue
"""


def test_a_heading_that_occurs_twice_is_refused_with_each_occurrence_and_its_lines(source: Path, config: ServerConfig) -> None:
    write(source, "twice.md", TWICE)
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "twice.md", heading="Guide > Examples")
    message = str(raised.value)
    assert raised.value.name == "heading"
    assert "lines 3-6" in message and "lines 11-14" in message and "Guide > Examples#2" in message and "start_line" in message


@pytest.mark.parametrize(
    ("arguments", "lines", "says"),
    [
        ({"heading": "Guide > Examples#2"}, (11, 14), "second example"),
        ({"heading": "examples#2"}, (11, 14), "second example"),  # the heading's own name, any case
        ({"heading": "Guide > Examples#1"}, (3, 6), "first example"),
        ({"heading": "Guide > Examples", "start_line": 11}, (11, 14), "second example"),  # the line the outline gives
        ({"heading": "Examples", "start_line": 13}, (13, 14), "second example"),  # any line of it: read from there
        ({"heading": "Examples", "start_line": 3, "end_line": 5}, (3, 5), "first example"),
        ({"heading": "Guide > Issue #2"}, (15, 17), "the issue"),  # a '#2' that is the heading's own name
        ({"heading": "Issue #2"}, (15, 17), "the issue"),
    ],
)
def test_each_occurrence_of_a_heading_can_be_read(source: Path, config: ServerConfig, arguments: dict, lines: tuple, says: str) -> None:
    write(source, "twice.md", TWICE)
    reply = document_reply(config, "twice.md", **arguments)
    assert (reply["line_start"], reply["line_end"]) == lines and says in reply["text"]
    assert reply["text"].splitlines()[0] == TWICE.splitlines()[lines[0] - 1]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [({"heading": "Examples", "start_line": 8}, "start_line"), ({"heading": "Examples#3"}, "heading"),
     ({"heading": "Examples", "start_line": 12, "end_line": 11}, "end_line")],
)
def test_an_occurrence_that_is_not_there_is_refused_with_the_ones_that_are(
    source: Path, config: ServerConfig, arguments: dict, named: str
) -> None:
    write(source, "twice.md", TWICE)
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "twice.md", **arguments)
    assert raised.value.name == named
    if named != "end_line":
        assert "lines 3-6" in str(raised.value) and "lines 11-14" in str(raised.value)


def test_a_line_longer_than_max_chars_is_read_to_its_end(source: Path, config: ServerConfig) -> None:
    write(source, "min.txt", "header\n" + "x" * 250 + "y")
    first = document_reply(config, "min.txt", start_line=2, max_chars=100)
    assert first["text"] == "x" * 100 and first["truncated"]
    assert (first["next_start_line"], first["next_start_char"]) == (2, 100)
    rest = document_reply(config, "min.txt", start_line=2, start_char=200, max_chars=100)
    assert rest["text"] == "x" * 50 + "y" and not rest["truncated"] and rest["next_start_line"] is None
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "min.txt", start_line=2, start_char=252)
    assert raised.value.name == "start_char" and "251 characters" in str(raised.value)


def read_following(config: ServerConfig, path: str, max_chars: int, **asked: Any) -> tuple[str, int]:
    """The text of ``path`` read by calls that follow each reply's continuation, and how many calls."""
    text, calls, start_line, start_char = "", 0, asked.pop("start_line", None), 0
    while True:
        reply = document_reply(config, path, max_chars=max_chars, start_line=start_line, start_char=start_char, **asked)
        calls += 1
        assert len(reply["text"]) <= max_chars
        text += reply["text"]
        if not reply["truncated"]:
            assert reply["next_start_line"] is None
            return text, calls
        start_line, start_char = reply["next_start_line"], reply["next_start_char"] or 0
        if start_char == 0:
            text += "\n"  # the reply ended at a line end
        assert calls <= 10_000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.text(st.sampled_from(["a", "é", " ", "\t", "#", "\n", "\n", "😀", "語", "\r"]), max_size=300),
    max_chars=st.integers(1, 40),
)
@example(body="a" * 100, max_chars=7)
@example(body="\n\n\n", max_chars=1)
@example(body="", max_chars=1)
def test_following_the_continuation_reads_every_character_once(source: Path, config: ServerConfig, body: str, max_chars: int) -> None:
    write(source, "any.txt", "plain " + body)  # a first word: a file of whitespace alone is read as empty
    lines = read_document(config, "any.txt").lines
    text, _ = read_following(config, "any.txt", max_chars)
    assert text == "\n".join(lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sections=st.lists(st.tuples(st.sampled_from(["Same", "Other"]), st.text(st.sampled_from(["w", " ", "\n", "é"]), max_size=80)),
                      min_size=1, max_size=6),
    max_chars=st.integers(1, 30),
)
def test_a_repeated_section_is_read_whole_by_its_continuation(
    source: Path, config: ServerConfig, sections: list[tuple[str, str]], max_chars: int
) -> None:
    write(source, "doc.md", "".join(f"## {name}\n\n{body}\n\n" for name, body in sections))
    document = read_document(config, "doc.md")
    for entry in document.outline:
        text, _ = read_following(config, "doc.md", max_chars, heading=entry["heading"], start_line=entry["line_start"])
        assert text == "\n".join(document.lines[entry["line_start"] - 1:entry["line_end"]])


@pytest.mark.anyio
async def test_an_agent_reads_past_each_dead_end_over_mcp(source: Path, tmp_path: Path) -> None:
    write(source, "twice.md", TWICE)
    write(source, "long.txt", "start\n" + "word " * 3000 + "end")
    write(source, "Docs/About/team.md", "# Team\n\nthe walrus team\n")
    async with Client(server_params(source, tmp_path / "idx")) as client:
        async def indexed() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 3

        await wait_for(indexed)
        refused = await client.call_tool("get_document", {"path": "twice.md", "heading": "Guide > Examples"})
        assert refused.is_error and "lines 11-14" in refused.content[0].text
        second = await call(client, "get_document", {"path": "twice.md", "heading": "Guide > Examples#2"})
        assert "second example" in second["text"] and second["line_start"] == 11
        by_line = await call(client, "get_document", {"path": "twice.md", "heading": "Guide > Examples", "start_line": 11})
        assert by_line["text"] == second["text"]

        read, asked = "", {"path": "long.txt", "start_line": 2, "max_chars": 4000}
        while True:
            part = await call(client, "get_document", asked)
            read += part["text"]
            if not part.get("truncated"):  # #23: left out when false
                break
            assert part["next_start_line"] == 2
            asked = {**asked, "start_char": part["next_start_char"]}
        assert read == "word " * 3000 + "end"

        wrong_case = await call(client, "search", {"query": "walrus", "path": "**/about/**"})
        assert wrong_case["results"] == [] and any("'**/About/**'" in warning for warning in wrong_case["warnings"])
        assert (await call(client, "search", {"query": "walrus", "path": "**/About/**"}))["results"]
