"""Ranking a large index in spans of file ids on several threads gives exactly the answer of
ranking it whole, and never mixes two versions of the index."""

from __future__ import annotations

import itertools
import random
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import database
import index_queries
import search
from index_writer import IndexWriter
from indexer import TextIndexer
from tests.conftest import write

VOCABULARY = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()


@pytest.fixture
def many_files(source: Path, indexer: TextIndexer) -> Path:
    """60 files of Zipf-ish words; some long enough for several sections; exact duplicates spread
    over the folders (so over the spans), whose equal scores must be ordered alike by both ways."""
    rng = random.Random(7)
    weights = [1 / (rank + 1) for rank in range(len(VOCABULARY))]
    for n in range(50):
        paragraphs = 80 if n % 10 == 0 else 3
        text = "\n\n".join(
            f"## part {p}\n\n" + " ".join(rng.choices(VOCABULARY, weights, k=40)) + (" rare words here" if n == 17 else "")
            for p in range(paragraphs)
        )
        write(source, f"dir{n % 4}/file{n:02d}.md", f"# File {n}\n\n{text}\n")
    for n in range(10):
        write(source, f"dir{n % 4}/copy{n}.md", "# Same\n\nalpha beta alpha gamma copyword\n")
    indexer.scan()
    return indexer.config.db_path


def files_matching(match: str) -> Callable[[sqlite3.Connection, index_queries.Span], int]:
    """Work for search._over_parts: how many files in a span match ``match``."""

    def count(part: sqlite3.Connection, span: index_queries.Span) -> int:
        return index_queries.count_matching_files(part, match, span)

    return count


QUERIES = [
    "alpha",  # in nearly every file
    "omega",
    "alpha beta",  # AND-ed, counted in one pass
    '"alpha beta"',  # a phrase
    "sig*",
    "rare zeta",  # AND finds one file: files with only some of the words fill up
    "alpha -omega",
    "what is the meaning of lambda theta kappa and sigma?",  # a question
    "copyword",  # ten files with equal scores
    "nothingmatches",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("limit", [1, 7, 100])
def test_ranking_in_parts_gives_the_answer_of_ranking_the_whole_index(
    many_files: Path, monkeypatch: pytest.MonkeyPatch, query: str, limit: int
) -> None:
    whole = search.search(many_files, query, limit)
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    in_parts = search.search(many_files, query, limit)
    assert in_parts == whole
    if query != "nothingmatches":
        assert whole["results"]


def test_a_question_matching_many_files_is_ranked_in_parts_too(many_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "FEEDBACK_MAX_FILES", 0)  # take the no-feedback path for a question
    counts = []
    real = index_queries.count_matching_files
    monkeypatch.setattr(index_queries, "count_matching_files", lambda *args: counts.append(args) or real(*args))
    query = QUERIES[7]
    whole = search.search(many_files, query, 10)
    assert len(counts) == 1  # counted once, not again while ranking
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 4)
    assert search.search(many_files, query, 10) == whole
    assert whole["files_matched"] > 10


def test_spans_cover_every_file_once(many_files: Path) -> None:
    conn = database.reader(many_files)
    spans = index_queries.file_spans(conn, 3)
    assert len(spans) == 3
    assert spans[0][0] == 0 and spans[-1][1] == index_queries.EVERY_ROW[1]
    assert all(low < high == next_low for (low, high), (next_low, _) in itertools.pairwise(spans))
    ids = [row[0] for row in conn.execute("SELECT id FROM sections")]
    assert sorted(ids) == sorted(i for low, high in spans for i in ids if low <= i < high)
    assert index_queries.file_spans(conn, 1) == [index_queries.EVERY_ROW]


