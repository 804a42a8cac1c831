"""Searches keep answering, with zero errors, while the daemon runs a full index of a
large corpus and then a stream of edits; p99 latency is reported (not asserted)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from reliability_helpers import RelCorpus, RelStdioServer, rel_check_index, rel_db_path

from exceptions import IndexUnavailableError
from search import search

CORPUS_FILES = 8000
EDIT_SECONDS = 8.0
SEARCH_THREADS = 2


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_searches_never_fail_during_full_index_and_edits(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "src", tmp_path / "idx"
    source.mkdir()
    corpus = RelCorpus(source, random.Random(66))
    for _ in range(CORPUS_FILES):
        corpus.add(paragraphs=2)
    db = rel_db_path(source, index_dir)
    corpus_lock = threading.Lock()
    tokens = [list(corpus.live_tokens())]  # a snapshot, replaced by the editor after each change
    stop = threading.Event()
    errors: list[str] = []
    latencies: list[float] = []
    during_index = [0]

    def searcher(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            query = rng.choice([rng.choice(tokens[0]), "river stone", "lantern*", '"maple harbor"'])
            started = time.perf_counter()
            try:
                search(db, query, 10)
            except IndexUnavailableError as exc:
                if "no index yet" not in str(exc) and "not initialised" not in str(exc):
                    errors.append(f"{query}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - any failure is what this test counts
                errors.append(f"{query}: {type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)

    def editor() -> None:
        while not stop.is_set():
            with corpus_lock:
                corpus.mutate(n_edits=20, n_deletes=3, n_adds=5)
                tokens[0] = list(corpus.live_tokens())
            time.sleep(0.05)

    mcp_latencies: list[float] = []
    args = ("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "1")
    with RelStdioServer(*args, timeout=180) as server:
        threads = [threading.Thread(target=searcher, args=(n,), daemon=True) for n in range(SEARCH_THREADS)]
        for thread in threads:
            thread.start()
        edits = threading.Thread(target=editor, daemon=True)
        first_index_done = False
        edits_started = 0.0
        rng = random.Random(67)
        while True:
            query = rng.choice(tokens[0])
            started = time.perf_counter()
            result = server.call("search", {"query": query})
            if result["isError"]:
                text = result["content"][0]["text"]
                if "no index yet" not in text and "not initialised" not in text:
                    errors.append(f"mcp {query}: {text}")
            else:
                mcp_latencies.append(time.perf_counter() - started)
                during_index[0] += int(result["structuredContent"].get("indexing", False))  # #23: left out when false
            if not first_index_done and server.status()["indexed_files"] >= CORPUS_FILES:
                first_index_done = True
                edits_started = time.monotonic()
                edits.start()
            if first_index_done and time.monotonic() - edits_started > EDIT_SECONDS:
                break
        stop.set()
        for thread in [*threads, edits]:
            thread.join(60)
        assert not any(thread.is_alive() for thread in [*threads, edits]), "a search or edit thread hung"
        assert not server.call("refresh_index")["isError"]
        assert server.close() == 0
    assert errors == [], errors[:10]
    rel_check_index(db, corpus, complete=True)
    assert during_index[0] > 0, "no search was answered while the first index ran"
    print(
        f"\nRELIABILITY concurrency: {len(latencies)} direct searches ({SEARCH_THREADS} threads) +"
        f" {len(mcp_latencies)} MCP searches ({during_index[0]} during the first index) over"
        f" {CORPUS_FILES} files and {len(corpus.dead)} edits/deletes, 0 errors;"
        f" direct p50 {percentile(latencies, 0.5) * 1000:.1f} ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms,"
        f" max {max(latencies) * 1000:.1f} ms; MCP p50 {percentile(mcp_latencies, 0.5) * 1000:.1f} ms,"
        f" p99 {percentile(mcp_latencies, 0.99) * 1000:.1f} ms, max {max(mcp_latencies) * 1000:.1f} ms"
    )
