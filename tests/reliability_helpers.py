"""Helpers for the reliability tests: corpora with one unique token per file version, running
main.py as a real subprocess, and checking that the index file agrees with the disk."""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

MAIN_PY = PROJECT_DIR / "main.py"
SECTION_BITS = 20  # mirrors database.SECTION_BITS; asserted equal in rel_check_index

WORDS = (
    "river stone lantern orbit maple harbor cipher meadow quartz ember willow falcon granite velvet"
    " tundra copper saffron glacier thunder hollow prism canyon"
).split()


def rel_token(file_no: int, version: int) -> str:
    """A word that occurs in exactly one version of one file (letters only: one FTS5 token)."""
    def letters(n: int) -> str:
        out = ""
        while True:
            out = chr(ord("a") + n % 26) + out
            n //= 26
            if n == 0:
                return out
    return f"zq{letters(file_no)}x{letters(version)}qz"


def rel_body(file_no: int, version: int, rng: random.Random, paragraphs: int = 3) -> str:
    """Markdown text for one file version: a heading, prose, and the version's unique token in
    every paragraph (so every section of a split file carries it)."""
    token = rel_token(file_no, version)
    parts = [f"# Note {file_no}\n"]
    for _ in range(paragraphs):
        prose = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))
        parts.append(f"{prose} {token}\n")
    return "\n".join(parts)


@dataclass
class RelCorpus:
    """A source tree whose files each hold one live token; tokens of older versions are 'dead'."""

    root: Path
    rng: random.Random
    versions: dict[str, tuple[int, int]] = field(default_factory=dict)  # rel path -> (file_no, version)
    dead: dict[str, str] = field(default_factory=dict)  # dead token -> the path it used to be in
    next_no: int = 0

    def add(self, rel: str | None = None, paragraphs: int = 3) -> str:
        no = self.next_no
        self.next_no += 1
        rel = rel or f"d{no % 17}/n{no}.md"
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel_body(no, 0, self.rng, paragraphs), encoding="utf-8")
        self.versions[rel] = (no, 0)
        return rel

    def edit(self, rel: str) -> None:
        no, version = self.versions[rel]
        self.dead[rel_token(no, version)] = rel
        self.versions[rel] = (no, version + 1)
        (self.root / rel).write_text(rel_body(no, version + 1, self.rng), encoding="utf-8")

    def delete(self, rel: str) -> None:
        no, version = self.versions.pop(rel)
        self.dead[rel_token(no, version)] = rel
        (self.root / rel).unlink()

    def mutate(self, n_edits: int, n_deletes: int, n_adds: int) -> None:
        paths = sorted(self.versions)
        for rel in self.rng.sample(paths, min(n_edits, len(paths))):
            self.edit(rel)
        for rel in self.rng.sample(sorted(self.versions), min(n_deletes, len(self.versions))):
            self.delete(rel)
        for _ in range(n_adds):
            self.add()

    def live_tokens(self) -> dict[str, str]:
        return {rel_token(no, version): rel for rel, (no, version) in self.versions.items()}


def rel_corpus(root: Path, files: int, paragraphs: int, seed: int) -> RelCorpus:
    """A new RelCorpus of ``files`` notes of ``paragraphs`` paragraphs in the new folder ``root``."""
    root.mkdir()
    corpus = RelCorpus(root, random.Random(seed))
    for _ in range(files):
        corpus.add(paragraphs=paragraphs)
    return corpus