def test_only_queries_estimated_to_match_many_sections_are_ranked_in_parts(
    many_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    conn = database.reader(many_files)
    rows = conn.execute("SELECT count(*) FROM sections_fts WHERE sections_fts MATCH 'alpha'").fetchone()[0]
    assert rows / 2 < index_queries.estimated_matching_rows(conn, '("alpha")', 4) < rows * 2
    estimate = index_queries.estimated_matching_rows(conn, '("alpha")', search.PARALLEL_SAMPLE)
    assert index_queries.estimated_matching_rows(conn, '("nothingmatches")', 4) == 0
    files = files_matching('("alpha")')
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", estimate + 1)
    assert len(search._over_parts(search.Searching(many_files, conn), '("alpha")', files)) == 1
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", estimate)
    parts = search._over_parts(search.Searching(many_files, conn), '("alpha")', files)
    assert len(parts) == 3 and sum(parts) == index_queries.count_matching_files(conn, '("alpha")')


def test_parts_that_see_a_newer_index_are_dropped_for_one_ranking_of_the_callers_snapshot(
    many_files: Path, source: Path, indexer: TextIndexer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    conn = database.reader(many_files)
    count = files_matching('("fresh")')
    with database.snapshot(conn):
        assert index_queries.count_matching_files(conn, '("fresh")') == 0
        write(source, "dir0/new.md", "# New\n\nfresh words\n")
        indexer.scan()  # commits while the caller's snapshot is open: other threads see the new file
        assert search._over_parts(search.Searching(many_files, conn), '("fresh")', count) == [0]  # one answer, from the caller's snapshot
    assert sum(search._over_parts(search.Searching(many_files, conn), '("fresh")', count)) == 1  # a new snapshot, in parts again
    assert len(search._over_parts(search.Searching(many_files, conn), '("fresh")', count)) == 3


def test_generation_changes_with_every_transaction_that_writes(many_files: Path, indexer: TextIndexer) -> None:
    conn = database.reader(many_files)
    before = index_queries.generation(conn)
    assert before is not None
    writer: IndexWriter = indexer.writer
    with writer.transaction():
        pass
    assert index_queries.generation(conn) == before
    with writer.transaction():
        writer.set_meta("note", "x")
    assert index_queries.generation(conn) != before


def test_the_fallback_that_groups_every_section_by_file_is_ranked_in_parts_too(
    many_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_queries, "CANDIDATE_SECTIONS_PER_FILE", 1)  # candidates then rarely hold enough files
    grouped = []
    real = index_queries.best_section_of_every_file

    def spy(conn, match, weights, limit, span=index_queries.EVERY_ROW, *rest):
        grouped.append(span)
        return real(conn, match, weights, limit, span, *rest)

    monkeypatch.setattr(index_queries, "best_section_of_every_file", spy)
    # Without collapsing copies, the ranking window is the files asked for (plus one).
    whole = search.search(many_files, "alpha", 7, collapse_duplicates=False)
    assert grouped == [index_queries.EVERY_ROW]
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    assert search.search(many_files, "alpha", 7, collapse_duplicates=False) == whole
    assert len(grouped) > 1 and index_queries.EVERY_ROW not in grouped[1:]


@pytest.mark.parametrize("match", ['("alpha")', '("alpha" AND "beta")', '("alpha beta")', '("copyword")', '("omega")'])
@pytest.mark.parametrize("limit", [1, 7, 100])
def test_one_pass_ranking_equals_ranking_candidates_first(many_files: Path, match: str, limit: int) -> None:
    conn = database.reader(many_files)
    one_pass = index_queries.best_section_of_every_file(conn, match, search.COLUMN_WEIGHTS, limit)
    assert [(rowid, score) for rowid, score, _ in one_pass] == index_queries.best_section_per_file(
        conn, match, search.COLUMN_WEIGHTS, limit
    )
    assert {count for _, _, count in one_pass} == {index_queries.count_matching_files(conn, match)}


def test_sections_are_loaded_in_the_order_asked_for_since_feedback_breaks_ties_by_it(many_files: Path) -> None:
    conn = database.reader(many_files)
    ids = [row[0] for row in conn.execute("SELECT id FROM sections ORDER BY id")]
    wanted = ids[::-3] + [(1 << 40)]  # descending, and one that does not exist
    assert list(index_queries.load_sections(conn, wanted)) == ids[::-3]


def test_parts_that_cannot_open_the_index_are_dropped(many_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    conn = database.reader(many_files)
    expected = index_queries.count_matching_files(conn, '("alpha")')
    count = files_matching('("alpha")')
    with database.snapshot(conn):
        many_files.rename(many_files.with_name("moved.sqlite3"))  # the open connection still reads it
        assert search._over_parts(search.Searching(many_files, conn), '("alpha")', count) == [expected]


def test_an_index_without_a_generation_is_never_split(many_files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    conn = database.reader(many_files)
    count = files_matching('("alpha")')
    assert len(search._over_parts(search.Searching(many_files, conn), '("alpha")', count)) == 3
    other = database.connect(many_files)  # as an index written before generations existed
    other.execute("DELETE FROM meta WHERE key = 'generation'")
    other.close()
    assert search._over_parts(search.Searching(many_files, conn), '("alpha")', count) == [index_queries.count_matching_files(conn, '("alpha")')]


def test_searches_in_parts_keep_answering_while_files_are_rewritten(
    many_files: Path, source: Path, indexer: TextIndexer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(search, "SEARCH_PARTS", 3)
    parts = {"ran": 0, "dropped": 0}
    real = search._work_in_span

    def counted(*args):
        result = real(*args)
        parts["dropped" if result is search._OTHER_GENERATION else "ran"] += 1
        return result

    monkeypatch.setattr(search, "_work_in_span", counted)
    stop = threading.Event()
    errors: list[str] = []
    replies = [0]

    def searcher(query: str) -> None:
        while not stop.is_set():
            try:
                reply = search.search(many_files, query, 7)
            except Exception as exc:  # noqa: BLE001 - any failure is what this test counts
                errors.append(f"{query}: {type(exc).__name__}: {exc}")
                continue
            scores = [hit["score"] for hit in reply["results"]]
            if scores != sorted(scores, reverse=True) or reply["files_matched"] < len(scores) or not scores:
                errors.append(f"{query}: inconsistent reply {reply}")
            replies[0] += 1

    threads = [threading.Thread(target=searcher, args=(query,)) for query in ("alpha", '"alpha beta"', QUERIES[7])]
    for thread in threads:
        thread.start()
    files = sorted(source.rglob("*.md"))
    rng = random.Random(3)
    for round_ in range(15):
        for path in rng.sample(files, 5):
            path.write_text(path.read_text() + f"\n\nalpha beta edit{round_}\n")
        indexer.scan()
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert replies[0] > 0 and parts["ran"] > 0
