"""Versions of a page are one result (#23): texts with at least 90% of their lines in common fold
into the best-ranked one, named in also_in; texts that share less stay apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

import copies
import replies
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import PROJECT_DIR, write
from tests.mcp_client import call, server_params, wait_for


def page(lines: int = 60, changed: int | None = None, start: int = 0) -> str:
    """A page of ``lines`` distinct lines (from line ``start``), line ``changed`` said differently."""
    body = [f"Line {i} sets the gizmo{i} dial to {i * 7} units." for i in range(start, start + lines)]
    if changed is not None:
        body[changed] = f"Line {changed} sets the gizmo{changed} dial to {changed * 7 + 1} units."
    return "# About gizmos\n\n" + "\n".join(body) + "\n"


def jaccard(a: str, b: str) -> float:
    first, second = copies.line_hashes(a), copies.line_hashes(b)
    return len(first & second) / len(first | second)


@pytest.mark.parametrize("lines", [60, 600])  # fewer lines than a sketch holds (exact), and many more
def test_texts_nine_tenths_alike_are_near_copies_and_less_alike_are_not(lines: int) -> None:
    base = page(lines)
    two_lines_changed = page(lines, changed=10).replace("Line 0 ", "Line zero ")
    four_fifths = page(lines * 4 // 5) + page(lines // 5, start=1000)
    assert jaccard(base, two_lines_changed) > 0.93
    assert copies.similarity(copies.sketch(base), copies.sketch(two_lines_changed)) >= copies.NEAR_COPY
    assert 0.6 < jaccard(base, four_fifths) < 0.7
    assert copies.similarity(copies.sketch(base), copies.sketch(four_fifths)) < copies.NEAR_COPY
    assert copies.similarity(copies.sketch(base), copies.sketch(page(lines, start=2000))) < 0.1


def test_texts_without_words_are_no_ones_copy() -> None:
    assert copies.sketch("") == copies.sketch("  \n ") == b""
    assert copies.similarity(b"", b"") == 0.0
    leaders = copies.Leaders()
    leaders.add("empty", b"")
    assert list(leaders.near(b"")) == []


def test_a_file_joins_the_best_ranked_leader_it_is_a_near_copy_of() -> None:
    leaders = copies.Leaders()
    leaders.add("other", copies.sketch(page(40, start=300)))
    leaders.add("first", copies.sketch(page()))
    leaders.add("second", copies.sketch(page(changed=20)))
    assert list(leaders.near(copies.sketch(page(changed=30)))) == ["first", "second"]


def test_a_sketch_is_the_same_in_every_process() -> None:
    """Loader processes are started with their own string-hash salt: the sketch must not depend on it."""
    script = "import sys, copies; sys.stdout.write(copies.sketch(sys.stdin.read()).hex())"
    made = {
        subprocess.run(
            [sys.executable, "-c", script], input=page(), capture_output=True, text=True, check=True, cwd=PROJECT_DIR,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert made == {copies.sketch(page()).hex()}


def versions(source: Path) -> None:
    """One page in three versions (a line or two apart) and a page that shares a quarter of its lines."""
    write(source, "5.1/about_gizmos.md", page())
    write(source, "7.4/about_gizmos.md", page(changed=10))
    write(source, "7.5/about_gizmos.md", page(changed=10).replace("Line 0 ", "Line zero "))
    write(source, "guides/gizmo_setup.md", page(10) + page(30, start=100))


def test_versions_of_a_page_are_one_result_and_other_pages_stay_apart(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    versions(source)
    indexer.scan()
    results = search(config.db_path, "gizmo dial units")["results"]
    assert len(results) == 2
    folded = next(hit for hit in results if hit["path"].endswith("about_gizmos.md"))
    assert sorted([folded["path"], *folded["also_in"]]) == ["5.1/about_gizmos.md", "7.4/about_gizmos.md", "7.5/about_gizmos.md"]
    assert folded["also_in_count"] == 2
    apart = next(hit for hit in results if hit is not folded)
    assert apart["path"] == "guides/gizmo_setup.md" and apart["also_in"] == []
    every = search(config.db_path, "gizmo dial units", collapse_duplicates=False)["results"]
    assert len(every) == 4 and all(hit["also_in"] == [] for hit in every)


def test_a_version_rewritten_is_no_longer_folded(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    versions(source)
    indexer.scan()
    write(source, "7.4/about_gizmos.md", page(20) + page(20, start=500))
    indexer.scan()
    results = {hit["path"]: hit["also_in"] for hit in search(config.db_path, "gizmo dial units")["results"]}
    assert len(results) == 3 and results["7.4/about_gizmos.md"] == [] and results["guides/gizmo_setup.md"] == []
    assert {path: also_in for path, also_in in results.items() if also_in} in (
        {"5.1/about_gizmos.md": ["7.5/about_gizmos.md"]}, {"7.5/about_gizmos.md": ["5.1/about_gizmos.md"]},
    )


@pytest.mark.parametrize(
    ("path", "also_in", "short"),
    [
        ("ref/5.1/Core/About/about_Signing.md", ["ref/7.4/Core/About/about_Signing.md", "ref/7.5/Core/About/about_Signing.md"], True),
        ("ref/5.1/Core/About/about_Signing.md", ["ref/7.4/Core/About/about_Signing.md"], True),
        ("ref/7.4/whats-new-7.4.md", ["ref/7.5/whats-new-7.4.md"], False),  # 7.4 twice in the path: a replace would change both
        ("ref/7.4/a/x.md", ["ref/7.5/b/x.md"], False),  # two folders differ
        ("ref/7.4/a/x.md", ["ref/7.5/a/x.md", "ref/7.4/b/x.md"], False),  # not the same folder
        ("ref/7.4/x.md", ["ref/7.5/a/x.md"], False),  # another depth
        ("x.md", ["y.md"], False),  # no shorter
    ],
)
def test_copies_are_named_by_the_folder_that_differs_when_that_is_unambiguous(path: str, also_in: list[str], short: bool) -> None:
    named = replies.named_copies(path, also_in)
    assert ("also_in_replaces" in named) == short
    if short:
        assert [path.replace(named["also_in_replaces"], entry) for entry in named["also_in"]] == also_in
        assert len(json.dumps(named)) < len(json.dumps({"also_in": also_in}))
    else:
        assert named == {"also_in": also_in}


@pytest.mark.anyio
async def test_versions_fold_over_mcp(source: Path, tmp_path: Path) -> None:
    versions(source)
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "1")) as client:

        async def idle() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 4

        await wait_for(idle)
        results = (await call(client, "search", {"query": "gizmo dial units"}))["results"]
        assert len(results) == 2
        folded = next(hit for hit in results if hit.get("also_in"))
        # Versions are named by their folder: an entry's path is path with also_in_replaces replaced by it.
        assert folded["also_in_replaces"] == folded["path"].split("/")[0] and all("/" not in entry for entry in folded["also_in"])
        named = {folded["path"].replace(folded["also_in_replaces"], entry) for entry in folded["also_in"]}
        assert {folded["path"], *named} == {"5.1/about_gizmos.md", "7.4/about_gizmos.md", "7.5/about_gizmos.md"}
        for path in named:
            assert "Line 9 sets" in (await call(client, "get_document", {"path": path}))["text"]


def test_newest_first_picks_the_newest_version_unless_the_query_names_one() -> None:
    from copies import newest_first, version_in

    assert [version_in(name) for name in ("7.4", "v2", "powershell-7.5", "2023", "docs", "a1")] == [(7, 4), (2,), (7, 5), (2023,), None, None]
    versions = ["ref/5.1/about_X.md", "ref/7.4/about_X.md", "ref/7.5/about_X.md"]
    assert newest_first(versions, "environment variables") == 2
    assert newest_first(versions, "environment variables in 5.1") == 0
    assert newest_first(["docs/v1.2.md", "docs/v1.10.md"], "x") == 1  # 1.10 after 1.2: numbers, not text
    assert newest_first(["a/x.md", "b/x.md"], "x") == 0  # no versions: the best-ranked leads
    assert newest_first(["7.4/a/x.md", "7.5/b/x.md"], "x") == 0  # two names differ: not versions of one page


def test_versions_whose_answering_section_differs_only_in_version_numbers_are_one_result_led_by_the_newest(
    source: Path, indexer: TextIndexer, config: ServerConfig
) -> None:
    for version, extra in (("5.1", "Windows PowerShell only: the registry provider."), ("7.4", "Cross-platform notes for Linux."),
                           ("7.5", "New in this release: the zqnewqz feature and more.")):
        other = "\n".join(f"Line {n} about {extra} in {version} number {n * 7}." for n in range(30))
        write(source, f"ref/{version}/about_Environment_Variables.md",
              f"# about_Environment_Variables\n\n## Short description\n\nEnvironment variables store data used by"
              f" PowerShell {version}; see ?view=powershell-{version} for zqenvqz details.\n\n## Notes\n\n{other}\n")
    indexer.scan()
    reply = search(config.db_path, "zqenvqz environment variables", 10)
    assert len(reply["results"]) == 1, reply["results"]
    hit = reply["results"][0]
    assert hit["path"] == "ref/7.5/about_Environment_Variables.md" and sorted(hit["also_in"]) == [
        "ref/5.1/about_Environment_Variables.md", "ref/7.4/about_Environment_Variables.md"]
    named = search(config.db_path, "zqenvqz environment variables 7.4", 10)["results"][0]
    assert named["path"] == "ref/7.4/about_Environment_Variables.md"


def test_every_copy_shown_apart_lists_equal_copies_newest_version_first(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    for version in ("5.1", "7.10", "7.4", "7.5"):
        write(source, f"ref/{version}/about_Quokka.md", "# about_Quokka\n\nThe zqquokkaqz lives on Rottnest Island.\n")
    indexer.scan()
    every = search(config.db_path, "zqquokkaqz", collapse_duplicates=False)["results"]
    assert [hit["path"].split("/")[1] for hit in every] == ["7.10", "7.5", "7.4", "5.1"]
    assert len({hit["score"] for hit in every}) == 1
    named = search(config.db_path, "zqquokkaqz 7.4", collapse_duplicates=False)["results"]
    assert named[0]["path"] == "ref/7.4/about_Quokka.md"


def _widgets(tail: str, other: str) -> str:
    """A page whose section on tension ends in ``tail``, and 40 lines of its own about ``other``."""
    intro = "Sprocket tension is set with the knurled dial on the left housing, clockwise to tighten it."
    steps = "\n".join(f"Step {i}: note the reading of gauge number {i} in the log." for i in range(20))
    own = "\n".join(f"The {other} part {i} is described here." for i in range(40))
    return f"# About widgets\n\n## Tension\n\n{intro}\n\n{steps}\n\n{tail}\n\n## Other\n\n{own}\n"


def test_versions_of_a_page_shown_alike_are_one_result(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    """Two versions whose answering section differs below what is shown (a sentence added, too much
    for the pages to fold as copies) would show the same heading and snippet twice: one result, the
    other in also_in. Another page shown alike, of another name, stays a result of its own."""
    write(source, "5.1/about_widgets.md", _widgets("Older housings have no dial.", "bracket"))
    write(source, "7.4/about_widgets.md", _widgets("Since 7.0 the dial also sets the sprocket speed; see about_speed.", "flange"))
    write(source, "guides/widget_tension.md", _widgets("A guide of its own.", "gasket"))
    indexer.scan()
    results = search(config.db_path, "sprocket tension knurled dial")["results"]
    shown = {(hit["heading"], hit["snippet"]) for hit in results}
    assert len(shown) == 1, results  # all three are shown alike
    versions = [hit for hit in results if hit["path"].endswith("about_widgets.md")]
    assert len(versions) == 1 and len(versions[0]["also_in"]) == 1, results
    assert [hit["path"] for hit in results if hit not in versions] == ["guides/widget_tension.md"]
    apart = search(config.db_path, "sprocket tension knurled dial", collapse_duplicates=False)["results"]
    assert len(apart) == 3


def test_pages_of_one_name_in_other_folders_shown_alike_stay_apart(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    """From a hostile review: three packages' CHANGELOG.md open their 3.0.0 breaking changes with
    the same long line, then list their own. Shown alike, they are not versions of one page (their
    paths differ in a name without a version): three results, each package's changes reachable."""
    shared = ("- Dropped support for Node.js 16 and older; Node.js 18 or later is now required, because Node.js 16 reached its"
              " end of life in September 2023 and no longer receives security updates from the OpenJS Foundation.")
    own = {"router": "- Renamed `route()` to `match()`.\n- Removed the `strict` option.",
           "store": "- The `persist` plugin is now a separate package.", "forms": "- Validation runs on blur by default."}
    for package, changes in own.items():
        write(source, f"packages/{package}/CHANGELOG.md",
              f"# Changelog\n\n## 3.0.0\n\n### Breaking changes\n\n{shared}\n{changes}\n\n## 2.4.0\n\n- Small fixes in {package}.\n")
    indexer.scan()
    results = search(config.db_path, "breaking changes 3.0.0")["results"]
    assert len(results) == 3 and not any(hit["also_in"] for hit in results), [(hit["path"], hit["also_in"]) for hit in results]


@pytest.mark.parametrize(
    ("path", "without"),
    [
        ("reference/5.1/Core/about_Signing.md", "reference/*/Core/about_Signing.md"),
        ("powershell-7.4/x.md", "powershell-*/x.md"),
        ("docs/v2/guide-v3.md", "docs/*/guide-*.md"),
        ("packages/router/CHANGELOG.md", "packages/router/CHANGELOG.md"),
        ("notes/2024-05-01.md", "notes/2024-05-01.md"),  # a date is not one version: not a version of another day's notes
    ],
)
def test_a_path_without_its_versions(path: str, without: str) -> None:
    assert copies.versionless(path) == without
