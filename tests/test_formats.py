"""Text extraction per format (formats.py): real bytes built here with the standard library; hostile
archives, XML, JSON and HTML end in FileSkipped, never in another exception or a hang."""

from __future__ import annotations

import io
import json
import os
import struct
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exceptions import FileSkipped
from formats import EXTRACTED_FORMATS, FORMAT_SKIP_REASONS, MAX_ARCHIVE_MEMBERS, MAX_BLOCK_ELEMENTS, Extracted, extract, pdf_extractor

HAS_PDFTOTEXT = pdf_extractor() is not None
needs_pdftotext = pytest.mark.skipif(not HAS_PDFTOTEXT, reason="pdftotext (poppler-utils) is not installed")


pytestmark = pytest.mark.usefixtures("no_hang")


# ---- helpers ---------------------------------------------------------------------------------------


def assert_headings_point_at_lines(extracted: Extracted) -> None:
    """Every heading's line holds its name; names and the title are single stripped lines."""
    lines = extracted.text.split("\n")
    for heading in extracted.headings:
        assert 1 <= heading.line <= len(lines), heading
        assert heading.name in lines[heading.line - 1].strip(), (heading, lines[heading.line - 1])
        assert heading.name == heading.name.strip() and heading.name and "\n" not in heading.name
        assert 1 <= heading.level <= 6
    assert [h.line for h in extracted.headings] == sorted({h.line for h in extracted.headings})
    assert "\r" not in extracted.text
    assert "\n" not in extracted.title and len(extracted.title) <= 200 and extracted.title == extracted.title.strip()


def read(name: str, data: bytes, **options: bool) -> Extracted:
    extracted = extract(name, data, **options)
    assert isinstance(extracted, Extracted)
    assert_headings_point_at_lines(extracted)
    return extracted


def skipped(name: str, data: bytes, **options: bool) -> FileSkipped:
    with pytest.raises(FileSkipped) as raised:
        extract(name, data, **options)
    assert raised.value.path == name
    return raised.value


def heading_lines(extracted: Extracted) -> list[tuple[int, str]]:
    return [(h.level, h.name) for h in extracted.headings]


def line_of(extracted: Extracted, text: str) -> int:
    return extracted.text.split("\n").index(text) + 1


def zip_bytes(parts: dict[str, str | bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return buffer.getvalue()


W_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
DC_NS = 'xmlns:dc="http://purl.org/dc/elements/1.1/"'


def w_para(text: str, style: str | None = None) -> str:
    properties = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f'<w:p>{properties}<w:r><w:t xml:space="preserve">{text}</w:t></w:r></w:p>'


def w_document(body: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document {W_NS}><w:body>{body}</w:body></w:document>'


def core_xml(title: str) -> str:
    return (
        '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
        f"{DC_NS}><dc:title>{title}</dc:title></cp:coreProperties>"
    )


def docx_bytes(body: str, styles: str | None = None, title: str | None = None) -> bytes:
    parts: dict[str, str | bytes] = {"word/document.xml": w_document(body)}
    if styles is not None:
        parts["word/styles.xml"] = f"<w:styles {W_NS}>{styles}</w:styles>"
    if title is not None:
        parts["docProps/core.xml"] = core_xml(title)
    return zip_bytes(parts)


ODT_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
)


def odt_bytes(body: str, title: str | None = None) -> bytes:
    parts: dict[str, str | bytes] = {
        "mimetype": "application/vnd.oasis.opendocument.text",
        "content.xml": f"<office:document-content {ODT_NS}><office:body><office:text>{body}</office:text></office:body></office:document-content>",
    }
    if title is not None:
        parts["meta.xml"] = f"<office:document-meta {ODT_NS} {DC_NS}><office:meta><dc:title>{title}</dc:title></office:meta></office:document-meta>"
    return zip_bytes(parts)


P_NS = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
)


def a_paras(*texts: str) -> str:
    return "".join(f"<a:p><a:r><a:t>{text}</a:t></a:r></a:p>" for text in texts)


def slide_xml(title: str | None, *texts: str, table: list[list[str]] | None = None) -> str:
    shapes = [f"<p:sp><p:nvSpPr><p:cNvPr id='2' name='Body'/><p:cNvSpPr/><p:nvPr/></p:nvSpPr><p:txBody>{a_paras(*texts)}</p:txBody></p:sp>"]
    if title is not None:  # after the body on purpose: the title still comes first
        shapes.append(
            "<p:sp><p:nvSpPr><p:cNvPr id='1' name='Title'/><p:cNvSpPr/><p:nvPr><p:ph type='title'/></p:nvPr></p:nvSpPr>"
            f"<p:txBody>{a_paras(title)}</p:txBody></p:sp>"
        )
    if table:
        rows = "".join("<a:tr>" + "".join(f"<a:tc><a:txBody>{a_paras(cell)}</a:txBody></a:tc>" for cell in row) + "</a:tr>" for row in table)
        shapes.append(f"<p:graphicFrame><a:graphic><a:graphicData><a:tbl>{rows}</a:tbl></a:graphicData></a:graphic></p:graphicFrame>")
    return f"<p:sld {P_NS}><p:cSld><p:spTree>{''.join(shapes)}</p:spTree></p:cSld></p:sld>"


def pptx_bytes(slides: dict[int, str], order: list[int] | None = None, title: str | None = None) -> bytes:
    parts: dict[str, str | bytes] = {f"ppt/slides/slide{number}.xml": xml for number, xml in slides.items()}
    if order is not None:
        ids = "".join(f'<p:sldId id="{256 + i}" r:id="rId{n}"/>' for i, n in enumerate(order))
        parts["ppt/presentation.xml"] = f"<p:presentation {P_NS}><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>"
        rels = "".join(
            f'<Relationship Id="rId{n}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide" Target="slides/slide{n}.xml"/>'
            for n in slides
        )
        parts["ppt/_rels/presentation.xml.rels"] = f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{rels}</Relationships>'
    if title is not None:
        parts["docProps/core.xml"] = core_xml(title)
    return zip_bytes(parts)


CONTAINER = (
    '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
    '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'
)


def xhtml(body: str, title: str = "chapter") -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml">'
        f"<head><title>{title}</title></head><body>{body}</body></html>"
    )


