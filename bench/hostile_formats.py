"""Time, peak RSS and index growth of hostile documents: the formats layer must not blow up.

    python bench/hostile_formats.py [--tree DIR] [--work DIR] [--cases epub,epub10,pptx,html,html_inline,docx]

Builds the files itself: an EPUB whose spine lists one 20 KB chapter 9,000 times (``epub``, and
ten such books in one folder, ``epub10``), a PPTX of 190 slides each just under 1 MiB unpacked
(``pptx``), a 9.9 MB HTML page that is one tag with a million and a half attributes (``html``)
or one line of two million inline tags (``html_inline``), and a .docx whose one paragraph tag
has a million attributes (``docx``, 11 MB of XML).
For each, two child processes of the code in DIR (default: this tree; point it at an older copy,
e.g. ``git archive HEAD | tar -x -C /tmp/old``, to measure before a change):

- ``extract``: ``sections.file_content`` on the file's bytes (what a loader and get_document do);
- ``index``: ``main.py index`` on a folder holding only that file (its loaders are its children).

Each reports wall seconds, peak RSS (the largest of the process and the children it waited for), and
for ``index`` the index's size and what the file became (indexed, or skipped and why).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHAPTER_KB = 20
SPINE_REPEATS = 9000
SLIDES = 190
SLIDE_BYTES = (1 << 20) - 4096  # under the 1 MiB a part had to exceed for its ratio to be checked
HTML_BYTES = 9_900_000
TIME_LIMIT_S = 600
ITEMREF = '<itemref idref="c"/>'

_P_NS = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
)


def _zip(parts: dict[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def spine_epub(repeats: int = SPINE_REPEATS) -> bytes:
    """A tiny EPUB whose spine lists its one chapter (CHAPTER_KB of text) ``repeats`` times."""
    paragraph = "<p>" + "lorem ipsum dolor sit amet " * 3 + "</p>"
    body = paragraph * (CHAPTER_KB * 1024 // len(paragraph))
    chapter = f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>c</title></head><body><h1>Chapter</h1>{body}</body></html>'
    container = (
        '<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="c.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'
    )
    opf = (
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><manifest>'
        '<item id="c" href="c.xhtml" media-type="application/xhtml+xml"/></manifest>'
        f"<spine>{ITEMREF * repeats}</spine></package>"
    )
    return _zip({"mimetype": "application/epub+zip", "META-INF/container.xml": container, "c.opf": opf, "c.xhtml": chapter})


def big_slides_pptx(slides: int = SLIDES, slide_bytes: int = SLIDE_BYTES) -> bytes:
    """A PPTX of ``slides`` slides, each a run of text just under slide_bytes unpacked."""
    head = f"<p:sld {_P_NS}><p:cSld><p:spTree><p:sp><p:txBody>"
    tail = "</p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
    paragraph = "<a:p><a:r><a:t>the same words again and again</a:t></a:r></a:p>"
    slide = head + paragraph * ((slide_bytes - len(head) - len(tail)) // len(paragraph)) + tail
    ids = "".join(f'<p:sldId id="{256 + n}" r:id="rId{n}"/>' for n in range(1, slides + 1))
    rels = "".join(
        f'<Relationship Id="rId{n}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/slide" '
        f'Target="slides/slide{n}.xml"/>' for n in range(1, slides + 1)
    )
    parts: dict[str, str | bytes] = {
        "ppt/presentation.xml": f"<p:presentation {_P_NS}><p:sldIdLst>{ids}</p:sldIdLst></p:presentation>",
        "ppt/_rels/presentation.xml.rels": f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{rels}</Relationships>',
    }
    parts.update({f"ppt/slides/slide{n}.xml": slide for n in range(1, slides + 1)})
    return _zip(parts)


def attribute_html(size: int = HTML_BYTES) -> bytes:
    """A page that is one <div> with as many short quoted attributes as fit in ``size`` bytes."""
    head, tail = b"<html><body><div", b">after the tag</div></body></html>"
    attribute = b' a="x"'
    return head + attribute * ((size - len(head) - len(tail)) // len(attribute)) + tail


def attribute_docx(attributes: int = 1_000_000) -> bytes:
    """A .docx whose one paragraph tag carries ``attributes`` distinct attributes (11 MB of XML)."""
    names = "".join(f' a{n}=""' for n in range(attributes))
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    return _zip({"word/document.xml": f"<w:document {w}><w:body><w:p{names}><w:r><w:t>x</w:t></w:r></w:p></w:body></w:document>"})


def inline_html(size: int = HTML_BYTES) -> bytes:
    """A page that is one line of two-letter words each in its own inline tag."""
    return b"<p>" + b"ab<i>" * ((size - 3) // 5)


#: name -> (what builds the folder's files, the extension to index).
CASES: dict[str, tuple[Callable[[], dict[str, bytes]], str]] = {
    "epub": (lambda: {"spine.epub": spine_epub()}, ".epub"),
    "epub10": (lambda: {f"spine{n}.epub": spine_epub() + bytes(n) for n in range(10)}, ".epub"),  # ten distinct files
    "pptx": (lambda: {"slides.pptx": big_slides_pptx()}, ".pptx"),
    "html": (lambda: {"attributes.html": attribute_html()}, ".html"),
    "html_inline": (lambda: {"inline.html": inline_html()}, ".html"),
    "docx": (lambda: {"attributes.docx": attribute_docx()}, ".docx"),
}


_EXTRACT = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from exceptions import FileSkipped
import sections
for path in sys.argv[2:]:
    try:
        content = sections.file_content(Path(path).name, Path(path).read_bytes())
        print("text", len(content.padded))
    except FileSkipped as skipped:
        print("skipped", skipped.reason, skipped.detail)
"""