def rel_run_main(*args: str, timeout: float = 120, prefix: tuple[str, ...] = (), **kwargs) -> subprocess.CompletedProcess:
    """Run main.py with the venv's Python (after ``prefix``, e.g. rel_unprivileged()); fail the
    test on a hang rather than wait forever."""
    return subprocess.run(
        [*prefix, sys.executable, str(MAIN_PY), *args], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def rel_unprivileged() -> tuple[str, ...]:
    """A command prefix under which file permissions bind: as root, setpriv drops the capabilities
    that let root read and list anything (DAC override); for another user, nothing. Skips the
    calling test where root cannot drop them."""
    import pytest

    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv, so permissions cannot be made to bind")
    caps = "-dac_override,-dac_read_search"
    probe = subprocess.run([setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop capabilities here: {probe.stderr.decode(errors='replace').strip()}")
    return (setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}", "--")


def rel_popen_index(source: Path, index_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(index_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def rel_db_path(source: Path, index_dir: Path, **settings: object) -> Path:
    """The index file of ``source`` built with the default settings, or with ``settings``."""
    from models import ServerConfig

    return ServerConfig(source_directory=source.resolve(), index_output_directory=index_dir.resolve(), **settings).db_path


def rel_integrity(db_path: Path) -> str:
    """PRAGMA integrity_check plus FTS5's own integrity-check, through a fresh connection."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if verdict == "ok":
            conn.execute("INSERT INTO sections_fts (sections_fts) VALUES ('integrity-check')")
        return verdict
    finally:
        conn.close()


def rel_verdict(db_path: Path) -> str:
    """rel_integrity, or what a file too damaged to check raises ("database disk image is malformed")."""
    try:
        return rel_integrity(db_path)
    except sqlite3.DatabaseError as exc:
        return str(exc)


def rel_serving(*folders: Path, index_dir: Path, prefix: tuple[str, ...] = ()) -> RelStdioServer:
    """A server on these source folders (one or several), with no periodic rescan."""
    args = [arg for folder in folders for arg in ("--source", str(folder))]
    return RelStdioServer(*args, "--index-dir", str(index_dir), "--scan-interval", "0", prefix=prefix)


def rel_notes(folder: Path, count: int = 3) -> None:
    """``count`` short notes n0.md, n1.md, ... in ``folder``, each holding "heron"."""
    for number in range(count):
        path = folder / f"n{number}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {number}\n\nThe heron waits {number}.\n")


def rel_indexed(source: Path, index_dir: Path, files: int, seed: int = 7, paragraphs: int = 3) -> RelCorpus:
    """A corpus of ``files`` files of ``paragraphs`` paragraphs in ``source``, indexed once by
    `main.py index` into ``index_dir``."""
    source.mkdir()
    corpus = RelCorpus(source, random.Random(seed))
    for _ in range(files):
        corpus.add(paragraphs=paragraphs)
    done = rel_run_main("index", "--source", str(source), "--index-dir", str(index_dir))
    assert done.returncode == 0, done.stderr
    return corpus


def rel_status(*args: str) -> dict:
    """`main.py status ARGS --json`, parsed (it exits 1 in state error)."""
    done = rel_run_main("status", *args, "--json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def rel_short(status: dict) -> dict:
    """The fields of a status a failing assertion shows."""
    return {key: status.get(key) for key in ("state", "indexed_files", "errors_encountered", "last_error")}


def rel_wait_for_log(server: "RelStdioServer", text: str, count: int = 1) -> None:
    """Wait until the server's log holds ``text`` ``count`` times (its first scans, with no tool
    call, which would open a reader in the server, before the step under test)."""
    deadline = time.monotonic() + 120
    while server.stderr.count(text) < count:
        assert time.monotonic() < deadline and server.proc.poll() is None, server.stderr[-2000:]
        time.sleep(0.05)


def rel_check_index(db_path: Path, corpus: RelCorpus, *, complete: bool) -> dict[str, int]:
    """Assert that every indexed file is wholly one version and nothing else is searchable.

    For each row in ``files``: its section rows are exactly ``section_count``, their text holds
    exactly one of the file's version tokens, and the FTS index holds exactly that token for this
    file (no token of an older version, no half-deleted rows). With ``complete``: the set of
    indexed files equals the files on disk, each at its current version, and no dead token is in
    the FTS index at all.
    """
    import database

    assert database.SECTION_BITS == SECTION_BITS
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        files = conn.execute("SELECT id, path, section_count FROM files").fetchall()
        tokens_of_path: dict[str, set[str]] = {}
        for token, rel in corpus.dead.items():
            tokens_of_path.setdefault(rel, set()).add(token)
        for token, rel in corpus.live_tokens().items():
            tokens_of_path.setdefault(rel, set()).add(token)
        # Every version token the FTS index holds, and the files it points at, in one pass.
        conn.execute("CREATE VIRTUAL TABLE temp.rel_vocab USING fts5vocab(main, sections_fts, instance)")
        fts_files: dict[str, set[int]] = {}
        for term, rowid in conn.execute("SELECT term, doc FROM temp.rel_vocab WHERE term GLOB 'zq*qz'"):
            fts_files.setdefault(term, set()).add(rowid >> SECTION_BITS)
        tokens_in_fts_of_file: dict[int, set[str]] = {}
        for term, ids in fts_files.items():
            for file_id in ids:
                tokens_in_fts_of_file.setdefault(file_id, set()).add(term)

        indexed: dict[str, str] = {}
        for file_id, rel, section_count in files:
            low, high = file_id << SECTION_BITS, ((file_id + 1) << SECTION_BITS) - 1
            bodies = [zlib.decompress(b).decode() for (b,) in conn.execute(
                "SELECT body FROM sections WHERE id BETWEEN ? AND ?", (low, high))]
            assert len(bodies) == section_count, f"{rel}: {len(bodies)} section rows, files says {section_count}"
            text = "\n".join(bodies)
            held = {t for t in tokens_of_path.get(rel, ()) if t in text}
            assert len(held) == 1, f"{rel}: holds tokens {held}, expected exactly one version"
            token = held.pop()
            assert fts_files.get(token) == {file_id}, f"{rel}: token {token} in FTS for files {fts_files.get(token)}"
            assert tokens_in_fts_of_file.get(file_id) == {token}, f"{rel}: FTS holds {tokens_in_fts_of_file.get(file_id)}"
            indexed[rel] = token
        assert set(tokens_in_fts_of_file) <= {file_id for file_id, _, _ in files}, "FTS rows of files not in the index"
        if complete:
            live = corpus.live_tokens()
            assert set(indexed) == set(live.values()), (
                f"missing {sorted(set(live.values()) - set(indexed))[:5]}, extra {sorted(set(indexed) - set(live.values()))[:5]}"
            )
            for token, rel in live.items():
                assert indexed[rel] == token, f"{rel}: indexed {indexed[rel]}, disk has {token}"
            found_dead = sorted(set(corpus.dead) & set(fts_files))
            assert not found_dead, f"dead tokens still searchable: {found_dead[:5]}"
        return {"files": len(files)}
    finally:
        conn.close()


def rel_mount_tmpfs(path: Path, size: str) -> bool:
    """Mount a size-limited tmpfs at ``path`` (root only); False if the machine does not allow it."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def rel_umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


class RelStdioServer:
    """main.py serve as a real subprocess spoken to in raw JSON-RPC lines, so the test sees every
    byte the server writes to stdout (each must be a JSON-RPC message) and all of its stderr."""

    def __init__(self, *args: str, timeout: float = 60, prefix: tuple[str, ...] = ()) -> None:
        from mcp.types import LATEST_PROTOCOL_VERSION

        self.timeout = timeout
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, str(MAIN_PY), "serve", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.stdout_lines: list[bytes] = []
        self.stderr_chunks: list[bytes] = []
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 1

        def pump_stdout() -> None:
            for line in self.proc.stdout:
                self.stdout_lines.append(line)
                self._lines.put(line)
            self._lines.put(None)

        def pump_stderr() -> None:
            for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
                self.stderr_chunks.append(chunk)

        threading.Thread(target=pump_stdout, daemon=True).start()
        threading.Thread(target=pump_stderr, daemon=True).start()
        self.request("initialize", {
            "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "reliability-tests", "version": "1"},
        })
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        """Send one request and return its response (skipping notifications); fail on a hang."""
        request_id = self._next_id
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no reply to {method} within {self.timeout}s; stderr: {self.stderr[-2000:]}") from None
            if line is None:
                raise AssertionError(f"server exited (rc={self.proc.wait()}) during {method}; stderr: {self.stderr[-2000:]}")
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    def call(self, tool: str, arguments: dict | None = None) -> dict:
        """A tools/call result: {'isError': bool, 'structuredContent': ..., 'content': [...]}."""
        reply = self.request("tools/call", {"name": tool, "arguments": arguments or {}})
        assert "result" in reply, f"JSON-RPC error for {tool}: {reply}"
        return reply["result"]

    def status(self) -> dict:
        return self.call("get_index_status")["structuredContent"]

    def wait_for_scan(self) -> dict:
        """Poll status until a scan has finished (or the server reports an error state)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status["state"] in ("error", "idle"):  # idle: the scan is done (#23: progress only while indexing)
                return status
            time.sleep(0.05)
        raise AssertionError(f"first scan did not finish within {self.timeout}s: {status}")

    @property
    def stderr(self) -> str:
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def close(self) -> int:
        """Close stdin (the client went away), wait for exit, and check stdout held only JSON-RPC."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            code = self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("server did not exit after stdin closed") from None
        for line in self.stdout_lines:
            message = json.loads(line)
            assert message.get("jsonrpc") == "2.0", f"not a JSON-RPC message on stdout: {line[:200]!r}"
        return code

    def __enter__(self) -> "RelStdioServer":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