def epub_bytes(chapters: dict[str, str | bytes], spine: list[str], title: str = "The Book") -> bytes:
    items = "".join(f'<item id="{name}" href="text/{name}.xhtml" media-type="application/xhtml+xml"/>' for name in chapters)
    items += '<item id="css" href="style.css" media-type="text/css"/>'
    itemrefs = "".join(f'<itemref idref="{name}"/>' for name in spine)
    opf = (
        f'<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata {DC_NS}><dc:title>{title}</dc:title></metadata>'
        f"<manifest>{items}</manifest><spine>{itemrefs}<itemref idref='css'/></spine></package>"
    )
    parts: dict[str, str | bytes] = {"mimetype": "application/epub+zip", "META-INF/container.xml": CONTAINER, "OEBPS/content.opf": opf}
    parts.update({f"OEBPS/text/{name}.xhtml": content for name, content in chapters.items()})
    parts["OEBPS/style.css"] = "p { color: red }"
    return zip_bytes(parts)


def pdf_bytes(pages: list[str]) -> bytes:
    """A minimal valid PDF, one line of Helvetica per page, with a correct cross-reference table."""
    count = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(count))
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", f"<< /Type /Pages /Kids [{kids}] /Count {count} >>", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>")
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def patched(data: bytes, local_offset: int, central_offset: int, fmt: str, value: int) -> bytes:
    """The zip with one field of its first member changed in both its local and central header."""
    out = bytearray(data)
    central = data.find(b"PK\x01\x02")
    struct.pack_into(fmt, out, local_offset, value)
    struct.pack_into(fmt, out, central + central_offset, value)
    return bytes(out)


# ---- dispatch --------------------------------------------------------------------------------------


def test_formats_and_reasons_are_as_documented() -> None:
    assert EXTRACTED_FORMATS == {".html", ".htm", ".xhtml", ".ipynb", ".docx", ".odt", ".pptx", ".epub", ".pdf"}
    assert FORMAT_SKIP_REASONS == ("malformed", "no_extractor")
    assert extract("notes.md", b"# Title") is None
    assert extract("Makefile", b"all:") is None
    assert extract("dir.html/notes.txt", b"<p>x</p>") is None
    assert read("PAGE.HTML", b"<p>upper case extension</p>").text == "upper case extension"
    assert read("page.xhtml", xhtml("<p>x</p>", title="X").encode()).title == "X"
    assert read("long.htm", b"<title>" + b"word " * 100 + b"</title>").title == ("word " * 40).strip()


# ---- HTML ------------------------------------------------------------------------------------------


def test_html_title_and_headings_h1_to_h6_on_their_lines() -> None:
    page = b"<html><head><title> The  Page </title></head><body><p>intro</p>" + b"".join(
        f"<h{n}>Level {n} <em>heading</em></h{n}><p>text {n}</p>".encode() for n in range(1, 7)
    ) + b"<h7>not a heading</h7></body></html>"
    extracted = read("page.html", page)
    assert extracted.title == "The Page"
    assert heading_lines(extracted) == [(n, f"Level {n} heading") for n in range(1, 7)]
    lines = extracted.text.split("\n")
    for heading in extracted.headings:
        assert lines[heading.line - 1] == heading.name
        assert lines[heading.line] == "" and lines[heading.line + 1] == f"text {heading.level}"
    assert "The Page" not in extracted.text
    assert "not a heading" in extracted.text


def test_html_title_falls_back_to_the_first_h1() -> None:
    assert read("a.htm", b"<h2>Second</h2><h1>First <b>one</b></h1><h1>Other</h1>").title == "First one"
    assert read("a.htm", b"<p>no headings</p>").title == ""


def test_html_drops_invisible_content() -> None:
    page = b"""<html><head><style>p { color: red }</style><script>var secret = "<p>scripted</p>";</script></head><body>
    <nav><a href="/">Home</a> menu</nav><template><p>templated</p></template><noscript>enable js</noscript>
    <svg><title>icon title</title><text>drawn</text></svg><!-- a comment --><?php echo 1 ?>
    <p>shown <!-- inline comment --> text</p><script src="x.js"></script></body></html>"""
    extracted = read("page.html", page)
    assert extracted.text == "shown text"
    assert extracted.title == ""


