"""Ranking: the relevance harness computes its metrics right, and keyword queries of 1-3 words
rank exactly as a plain FTS5 table queried with the AND of the words."""

from __future__ import annotations

import importlib.util
import random
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import database  # noqa: E402
from index_writer import IndexWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig  # noqa: E402
from search import UNWEIGHED_SCORE, search  # noqa: E402


def _load_relevance():
    spec = importlib.util.spec_from_file_location("bench_relevance", ROOT / "bench" / "relevance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


relevance = _load_relevance()


# ---- the harness -----------------------------------------------------------------------------


def test_metrics_of_known_rankings() -> None:
    grades = {"a": 3, "b": 1, "c": 0}
    assert relevance.ndcg_at(["a", "b", "x"], grades) == pytest.approx(1.0)
    assert relevance.ndcg_at(["b", "a"], grades) == pytest.approx((1 + 3 / 1.5849625) / (3 + 1 / 1.5849625), rel=1e-6)
    assert relevance.ndcg_at(["c", "x"], grades) == 0.0
    assert relevance.recall_at(["x", "a"], grades) == 0.5
    assert relevance.recall_at(["x"] * 100 + ["a"], grades) == 0.0  # beyond the depth
    assert relevance.mrr_at(["c", "x", "b"], grades) == pytest.approx(1 / 3)
    assert relevance.mrr_at(["x"] * 10 + ["a"], grades) == 0.0


def _write_collection(root: Path) -> Path:
    docs = root / "tiny" / "docs"
    docs.mkdir(parents=True)
    texts = {
        "1": "Wing flutter\nflutter of a swept wing at transonic speed",
        "2": "Boundary layers\nlaminar boundary layer on a flat plate",
        "3": "Heat transfer\nheat conduction in composite slabs",
        "4": "Catalogues\nsubject catalogues of a public library",
        "5": "Shock waves\nshock wave and boundary layer interaction",
    }
    for doc_id, text in texts.items():
        (docs / f"{doc_id}.txt").write_text(text + "\n", encoding="utf-8")
    (root / "tiny" / "queries.tsv").write_text(
        "q1\tflutter of swept wings\nq2\tlaminar boundary layer\nq3\tnothing judged here\nq4\tzeppelin mooring masts\n",
        encoding="utf-8",
    )
    (root / "tiny" / "qrels.tsv").write_text("q1\t1\t2\nq2\t2\t1\nq2\t5\t1\nq3\t3\t0\nq4\t4\t1\n", encoding="utf-8")
    return root / "tiny"


def test_harness_scores_a_collection_end_to_end(tmp_path: Path) -> None:
    collection = _write_collection(tmp_path)
    summary, scores = relevance.evaluate_collection(collection, tmp_path / "index")
    by_id = {s.query_id: s for s in scores}
    assert summary.queries == 3 and summary.unjudged == 1  # q3 has no relevant document
    assert (by_id["q1"].ndcg, by_id["q1"].recall, by_id["q1"].mrr) == (pytest.approx(1.0), 1.0, 1.0)
    assert by_id["q2"].mrr == 1.0 and by_id["q2"].recall == 1.0  # doc 2 has all three words, doc 5 two
    assert (by_id["q4"].ndcg, by_id["q4"].recall, by_id["q4"].mrr) == (0.0, 0.0, 0.0)  # no file matches
    assert summary.ndcg == pytest.approx((1.0 + by_id["q2"].ndcg + 0.0) / 3)


def test_harness_command_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    collection = _write_collection(tmp_path)
    out = tmp_path / "scores.json"
    assert relevance.main([str(collection), "--index-dir", str(tmp_path / "index"), "--worst", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| tiny | 3 |" in printed and "worst 2 of tiny" in printed
    assert '"query_id": "q1"' in out.read_text(encoding="utf-8")


# ---- keyword queries: as precise as a plain FTS5 AND -----------------------------------------

VOCABULARY = [f"{stem}{suffix}" for stem in ("alpha", "brav", "charl", "delt", "ech", "foxtr", "golf", "hotel") for suffix in ("o", "ing")]


def _keyword_corpus(source: Path, files: int, rng: random.Random) -> dict[str, str]:
    """Files of one section each, no title (a first line longer than a title), so the daemon's rows
    hold exactly the text a plain single-column FTS5 table holds."""
    weights = [1 / (rank + 1) for rank in range(len(VOCABULARY))]
    texts = {}
    for n in range(files):
        words = rng.choices(VOCABULARY, weights, k=rng.randint(25, 120))
        text = " ".join(words) + "\n"
        assert len(text) > 121
        texts[f"f{n:03d}.txt"] = text
        (source / f"f{n:03d}.txt").write_text(text, encoding="utf-8")
    return texts


def test_keyword_queries_rank_as_plain_fts5_and(tmp_path: Path) -> None:
    rng = random.Random(11)
    source = tmp_path / "src"
    source.mkdir()
    texts = _keyword_corpus(source, 150, rng)
    config = ServerConfig(source_directory=source, index_output_directory=tmp_path / "index", scan_interval_seconds=0)
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    plain = sqlite3.connect(":memory:")
    plain.execute(f"CREATE VIRTUAL TABLE plain USING fts5(body, tokenize=\"{database.TOKENIZER}\")")
    names = sorted(texts)
    plain.executemany("INSERT INTO plain (rowid, body) VALUES (?, ?)", [(i, texts[name]) for i, name in enumerate(names)])

    queries = [" ".join(rng.sample(VOCABULARY, k)) for k in (1, 2, 3) for _ in range(15)]
    compared = 0
    for query in queries:
        match = " AND ".join(f'"{word}"' for word in query.split())
        expected = [
            (names[rowid], round(-score, 6))
            for rowid, score in plain.execute("SELECT rowid, bm25(plain) FROM plain WHERE plain MATCH ? ORDER BY bm25(plain)", (match,))
        ]
        got = [(hit["path"], hit["score"]) for hit in search(config.db_path, query, 10)["results"]]
        got = got[: len(expected)]  # files matching only some words may follow, below every full match
        if got and expected[0][1] < UNWEIGHED_SCORE:
            # FTS5 gave every word no weight: the daemon multiplies its scores by one factor
            # (search.with_weighed_words); compared here on FTS5's scale, unrounded.
            raw = [-score for _, score in plain.execute("SELECT rowid, bm25(plain) FROM plain WHERE plain MATCH ? ORDER BY bm25(plain)", (match,))]
            factor = got[0][1] / raw[0]
            assert [score / factor for _, score in got] == pytest.approx(raw[: len(got)], rel=1e-3)
            expected = [(path, score * factor) for (path, _), score in zip(expected, raw)]
        assert [score for _, score in got] == pytest.approx([score for _, score in expected[: len(got)]], rel=1e-3)
        for _, score in got:  # same files, in any order only among equal scores
            expected_files = {path for path, s in expected if s == pytest.approx(score, rel=1e-3)}
            got_files = {path for path, s in got if s == pytest.approx(score, rel=1e-3)}
            assert got_files <= expected_files, query
        assert len(got) == min(10, len(expected)), query
        compared += len(got)
    assert compared > 200  # the queries did find files to compare


# ---- questions -------------------------------------------------------------------------------


def _index(tmp_path: Path, files: dict[str, str]) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name, text in files.items():
        (source / name).write_text(text, encoding="utf-8")
    config = ServerConfig(source_directory=source, index_output_directory=tmp_path / "index", scan_interval_seconds=0)
    writer = IndexWriter(config.db_path)
    TextIndexer(config, writer).scan()
    writer.close()
    return config.db_path


FILLER = {f"other{n}.txt": f"notes {n}\n\ngardening soil compost tomato seedlings watering schedule {n}\n" for n in range(20)}
BUZZ = "aileron buzz at transonic speed: a flutter of the control surface; oscillation of the hinge moment\n"
QUESTION = "what is the mechanism of transonic aileron buzz and flutter"


def test_question_finds_a_file_through_feedback_words(tmp_path: Path) -> None:
    files = {f"buzz{n}.txt": f"report {n}\n\n{BUZZ}" for n in range(4)}
    files["hinge.txt"] = "measurements\n\nhinge moment oscillation recorded in the wind tunnel\n"
    db_path = _index(tmp_path, {**FILLER, **files})
    hits = search(db_path, QUESTION, 10)["results"]
    paths = [hit["path"] for hit in hits]
    assert sorted(paths[:4]) == sorted(f"buzz{n}.txt" for n in range(4))
    assert paths[4] == "hinge.txt"  # shares no word with the question, only with its best files
    assert "**aileron**" in hits[0]["snippet"] and "**hinge**" not in hits[0]["snippet"]  # the user's words
    assert "**hinge**" in hits[4]["snippet"]  # what found it
    assert search(db_path, QUESTION, 10) == search(db_path, QUESTION, 10)


def test_feedback_is_skipped_when_the_question_matches_too_many_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f"buzz{n}.txt": f"report {n}\n\n{BUZZ}" for n in range(4)}
    files["hinge.txt"] = "measurements\n\nhinge moment oscillation recorded in the wind tunnel\n"
    db_path = _index(tmp_path, {**FILLER, **files})
    monkeypatch.setattr("search.FEEDBACK_MAX_FILES", 3)
    reply = search(db_path, QUESTION, 10)
    assert sorted(hit["path"] for hit in reply["results"]) == sorted(f"buzz{n}.txt" for n in range(4))
    assert reply["files_matched"] == 4


def test_a_quoted_phrase_in_a_question_ranks_but_does_not_filter(tmp_path: Path) -> None:
    db_path = _index(tmp_path, {
        **FILLER,
        "phrase.txt": "flaps\n\nwing flaps lower the stall speed for landing\n",
        "words.txt": "flaps\n\nwing flaps change the lift at landing; speed and stall are discussed later\n",
        "nophrase.txt": "flaps\n\nwing flaps change the lift at landing\n",
    })
    paths = [hit["path"] for hit in search(db_path, 'how do wing flaps change "stall speed" at landing', 10)["results"]]
    assert paths[0] == "phrase.txt" and set(paths) == {"phrase.txt", "words.txt", "nophrase.txt"}
    keyword = [hit["path"] for hit in search(db_path, 'flaps "stall speed"', 10)["results"]]
    assert keyword == ["phrase.txt"]  # in a keyword query the phrase is required


def test_a_question_made_only_of_stopwords_finds_the_phrase(tmp_path: Path) -> None:
    db_path = _index(tmp_path, {
        **FILLER,
        "hamlet.txt": "hamlet\n\nto be, or not to be, that is the question\n",
        "shuffled.txt": "shuffled\n\nnot to be or to be\n",
    })
    assert [hit["path"] for hit in search(db_path, "to be or not to be", 10)["results"]][0] == "hamlet.txt"
