"""Crash safety: SIGKILL `main.py index` at random moments, during a first index and during
updates (edits, deletes and adds between kills). After every kill the database passes
integrity_check and no file is half indexed; after a final run the index equals the disk."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from reliability_helpers import RelCorpus, rel_check_index, rel_db_path, rel_integrity, rel_popen_index, rel_run_main

CORPUS_FILES = 2500
KILLS_PER_PHASE = 12
HANG_TIMEOUT = 120


def kill_at_random(source: Path, index_dir: Path, rng: random.Random, latest: float) -> bool:
    """Start an index run and SIGKILL it after a random delay; True if it was still running."""
    proc = rel_popen_index(source, index_dir)
    time.sleep(rng.uniform(0.25, latest))
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    try:
        proc.communicate(timeout=HANG_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("main.py index did not exit") from None
    return killed


def check_after_kill(db_path: Path, corpus: RelCorpus) -> int:
    if not db_path.exists() or not has_tables(db_path):
        return 0  # killed before the database, or its schema (one transaction), was created
    assert rel_integrity(db_path) == "ok"
    return rel_check_index(db_path, corpus, complete=False)["files"]


def has_tables(db_path: Path) -> bool:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] > 0
    finally:
        conn.close()


def test_sigkill_during_first_index_and_updates_never_leaves_a_half_indexed_file(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    source.mkdir()
    corpus = RelCorpus(source, rng)
    for _ in range(CORPUS_FILES):
        corpus.add()
    db_path = rel_db_path(source, index_dir)

    first_kills, partial_states = 0, 0
    while first_kills < KILLS_PER_PHASE:
        if kill_at_random(source, index_dir, rng, latest=1.6):
            first_kills += 1
            indexed = check_after_kill(db_path, corpus)
            partial_states += int(0 < indexed < len(corpus.versions))
        else:  # the run finished before the kill: start the first index over
            for leftover in index_dir.glob("*"):
                leftover.unlink()

    assert rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir)).returncode == 0
    rel_check_index(db_path, corpus, complete=True)

    update_kills, runs = 0, 0
    while update_kills < KILLS_PER_PHASE:
        corpus.mutate(n_edits=500, n_deletes=120, n_adds=120)
        runs += 1
        if kill_at_random(source, index_dir, rng, latest=1.0):
            update_kills += 1
            check_after_kill(db_path, corpus)

    final = rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir))
    assert final.returncode == 0, final.stderr
    assert rel_integrity(db_path) == "ok"
    checked = rel_check_index(db_path, corpus, complete=True)
    assert checked["files"] == len(corpus.versions)
    print(
        f"\nRELIABILITY crash: {first_kills} kills during a first index ({partial_states} left a partial index),"
        f" {update_kills} kills during {runs} update runs; {len(corpus.versions)} files on disk,"
        f" {len(corpus.dead)} dead tokens, all checks ok"
    )