HTML_TEXT_CASES = {
    "entities are decoded": (
        b"<p>Tom &amp; Jerry &eacute;t&eacute; &#x4e2d;&#25991; &lt;tag&gt; &nbsp;x &copy</p>",
        "Tom & Jerry \u00e9t\u00e9 \u4e2d\u6587 <tag> x \u00a9",
    ),
    "blocks start lines, inline elements do not": (
        b"<div>one <b>bold</b> <a href='x'>link</a>\n   spread\tover</div><div><div>nested</div></div><ul><li>a<li>b</ul>a<br>b<br><br>c",
        "one bold link spread over\nnested\na\nb\na\nb\n\nc",
    ),
    "table rows are lines with cells separated": (
        b"<p>before</p><table><tr><th>Name</th><th>Size</th></tr><tr><td>apple</td><td></td><td>3</td></tr><tr><td>pear<td>5</table><p>after</p>",
        "before\n\nName | Size\napple | 3\npear | 5\n\nafter",
    ),
    "pre keeps its lines and indentation": (
        b"<p>Code:</p><pre>\ndef f():\n    return  1\n\n\n# done</pre><p>after   the   code</p>",
        "Code:\n\ndef f():\n    return  1\n\n# done\n\nafter the code",
    ),
}


@pytest.mark.parametrize(("page", "text"), HTML_TEXT_CASES.values(), ids=HTML_TEXT_CASES.keys())
def test_html_text(page: bytes, text: str) -> None:
    assert read("page.html", page).text == text


def test_html_carriage_returns_become_line_breaks() -> None:
    extracted = read("cr.html", b"<title>a\r\nb</title><pre>one\r\ntwo\rthree&#13;four</pre><p>x\r\ny</p><h2>h\r2</h2>")
    assert extracted.text == "one\ntwo\nthree\nfour\n\nx y\n\nh 2"
    assert extracted.title == "a b"


def test_html_unclosed_and_misnested_tags_keep_their_text() -> None:
    page = b"<p>one<p>two<div><span>three</div></span><b><i>four</b></i><h2>Head<p>after the heading<h3>Third</h2>tail<table><tr><td>cell"
    extracted = read("u.html", page)
    assert extracted.text.split("\n") == ["one", "", "two", "three", "four", "", "Head", "", "after the heading", "", "Third", "", "tail", "", "cell"]
    assert heading_lines(extracted) == [(2, "Head"), (3, "Third")]


def test_html_blocks_inside_a_heading_stay_in_it() -> None:
    extracted = read("h.html", b"<h2><a href='#x'><div>Wrapped</div></a></h2><p>text</p><h3>One<br>line</h3>")
    assert heading_lines(extracted) == [(2, "Wrapped"), (3, "One line")]
    assert extracted.text == "Wrapped\n\ntext\n\nOne line"


def test_html_an_unclosed_dropped_element_does_not_hide_the_page() -> None:
    extracted = read("n.html", b"<nav>menu<p>the body text</p><script>code()</script><p>more")
    assert "the body text" in extracted.text and "more" in extracted.text
    assert "code()" not in extracted.text
    assert "visible" not in read("s.html", b"<p>before</p><script>if (a < b) { '<p>visible</p>' }").text


def test_html_tag_cut_off_by_the_end_of_input_and_stray_brackets() -> None:
    assert read("c.html", b"<p>a < b and c<d> e</p><p>text <a href='unclosed").text == "a < b and c e\n\ntext"
    assert read("c.html", b"<title>never closed<p>body</p>").title == "never closed"
    assert read("c.html", b"<title>never closed<p>body</p>").text == "body"


def test_html_100k_deep_nesting_completes() -> None:
    page = b"<div>" * 100_000 + b"<h2>deep</h2><p>down here</p>" + b"</div>" * 100_000
    started = time.process_time()  # CPU: what another process does to the machine does not count
    extracted = read("deep.html", page)
    assert time.process_time() - started < 5
    assert extracted.text == "deep\n\ndown here"
    assert heading_lines(extracted) == [(2, "deep")]


@pytest.mark.parametrize("unit", ["<a b='", '<a b="', "<!--", "<![if x", "<![CDATA[", "</a", "<title>", "<p =", "&#", "<h1>", "<td>x"])
def test_html_hostile_repetitions_take_linear_time(unit: str) -> None:
    # html.parser.HTMLParser needs minutes for 40,000 of the first of these.
    page = (unit * 100_000).encode()
    started = time.process_time()  # CPU: what another process does to the machine does not count
    extract("hostile.html", page)
    assert time.process_time() - started < 3


