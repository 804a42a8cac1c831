"""Indexing real files into a real SQLite file: change detection, deletion, rename, sections."""

from __future__ import annotations

import os
import signal
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import index_writer
from formats import MAX_TITLE_CHARS
from index_writer import IndexWriter
from indexer import RACY_WINDOW_NS, TextIndexer
from loader import PROCESS_LOADING_MIN_FILES
from models import ServerConfig
from search import search
from sections import MAX_SECTION_CHARS, MIN_SECTION_CHARS, split_sections
from status import read_status
from tests.conftest import write

FILL = "filler words " * (MIN_SECTION_CHARS // 13 + 1)  # a block long enough to be a section of its own


def found(config: ServerConfig, query: str) -> list[str]:
    return [hit["path"] for hit in search(config.db_path, query, 20)["results"]]


def test_first_scan_indexes_text_and_counts_skips(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "a.md", "# Alpha\n\napples and pears\n")
    write(source, "b.txt", "bananas")
    write(source, "c.bin.txt", b"\x00\x01\x02")
    write(source, "d.log", "logs")
    reply = indexer.scan()
    assert reply == {"success": True, "files_processed": 2, "files_removed": 0, "errors": []}
    assert found(config, "apples") == ["a.md"]
    status = read_status(config, indexer)
    assert status["indexed_files"] == 2
    assert status["skipped_files"] == {"binary": 1, "excluded_extension": 1}
    assert status["last_scan"] is not None
    assert status["state"] == "idle"


def test_unchanged_files_are_not_read_again(indexer: TextIndexer, source: Path) -> None:
    path = write(source, "a.md", "stable")
    old = path.stat().st_mtime_ns - 10 * RACY_WINDOW_NS
    os.utime(path, ns=(old, old))
    indexer.scan()
    assert indexer.scan()["files_processed"] == 0


def test_edit_that_keeps_size_and_second_is_detected(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    path = write(source, "a.md", "original words")
    second = (path.stat().st_mtime_ns // 1_000_000_000) * 1_000_000_000
    os.utime(path, ns=(second + 1000, second + 1000))
    indexer.scan()
    path.write_text("replaced words")  # same length
    os.utime(path, ns=(second + 2000, second + 2000))  # same second, 1 µs later
    assert indexer.scan()["files_processed"] == 1
    assert found(config, "replaced") == ["a.md"]
    assert found(config, "original") == []


def test_racy_edit_with_identical_mtime_and_size_is_caught_by_hash(
    indexer: TextIndexer, config: ServerConfig, source: Path
) -> None:
    path = write(source, "a.md", "first version")
    stamp = path.stat().st_mtime_ns
    indexer.scan()
    path.write_text("other version")  # same size
    os.utime(path, ns=(stamp, stamp))  # mtime restored exactly: only the content differs
    indexer.scan()
    assert found(config, "other") == ["a.md"]
    assert found(config, "first") == []


def test_deleted_and_renamed_files(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "gone.md", "vanishing content")
    write(source, "old/name.md", "movable content")
    indexer.scan()
    (source / "gone.md").unlink()
    (source / "new").mkdir()
    (source / "old" / "name.md").rename(source / "new" / "name.md")
    reply = indexer.scan()
    assert reply["files_removed"] == 2 and reply["files_processed"] == 1
    assert found(config, "vanishing") == []
    assert found(config, "movable") == ["new/name.md"]


def test_a_file_that_becomes_binary_or_too_large_leaves_the_index(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "a.txt", "findable words")
    write(source, "b.txt", "other findable")
    indexer.scan()
    write(source, "a.txt", b"\x00binary now findable")
    write(source, "b.txt", "findable " * 2_000_000)  # over the 10 MB limit
    indexer.scan()
    assert found(config, "findable") == []
    assert read_status(config, indexer)["skipped_files"] == {"binary": 1, "too_large": 1}


def test_fallback_decoded_files_are_indexed_and_flagged(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "latin.txt", "na\xefve caf\xe9".encode("latin-1"))
    write(source, "utf16.txt", "unicode sixteen".encode("utf-16"))
    indexer.scan()
    assert found(config, "café") == ["latin.txt"]
    assert found(config, "sixteen") == ["utf16.txt"]
    assert read_status(config, indexer)["fallback_decoded_files"] == 1


def test_refresh_one_file_indexes_and_removes(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    indexer.scan()
    write(source, "new.md", "fresh content")
    assert indexer.refresh_file("new.md") == {"success": True, "files_processed": 1, "files_removed": 0, "errors": []}
    assert found(config, "fresh") == ["new.md"]
    (source / "new.md").unlink()
    assert indexer.refresh_file(str(source / "new.md"))["files_removed"] == 1
    assert found(config, "fresh") == []
    missing = indexer.refresh_file("never.md")
    assert not missing["success"] and "no such file" in missing["errors"][0]
    write(source, "pic.png", b"\x89PNG")
    skipped = indexer.refresh_file("pic.png")
    assert not skipped["success"] and "excluded_extension" in skipped["errors"][0]


def test_each_file_has_one_metadata_row_and_matching_fts_rows(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    for i in range(30):
        write(source, f"f{i}.md", f"# File {i}\n\nbody {i} {FILL}\n\n## Part\n\nmore {i} {FILL}\n")
    indexer.scan()
    for i in range(0, 30, 2):
        write(source, f"f{i}.md", f"# Edited {i}\n\nonly one section\n")
    indexer.scan()
    conn = sqlite3.connect(config.db_path)
    files = conn.execute("SELECT count(*), sum(section_count) FROM files").fetchone()
    sections = conn.execute("SELECT count(*) FROM sections").fetchone()[0]
    fts_rows = conn.execute("SELECT count(*) FROM sections_fts_docsize").fetchone()[0]
    assert files == (30, 15 * 1 + 15 * 2)
    assert sections == fts_rows == 45
    conn.execute("INSERT INTO sections_fts(sections_fts) VALUES ('integrity-check')")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_fts_settings_are_given_to_new_and_existing_indexes(config: ServerConfig) -> None:
    """FTS5 keeps its settings in the index: a new index gets the daemon's, and an index written
    with FTS5's defaults (an older daemon's) is given them when it is opened again."""
    config.db_path.parent.mkdir(parents=True)
    IndexWriter(config.db_path).close()
    conn = sqlite3.connect(config.db_path)
    wanted = {"hashsize": index_writer.FTS_HASH_BYTES}
    assert dict(conn.execute("SELECT k, v FROM sections_fts_config WHERE k != 'version'")) == wanted
    with conn:
        conn.execute("DELETE FROM sections_fts_config WHERE k != 'version'")
    conn.close()
    IndexWriter(config.db_path).close()
    conn = sqlite3.connect(config.db_path)
    assert dict(conn.execute("SELECT k, v FROM sections_fts_config WHERE k != 'version'")) == wanted
    conn.close()


@pytest.mark.parametrize(
    ("name", "text", "title", "headings"),
    [
        ("a.md", f"---\ntitle: Front\n---\n{FILL}\n# Top\n{FILL}\n## Sub\n{FILL}\n", "Front", ["", "Top", "Top > Sub"]),
        ("a.md", f"# One\n{FILL}\n```\n# not a heading\n```\n## Two\n{FILL}\n", "One", ["One", "One > Two"]),
        ("a.rst", f"=====\nTitle\n=====\n\n{FILL}\n\nPart\n----\n{FILL}\n", "Title", ["Title", "Title > Part"]),
        ("a.txt", "Shopping list\n\neggs\n", "Shopping list", [""]),
    ],
)
def test_sections_follow_headings(name: str, text: str, title: str, headings: list[str]) -> None:
    got_title, sections = split_sections(text, name)
    assert got_title == title
    assert [s.heading for s in sections] == headings
    assert "\n".join(s.body for s in sections).strip() == text.strip()


def test_short_heading_blocks_share_a_section() -> None:
    text = "# Cmdlet\n\nintro\n\n## -Path\n\npath help\n\n## -Force\n\nforce help\n"
    _, sections = split_sections(text, "ref.md")
    assert [(s.heading, s.start_line, s.end_line) for s in sections] == [("Cmdlet", 1, 12)]


def test_large_files_are_split_into_bounded_sections_with_line_ranges() -> None:
    paragraphs = [f"paragraph {i} " + "word " * 100 for i in range(MAX_SECTION_CHARS // 40)]
    text = "\n\n".join(paragraphs)
    _, sections = split_sections(text, "big.txt")
    assert len(sections) >= len(text) // MAX_SECTION_CHARS > 10
    assert all(len(s.body) <= MAX_SECTION_CHARS for s in sections)
    lines = text.split("\n")
    for s in sections:
        assert "\n".join(lines[s.start_line - 1:s.end_line]) == s.body
    one_line = "x" * (3 * MAX_SECTION_CHARS + 2000)
    assert [len(s.body) for s in split_sections(one_line, "long.txt")[1]] == [MAX_SECTION_CHARS] * 3 + [2000]


def _loader_pids() -> set[int]:
    """This process's children that are loader processes."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                if b"run_loader" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.add(int(pid))
            except FileNotFoundError:
                pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc to find the loader processes")
def test_scan_finishes_when_its_loader_processes_are_killed(
    indexer: TextIndexer, config: ServerConfig, source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    count = 40 * PROCESS_LOADING_MIN_FILES
    for i in range(count):
        write(source, f"d{i % 50}/f{i}.md", f"# Note {i}\n\nword{i} {FILL}\n")
    before = _loader_pids()
    with ThreadPoolExecutor(1) as pool:
        scan = pool.submit(indexer.scan)
        loaders: set[int] = set()
        while not loaders and not scan.done():
            loaders = _loader_pids() - before
        for pid in loaders:
            os.kill(pid, signal.SIGKILL)
        reply = scan.result()
    assert loaders, "the scan should have started loader processes"
    assert reply["success"] and reply["files_processed"] == count
    assert "loading the rest in the writer's process" in caplog.text
    assert found(config, f"word{count - 1}") == [f"d{(count - 1) % 50}/f{count - 1}.md"]
    assert read_status(config, indexer)["indexed_files"] == count


LONG_HEADING = "Long heading " * 12  # two on a heading path make it longer than MAX_TITLE_CHARS
LINES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\t ", "#", "# Top", "## Sub ##", "   ### Deep", f"# {LONG_HEADING}", f"## {LONG_HEADING}"]),
    st.sampled_from(["```", "~~~~", "Title", "=====", "-----", "---", "title: Front", "...", LONG_HEADING, "=" * 160]),
    st.sampled_from(["word " * 500, FILL, "x" * (MAX_SECTION_CHARS + 1), " " * (MAX_SECTION_CHARS + 9), "y" * (3 * MAX_SECTION_CHARS)]),
)


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(LINES, max_size=60), name=st.sampled_from(["a.md", "a.rst", "a.txt"]))
@example(lines=[f"# {LONG_HEADING}", FILL, f"## {LONG_HEADING}", FILL], name="a.md")
def test_sections_give_back_the_text_in_order_within_bounds(lines: list[str], name: str) -> None:
    """Any text: the sections, in order, give back each of its lines but blank ones; bounded sizes."""
    text = "\n".join(lines)
    title, sections = split_sections(text, name)
    assert isinstance(title, str) and len(title) <= MAX_TITLE_CHARS
    original = text.split("\n")
    rebuilt: list[str | None] = [None] * len(original)  # each line as the sections give it back
    for before, after in pairwise(sections):
        assert before.end_line <= after.start_line
    for section in sections:
        assert isinstance(section.heading, str) and len(section.heading) <= MAX_TITLE_CHARS
        assert 0 < len(section.body) <= MAX_SECTION_CHARS
        assert 1 <= section.start_line <= section.end_line <= len(original)
        first = section.start_line - 1
        if len(original[first]) > MAX_SECTION_CHARS:  # a line too long for one section comes in pieces
            assert section.end_line == section.start_line
            rebuilt[first] = (rebuilt[first] or "") + section.body
            continue
        assert section.body.strip()  # runs of blank lines are left out
        body_lines = section.body.split("\n")
        assert len(body_lines) == section.end_line - first
        for i, line in enumerate(body_lines, start=first):
            assert rebuilt[i] is None
            rebuilt[i] = line
    for line, got in zip(original, rebuilt):
        if got is None:
            assert not line.strip()
        else:
            assert got == line
