"""bench/million.py builds the same corpus from the same arguments, in the tree it promises, and
reports its measurements. No timing is asserted: a benchmark is not a test."""

from __future__ import annotations

from pathlib import Path

from tests.test_bench import _load

PAGE = """---
title: About jobs
---

# About jobs

Jobs run commands in the background, so that the session stays free for other work meanwhile.

## Starting a job

```powershell
# not a heading: inside a fence

Start-Job -ScriptBlock { Get-Process }
```

Use Receive-Job to read what a job wrote to its output.

### Waiting

Wait-Job waits until the jobs are done, then returns them to the pipeline.
"""


def _sources(root: Path) -> tuple[Path, Path]:
    docs, collections = root / "docs", root / "collections"
    for n in range(3):
        (docs / f"area{n}").mkdir(parents=True)
        (docs / f"area{n}" / f"about_jobs{n}.md").write_text(PAGE.replace("jobs", f"jobs{n}"), encoding="utf-8")
    for name in ("cranfield", "med"):
        (collections / name / "docs").mkdir(parents=True)
        for n in range(1, 6):
            text = f"Title {name} {n}\n" + f"the {name} abstract number {n} studies boundary layers and flow. " * 3
            (collections / name / "docs" / f"{n}.txt").write_text(text, encoding="utf-8")
    return docs, collections


def _files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_pieces_are_cut_at_headings_outside_fences() -> None:
    million = _load("million")
    pieces = million.markdown_pieces(PAGE)
    assert [name for name, _ in pieces] == ["About jobs", "Starting a job", "Waiting"]
    assert [piece.split("\n", 1)[0] for _, piece in pieces] == ["## About jobs", "## Starting a job", "### Waiting"]
    assert "# not a heading: inside a fence" in pieces[1][1]
    assert not any(piece.startswith("---") or "title:" in piece for _, piece in pieces)


def test_the_same_arguments_build_the_same_tree(tmp_path: Path) -> None:
    million = _load("million")
    sources = million.read_sources(*_sources(tmp_path))
    first = million.build_corpus(tmp_path / "one", 700, 5, sources)
    again = million.build_corpus(tmp_path / "two", 700, 5, sources)
    other = million.build_corpus(tmp_path / "three", 700, 6, sources)

    files = _files(tmp_path / "one")
    assert files == _files(tmp_path / "two")
    assert files != _files(tmp_path / "three")
    assert first == again and first["files"] == len(files) == other["files"] == 700
    assert {Path(path).suffix for path in files} <= {".md", ".txt", ".rst"}
    per_folder: dict[str, int] = {}
    for path in files:
        per_folder[str(Path(path).parent)] = per_folder.get(str(Path(path).parent), 0) + 1
    assert all(10 <= count <= 109 for count in per_folder.values()), per_folder
    assert all(1 <= folder.count("/") + 1 <= 6 for folder in per_folder)
    assert first["folders"] == len(per_folder)


def test_the_run_reports_what_it_measured(tmp_path: Path) -> None:
    million = _load("million")
    docs, collections = _sources(tmp_path)

    report = million.run(tmp_path / "out", 250, 1, docs, collections, repeat=2, rescans=2,
                         steps=("index", "rescan", "watching"), lower_limit=False)

    assert report["build"]["files"] == 250 and not report["build"]["reused"]
    index = report["index"]
    assert index["daemon"]["s"] > 0 and index["floor"]["s"] > 0 and index["index_mb"] >= 0
    assert index["daemon"]["tree_rss_mb"] >= index["daemon"]["largest_rss_mb"] > 0
    assert report["rescan"]["files_read_in_last_rescan"] == 0
    watching = report["watching"]
    assert watching["server"]["watching"]["active"] and watching["server"]["watching"]["folders"] == watching["folders"]
    assert set(report["steps"]) == {"build", "index", "rescan", "watching"}
    lines = list(million.table(report))
    assert any(line.startswith("| full index |") for line in lines)
    assert any(line.startswith("| watching |") for line in lines)
    again = million.run(tmp_path / "out", 250, 1, docs, collections, repeat=2, rescans=2, steps=("rescan",))
    assert again["build"]["reused"]