def test_html_1mb_page_extracts_quickly() -> None:
    paragraph = "<div class='c'><h2 id='x'>Section title</h2><p>" + " ".join(f"<a href='/{i}'>word{i}</a> plain text" for i in range(40)) + "</p></div>\n"
    page = ("<html><body>" + paragraph * (1_000_000 // len(paragraph))).encode()
    started = time.process_time()  # CPU: what another process does to the machine does not count
    extracted = read("big.html", page)
    assert time.process_time() - started < 1.5
    assert len(extracted.headings) == 1_000_000 // len(paragraph)


def test_html_declared_charset_is_honoured() -> None:
    latin = '<html><head><meta charset="iso-8859-1"><title>Caf\u00e9</title></head><body><p>d\u00e9j\u00e0 vu</p></body></html>'
    extracted = read("latin.html", latin.encode("latin-1"))
    assert extracted.title == "Caf\u00e9" and extracted.text == "d\u00e9j\u00e0 vu"
    cyrillic = '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251"><p>\u041f\u0440\u0438\u0432\u0435\u0442</p>'
    assert read("ru.html", cyrillic.encode("cp1251")).text == "\u041f\u0440\u0438\u0432\u0435\u0442"
    assert read("bom.html", "<p>\u00fcber</p>".encode("utf-16")).text == "\u00fcber"


def test_html_that_is_not_text_is_binary() -> None:
    assert skipped("bin.html", b"\x00\x01\x02<p>x</p>" * 100).reason == "binary"


# ---- Jupyter notebooks -----------------------------------------------------------------------------


def notebook(cells: object, **top: object) -> bytes:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells, **top}).encode()


def md(source: str | list[str]) -> dict[str, object]:
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def code(source: str | list[str], outputs: list[object] | None = None) -> dict[str, object]:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": outputs or [], "execution_count": 1}


def test_notebook_cells_in_order_with_markdown_headings() -> None:
    cells = [
        md(["# Analysis\n", "\n", "Some *intro* text.\n", "## Loading data"]),
        code("import pandas as pd\n# a comment, not a heading\ndf = pd.read_csv('x')"),
        md("```python\n# fenced, not a heading\n```\n### Results ###\n####### seven hashes"),
        {"cell_type": "raw", "source": "raw text"},
    ]
    extracted = read("n.ipynb", notebook(cells))
    assert extracted.title == "Analysis"
    assert heading_lines(extracted) == [(1, "Analysis"), (2, "Loading data"), (3, "Results")]
    lines = extracted.text.split("\n")
    assert [lines[h.line - 1] for h in extracted.headings] == ["# Analysis", "## Loading data", "### Results ###"]
    order = [line_of(extracted, line) for line in ("Some *intro* text.", "import pandas as pd", "# fenced, not a heading", "####### seven hashes", "raw text")]
    assert order == sorted(order)


def test_notebook_source_as_string_or_list_reads_the_same() -> None:
    as_list = read("a.ipynb", notebook([md(["# T\n", "body\n"]), code(["x = 1\n", "y = 2"])]))
    as_string = read("b.ipynb", notebook([md("# T\nbody\n"), code("x = 1\ny = 2")]))
    assert as_list == as_string
    assert "x = 1\ny = 2" in as_list.text


def test_notebook_outputs_only_when_asked_and_never_images() -> None:
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": ["printed line\n"]},
        {"output_type": "execute_result", "data": {"text/plain": "'result value'", "image/png": "iVBORw0KGgoAAAANSUhEUg"}, "metadata": {}, "execution_count": 1},
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgoAAAANSUhEUg"}, "metadata": {}},
        {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["tb"]},
    ]
    data = notebook([code("print('x')", outputs)])
    assert read("o.ipynb", data).text == "print('x')"
    with_outputs = read("o.ipynb", data, notebook_outputs=True)
    assert with_outputs.text == "print('x')\n\nprinted line\n\n'result value'"
    assert "iVBOR" not in with_outputs.text


def test_notebook_title_from_metadata_and_nbformat_3() -> None:
    data = json.dumps({"metadata": {"title": "Meta Title"}, "cells": [md("## only a level 2")]}).encode()
    assert read("m.ipynb", data).title == "Meta Title"
    v3 = {"nbformat": 3, "metadata": {"name": "old"}, "worksheets": [{"cells": [
        {"cell_type": "heading", "level": 1, "source": "Old Title"},
        {"cell_type": "code", "input": ["a = 1\n"], "outputs": [{"output_type": "pyout", "text": ["1"]}]},
    ]}]}
    extracted = read("v3.ipynb", json.dumps(v3).encode(), notebook_outputs=True)
    assert extracted.title == "Old Title"
    assert extracted.text == "Old Title\n\na = 1\n\n1"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'"a string"',
        json.dumps({"cells": {"a": 1}}).encode(),
        json.dumps({"cells": "text"}).encode(),
        json.dumps({"worksheets": 5}).encode(),
        b"[" * 100_000 + b"]" * 100_000,
        b'{"cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"cells": [' + b"1" * 5000 + b"]}",
    ],
)
def test_notebook_hostile_shapes_are_malformed(data: bytes) -> None:
    assert skipped("h.ipynb", data).reason == "malformed"


