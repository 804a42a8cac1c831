"""get_document's reading of real files, in process: headings of any name, bounds, odd files.
(The MCP session and the refusals are in test_find_narrow_read.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from documents import MAX_OUTLINE_HEADINGS, document_reply
from exceptions import ArgumentError
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import write


def test_headings_holding_the_separator_or_controls_are_found_by_the_name_search_shows(
    indexer: TextIndexer, source: Path, config: ServerConfig
) -> None:
    write(source, "gen.md", "# Generics <T>\n\nabout T\n\n## x >= y\n\ncompare\n\n## Ctrl\x1bHead\n\nescape\n")
    outline = document_reply(config, "gen.md", outline=True)["outline"]
    assert [entry["heading"] for entry in outline] == ["Generics <T>", "Generics <T> > x >= y", "Generics <T> > Ctrl\ufffdHead"]
    for entry in outline:
        assert document_reply(config, "gen.md", heading=entry["heading"])["line_start"] == entry["line_start"]
    loose = document_reply(config, "gen.md", heading="generics <t>>x >= y")["text"]
    assert "compare" in loose and "escape" not in loose
    indexer.scan()
    hit = search(config.db_path, "escape")["results"][0]
    assert "escape" in document_reply(config, "gen.md", heading=hit["heading"])["text"]


def test_a_file_of_headings_only_is_outlined_up_to_the_bound(source: Path, config: ServerConfig) -> None:
    write(source, "h.md", "# a\n" * 200_000)
    reply = document_reply(config, "h.md", start_line=5, end_line=6, outline=True, max_chars=100_000)
    assert reply["outline_truncated"] and len(reply["outline"]) == MAX_OUTLINE_HEADINGS
    small = document_reply(config, "h.md", start_line=5, end_line=6, outline=True)  # 20,000 characters: fewer fit
    assert small["outline_truncated"] and 0 < len(small["outline"]) < MAX_OUTLINE_HEADINGS
    assert reply["text"] == "# a\n# a" and reply["total_lines"] == 200_000


def test_control_bytes_past_the_binary_sniff_are_not_returned_raw(source: Path, config: ServerConfig) -> None:
    write(source, "mixed.txt", "plain text line\n" * 1000 + "bell\x07 and escape\x1b[2J here\n")
    text = document_reply(config, "mixed.txt", start_line=1001)["text"]
    assert text == "bell\ufffd and escape\ufffd[2J here"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [({"start_line": 0}, "start_line"), ({"start_line": 3, "end_line": 2}, "end_line"), ({"end_line": -1}, "end_line"),
     ({"start_line": True}, "start_line"), ({"max_chars": 100_001}, "max_chars"), ({"heading": "B"}, "heading"),
     ({"start_char": -1}, "start_char"), ({"start_line": 3, "start_char": 4}, "start_char")],
)
def test_bad_ranges_name_the_argument(source: Path, config: ServerConfig, arguments: dict, named: str) -> None:
    write(source, "a.md", "# A\n\none\ntwo\nthree\n")
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "a.md", **arguments)
    assert raised.value.name == named


def test_a_name_with_the_index_suffix_outside_the_index_directory_is_readable(source: Path, config: ServerConfig) -> None:
    write(source, "backup.sqlite3.md", "# Backup\n\nnotes about a backup\n")
    assert document_reply(config, "backup.sqlite3.md")["title"] == "Backup"


def test_a_search_hits_heading_and_first_line_read_its_section(indexer: TextIndexer, config: ServerConfig) -> None:
    # The page title has no text of its own: the hit's lines start at it, the section two lines on.
    write(config.source_directory, "about.md", "# about_Signing\n\n## Short description\n\nExplains how to sign scripts.\n\n## Long\n\nOther text.\n")
    indexer.scan()
    [hit] = search(config.db_path, "sign scripts")["results"]
    assert hit["line_start"] == 1 and hit["heading"] == "about_Signing > Short description", hit
    document = document_reply(config, "about.md", heading=hit["heading"], start_line=hit["line_start"])
    assert document["text"] == "## Short description\n\nExplains how to sign scripts.\n"
