"""Findings of a hostile review: Office archives of millions of empty or nested elements, files of
millions of headings, and the supervisor of the rescan loop after a failure (status kept in step,
one failure counted once, a MemoryError survived)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import formats
from daemon import Daemon
import markup
import sections
from documents import MAX_OUTLINE_HEADINGS
from indexer import TextIndexer
from models import ServerConfig, WatchState
from status import read_status
from watcher import SourceWatcher
from tests.conftest import PROJECT_DIR, write
from tests.test_background_loop import daemon_of, found, status_of, wait_until, watched_config  # noqa: F401 - fixtures
from tests.test_formats import docx_bytes, read, skipped, w_document, zip_bytes

pytestmark = pytest.mark.usefixtures("no_hang")


def peak_bytes(action) -> int:
    """The most memory Python held while ``action`` ran (tracemalloc's peak)."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---- archives: elements outside any block ---------------------------------------------------------


def padded_docx(body: str) -> bytes:
    """A .docx with 100 KB of random bytes beside its document, which unpacks to less than 200 times its size."""
    return zip_bytes({"word/document.xml": w_document(body), "pad.bin": os.urandom(100_000)})


def test_a_part_nested_past_the_depth_limit_is_too_large_without_keeping_every_element() -> None:
    depth = 300_000
    body = "<w:x>" * depth + "</w:x>" * depth  # outside any paragraph: no block ever counted it
    data = padded_docx(body)
    errors: list[formats.FileSkipped] = []
    peak = peak_bytes(lambda: errors.append(skipped("nest.docx", data)))
    assert errors[0].reason == "too_large"
    assert errors[0].detail == f"word/document.xml nests elements more than {formats.MAX_XML_DEPTH} deep"
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
    contents: list[sections.Content] = []
    peak = peak_bytes(lambda: contents.append(sections.file_content(name, data, most=MAX_OUTLINE_HEADINGS + 1)))
    assert len(contents[0].headings) == MAX_OUTLINE_HEADINGS + 1
    assert contents[0].text.count("h\n") == HEADINGS - 1  # every heading's line is still text
    assert peak < most_times_size * len(data)


@pytest.mark.parametrize("name", ["many.md", "many.ipynb", "many.html"])
def test_headings_past_the_cap_are_not_collected_and_their_text_is_still_indexed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(markup, "MAX_HEADINGS", 1_000, raising=False)  # raising=False: fails on the asserts before the fix
    data = MANY_HEADINGS.get(name) or ("# h\n" * HEADINGS).encode()
    contents: list[sections.Content] = []
    peak = peak_bytes(lambda: contents.append(sections.file_content(name, data)))
    assert len(contents[0].headings) == 1_000
    rows = sections.sections(contents[0])
    assert sum(row.body.count("h") for row in rows) == HEADINGS  # nothing lost: cut by size past the last heading
    if name == "many.md":  # the others hold their lines one by one (see above)
        assert peak < 8 * len(data)


# ---- the supervisor of the rescan loop ------------------------------------------------------------

watching_needs_inotify = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")


@watching_needs_inotify
def test_after_a_failed_turn_status_says_watching_stopped_and_counts_the_failure_once(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon], monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(source, "a.md", "a\n")
    failing, recording = SourceWatcher.next_batch, TextIndexer.record_watching
    raised: list[bool] = []
    recorded: list[WatchState] = []

    def next_batch(self: SourceWatcher, timeout: float | None):  # noqa: ANN202
        if not raised:
            raised.append(True)
            raise RuntimeError("an unforeseen failure")
        return failing(self, timeout)

    def record_watching(self: TextIndexer, state: WatchState) -> None:
        recorded.append(replace(state))  # a copy: a watcher's state changes when it closes
        recording(self, state)

    monkeypatch.setattr(SourceWatcher, "next_batch", next_batch)
    monkeypatch.setattr(TextIndexer, "record_watching", record_watching)
    daemon = daemon_of(watched_config)
    assert wait_until(lambda: bool(recorded))
    # what status shows in this process and, through the index, in others
    assert not recorded[0].active and "stopped by a failure" in (recorded[0].problem or ""), recorded
    write(source, "a.md", "zqafterfailureqz\n")
    assert wait_until(lambda: found(watched_config, "zqafterfailureqz") == ["a.md"])
    for status in (status_of(daemon), dict(read_status(watched_config, None))):
        assert status["watching"]["active"], status
        assert status["errors_encountered"] == 1, status


@watching_needs_inotify
def test_a_memory_error_while_reporting_a_failed_turn_does_not_end_the_loop(
    watched_config: ServerConfig, source: Path, daemon_of: Callable[[ServerConfig], Daemon], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of memory in a turn, and again while its traceback is formatted (made here by raising
    MemoryError, which cannot be caused for real without starving the machine)."""
    write(source, "a.md", "a\n")
    failing, reporting = SourceWatcher.next_batch, TextIndexer.record_problem
    held: list[weakref.ref] = []
    freed: list[bool] = []

    class Huge:
        """Stands for the large tree a turn held when memory ran out."""

    def next_batch(self: SourceWatcher, timeout: float | None):  # noqa: ANN202
        if not held:
            tree = Huge()
            held.append(weakref.ref(tree))
            raise MemoryError
        return failing(self, timeout)

    def record_problem(self: TextIndexer, message: str, exc: BaseException) -> None:
        reporting(self, message, exc)
        if not freed:
            freed.append(held[0]() is None)
            raise MemoryError  # as if formatting the traceback ran out of memory

    monkeypatch.setattr(SourceWatcher, "next_batch", next_batch)
    monkeypatch.setattr(TextIndexer, "record_problem", record_problem)
    daemon = daemon_of(watched_config)
    assert wait_until(lambda: bool(freed))
    assert freed == [True]  # the failed turn's locals were let go before its report
    write(source, "a.md", "zqaftermemoryqz\n")
    assert wait_until(lambda: found(watched_config, "zqaftermemoryqz") == ["a.md"])
    assert daemon._thread.is_alive()
    assert status_of(daemon)["errors_encountered"] == 1