#: Runs a command and reports its peak RSS: measured from this small process, not from the bench
#: (a forked child's RSS before exec, the bench's built files, would count as the command's).
_RUSAGE_WRAPPER = """
import resource, subprocess, sys
status = subprocess.call(sys.argv[1:], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, status, file=sys.stderr)
"""


def run_child(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB of the command and the children it waited for, its stdout);
    killed after TIME_LIMIT_S."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-c", _RUSAGE_WRAPPER, *cmd], cwd=cwd, stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        timer = threading.Timer(TIME_LIMIT_S, os.killpg, (process.pid, signal.SIGKILL))
        timer.start()
        process.wait()
        timer.cancel()
        elapsed = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text = out.read().decode("utf-8", "replace")
        report = err.read().decode("utf-8", "replace").split()
    if len(report) != 2:
        return elapsed, float("nan"), f"killed after {TIME_LIMIT_S} s\n{text}"
    peak_kb, status = report
    return elapsed, int(peak_kb) / 1024, (f"exit status {status}\n" if status != "0" else "") + text


def measure(tree: Path, work: Path, name: str, files: dict[str, bytes], extension: str) -> dict[str, object]:
    folder = work / name / "source"
    shutil.rmtree(work / name, ignore_errors=True)
    folder.mkdir(parents=True)
    for rel, data in files.items():
        (folder / rel).write_bytes(data)
    config = work / name / "config.json"
    config.write_text("{}")
    paths = [str(folder / rel) for rel in files]
    extract_s, extract_mb, extracted = run_child([sys.executable, "-c", _EXTRACT, str(tree), *paths], work)
    index_dir = work / name / "index"
    index_s, index_mb, _ = run_child(
        [sys.executable, str(tree / "main.py"), "index", "--config", str(config), "--source", str(folder),
         "--index-dir", str(index_dir), "--include-ext", extension, "--scan-interval", "0"], work,
    )
    index_bytes = sum(path.stat().st_size for path in index_dir.rglob("*") if path.is_file() and not path.name.endswith(".lock"))
    return {
        "case": name, "file_bytes": sum(map(len, files.values())),
        "extract_s": round(extract_s, 2), "extract_peak_rss_mb": round(extract_mb, 1),
        "extract": extracted.strip().splitlines()[:1],
        "index_s": round(index_s, 2), "index_peak_rss_mb": round(index_mb, 1), "index_mb": round(index_bytes / 1e6, 2),
        "skipped": _skipped(index_dir),
    }


def _skipped(index_dir: Path) -> list[list[str]]:
    """What the index recorded as skipped (path, reason, detail), read straight from its database."""
    for db in index_dir.glob("*.sqlite3"):
        connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "skipped" in tables:
                return [list(map(str, row)) for row in connection.execute("SELECT path, reason, detail FROM skipped LIMIT 3")]
        finally:
            connection.close()
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="the project tree whose code runs")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-hostile-formats"))
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    args = parser.parse_args()
    for name in args.cases.split(","):
        build, extension = CASES[name]
        print(json.dumps(measure(args.tree.resolve(), args.work, name, build(), extension)), flush=True)


if __name__ == "__main__":
    main()
