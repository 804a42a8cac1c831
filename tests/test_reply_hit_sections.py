"""Hits at the section that answers (the heading whose own lines hold the words), and clean snippets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from documents import document_reply
from indexer import TextIndexer
from models import ServerConfig
from search import search
from sections import HeadingSpan, heading_spans, split_sections
from snippets import ELLIPSIS, SNIPPET_MAX_CHARS, _may_match, bounded_snippet, clean_snippet, without_heading
from tests.conftest import write
from tests.test_formats import docx_bytes, epub_bytes, odt_bytes, pptx_bytes, slide_xml, w_para, xhtml
from tests.test_formats_indexed import assert_hit_lines_hold, every_format, scanned  # noqa: F401 (a fixture)
from tests.mcp_client import call, server_params, wait_for

M_OPEN, M_CLOSE = "\ue000", "\ue001"  # the private markers a snippet's matches are between


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("# Firewall ##", "Firewall"),
        ("---\ntitle: Notes\n---\n# Notes\ntext", "Notes\ntext"),
        ("Heading\n=======\ntext", "Heading\ntext"),
        (f"**{M_OPEN}WhatIf{M_CLOSE}** switch", f"{M_OPEN}WhatIf{M_CLOSE} switch"),
        ("*em* and _em_ and ***both***", "em and em and both"),
        ("about_Signing and snake_case_name", "about_Signing and snake_case_name"),
        (f"def {M_OPEN}http{M_CLOSE}_{M_OPEN}get{M_CLOSE}_{M_OPEN}url{M_CLOSE}(url)",  # its parts highlighted: still one name
         f"def {M_OPEN}http{M_CLOSE}_{M_OPEN}get{M_CLOSE}_{M_OPEN}url{M_CLOSE}(url)"),
        (r"\*not emphasis\* and 3 \* 4", "*not emphasis* and 3 * 4"),
        ("see [the guide](https://example.com/guide.md) or ![logo](logo.png)", "see the guide or logo"),
        ("<https://example.com> [ref][1]", "https://example.com ref"),
        ("a<br/>b <span class='x'>c</span> <!-- hidden --> <String[]> <String>", "a b  c    <String[]> <String>"),
        ("| Name | Value |\n|---|:---:|\n| a \\| b | c |", "Name; Value\na | b; c"),
        ("```powershell\nGet-Process | Sort-Object **x\n```\nafter", "Get-Process | Sort-Object **x\nafter"),
        ("`**kwargs` and **bold *nested* x**", "`**kwargs` and bold nested x"),
        ("…## Part\n- one\n* two\n> quoted…", "…Part\none\ntwo\nquoted…"),
        ("---\n\nabove a rule", "\nabove a rule"),
        ("[a](../x(v=1).md), cut](../y.md) and [cut](../z", "a, cut and [cut"),  # links the snippet's ends cut
        ("[`Get-Item`](xref:Get-Item) and [`Select-String`][22]; `[a](b)` is code", "`Get-Item` and `Select-String`; `[a](b)` is code"),
        ("> [!NOTE]\n> Be careful.", "NOTE:\nBe careful."),
    ],
)
def test_clean_snippet_keeps_the_text_and_drops_the_markup(raw: str, clean: str) -> None:
    assert clean_snippet(raw) == clean


def test_a_snippet_that_starts_inside_code_keeps_it_until_the_fence() -> None:
    assert clean_snippet("Get-Item **x**\n```\n> **Note** text") == "Get-Item x\n> **Note** text"
    assert clean_snippet("Get-Item **x**\n```\n> **Note** text", in_fence=True) == "Get-Item **x**\nNote text"


def test_a_snippet_leaves_out_the_heading_it_starts_with_when_the_rest_shows_a_match() -> None:
    heading = "about_Signing > Sign a script"
    assert without_heading(f"{M_OPEN}Sign{M_CLOSE} a {M_OPEN}script{M_CLOSE} Signing a {M_OPEN}script{M_CLOSE} permits", heading) == (
        f"Signing a {M_OPEN}script{M_CLOSE} permits")
    assert without_heading(f"about_Signing Sign a script Run {M_OPEN}it{M_CLOSE}.", heading) == f"Run {M_OPEN}it{M_CLOSE}."  # the path's parts
    kept = [
        f"{M_OPEN}Sign{M_CLOSE} a script Nothing matched here.",  # the heading's words are the only match
        f"{M_OPEN}Sign a script permits{M_CLOSE} you.",  # a phrase across the heading's end
        f"{ELLIPSIS}Sign a script {M_OPEN}x{M_CLOSE}",  # cut: not the section's start
        f"Sign a scripting {M_OPEN}x{M_CLOSE}",  # another word
    ]
    assert [without_heading(text, heading) for text in kept] == kept


def test_a_long_snippet_is_cut_around_the_most_matched_words_at_spaces() -> None:
    words = [f"{M_OPEN}alpha{M_CLOSE}", *["filler"] * 40, f"{M_OPEN}alpha{M_CLOSE}", "and", f"{M_OPEN}beta{M_CLOSE}", "then",
             f"{M_OPEN}gamma{M_CLOSE}", *["tail"] * 40]
    cut = bounded_snippet(" ".join(words))
    assert cut.startswith(ELLIPSIS) and cut.endswith(ELLIPSIS) and len(cut) <= SNIPPET_MAX_CHARS + 2
    assert all(f"{M_OPEN}{word}{M_CLOSE}" in cut for word in ("alpha", "beta", "gamma"))
    assert set(cut.strip(ELLIPSIS).split(" ")) <= set(words)  # no word shown in part
    phrase = f"{M_OPEN}{'long phrase ' * 20}{M_CLOSE}"
    assert M_CLOSE in bounded_snippet(f"lead {phrase} after")  # a match longer than a snippet is closed


def _rows(text: str, name: str) -> list[tuple[int, int, str, tuple]]:
    return [(s.start_line, s.end_line, s.body, s.outline) for s in split_sections(text, name)[1]]


def test_every_heading_starts_a_span_named_by_its_path() -> None:
    text = "---\ntitle: T\n---\n# Page\n\n## Short\nSays a.\n\n## Long\nSays b.\n\n### Deep\nSays c.\n"
    spans = heading_spans(_rows(text, "p.md"))
    # The title has no text of its own: it goes with the span after it.
    assert [(s.heading, s.path, s.start_line, s.end_line) for s in spans] == [
        ("Page > Short", ("Page", "Short"), 4, 7),
        ("Page > Long", ("Page", "Long"), 9, 10),
        ("Page > Long > Deep", ("Page", "Long", "Deep"), 12, 13),
    ]
    assert spans[2].text == "### Deep\nSays c."
    assert heading_spans(_rows("plain text\n", "notes.txt")) == []


def _long_page() -> str:
    filler = "\n\n".join(f"Paragraph {i} on policies, scopes and other matters." for i in range(700))
    return (
        "---\ntitle: about_Signing\n---\n# about_Signing\n\n## Short description\nExplains how policies work.\n\n"
        f"## Long description\n{filler}\n\n## Sign a script\n\n"
        "Signing a script permits you to run the script. Use **-WhatIf** with a [certificate](https://x.example/c.md).\n\n"
        "### Details\n| Name | Value |\n|---|---|\n| a | b |\n"
    )


def test_a_hit_names_the_deepest_heading_holding_the_words(indexer: TextIndexer, config: ServerConfig) -> None:
    text = _long_page()
    write(config.source_directory, "about_Signing.md", text)
    assert len(split_sections(text, "about_Signing.md")[1]) > 1  # merged rows: the heading is not a row's first
    indexer.scan()
    [hit] = search(config.db_path, "how do I sign a script")["results"]
    lines = text.split("\n")
    start = lines.index("## Sign a script") + 1
    assert hit["heading"] == "about_Signing > Sign a script"
    assert (hit["line_start"], hit["line_end"]) == (start, start + 2)
    assert hit["snippet"].startswith("**Signing** a **script** permits")  # the heading's words are in heading only
    # Clean: no heading marker, link target or escaped bold; the source's own ** are gone.
    assert "#" not in hit["snippet"] and "https" not in hit["snippet"] and "\\*" not in hit["snippet"]
    assert "-WhatIf with a certificate." in hit["snippet"]
    long = search(config.db_path, "paragraph matters")["results"][0]["snippet"]  # a long section: cut to the bound
    assert len(long.replace("**", "").strip(ELLIPSIS)) <= SNIPPET_MAX_CHARS and "**Paragraph**" in long and "**matters**" in long

    [whatif] = search(config.db_path, "WhatIf")["results"]
    assert "**WhatIf**" in whatif["snippet"] and "\\*" not in whatif["snippet"]
    [details] = search(config.db_path, "details name")["results"]
    assert details["heading"] == "about_Signing > Sign a script > Details"
    assert details["snippet"] == "**Name**; Value a; b"
    [page] = search(config.db_path, "about_Signing")["results"]
    assert page["heading"] == "about_Signing > Short description"  # the title's words, with the text under it


@pytest.mark.anyio
async def test_get_document_reads_only_the_section_a_hit_names(source: Path, tmp_path: Path) -> None:
    write(source, "about_Signing.md", _long_page())
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        async def indexed() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 1

        await wait_for(indexed)
        [hit] = (await call(client, "search", {"query": "how do I sign a script"}))["results"]
        assert hit["heading"] == "about_Signing > Sign a script"
        part = await call(client, "get_document", {"path": hit["path"], "heading": hit["heading"]})
        assert part["text"].startswith("## Sign a script\n\nSigning a script permits")
        assert "Paragraph" not in part["text"] and len(part["text"]) < 300  # that section and its subsection only


EXTRACTED = {  # a file of each extracted format, with words and the heading path whose own lines hold each
    "garden.html": ("<h1>Garden</h1><p>Plants and beds.</p><h2>Pests</h2><p>Aphids on the shoots.</p>"
                    "<h3>Remedies</h3><p>Spray neem oil at dusk.</p>", {"neem": "Garden > Pests > Remedies"}),
    "census.ipynb": (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "source": "# Census\nCounting on the ice."},
        {"cell_type": "code", "source": "# a comment, not a heading\ntusks = 2", "outputs": []},
        {"cell_type": "markdown", "source": "## Results\nThe herd grew."}]}),
        {"herd": "Census > Results", "tusks": "Census"}),  # a code comment is no heading, as it would be in Markdown
    "report.docx": (docx_bytes(w_para("Quarterly", "Title") + w_para("Budget", "Heading1") + w_para("Spend on paper.")
                               + w_para("Travel", "Heading2") + w_para("Trains to the zeppelin port.")), {"zeppelin": "Budget > Travel"}),
    "minutes.odt": (odt_bytes('<text:h text:outline-level="1">Agenda</text:h><text:p>Opening words.</text:p>'
                              '<text:h text:outline-level="2">Supplies</text:h><text:p>Order more kumquats.</text:p>'),
                    {"kumquats": "Agenda > Supplies"}),
    "deck.pptx": (pptx_bytes({1: slide_xml("Opening", "hello all"), 2: slide_xml("Roadmap", "ship the blimp")}), {"blimp": "Roadmap"}),
    "book.epub": (epub_bytes({"c1.xhtml": xhtml("<h1>Chapter One</h1><p>A marmot appears.</p><h2>Scene</h2><p>The ibex climbs.</p>"),
                              "c2.xhtml": xhtml("<h1>Chapter Two</h1><p>It went on.</p>")}, ["c1.xhtml", "c2.xhtml"]),
                  {"ibex": "Chapter One > Scene", "went": "Chapter Two"}),
}


@pytest.mark.parametrize("name", sorted(EXTRACTED))
def test_a_hit_in_an_extracted_format_names_the_heading_holding_its_words(every_format: ServerConfig, source: Path, name: str) -> None:
    data, headings = EXTRACTED[name]
    write(source, name, data)
    scanned(every_format)
    for word, heading in headings.items():
        [hit] = search(every_format.db_path, word)["results"]
        assert hit["heading"] == heading  # the file is one row, named by its first heading
        assert_hit_lines_hold(every_format, hit, word)
        part = document_reply(every_format, name, heading)["text"]
        assert word in part and part.splitlines()[0].endswith(heading.split(" > ")[-1])  # ("## Results" in a notebook)


def test_a_hit_past_a_files_eighth_row_names_its_heading(indexer: TextIndexer, config: ServerConfig) -> None:
    filler = "\n\n".join(f"Line {i} of plain words about sheep and goats." for i in range(20))
    parts = [f"## Part {n}\n\n{filler}\n" for n in range(100)]
    rows = split_sections("# Farm\n\nIntro.\n\n" + "\n".join(parts), "farm.md")[1]
    second = int(rows[9].heading.rsplit(" ", 1)[1]) + 1  # the second part of the tenth row
    parts[second] += "\n### Target\n\nThe ocelot sleeps here.\n"
    text = "# Farm\n\nIntro.\n\n" + "\n".join(parts)
    write(config.source_directory, "farm.md", text)
    rows = split_sections(text, "farm.md")[1]
    assert "ocelot" in rows[9].body and "Target" not in rows[9].heading  # merged into a row that starts at an earlier heading
    indexer.scan()
    [hit] = search(config.db_path, "ocelot")["results"]
    start = text.split("\n").index("### Target") + 1
    assert (hit["heading"], hit["line_start"], hit["line_end"]) == (f"Farm > Part {second} > Target", start, start + 2)


def test_page_title_words_name_no_section_and_a_heading_of_only_the_words_wins(indexer: TextIndexer, config: ServerConfig) -> None:
    write(config.source_directory, "ssh.md", (
        "# Remoting over SSH\n\n## Overview\n\nSet up remoting over SSH between computers, as the sections below say.\n\n"
        "## Install on Windows\n\nInstall the SSH server from the optional features.\n\n"
        "## Install on Ubuntu\n\nInstall the SSH server with apt: sudo apt install openssh-server.\n"))
    write(config.source_directory, "Get-Item.md", (
        "# Get-Item\n\n## SYNOPSIS\n\nGets items.\n\n## EXAMPLES\n\n### Example 3: Get items using the Depth parameter\n\n"
        "Get-Item -Path C:\\ -Depth 2 lists two levels.\n\n## PARAMETERS\n\n### -Path\n\nWhere Get-Item looks.\n\n"
        "### -Depth\n\nHow many levels Get-Item goes down below the path.\n"))
    write(config.source_directory, "about_Widget.md", (
        "# about_Widget\n\n## Short description\n\nWidget edits lines.\n\n## Notes\n\n### Command History\n\n"
        "Widget saves the command history in a file in your profile folder.\n\n"
        "#### Widget 2.0 improves the filtering of secrets\n\nWidget no longer saves lines holding secrets to the history file.\n"))
    indexer.scan()

    def heading(query: str, path: str) -> str:
        return next(hit["heading"] for hit in search(config.db_path, query)["results"] if hit["path"] == path)

    # The title's words are every section's: the section whose own heading adds a word answers.
    assert heading("set up remoting over SSH on Ubuntu", "ssh.md") == "Remoting over SSH > Install on Ubuntu"
    # Both headings hold the words (the parameter's under PARAMETERS): the one that is only them answers.
    assert heading("Get-Item -Depth parameter", "Get-Item.md") == "Get-Item > PARAMETERS > -Depth"
    # A deeper heading that only repeats the title's word does not take the hit from its parent.
    assert heading("where does Widget save the command history file", "about_Widget.md") == "about_Widget > Notes > Command History"


def test_a_phrase_across_a_rows_size_cut_names_the_heading_holding_it(indexer: TextIndexer, config: ServerConfig) -> None:
    # Only the rows the index finds a searched word in have their spans read, and a span over
    # two rows always is: here neither row holds the phrase, their span does.
    paragraphs = [f"Paragraph {n} says aaaaa and then bbbbbbbb once." for n in range(560)]
    def text_of(paragraphs: list[str]) -> str:
        return "# Doc\n\nIntro.\n\n## First\n\n" + "\n\n".join(paragraphs) + "\n\n## Other\n\nA zebra crossing is here.\n"
    rows = split_sections(text_of(paragraphs), "doc.md")[1]
    assert [row.heading for row in rows] == ["Doc", "Doc > First", "Doc > First", "Doc > Other"]
    last = next(n for n, paragraph in enumerate(paragraphs) if paragraph not in rows[1].body)  # the first in the next row
    paragraphs[last - 1] = paragraphs[last - 1].replace("once.", "zebra")
    paragraphs[last] = paragraphs[last].replace("Paragraph", "crossing", 1)
    text = text_of(paragraphs)
    rows = split_sections(text, "doc.md")[1]
    assert rows[1].body.endswith("zebra") and rows[2].body.lstrip().startswith("crossing")
    write(config.source_directory, "doc.md", text)
    indexer.scan()
    [hit] = search(config.db_path, '"zebra crossing"')["results"]
    assert hit["heading"] == "Doc > First"  # the earlier of two spans holding it once


def test_only_spans_that_may_hold_a_searched_word_are_read() -> None:
    rows = [(7, 10, 20, "", []), (8, 21, 30, "", []), (9, 31, 40, "", [])]  # (id, first line, last line, ...)
    spans = [
        HeadingSpan("A", ("A",), 10, 14, ""),  # at the first row's start: its heading may be before the rows
        HeadingSpan("B", ("B",), 15, 20, ""),  # inside row 7, which holds no searched word
        HeadingSpan("C", ("C",), 21, 25, ""),  # inside row 8, which does
        HeadingSpan("D", ("D",), 26, 33, ""),  # over rows 8 and 9
        HeadingSpan("E", ("E",), 34, 40, ""),  # inside row 9, which holds none
    ]
    assert _may_match(spans, rows, {8}) == [True, False, True, True, False]
    assert _may_match(spans, rows, set()) == [True, False, False, True, False]
