"""Documents built to blow up the format layer: archives that expand without bound (a chapter
listed thousands of times, many parts each just under a per-part check, millions of empty or
nested elements), XML tags and blocks of a huge number of attributes, a text past the size limit
for a file, HTML pages of one tag of a huge number of attributes or of a huge number of inline
tags, files of millions of headings, a pdftotext left running (and the PDF's copy left behind)
when the process that started it is killed; and a .docx whose Title paragraph must not name its
sections."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

import formats
import markup
import sections
from documents import MAX_OUTLINE_HEADINGS, document_reply
from exceptions import ArgumentError
from formats import MAX_BLOCK_ELEMENTS, MAX_COMPRESSION_RATIO, MAX_TAG_ATTRIBUTES, PDF_TIMEOUT_SECONDS, extract
from index_writer import IndexWriter
from models import ServerConfig
from search import search
from status import read_status
from tests.conftest import PROJECT_DIR, write
from tests.test_formats import (
    P_NS, W_NS, docx_bytes, epub_bytes, pdf_bytes, pptx_bytes, read, skipped, slide_xml, w_document, w_para, xhtml, zip_bytes,
)
from tests.test_formats_indexed import scanned

pytestmark = pytest.mark.usefixtures("no_hang")

CHAPTER = xhtml("<h1>Chapter</h1>" + "<p>lorem ipsum dolor sit amet, the walrus counted</p>" * 400)  # about 20 KB


def skipped_in_index(config: ServerConfig) -> dict[str, tuple[str, str]]:
    writer = IndexWriter(config.db_path)
    try:
        return {path: (reason, detail) for path, reason, detail in writer.skipped_entries(["too_large", "malformed"])}
    finally:
        writer.close()


T = TypeVar("T")


def with_peak(action: Callable[[], T]) -> tuple[T, int]:
    """What ``action`` returns, and the most memory Python held while it ran (tracemalloc's peak)."""
    tracemalloc.start()
    try:
        done = action()
        return done, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---- archives ---------------------------------------------------------------------------------------


def test_a_chapter_the_spine_lists_over_and_over_is_read_once() -> None:
    book = read("spine.epub", epub_bytes({"c": CHAPTER}, spine=["c"] * 500))
    assert book.text.count("the walrus counted") == 400
    assert [h.name for h in book.headings] == ["Chapter"]


def test_a_slide_the_deck_lists_over_and_over_is_read_once() -> None:
    deck = read("deck.pptx", pptx_bytes({1: slide_xml("Only", "the one slide")}, order=[1] * 300))
    assert deck.text.count("the one slide") == 1


def test_many_parts_each_under_a_per_part_check_add_up_to_a_bomb() -> None:
    """Eight slides of just under 1 MiB that pack ~300 times each: no part alone passes 1 MiB, the
    archive as a whole unpacks to more than MAX_COMPRESSION_RATIO times its size."""
    paragraph = "<a:p><a:r><a:t>the same words again and again</a:t></a:r></a:p>"
    slide = f"<p:sld {P_NS}><p:cSld><p:spTree><p:sp><p:txBody>{paragraph * 16_000}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
    assert len(slide) < 1 << 20
    data = pptx_bytes(dict.fromkeys(range(1, 9), slide), order=list(range(1, 9)))
    assert 8 * len(slide) > MAX_COMPRESSION_RATIO * len(data)
    error = skipped("slides.pptx", data)
    assert error.reason == "too_large" and error.detail == f"it unpacks to more than {MAX_COMPRESSION_RATIO} times its size"


def test_what_is_read_from_an_archive_adds_up_part_after_part() -> None:
    """Styles and document each just under 1 MiB of spaces: the second read passes the ratio."""
    padding = " " * 1_000_000
    styles = f"<w:styles {W_NS}>{padding}</w:styles>"
    data = zip_bytes({"word/document.xml": w_document(w_para("text") + padding), "word/styles.xml": styles})
    error = skipped("padded.docx", data)
    assert error.reason == "too_large" and error.detail == f"it unpacks to more than {MAX_COMPRESSION_RATIO} times its size"
    assert read("half.docx", zip_bytes({"word/document.xml": w_document(w_para("text") + padding)})).text == "text"


def test_a_large_archive_that_packs_as_text_does_is_read() -> None:
    """The whole-archive ratio leaves ordinary documents alone: a part that packs 20-fold is read."""
    words = " ".join(f"w{n % 997}x{n % 13}" for n in range(300_000))
    data = docx_bytes(w_para(words))
    assert len(words) > 1 << 20
    assert read("big.docx", data).text == words


def test_one_xml_tag_of_a_huge_number_of_attributes_is_refused_before_it_is_parsed() -> None:
    attributes = "".join(f' a{n}=""' for n in range(300_000))
    document = f'<w:document {W_NS}><w:body><w:p{attributes}><w:r><w:t>x</w:t></w:r></w:p></w:body></w:document>'
    data = zip_bytes({"word/document.xml": document})
    error, peak = with_peak(lambda: skipped("crowded.docx", data))
    assert error.reason == "too_large" and error.detail == f"word/document.xml has a tag of more than {MAX_TAG_ATTRIBUTES} attributes"
    assert peak < 4 * len(document), f"{peak / len(document):.0f} times the part's size"


def test_a_block_of_elements_that_each_carry_attributes_is_refused() -> None:
    values = random.Random(7)

    def runs(count: int) -> str:  # random values: it must not pass for a zip bomb instead
        return "".join("<w:r " + " ".join(f'a{n}="{values.getrandbits(32):08x}"' for n in range(40)) + "/>" for _ in range(count))

    error = skipped("rows.docx", docx_bytes("<w:p>" + runs(MAX_BLOCK_ELEMENTS // 41 + 1) + "</w:p>"))
    assert error.reason == "too_large" and error.detail == f"word/document.xml has a block of more than {MAX_BLOCK_ELEMENTS} elements and attributes"
    assert read("fine.docx", docx_bytes("<w:p>" + runs(1000) + "</w:p>")).text == ""


# archives of elements outside any block


def padded_docx(body: str) -> bytes:
    """A .docx with 100 KB of random bytes beside its document, which unpacks to less than 200 times its size."""
    return zip_bytes({"word/document.xml": w_document(body), "pad.bin": os.urandom(100_000)})


def test_a_part_nested_past_the_depth_limit_is_too_large_without_keeping_every_element() -> None:
    depth = 300_000
    body = "<w:x>" * depth + "</w:x>" * depth  # outside any paragraph: no block ever counted it
    data = padded_docx(body)
    error, peak = with_peak(lambda: skipped("nest.docx", data))
    assert error.reason == "too_large"
    assert error.detail == f"word/document.xml nests elements more than {formats.MAX_XML_DEPTH} deep"
    # the part's bytes and its decoded text, not an element object per tag
    assert peak < 4 * len(body)


def test_elements_past_the_archive_limit_are_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "MAX_ARCHIVE_ELEMENTS", 1_000)
    assert read("few.docx", docx_bytes("<w:p/>" * 900)).text == ""
    error = skipped("many.docx", docx_bytes("<w:p/>" * 1_001))
    assert error.reason == "too_large" and error.detail == "its XML parts hold more than 1000 elements"


def test_millions_of_empty_paragraphs_take_linear_time(tmp_path: Path) -> None:
    # 1.5 million <w:p/> (under the element limit) took over a minute of CPU when each finished
    # paragraph was removed from a list of ~175,000 siblings; linear, it takes a few seconds.
    path = tmp_path / "empty.docx"
    path.write_bytes(padded_docx("<w:p/>" * 1_500_000))
    script = f"import formats, sys; print(repr(formats.extract('empty.docx', open(sys.argv[1], 'rb').read()).text))"
    done = subprocess.run(
        ["prlimit", "--cpu=30", sys.executable, "-c", script, str(path)],
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "''"


# ---- the cap on a file's text -----------------------------------------------------------------------


def test_text_past_the_cap_is_too_large_naming_the_cap() -> None:
    book = epub_bytes({f"c{n}": CHAPTER for n in range(5)}, spine=[f"c{n}" for n in range(5)])
    assert read("book.epub", book, max_text_chars=1 << 20).text.count("walrus") == 2000
    error = skipped("book.epub", book, max_text_chars=50_000)
    assert error.reason == "too_large"
    assert error.detail == "its text is more than 0.048 MB, the size limit for a file (max_file_size_mb)"


@pytest.mark.parametrize("name", ["a.html", "a.ipynb", "a.docx"])
def test_the_cap_holds_for_every_format(name: str) -> None:
    words = "walrus " * 20_000
    data = {
        "a.html": f"<p>{words}</p>".encode(),
        "a.ipynb": b'{"cells": [{"cell_type": "markdown", "source": "' + words.encode() + b'"}]}',
        "a.docx": docx_bytes(w_para(words)),
    }[name]
    assert extract(name, data, max_text_chars=200_000) is not None
    assert skipped(name, data, max_text_chars=100_000).reason == "too_large"


def test_an_archive_whose_text_passes_the_file_size_limit_is_skipped_with_the_reason(config: ServerConfig, source: Path) -> None:
    small = replace(config, included_extensions=(".epub", ".md"), max_file_size_mb=0.05)
    book = epub_bytes({f"c{n}": CHAPTER for n in range(5)}, spine=[f"c{n}" for n in range(5)])
    assert len(book) < small.max_file_size_bytes  # the file itself is under the limit: its text is not
    write(source, "book.epub", book)
    write(source, "fine.md", "# Fine\n\nthe ocelot stays findable\n")
    indexer = scanned(small)
    assert read_status(small, indexer)["skipped_files"].get("too_large") == 1
    reason, detail = skipped_in_index(small)["book.epub"]
    assert reason == "too_large" and "max_file_size_mb" in detail
    assert not search(small.db_path, "walrus", 5)["results"]
    assert search(small.db_path, "ocelot", 5)["results"][0]["path"] == "fine.md"
    with pytest.raises(ArgumentError, match="too_large"):
        document_reply(small, "book.epub")


# ---- HTML -------------------------------------------------------------------------------------------


def attribute_page(attributes: int) -> bytes:
    return b"<html><body><div" + b' a="x"' * attributes + b">after the tag</div></body></html>"


@pytest.mark.parametrize(
    ("page", "text_chars"),
    [
        (attribute_page(300_000), len("after the tag")),  # one tag of 300,000 attributes, 1.8 MB
        (b"<p>" + b"ab<i>" * 300_000, 600_000),  # 300,000 inline tags on one line
    ],
    ids=["attributes", "inline-tags"],
)
def test_a_page_takes_memory_in_proportion_to_its_size(page: bytes, text_chars: int) -> None:
    extracted, peak = with_peak(lambda: extract("hostile.html", page))
    assert extracted is not None and len(extracted.text) == text_chars
    assert peak < 8 * len(page), f"{peak / len(page):.0f} times the file's size"


@pytest.mark.parametrize(
    ("page", "text"),
    [
        (b'<p title="a>b" c=\'d>e\' f = "g>h">shown</p>', "shown"),
        (b'<p a=b"c>d">shown', 'd">shown'),  # a quote inside an unquoted value is text of it
        (b'<p a="never closed>hidden', ""),  # the tag runs to the end of input
        (b"before<p" + b' a="x"' * 100_000, "before"),  # no ">" at all: cut off by the end of input
        (b"<p" + b' a="x"' * 100_000 + b"<b>a bracket at last", "a bracket at last"),
        (b'<p a==">" b>shown', "shown"),
        (b"<br/>one<p/>two", "one\n\ntwo"),
    ],
)
def test_tags_end_where_a_browser_ends_them(page: bytes, text: str) -> None:
    extracted = extract("t.html", page)
    assert extracted is not None and extracted.text == text


# ---- files of millions of headings ----------------------------------------------------------------

HEADINGS = 200_000
MANY_HEADINGS = {
    "many.ipynb": json.dumps({"cells": [{"cell_type": "markdown", "source": "# h\n" * HEADINGS}]}).encode(),
    "many.html": ("<h1>h</h1>" * HEADINGS).encode(),
}


@pytest.mark.parametrize(("name", "most_times_size"), [("many.ipynb", 30), ("many.html", 8)])
def test_an_outline_of_a_file_of_many_headings_collects_no_more_than_it_lists(name: str, most_times_size: int) -> None:
    """What get_document reads (most=MAX_OUTLINE_HEADINGS + 1): 69 and 17 times the file's size
    when every heading was built first and cut after. The notebook's bound is wider: its lines
    are held one by one, headings or not."""
    data = MANY_HEADINGS[name]
    content, peak = with_peak(lambda: sections.file_content(name, data, most=MAX_OUTLINE_HEADINGS + 1))
    assert len(content.headings) == MAX_OUTLINE_HEADINGS + 1
    assert content.text.count("h\n") == HEADINGS - 1  # every heading's line is still text
    assert peak < most_times_size * len(data)


@pytest.mark.parametrize("name", ["many.md", "many.ipynb", "many.html"])
def test_headings_past_the_cap_are_not_collected_and_their_text_is_still_indexed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(markup, "MAX_HEADINGS", 1_000, raising=False)  # raising=False: fails on the asserts before the fix
    data = MANY_HEADINGS.get(name) or ("# h\n" * HEADINGS).encode()
    content, peak = with_peak(lambda: sections.file_content(name, data))
    assert len(content.headings) == 1_000
    rows = sections.sections(content)
    assert sum(row.body.count("h") for row in rows) == HEADINGS  # nothing lost: cut by size past the last heading
    if name == "many.md":  # the others hold their lines one by one (see above)
        assert peak < 8 * len(data)


# ---- docx: the Title paragraph names no section -----------------------------------------------------


def test_a_docx_title_paragraph_is_the_title_not_the_heading_of_its_sections(config: ServerConfig, source: Path) -> None:
    body = w_para("Big Title", "Title") + w_para("Introduction", "Heading1") + w_para("The walrus eats clams.")
    extracted = read("r.docx", docx_bytes(body, title="Core Title"))
    assert extracted.title == "Core Title"
    assert [(h.level, h.name) for h in extracted.headings] == [(1, "Introduction")]
    assert read("r.docx", docx_bytes(body)).title == "Big Title"  # no core title: the Title paragraph
    docx = replace(config, included_extensions=(".docx",))
    write(source, "r.docx", docx_bytes(body, title="Core Title"))
    scanned(docx)
    hit = search(docx.db_path, "walrus", 5)["results"][0]
    assert (hit["title"], hit["heading"]) == ("Core Title", "Introduction")


# ---- pdftotext --------------------------------------------------------------------------------------


def fake_pdftotext(folder: Path, script: str) -> Path:
    folder.mkdir(exist_ok=True)
    fake = folder / "pdftotext"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return fake


def test_pdftotext_runs_under_a_cpu_limit_reading_the_pdf_on_its_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = tmp_path / "seen"
    fake_pdftotext(tmp_path / "bin", f'{{ ulimit -t; ulimit -c; echo "$@"; head -c 8; }} > {seen}')
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "bin"), "/usr/bin", "/bin"]))
    assert read("doc.pdf", b"%PDF-1.4 and the rest").text == ""
    cpu, core, arguments, start = seen.read_text().split("\n", 3)
    assert (cpu, core) == (str(PDF_TIMEOUT_SECONDS), "0")
    assert arguments == "-enc UTF-8 - -" and start == "%PDF-1.4"