def test_notebook_wrong_types_inside_are_skipped() -> None:
    cells = [
        7, None, "text", [], md({"not": "a string"}), md(["ok ", 3, None, "line"]), {"cell_type": ["x"], "source": "odd kind"},
        code(5, outputs=["bad", 3, {"output_type": "stream", "text": {"x": 1}}, {"output_type": "execute_result", "data": "x"}]),
        {"cell_type": "heading", "level": "1", "source": "not a level"},
        {"cell_type": "markdown", "source": ["# Kept heading"], "outputs": "x"},
    ]
    extracted = read("w.ipynb", notebook(cells, metadata={"title": 5}), notebook_outputs=True)
    assert extracted.text == "ok line\n\nodd kind\n\nnot a level\n\n# Kept heading"
    assert extracted.title == "Kept heading"


# ---- docx ------------------------------------------------------------------------------------------


def test_docx_paragraphs_headings_tables_and_title() -> None:
    body = (
        w_para("Report Title", "Title")
        + w_para("Introduction", "Heading1")
        + '<w:p><w:pPr><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr><w:r><w:t>a</w:t><w:tab/><w:t>b</w:t><w:br/><w:t>c</w:t></w:r></w:p>'
        + w_para("Details", "Heading2")
        + "<w:tbl><w:tr><w:tc>" + w_para("Name") + "</w:tc><w:tc>" + w_para("Size") + w_para("(cm)") + "</w:tc></w:tr>"
        + "<w:tr><w:tc>" + w_para("apple") + "</w:tc><w:tc>" + w_para("3") + "</w:tc></w:tr></w:tbl>"
        + '<w:p><w:r><w:t>kept</w:t></w:r><w:del><w:r><w:delText>deleted</w:delText></w:r></w:del></w:p>'
        + w_para("Deep", "Heading9")
    )
    extracted = read("r.docx", docx_bytes(body, title="Core Title"))
    assert extracted.title == "Core Title"
    assert heading_lines(extracted) == [(1, "Introduction"), (2, "Details"), (6, "Deep")]  # a Title paragraph is no heading
    assert extracted.text == "Report Title\n\nIntroduction\na\tb\nc\n\nDetails\nName | Size (cm)\napple | 3\nkept\n\nDeep"


def test_docx_localized_style_ids_map_through_styles_xml() -> None:
    styles = (
        '<w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Titel"><w:name w:val="Title"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Kapitel"><w:name w:val="Kapitel"/><w:pPr><w:outlineLvl w:val="0"/></w:pPr></w:style>'
        '<w:style w:type="paragraph" w:styleId="Standard"><w:name w:val="Normal"/></w:style>'
    )
    body = (
        w_para("Der Titel", "Titel") + w_para("Kapitel eins", "Kapitel") + w_para("Abschnitt", "berschrift2") + w_para("Text", "Standard")
        + '<w:p><w:pPr><w:outlineLvl w:val="2"/></w:pPr><w:r><w:t>Direct level</w:t></w:r></w:p>'
        + '<w:p><w:pPr><w:outlineLvl w:val="9"/></w:pPr><w:r><w:t>Body level</w:t></w:r></w:p>'
    )
    extracted = read("de.docx", docx_bytes(body, styles=styles))
    assert heading_lines(extracted) == [(1, "Kapitel eins"), (2, "Abschnitt"), (3, "Direct level")]
    assert extracted.title == "Der Titel"  # no core.xml: the Title-style paragraph


def test_docx_title_falls_back_to_the_first_heading() -> None:
    assert read("h.docx", docx_bytes(w_para("plain") + w_para("First", "Heading3"))).title == "First"
    assert read("h.docx", docx_bytes(w_para("plain"), title="")).title == ""


def test_docx_text_box_fallback_is_not_read_twice() -> None:
    mc = 'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
    box = f"<w:txbxContent>{w_para('boxed')}</w:txbxContent>"
    body = f"<w:p><w:r><w:t>outer</w:t></w:r><w:r><mc:AlternateContent {mc}><mc:Choice>{box}</mc:Choice><mc:Fallback>{box}</mc:Fallback></mc:AlternateContent></w:r></w:p>"
    assert read("box.docx", docx_bytes(body)).text == "outer boxed"


def test_docx_9k_deep_xml_nesting_completes() -> None:
    # deeper than the recursion limit, within MAX_XML_DEPTH; numbered tags: the same tag 9,000
    # times packs tighter than the bomb check allows
    body = "<w:p><w:r>" + "".join(f"<w:x{i}>" for i in range(9_000)) + "<w:t>deep</w:t>" + "".join(f"</w:x{i}>" for i in reversed(range(9_000))) + "</w:r></w:p>"
    assert read("deep.docx", docx_bytes(body)).text == "deep"


# ---- odt -------------------------------------------------------------------------------------------


