"""What a search's path, extensions and date filters let through: the rules as a table, then on a
real index (the filter applies before the limit, and files_matched counts what passes)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from exceptions import ArgumentError
import filters as filters_module
from filters import read_filters
from indexer import TextIndexer
from models import ServerConfig
import search as search_module
from search import Freshness, search
from tests.conftest import write

PATHS = [
    "readme.md", "guides/a.md", "guides/install.md", "guides/x/y/z.md", "guides/x/install.md", "guides.md",
    "guides-old/a.md", "other/install.md", "other/deep/install.md", "a/b/c.rst", "x/b1.md", "x/a1.md", "notes/Ünïcode.md",
]


def passing(pattern: str) -> list[str]:
    """PATHS that the filter lets through, tested as the index tests them (SQLite's GLOB, then the pattern)."""
    filters = read_filters(pattern)
    glob = sqlite3.connect(":memory:")
    return [
        p for p in PATHS
        if p.startswith(filters.prefix) and (filters.glob is None or glob.execute("SELECT ? GLOB ?", (p, filters.glob)).fetchone()[0])
        and (filters.pattern is None or filters.pattern.fullmatch(p))
    ]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("guides/", ["guides/a.md", "guides/install.md", "guides/x/y/z.md", "guides/x/install.md"]),
        ("guides", ["guides/a.md", "guides/install.md", "guides/x/y/z.md", "guides/x/install.md"]),  # a folder, not a name prefix
        ("./guides/install.md", ["guides/install.md"]),
        ("guides/**/*.md", ["guides/a.md", "guides/install.md", "guides/x/y/z.md", "guides/x/install.md"]),
        ("guides/*.md", ["guides/a.md", "guides/install.md"]),  # * stays within a folder
        ("*/install.md", ["guides/install.md", "other/install.md"]),
        ("**/install.md", ["guides/install.md", "guides/x/install.md", "other/install.md", "other/deep/install.md"]),
        ("**/*.rst", ["a/b/c.rst"]),
        ("*.md", ["readme.md", "guides.md"]),  # the whole path: top level only
        ("x/[!a]*.md", ["x/b1.md"]),
        ("x/?1.md", ["x/b1.md", "x/a1.md"]),
        ("guides/**", ["guides/a.md", "guides/install.md", "guides/x/y/z.md", "guides/x/install.md"]),
        ("other/**/**/install.md", ["other/install.md", "other/deep/install.md"]),
        ("notes/Ü*", ["notes/Ünïcode.md"]),
        ("", PATHS),
        ("./", PATHS),
        ("**/**", PATHS),
        ("guides/**/**", ["guides/a.md", "guides/install.md", "guides/x/y/z.md", "guides/x/install.md"]),
        ("x[--0]b1.md", []),  # a range holding "/" still matches within one name
    ],
)
def test_path_filter_rules(pattern: str, expected: list[str]) -> None:
    assert passing(pattern) == expected


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"path": "/etc/passwd"}, "path"), ({"path": "guides/../.."}, "path"), ({"path": "a\x00b"}, "path"),
        ({"path": "*a*b*c"}, "path"), ({"path": "x" * 2000}, "path"), ({"path": "[z-a]*.md"}, "path"),
        ({"path": "**/a/**/b.md"}, "path"),  # two ** before the end could take exponential time on a deep tree
        ({"extensions": ".md"}, "extensions"), ({"extensions": ["*.md"]}, "extensions"), ({"extensions": [3]}, "extensions"),
        ({"extensions": [".md"] * 51}, "extensions"),
        ({"modified_after": "last week"}, "modified_after"), ({"modified_before": "2024-13-01"}, "modified_before"),
    ],
)
def test_malformed_filters_name_the_argument(arguments: dict, named: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        read_filters(**arguments)
    assert raised.value.name == named


def test_dates_are_utc_unless_they_say_otherwise() -> None:
    assert read_filters(modified_after="2024-05-01").modified == (1714521600 * 10**9, None)
    assert read_filters(modified_after="2024-05-01T02:00:00+02:00").modified == (1714521600 * 10**9, None)
    assert read_filters(modified_before="2024-05-01T00:00:00Z").modified == (None, 1714521600 * 10**9)
    # Past what nanoseconds in 64 bits hold: every file is after year 1 and before 9999.
    assert read_filters(modified_after="0001-01-01", modified_before="9999-12-31").modified == (-(2**63), 2**63 - 1)
    assert read_filters(modified_after="0001-01-01T00:00:00+14:00", modified_before="9999-12-31T23:59:59-14:00").modified == (-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    "text",
    ["20240501T020000+0200", "2024-05-01T02:00+02", "2024-W18-3T02:00:00.000+02:00", "2024-05-01T00:00:00.0Z", "2024-05-01 00:00:00,0000000+00:00"],
)
def test_dates_in_the_forms_python_3_11_reads(text: str) -> None:
    # 3.10's datetime.fromisoformat reads fewer of them; search reads them on every version.
    assert read_filters(modified_after=text).modified == (1714521600 * 10**9, None)


@pytest.fixture(params=["listed", "looked_up"])
def filter_route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a filter is applied: as the list of its files, or per matching section (wide)."""
    if request.param == "looked_up":
        monkeypatch.setattr(filters_module, "MAX_LISTED_FILES", 0)


@pytest.mark.usefixtures("filter_route")
def test_filters_apply_before_the_limit(indexer: TextIndexer, source: Path, config: ServerConfig) -> None:
    # Forty files far better for "heron" outside the folder; the folder's weak ones must still come back.
    for n in range(40):
        write(source, f"birds/strong{n}.md", "# Heron\n\nheron heron heron heron\n")
    for n in range(3):
        write(source, f"weak/w{n}.txt", f"a heron, once, among many other words of note {n} " + "filler " * 50)
    os.utime(source / "weak/w0.txt", ns=(10**18, 10**18))  # 2001-09-09, the others are today
    indexer.scan()
    reply = search(config.db_path, "heron", 2, filters=read_filters("weak/"))
    assert {hit["path"] for hit in reply["results"]} <= {"weak/w0.txt", "weak/w1.txt", "weak/w2.txt"}
    assert len(reply["results"]) == 2 and reply["files_matched"] == 3 and reply["has_more"] and reply["next_offset"] == 2
    dated = search(config.db_path, "heron", 10, filters=read_filters(modified_before="2010-01-01"))
    assert [hit["path"] for hit in dated["results"]] == ["weak/w0.txt"] and dated["files_matched"] == 1
    both = search(config.db_path, "heron -once", 10, filters=read_filters("weak/", [".txt"]))
    assert both["results"] == [] and both["files_matched"] == 0
    globbed = search(config.db_path, "heron", 50, filters=read_filters("*/strong1*.md"), collapse_duplicates=False)
    assert sorted(hit["path"] for hit in globbed["results"]) == ["birds/strong1.md"] + [f"birds/strong{n}.md" for n in range(10, 20)]
    question = search(config.db_path, "where does the heron live among many words", 10, filters=read_filters("weak/**"))
    assert {hit["path"] for hit in question["results"]} == {"weak/w0.txt", "weak/w1.txt", "weak/w2.txt"}


def test_fresh_results_without_a_writer_leave_out_deleted_files_and_mark_changed_ones(
    indexer: TextIndexer, source: Path, config: ServerConfig
) -> None:
    for name in ("kept", "changed", "deleted"):
        write(source, f"{name}.md", f"# {name}\n\nthe egret of {name}\n")
    indexer.scan()
    write(source, "changed.md", "# changed\n\nthe egret moved elsewhere, and grew\n")
    (source / "deleted.md").unlink()
    asked: list[list[str]] = []
    freshness = Freshness(config.source_directory, lambda paths: asked.append(paths) is not None)  # a writer that is busy
    reply = search(config.db_path, "egret", freshness=freshness)
    assert [sorted(paths) for paths in asked] == [["changed.md", "deleted.md"]]
    assert {hit["path"]: hit["stale"] for hit in reply["results"]} == {"kept.md": False, "changed.md": True}
    assert reply["files_matched"] == 2
    unchecked = search(config.db_path, "egret")
    assert len(unchecked["results"]) == 3 and not any(hit["stale"] for hit in unchecked["results"])


def test_paging_ends_when_copies_fill_every_file_ranked(
    indexer: TextIndexer, source: Path, config: ServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(60):
        write(source, f"copy{n}.md", f"# v{n}\n\nzebra apple same text\n")
    for n in range(5):
        write(source, f"other{n}.md", f"zebra only {n}\n")
    indexer.scan()
    monkeypatch.setattr(search_module, "MAX_RANKED_FILES", 50)  # as 4,000 copies would
    offset: int | None = 0
    seen: list[str] = []
    for _ in range(10):
        reply = search(config.db_path, "zebra", 5, offset=offset)
        seen += [hit["path"] for hit in reply["results"]]
        offset = reply["next_offset"]
        if offset is None:
            break
    assert offset is None, "a page that adds nothing must say nothing more follows"
    assert len(seen) == len(set(seen)) == 6 and sum(path.startswith("copy") for path in seen) == 1


def test_lone_surrogates_in_filters_name_the_argument() -> None:
    for arguments, named in (({"path": "a\ud800/**"}, "path"), ({"extensions": [".\ud800"]}, "extensions")):
        with pytest.raises(ArgumentError) as raised:
            read_filters(**arguments)
        assert raised.value.name == named
