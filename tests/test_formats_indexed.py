"""Every format through the index: a scan reads it, search gives its title, heading and the lines
of the extracted text, get_document returns those lines; hostile files are skipped with a reason
and the others are indexed all the same. Markdown's setext headings, front matter without a
title and CR-only line ends too."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from documents import document_reply
from index_writer import IndexWriter
from indexer import RACY_WINDOW_NS, TextIndexer
from models import ServerConfig
from search import search
from status import read_status
from tests.conftest import write
from tests.test_formats import docx_bytes, epub_bytes, odt_bytes, pptx_bytes, slide_xml, w_para, xhtml, zip_bytes

FORMATS = (".txt", ".md", ".rst", ".html", ".htm", ".ipynb", ".docx", ".odt", ".pptx", ".epub", ".pdf")


@pytest.fixture
def every_format(config: ServerConfig) -> ServerConfig:
    return replace(config, included_extensions=FORMATS)


def scanned(config: ServerConfig) -> TextIndexer:
    writer = IndexWriter(config.db_path)
    indexer = TextIndexer(config, writer)
    assert indexer.scan()["success"]
    writer.close()
    return indexer


def best(config: ServerConfig, query: str) -> dict:
    hits = search(config.db_path, query, 5)["results"]
    assert hits, f"nothing found for {query!r}"
    return hits[0]


def assert_hit_lines_hold(config: ServerConfig, hit: dict, word: str) -> None:
    """The lines a search hit names are lines of the text get_document returns, holding the word."""
    document = document_reply(config, hit["path"], start_line=hit["line_start"], end_line=hit["line_end"], max_chars=100_000)
    assert word.lower() in document["text"].lower(), (hit, document["text"])


NOTEBOOK = {
    "nbformat": 4, "nbformat_minor": 5, "metadata": {},
    "cells": [
        {"cell_type": "markdown", "source": ["# Walrus census\n", "Counting on the ice.\n"]},
        {"cell_type": "code", "source": "import numpy\n# a comment, not a heading\ntusks = 2", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": "narwhalish output\n"}]},
        {"cell_type": "markdown", "source": "## Results\nThe herd grew."},
    ],
}


def test_each_format_is_found_with_its_title_heading_and_lines(every_format: ServerConfig, source: Path) -> None:
    write(source, "garden.html", "<html><head><title>Garden &amp; Tools</title><script>var secretword=1</script></head><body>"
          "<nav>menu words</nav><h1>Roses</h1><p>Prune in spring.</p><h2>Pests</h2><p>Aphids on the shoots.</p></body></html>")
    write(source, "census.ipynb", json.dumps(NOTEBOOK))
    write(source, "report.docx", docx_bytes(w_para("Quarterly", "Title") + w_para("Budget", "Heading1") + w_para("Spend on quinoa.")))
    write(source, "minutes.odt", odt_bytes('<text:h text:outline-level="1">Agenda</text:h><text:p>Discuss the kumquat supply.</text:p>'))
    write(source, "deck.pptx", pptx_bytes({1: slide_xml("Opening", "hello"), 2: slide_xml("Roadmap", "ship the zeppelin")}))
    write(source, "book.epub", epub_bytes({"c1.xhtml": xhtml("<h1>Chapter One</h1><p>A marmot appears.</p>")}, ["c1.xhtml"], title="Mountain Tales"))
    scanned(every_format)
    cases = [
        ("aphids", "garden.html", "Garden & Tools", "Roses > Pests"),
        ("herd", "census.ipynb", "Walrus census", None),
        ("quinoa", "report.docx", "Quarterly", None),
        ("kumquat", "minutes.odt", "Agenda", None),
        ("zeppelin", "deck.pptx", "Opening", None),
        ("marmot", "book.epub", "Mountain Tales", None),
    ]
    for word, path, title, heading in cases:
        hit = best(every_format, word)
        assert (hit["path"], hit["title"]) == (path, title)
        assert_hit_lines_hold(every_format, hit, word)
        if heading:
            assert document_reply(every_format, path, heading)["text"].splitlines()[0] == "Pests"
    assert not search(every_format.db_path, "secretword", 5)["results"]  # a script is not text
    assert not search(every_format.db_path, "narwhalish", 5)["results"]  # outputs only when asked
    outline = document_reply(every_format, "census.ipynb", outline=True)["outline"]
    assert [entry["heading"] for entry in outline] == ["Walrus census", "Walrus census > Results"]


def test_notebook_outputs_are_indexed_when_asked(every_format: ServerConfig, source: Path) -> None:
    write(source, "census.ipynb", json.dumps(NOTEBOOK))
    with_outputs = replace(every_format, index_notebook_outputs=True)
    scanned(with_outputs)
    assert best(with_outputs, "narwhalish")["path"] == "census.ipynb"
    assert "narwhalish output" in document_reply(with_outputs, "census.ipynb")["text"]


def test_hostile_documents_are_skipped_with_a_reason_and_the_rest_is_indexed(every_format: ServerConfig, source: Path) -> None:
    laughs = '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><w:document>&lol2;</w:document>'
    write(source, "bomb.docx", zip_bytes({"word/document.xml": laughs}))
    write(source, "zeros.odt", zip_bytes({"content.xml": b"<a>" + b" " * (5 << 20) + b"</a>"}))
    write(source, "cut.pptx", pptx_bytes({1: slide_xml("Cut", "off")})[:200])
    write(source, "notzip.epub", b"this is not a zip archive at all")
    write(source, "broken.ipynb", "{not json")
    write(source, "fine.md", "# Fine\n\nthe ocelot stays findable\n")
    indexer = scanned(every_format)
    skipped = read_status(every_format, indexer)["skipped_files"]
    assert skipped.get("malformed") == 4 and skipped.get("too_large") == 1, skipped
    assert best(every_format, "ocelot")["path"] == "fine.md"
    with pytest.raises(Exception, match="malformed"):
        document_reply(every_format, "bomb.docx")


def test_pdf_without_pdftotext_is_skipped_as_no_extractor(every_format: ServerConfig, source: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    write(source, "paper.pdf", b"%PDF-1.4\n%%EOF\n")
    indexer = scanned(every_format)
    assert read_status(every_format, indexer)["skipped_files"] == {"no_extractor": 1}


def test_setext_headings_front_matter_without_title_and_cr_line_ends(config: ServerConfig, source: Path) -> None:
    write(source, "setext.md", "Install Guide\n=============\n\nintro words\n\nOn Linux\n--------\n\nuse the pelican package\n\n"
          "```\nnot a heading\n---\n```\n")
    write(source, "front.md", "---\nauthor: someone\ntags: [a]\n---\n\nThe opening line of the body\n\nmore about lemurs\n")
    write(source, "mac.md", b"# Old Mac\r\rfirst line\rthe capybara line\r")
    scanned(config)
    assert best(config, "pelican")["title"] == "Install Guide"
    outline = document_reply(config, "setext.md", outline=True)["outline"]
    assert [(entry["heading"], entry["line_start"]) for entry in outline] == [("Install Guide", 1), ("Install Guide > On Linux", 6)]
    assert best(config, "lemurs")["title"] == "The opening line of the body"
    hit = best(config, "capybara")
    assert hit["title"] == "Old Mac"
    document = document_reply(config, "mac.md")
    assert document["total_lines"] == 4 and document["text"].splitlines()[3] == "the capybara line"
    assert_hit_lines_hold(config, hit, "capybara")


def test_lone_surrogates_in_extracted_text_do_not_stop_a_scan(every_format: ServerConfig, source: Path) -> None:
    write(source, "odd.ipynb", '{"cells":[{"cell_type":"markdown","source":"# Odd \\ud800 notes about wombats"}]}')
    write(source, "odd.html", b'<meta charset="unicode_escape"><h1>x \\ud800 quokka</h1>\xff')
    write(source, "fine.md", "# Fine\n\nthe ocelot stays findable\n")
    indexer = scanned(every_format)
    assert read_status(every_format, indexer)["indexed_files"] == 3
    assert best(every_format, "wombats")["title"] == "Odd \ufffd notes about wombats"
    assert best(every_format, "ocelot")["path"] == "fine.md"


@pytest.mark.parametrize("text", ["---\nauthor: x\n\nbody text here\n", "---\n\nsome text here\n\nmore text\n"])
def test_a_rule_or_an_unclosed_front_matter_is_no_title(config: ServerConfig, source: Path, text: str) -> None:
    write(source, "a.md", text)
    scanned(config)
    assert best(config, "text")["title"] == ""


def test_a_file_skipped_for_its_content_is_not_read_again_until_it_changes(every_format: ServerConfig, source: Path) -> None:
    path = write(source, "broken.docx", b"not a zip archive")
    os.utime(path, ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))
    writer = IndexWriter(every_format.db_path)
    indexer = TextIndexer(every_format, writer)
    try:
        indexer.scan()
        assert read_status(every_format, indexer)["skipped_files"].get("malformed") == 1
        time.sleep(RACY_WINDOW_NS / 1e9 + 0.1)  # a skip stands once the file's ctime is that old
        indexer.scan()
        indexer.scan()
        assert indexer.progress.files_total == 0  # unchanged: not read again
        assert read_status(every_format, indexer)["skipped_files"].get("malformed") == 1  # the skip stands, counted
        path.write_bytes(b"still not a zip, but changed")
        os.utime(path, ns=(1_600_000_100 * 10**9, 1_600_000_100 * 10**9))
        indexer.scan()
        assert indexer.progress.files_total == 1  # changed: read again
        assert read_status(every_format, indexer)["skipped_files"].get("malformed") == 1
    finally:
        writer.close()