def test_odt_headings_paragraphs_lists_tables_and_title() -> None:
    body = (
        '<text:h text:outline-level="1">Chapter <text:span>One</text:span></text:h>'
        "<text:p>a<text:s text:c=\"3\"/>b<text:tab/>c<text:line-break/>d<office:annotation><text:p>a comment</text:p></office:annotation></text:p>"
        "<text:list><text:list-item><text:p>first item</text:p></text:list-item><text:list-item><text:p>second item</text:p></text:list-item></text:list>"
        '<text:h text:outline-level="8">Deep</text:h>'
        "<table:table><table:table-row><table:table-cell><text:p>x</text:p></table:table-cell><table:table-cell><text:p>y</text:p><text:p>z</text:p></table:table-cell></table:table-row></table:table>"
        '<text:h text:outline-level="nonsense">Bad level</text:h>'
    )
    extracted = read("d.odt", odt_bytes(body, title="Meta Title"))
    assert extracted.title == "Meta Title"
    assert heading_lines(extracted) == [(1, "Chapter One"), (6, "Deep"), (1, "Bad level")]
    assert extracted.text == "Chapter One\na   b\tc\nd\nfirst item\nsecond item\n\nDeep\nx | y z\n\nBad level"
    assert read("d.odt", odt_bytes(body)).title == "Chapter One"


def test_odt_space_runs_are_bounded() -> None:
    extracted = read("s.odt", odt_bytes('<text:p>a<text:s text:c="1000000000"/>b<text:s text:c="-5"/>c<text:s text:c="' + "9" * 5000 + '"/>d</text:p>'))
    assert len(extracted.text) < 200 and extracted.text.startswith("a ") and extracted.text.endswith("b c d")


# ---- pptx ------------------------------------------------------------------------------------------


def test_pptx_slides_in_presentation_order_with_titles_and_tables() -> None:
    slides = {
        1: slide_xml("Closing", "thanks"),
        2: slide_xml(None, "untitled body"),
        3: slide_xml("Opening", "first point", "second point", table=[["h1", "h2"], ["c1", ""]]),
    }
    extracted = read("deck.pptx", pptx_bytes(slides, order=[3, 2, 1]))
    assert extracted.title == "Opening"
    assert heading_lines(extracted) == [(1, "Opening"), (1, "Slide 2"), (1, "Closing")]
    assert extracted.text == "Opening\nfirst point\nsecond point\nh1 | h2\nc1\n\nSlide 2\nuntitled body\n\nClosing\nthanks"
    assert read("deck.pptx", pptx_bytes(slides, order=[3, 2, 1], title="Core")).title == "Core"


def test_pptx_without_presentation_order_uses_slide_numbers() -> None:
    slides = {10: slide_xml("Ten"), 2: slide_xml("Two"), 1: slide_xml(None, "one")}
    extracted = read("n.pptx", pptx_bytes(slides))
    assert heading_lines(extracted) == [(1, "Slide 1"), (1, "Two"), (1, "Ten")]
    assert extracted.title == ""


# ---- epub ------------------------------------------------------------------------------------------


def test_epub_spine_order_title_and_shifted_headings() -> None:
    chapters = {
        "c1": xhtml("<h1>Chapter One</h1><p>It began.</p><h2>Scene</h2><p>More &amp; more.</p>"),
        "c2": xhtml("<h1>Chapter Two</h1><p>It went on.</p>"),
        "front": xhtml("<p>Front matter</p>"),
    }
    extracted = read("b.epub", epub_bytes(chapters, spine=["front", "c1", "c2"]))
    assert extracted.title == "The Book"
    assert extracted.text == "Front matter\n\nChapter One\n\nIt began.\n\nScene\n\nMore & more.\n\nChapter Two\n\nIt went on."
    assert heading_lines(extracted) == [(1, "Chapter One"), (2, "Scene"), (1, "Chapter Two")]
    assert "chapter" not in extracted.text.lower().replace("chapter one", "").replace("chapter two", "")


@pytest.mark.parametrize(
    "parts, detail",
    [
        ({"mimetype": "application/epub+zip"}, "META-INF/container.xml is missing"),
        ({"META-INF/container.xml": CONTAINER}, "OEBPS/content.opf is missing"),
        ({"META-INF/container.xml": "<container/>"}, "names no package document"),
    ],
)
def test_epub_missing_parts_are_malformed(parts: dict[str, str | bytes], detail: str) -> None:
    error = skipped("e.epub", zip_bytes(parts))
    assert error.reason == "malformed" and detail in error.detail


def test_epub_a_part_listed_over_and_over_is_read_once() -> None:
    book = read("n.epub", epub_bytes({"c": xhtml("<p>tiny</p>")}, spine=["c"] * (MAX_ARCHIVE_MEMBERS + 1)))
    assert book.text.count("tiny") == 1


def test_epub_broken_chapter_is_malformed() -> None:
    error = skipped("b.epub", epub_bytes({"c": b"<p>\x00\x00\x00 not text</p>" * 10}, spine=["c"]))
    assert error.reason == "malformed" and error.detail.startswith("OEBPS/text/c.xhtml: ")


# ---- hostile archives ------------------------------------------------------------------------------


def test_zip_bomb_member_is_refused_without_inflating_it() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("word/document.xml", "w") as member:
        zeros = bytes(1 << 20)
        for _ in range(300):
            member.write(zeros)
    started = time.process_time()  # CPU: what another process does to the machine does not count
    error = skipped("bomb.docx", buffer.getvalue())
    assert time.process_time() - started < 1
    assert error.reason == "too_large" and "200 times" in error.detail


