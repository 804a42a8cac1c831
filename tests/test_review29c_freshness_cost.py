"""Review of 1403a31 (#25): when files found gone are grouped again from scratch, each regrouping
may expose a single new file to check. Deep in the pages (offset near MAX_OFFSET), with many
deleted files ranked just after the live ones, that is one whole regrouping per deleted file:
quadratic, and in Python, where neither the search's time limit nor its cancellation is polled.
Measured (4,000 ranked, offset 1000, 1,000 gone): 8.7 s without collapsing, 16 s with, against
0.05 s / 1.4 s before the change; 3,000 gone: "stopped after 10 s" after 20 s / 46 s."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import search as search_module
from indexer import TextIndexer
from models import ServerConfig
from search import Freshness, search
from tests.conftest import write

LIVE, GONE, OFFSET = 201, 300, 200


def body(n: int, times: int) -> str:
    return f"# T{n}\n\n" + "walrus " * times + " ".join(f"w{n}x{i}" for i in range(20)) + f"\nuniq{n}\n"


@pytest.mark.parametrize("collapse", [False, True])
def test_many_gone_files_after_a_deep_page_cost_few_regroupings(
    source: Path, indexer: TextIndexer, config: ServerConfig, monkeypatch: pytest.MonkeyPatch, collapse: bool
) -> None:
    write(source, "top.md", body(99_999, 8))  # the best file, gone: the first pass comes up one short
    for n in range(LIVE):
        write(source, f"live/l{n:04}.md", body(n, 5))
    for n in range(GONE):
        write(source, f"gone/g{n:04}.md", body(10_000 + n, 1))
    indexer.scan()
    (source / "top.md").unlink()
    shutil.rmtree(source / "gone")
    calls = []
    real = search_module._groups
    monkeypatch.setattr(search_module, "_groups", lambda *a, **k: calls.append(1) or real(*a, **k))
    reply = search(config.db_path, "walrus", 1, offset=OFFSET, collapse_duplicates=collapse,
                   freshness=Freshness(config.source_directory))
    assert [hit["path"] for hit in reply["results"]][0].startswith("live/")
    assert not reply["has_more"] and reply["next_offset"] is None
    # one regrouping per gone file found one at a time (~GONE) is the blow-up; a few dozen is fine
    assert len(calls) <= 40, f"{len(calls)} regroupings for {GONE} gone files"