def _state(pid: int) -> str | None:
    """A process's state letter ("Z": a zombie no one reaped yet), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pdftotext_dies_with_the_process_that_started_it_and_leaves_no_copy(tmp_path: Path) -> None:
    """SIGKILL (as the OOM killer sends) to a loader in the middle of a PDF: pdftotext must not run
    on, and no copy of the PDF may be left in the temporary folder."""
    temporary, pid_file, listing = tmp_path / "tmp", tmp_path / "pid", tmp_path / "listing"
    temporary.mkdir()
    fake_pdftotext(tmp_path / "bin", f"ls -A {temporary} > {listing}\necho $$ > {pid_file}.new\nmv {pid_file}.new {pid_file}\nexec sleep 120")
    environment = {**os.environ, "PATH": os.pathsep.join([str(tmp_path / "bin"), "/usr/bin", "/bin"]), "TMPDIR": str(temporary)}
    code = "import sys; from formats import extract; extract('doc.pdf', sys.stdin.buffer.read())"
    loader = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT_DIR, env=environment, stdin=subprocess.PIPE)
    fake_pid = None
    try:
        loader.stdin.write(pdf_bytes(["Hello"]))  # type: ignore[union-attr]
        loader.stdin.close()  # type: ignore[union-attr]
        while not pid_file.exists():
            assert loader.poll() is None, "the loader ended before pdftotext started"
            time.sleep(0.05)
        fake_pid = int(pid_file.read_text())
        assert listing.read_text() == "", "a named copy of the PDF exists while pdftotext runs"
        loader.send_signal(signal.SIGKILL)
        loader.wait()
        while _state(fake_pid) not in (None, "Z"):  # no_hang fails the test if it never dies
            time.sleep(0.05)
        assert not list(temporary.iterdir())
    finally:
        if loader.poll() is None:
            loader.kill()
            loader.wait()
        if fake_pid is not None and _state(fake_pid) not in (None, "Z"):
            os.kill(fake_pid, signal.SIGKILL)