def test_zip_header_lying_about_sizes_is_caught() -> None:
    data = zip_bytes({"word/document.xml": w_document(w_para("x" * 2_000_000))})
    understated = patched(data, 22, 24, "<I", 1000)  # says 1000 bytes: the CRC of those is wrong
    assert skipped("lie.docx", understated).reason == "malformed"
    overstated = patched(data, 22, 24, "<I", 0xFFFF_FFF0)  # says 4 GB from a few KB
    assert skipped("lie.docx", overstated).reason == "too_large"


def test_billion_laughs_is_refused_quickly() -> None:
    entities = '<!ENTITY lol0 "lol">' + "".join(f'<!ENTITY lol{i} "{"&lol%d;" % (i - 1) * 10}">' for i in range(1, 10))
    document = f'<?xml version="1.0"?><!DOCTYPE w:document [{entities}]><w:document {W_NS}><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>'
    started = time.process_time()  # CPU: what another process does to the machine does not count
    error = skipped("lol.docx", zip_bytes({"word/document.xml": document}))
    assert time.process_time() - started < 1
    assert error.reason == "malformed" and "document type" in error.detail


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_external_entity_is_refused_and_never_read(encoding: str) -> None:
    document = f'<?xml version="1.0" encoding="{encoding}"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]><w:document {W_NS}><w:body><w:p><w:r><w:t>&x;</w:t></w:r></w:p></w:body></w:document>'
    error = skipped("xxe.docx", zip_bytes({"word/document.xml": document.encode(encoding)}))
    assert error.reason == "malformed" and "document type" in error.detail
    assert "root:" not in str(error)


def test_other_parts_with_a_doctype_are_refused_too() -> None:
    core = '<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>' + core_xml("&x;")
    parts = {"word/document.xml": w_document(w_para("body")), "docProps/core.xml": core}
    assert skipped("core.docx", zip_bytes(parts)).reason == "malformed"
    opf_doctype = {"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": '<!DOCTYPE p [<!ENTITY a "b">]><package/>'}
    assert skipped("o.epub", zip_bytes(opf_doctype)).reason == "malformed"


