"""Freshness checks what a search shows (#25): each result's file and the copies named with it,
not every file ranked to fold copies; a gone file is never shown, and a group of copies whose
shown files are gone is led by the next one still on disk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import search as search_module
from exceptions import SourceUnavailableError
from file_utils import disk_signatures
from indexer import TextIndexer
from models import ServerConfig
from search import MAX_ALSO_IN, Freshness, search
from tests.conftest import write


def page(number: int, extra: int = 0) -> str:
    """Page ``number``: 40 lines of its own, ``number % 5 + 1`` of them holding "walrus", then
    ``extra`` lines more (a version of the page a little longer: a near-copy)."""
    lines = [f"Line {i} of page {number} {'tells of the walrus' if i <= number % 5 else 'says little'}." for i in range(40)]
    lines += [f"Added line {i} of page {number}." for i in range(extra)]
    return f"# Page {number}\n\n" + "\n".join(lines) + "\n"


@pytest.fixture
def versions(source: Path, indexer: TextIndexer) -> dict[int, list[str]]:
    """Ten pages in twelve versions each (a line or two longer from one version to the next)."""
    written = {number: [f"v{version:02}/page{number}.md" for version in range(12)] for number in range(10)}
    for number, paths in written.items():
        for version, path in enumerate(paths):
            write(source, path, page(number, extra=version // 4))
    indexer.scan()
    return written


def test_only_the_files_shown_are_checked_on_disk(
    versions: dict[int, list[str]], config: ServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    real = search_module.disk_signatures

    def counting(root: Path, rels: list[str]) -> dict:
        checked.extend(rels)
        return real(root, rels)

    monkeypatch.setattr(search_module, "disk_signatures", counting)
    reply = search(config.db_path, "walrus", 5, freshness=Freshness(config.source_directory))
    assert len(reply["results"]) == 5 and reply["has_more"]
    assert all(hit["also_in_count"] == 11 for hit in reply["results"])
    shown = [path for hit in reply["results"] for path in [hit["path"], *hit["also_in"]]]
    assert set(shown) <= set(checked)
    # the page and the group after it (it says whether more follow): 6 groups, 6 files each, of 120 ranked
    assert len(checked) == len(set(checked)) <= 6 * (1 + MAX_ALSO_IN)


def test_a_group_whose_shown_files_are_gone_is_led_by_the_next_one(
    versions: dict[int, list[str]], source: Path, config: ServerConfig
) -> None:
    before = search(config.db_path, "walrus", 10)["results"]
    first = before[0]
    gone = [first["path"], *first["also_in"]]
    assert len(gone) == 1 + MAX_ALSO_IN
    for path in gone:
        (source / path).unlink()
    asked: list[list[str]] = []
    after = search(config.db_path, "walrus", 10, freshness=busy_writer_in(config, asked))["results"]
    assert len(after) == 10
    same_page = next(hit for hit in after if hit["title"] == first["title"])
    assert same_page["path"] not in gone and not set(same_page["also_in"]) & set(gone)
    assert same_page["path"] in versions[int(first["title"].split()[-1])]
    assert asked == [sorted(gone)]


def test_results_stay_best_first_and_never_show_a_gone_file(
    versions: dict[int, list[str]], source: Path, config: ServerConfig
) -> None:
    every = [path for paths in versions.values() for path in paths]
    gone = set(random.Random(7).sample(every, 70))
    for number in (2, 7):  # two pages gone in every version
        gone |= set(versions[number])
    for path in gone:
        (source / path).unlink()
    reply = search(config.db_path, "walrus", 10, freshness=busy_writer_in(config, []))
    results = reply["results"]
    assert len(results) == 8 and not reply["has_more"]
    assert not {path for hit in results for path in [hit["path"], *hit["also_in"]]} & gone
    scores = [hit["score"] for hit in results]
    assert scores == sorted(scores, reverse=True)
    left = {hit["title"]: hit for hit in results}
    assert set(left) == {f"Page {number}" for number in range(10) if number not in (2, 7)}


def busy_writer_in(config: ServerConfig, asked: list[list[str]]) -> Freshness:
    """busy_writer on the config's source."""
    return Freshness(config.source_directory, lambda paths: asked.append(sorted(paths)) is not None)


def test_a_group_led_by_a_weaker_copy_is_placed_by_it(versions: dict[int, list[str]], source: Path, config: ServerConfig) -> None:
    # Pages n and n + 5 hold "walrus" as often (their shortest versions tie); with its 8 shortest
    # versions gone, page n + 5 is led by a longer one, which ranks below page n's shortest.
    for number in range(5, 10):
        for path in versions[number][:8]:
            (source / path).unlink()
    results = search(config.db_path, "walrus", 10, freshness=busy_writer_in(config, []))["results"]
    order = [hit["title"] for hit in results]
    assert len(order) == 10
    for number in range(5):
        assert order.index(f"Page {number}") < order.index(f"Page {number + 5}")
        assert results[order.index(f"Page {number + 5}")]["path"] in versions[number + 5][8:]
    scores = [hit["score"] for hit in results]
    assert scores == sorted(scores, reverse=True)


def test_disk_signatures_reads_its_paths_once_and_names_every_one(source: Path) -> None:
    write(source, "a/kept.md", "kept\n")
    found = disk_signatures(source, iter(["a/kept.md", "a/gone.md", "b/gone.md"]))  # a one-pass iterable
    assert set(found) == {"a/kept.md", "a/gone.md", "b/gone.md"}
    assert found["a/kept.md"] is not None and found["a/kept.md"][2] == 5 and found["a/gone.md"] is None is found["b/gone.md"]
    with pytest.raises(SourceUnavailableError, match="cannot be opened"):  # not "gone": the source itself is missing
        disk_signatures(source / "missing", iter(["a/kept.md"]))
