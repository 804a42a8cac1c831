"""The benchmark harness runs end to end on a tiny corpus and reports every measurement.

No timing is asserted: a benchmark is not a test.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_harness_reports_every_measurement(tmp_path: Path) -> None:
    make_corpus, run = _load("make_corpus"), _load("run")
    corpus = tmp_path / "corpus"
    make_corpus.write_corpus(corpus, 60, seed=3)
    again = tmp_path / "again"
    make_corpus.write_corpus(again, 60, seed=3)
    assert (corpus / make_corpus.relative_path(7)).read_bytes() == (again / make_corpus.relative_path(7)).read_bytes()

    report = run.run(corpus, tmp_path / "work", repeat=2, quick=True)

    assert report["corpus"]["text_files"] == 60
    for key in ("floor_s", "daemon_s", "ratio", "files_per_s", "mb_per_s", "floor_peak_rss_mb", "daemon_peak_rss_mb"):
        assert report["index"][key] > 0, key
    for key in ("floor_s", "daemon_s", "ratio"):
        assert report["rescan"][key] > 0, key
    assert report["rescan"]["files_read_in_last_rescan"] == 0
    assert report["size"]["index_bytes"] > 0 and report["size"]["ratio"] > 0
    assert report["changed_file"]["n"] == 2 and report["changed_file"]["median_ms"] > 0
    assert set(report["cli_search_ms"]) == {"common", "rare"}
    assert set(report["queries"]) == set(run.QUERY_CLASSES)
    for name, query in report["queries"].items():
        assert query["results"] > 0, name
        for column in ("floor_ms", "search_ms", "mcp_ms"):
            assert set(query[column]) >= {"p50", "p95", "p99"}, (name, column)
    assert (corpus / report["changed_file"]["file"]).read_bytes() == (again / report["changed_file"]["file"]).read_bytes()
    run.print_table(report)
    assert report["machine"]["load_start"] and report["machine"]["load_end"]


def test_index_ab_alternates_checkouts_with_the_floor(tmp_path: Path) -> None:
    make_corpus, index_ab = _load("make_corpus"), _load("index_ab")
    make_corpus.write_corpus(tmp_path / "corpus", 30, seed=4)

    summary = index_ab.compare(tmp_path / "corpus", tmp_path, {"this": index_ab.REPO}, rounds=2)

    assert len(summary["floor_s"]) == 2 and summary["load_end"]
    this = summary["codes"]["this"]
    assert len(this["runs"]) == 2 and this["ratio"] > 0 and this["cpu_ratio"] > 0 and this["bound"] > 0


def test_harness_names_corpora_and_rotates_turns(tmp_path: Path) -> None:
    harness = _load("harness")
    assert harness.corpus(tmp_path) == tmp_path.resolve()
    assert [harness.rotated(["floor", "a", "b"], turn)[0] for turn in range(4)] == ["floor", "a", "b", "floor"]
    order: list[str] = []
    results = harness.alternated(2, {"floor": lambda: order.append("floor"), "a": lambda: order.append("a")})
    assert order == ["floor", "a", "a", "floor"] and set(results) == {"floor", "a"}
    assert not harness.SPEED.is_relative_to(harness.REPO)  # corpora and indexes never go into the repository


def test_breakdown_times_every_stage(tmp_path: Path) -> None:
    make_corpus, breakdown = _load("make_corpus"), _load("breakdown")
    make_corpus.write_corpus(tmp_path / "corpus", 40, seed=5)
    paths = sorted(path.relative_to(tmp_path / "corpus").as_posix() for path in (tmp_path / "corpus").rglob("*") if path.is_file())

    stages, files, rows = breakdown.one_run(tmp_path / "corpus", paths)

    assert 0 < files <= 40 and rows >= files
    names = {stage for _, stage in stages.seconds}
    assert {"read and hash", "split into sections", "compress", "sketch", "pickle a chunk", "unpickle a chunk",
            "upsert_file (all its SQL)", "  of which the FTS5 insert", "COMMIT", "whole bench/floor.py"} <= names


def test_same_replies_finds_a_changed_reply_and_none_between_a_checkout_and_itself(tmp_path: Path) -> None:
    make_corpus, same = _load("make_corpus"), _load("same_replies")
    corpus = tmp_path / "corpus"
    make_corpus.write_corpus(corpus, 30, seed=5)
    queries = tmp_path / "queries.json"
    words = [word for path in sorted(corpus.rglob("*.md"))[:3] for word in path.read_text().split()[2:4]]
    queries.write_text(json.dumps([*words, "how do I find these words?"]))
    (tmp_path / "idx").mkdir()
    db = same.build_index(same.REPO, corpus, tmp_path / "idx")
    asked = json.loads(queries.read_text())
    before = same.replies(same.REPO, db, corpus, queries)
    assert any(reply["results"] for reply in before)
    assert same.differing(asked, before, same.replies(same.REPO, db, corpus, queries)) == []
    changed = [dict(reply) for reply in before]
    changed[1]["results"] = list(reversed(changed[1]["results"])) + [{"path": "other.md"}]
    assert [query for query, _, _ in same.differing(asked, before, changed)] == [asked[1]]