@pytest.mark.parametrize("name", ["x.docx", "x.odt", "x.pptx", "x.epub"])
def test_not_a_zip_truncated_or_empty_is_malformed(name: str) -> None:
    good = {
        "x.docx": docx_bytes(w_para("hello " * 200)),
        "x.odt": odt_bytes("<text:p>" + "hello " * 200 + "</text:p>"),
        "x.pptx": pptx_bytes({1: slide_xml("T", "hello " * 200)}),
        "x.epub": epub_bytes({"c": xhtml("<p>" + "hello " * 200 + "</p>")}, ["c"]),
    }[name]
    assert "hello" in read(name, good).text
    for data in (b"", b"plain text, not a zip", good[: len(good) // 2], good[:-30]):
        assert skipped(name, data).reason == "malformed"


def test_missing_required_part_is_malformed() -> None:
    error = skipped("m.docx", zip_bytes({"word/styles.xml": f"<w:styles {W_NS}/>"}))
    assert error.reason == "malformed" and error.detail == "word/document.xml is missing"
    assert skipped("m.odt", zip_bytes({"meta.xml": "<x/>"})).detail == "content.xml is missing"


def test_bad_xml_is_malformed() -> None:
    for document in ("<w:document", "<a></b>", "", "\x01<a/>", "<a/><b/>"):
        assert skipped("x.docx", zip_bytes({"word/document.xml": document})).reason == "malformed"
    assert skipped("x.docx", zip_bytes({"word/document.xml": b"<a>\xff\xfe</a>"})).detail == "word/document.xml is not UTF-8 or UTF-16 text"


def test_encrypted_member_is_malformed() -> None:
    data = zip_bytes({"word/document.xml": w_document(w_para("secret"))})
    error = skipped("enc.docx", patched(data, 6, 8, "<H", 0x1))
    assert error.reason == "malformed" and "encrypted" in error.detail


def test_unknown_compression_method_is_malformed() -> None:
    data = zip_bytes({"word/document.xml": w_document(w_para("x"))})
    assert skipped("m.docx", patched(data, 8, 10, "<H", 99)).reason == "malformed"


def test_a_block_of_too_many_elements_is_refused() -> None:
    body = "<w:p>" + "".join(f"<w:r{i}/>" for i in range(MAX_BLOCK_ELEMENTS + 1)) + "</w:p>"
    error = skipped("big.docx", docx_bytes(body))
    assert error.reason == "too_large" and f"more than {MAX_BLOCK_ELEMENTS} elements" in error.detail


def test_too_many_members_is_refused() -> None:
    parts: dict[str, str | bytes] = {f"f{i}": "" for i in range(MAX_ARCHIVE_MEMBERS * 2)}
    parts["word/document.xml"] = w_document(w_para("x"))
    error = skipped("many.docx", zip_bytes(parts, zipfile.ZIP_STORED))
    assert error.reason == "too_large" and "more than 10000 files" in error.detail


def test_every_corruption_of_a_small_docx_is_read_or_skipped() -> None:
    styles = '<w:style w:styleId="H"><w:name w:val="heading 1"/></w:style>'
    good = docx_bytes(w_para("Heading", "H") + w_para("body") + "<w:tbl><w:tr><w:tc>" + w_para("cell") + "</w:tc></w:tr></w:tbl>", styles, "T")
    outcomes = set()
    for position in range(len(good)):
        for data in (good[:position], good[:position] + bytes([good[position] ^ 0xFF]) + good[position + 1:]):
            try:
                extracted = extract("c.docx", data)
            except FileSkipped as error:
                outcomes.add(error.reason)
                continue
            assert isinstance(extracted, Extracted)
            assert_headings_point_at_lines(extracted)
            outcomes.add("read")
    assert outcomes <= {"read", "malformed", "too_large"} and {"read", "malformed"} <= outcomes


# ---- PDF -------------------------------------------------------------------------------------------


@needs_pdftotext
def test_pdf_pages_become_text_with_a_blank_line_between() -> None:
    extracted = read("doc.pdf", pdf_bytes(["Hello PDF world", "Second page here"]))
    assert extracted.title == "Hello PDF world"
    assert extracted.headings == ()
    assert extracted.text == "Hello PDF world\n\nSecond page here"
    assert "\f" not in extracted.text


@needs_pdftotext
def test_pdf_that_pdftotext_cannot_read_is_malformed_with_its_reason() -> None:
    error = skipped("bad.pdf", b"%PDF-1.4\nnot really a pdf")
    assert error.reason == "malformed"
    assert error.detail.startswith("pdftotext failed (exit status 1): ") and "xref" in error.detail.lower()


def test_pdf_without_pdftotext_is_no_extractor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert pdf_extractor() is None
    error = skipped("doc.pdf", pdf_bytes(["Hello"]))
    assert (error.reason, error.detail) == ("no_extractor", "install poppler-utils (pdftotext) to index PDFs")


def test_pdftotext_in_the_working_directory_is_never_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    for folder in ("", "bin"):
        fake = tmp_path / folder / "pdftotext"
        fake.parent.mkdir(exist_ok=True)
        fake.write_text(f"#!/bin/sh\ntouch {marker}\necho planted\n")
        fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join(["", ".", "bin", "./bin"]))
    assert pdf_extractor() is None
    assert skipped("doc.pdf", pdf_bytes(["Hello"])).reason == "no_extractor"
    assert not marker.exists()


def test_pdftotext_is_found_in_an_absolute_path_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    fake = folder / "pdftotext"
    fake.write_text("#!/bin/sh\nprintf 'Page one\\r\\nline\\fPage two\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([".", str(folder), "/usr/bin", "/bin"]))
    assert pdf_extractor() == str(fake)
    extracted = read("doc.pdf", b"%PDF-1.4")
    assert extracted.text == "Page one\nline\n\nPage two"
    assert not list(Path(tempfile.gettempdir()).glob("docsearch-*.pdf"))  # its private copy is removed


# ---- any bytes -------------------------------------------------------------------------------------

SAMPLES = {
    ".docx": docx_bytes(w_para("Head", "Heading1") + w_para("body text"), title="T"),
    ".odt": odt_bytes('<text:h text:outline-level="2">Head</text:h><text:p>body</text:p>', title="T"),
    ".pptx": pptx_bytes({1: slide_xml("Head", "body"), 2: slide_xml(None, "more")}, order=[2, 1]),
    ".epub": epub_bytes({"c": xhtml("<h1>Head</h1><p>body</p>")}, ["c"]),
    ".ipynb": notebook([md("# Head\ntext"), code("x = 1", [{"output_type": "stream", "text": "out"}])]),
    ".html": b"<html><head><title>T</title></head><body><h1>Head</h1><p>body &amp; <b>more</b></p><pre>x\ny</pre></body></html>",
    ".pdf": pdf_bytes(["Head"]),
}


def outcome(name: str, data: bytes) -> None:
    try:
        extracted = extract(name, data, notebook_outputs=True)
    except FileSkipped as error:
        assert error.reason in {"malformed", "too_large", "binary", "no_extractor"}
        return
    assert isinstance(extracted, Extracted)
    assert_headings_point_at_lines(extracted)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extension=st.sampled_from(sorted(EXTRACTED_FORMATS)), data=st.binary(max_size=2048))
def test_any_bytes_are_read_or_skipped(extension: str, data: bytes) -> None:
    outcome("f" + extension, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    extension=st.sampled_from(sorted(SAMPLES)),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.floats(0, 1),
)
def test_damaged_files_are_read_or_skipped(extension: str, edits: list[tuple[float, int]], cut: float) -> None:
    data = bytearray(SAMPLES[extension])
    for where, value in edits:
        data[int(where * len(data))] = value
    outcome("f" + extension, bytes(data[: max(1, int(cut * len(data)))]))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/=\"'!-?[]&#;ab1 \n\r\tph2tdscript")), max_size=300))
def test_any_markup_keeps_headings_on_their_lines(markup: str) -> None:
    outcome("f.html", markup.encode())
    outcome("f.ipynb", notebook([md(markup)]))
