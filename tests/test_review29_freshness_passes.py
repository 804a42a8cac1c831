"""Review of #25 (freshness checks only what a search shows): a file found gone in one ranking
pass must stay out of the groups the next pass builds (each pass groups its ranking anew), and a
group whose leader is gone is grouped as if that leader had never been ranked, as before #25."""

from __future__ import annotations

import shutil
from pathlib import Path

from indexer import TextIndexer
from models import ServerConfig
from search import Freshness, search
from tests.conftest import write


def shown(reply: dict) -> set[str]:
    return {path for hit in reply["results"] for path in [hit["path"], *hit["also_in"]]}


def notes(source: Path, indexer: TextIndexer, count: int) -> list[str]:
    """``count`` notes, each holding "walrus" once less than the one before: best first."""
    paths = [f"f{n:02}.md" for n in range(count)]
    for n, path in enumerate(paths):
        write(source, path, f"# Note {n}\n\n" + "walrus " * (count + 2 - n) + f"\nunique {n}\n")
    indexer.scan()
    return paths


def test_files_gone_in_a_first_pass_stay_out_of_the_next(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    # collapse off, limit 1: the first pass ranks 2 files, both gone; the second ranks 4 and its
    # first chunk is those two, already checked: they must not be returned.
    paths = notes(source, indexer, 6)
    for path in paths[:2]:
        (source / path).unlink()
    for offset in range(4):
        reply = search(config.db_path, "walrus", 1, offset=offset, collapse_duplicates=False,
                       freshness=Freshness(config.source_directory))
        assert [hit["path"] for hit in reply["results"]] == [paths[2 + offset]]
        assert reply["has_more"] == (offset < 3)


def test_a_gone_copy_stays_out_when_copies_need_a_second_pass(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    # 40 copies of one text, one asked for: 30 are ranked, one group; a second pass ranks all 40.
    for n in range(40):
        write(source, f"c{n:02}.md", "# Copy\n\nwalrus walrus walrus\nsame text\n")
    indexer.scan()
    first = search(config.db_path, "walrus", 1)["results"][0]["path"]
    (source / first).unlink()
    reply = search(config.db_path, "walrus", 1, freshness=Freshness(config.source_directory))
    assert len(reply["results"]) == 1
    assert first not in shown(reply)
    assert reply["results"][0]["also_in_count"] == 38


def test_a_deleted_source_returns_nothing(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    notes(source, indexer, 10)
    shutil.rmtree(source)
    for collapse in (True, False):
        reply = search(config.db_path, "walrus", 1, collapse_duplicates=collapse, freshness=Freshness(config.source_directory))
        assert reply["results"] == [] and not reply["has_more"] and reply["files_matched"] == 0


def test_copies_of_a_gone_leader_are_grouped_by_the_next_one(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    # b and c are each a near-copy of a, not of each other. With a gone, b leads and c is a text of
    # its own (as before #25), not folded under b.
    common = [f"Shared line number {i} about nothing." for i in range(54)]
    a = common + [f"walrus walrus walrus line {i} of A" for i in range(6)]
    b = common + [f"walrus walrus walrus line {i} of A" for i in range(3)] + [f"walrus walrus other {i} of B" for i in range(3)]
    c = common + [f"walrus walrus walrus line {i} of A" for i in range(3, 6)] + [f"third {i} of C" for i in range(3)]
    for name, lines in (("a.md", a), ("b.md", b), ("c.md", c)):
        write(source, name, "# T\n\n" + "\n".join(lines) + "\n")
    indexer.scan()
    before = search(config.db_path, "walrus", 5)["results"]
    assert [(hit["path"], hit["also_in"]) for hit in before] == [("a.md", ["b.md", "c.md"])]
    (source / "a.md").unlink()
    after = search(config.db_path, "walrus", 5, freshness=Freshness(config.source_directory))["results"]
    assert [(hit["path"], hit["also_in"]) for hit in after] == [("b.md", []), ("c.md", [])]
