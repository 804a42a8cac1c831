"""Reading files for the index: loading each into a LoadedFile, in loader processes when there are many.

Loading (read, hash, decode or extract, split, compress) is Python code; in the writer's process it
would share one core with SQLite's inserts through the GIL. load_files runs it in LOADER_PROCESSES
processes, started isolated (LOADER_COMMAND) and fed chunks of files, while the writer inserts;
what they send back is unpickled by a class that only lets through the records they send.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import typing_extensions

import database
from config import USABLE_CPUS
from exceptions import FileSkipped, SourceUnavailableError, reason_of
from file_utils import NOT_THE_INDEXED_FOLDER, expected_source, read_regular_file, reading_from
from models import DiskFile, LoadedFile, ServerConfig
from copies import sketch
from markup import front_matter_tags
from sections import file_content, said_key, sections

logger = logging.getLogger(__name__)


#: Loading (read, hash, decode, split, compress) is Python code; on a single thread it would share
#: one core with the writer. A scan with this many files to read loads them in LOADER_PROCESSES
#: processes, a chunk of CHUNK_FILES files or CHUNK_BYTES at a time, while the writer inserts.
PROCESS_LOADING_MIN_FILES = 200
LOADER_PROCESSES = USABLE_CPUS
CHUNK_FILES = 64
CHUNK_BYTES = 1 << 20
#: Loading runs at most this far ahead of the writer, so it goes on during a commit.
READ_AHEAD_BYTES = 32 << 20


class Reading(NamedTuple):
    """How files are read: the size limit, and whether notebook outputs are text too."""

    max_bytes: int
    notebook_outputs: bool = False


def reading(config: ServerConfig) -> Reading:
    """How files are read under ``config``."""
    return Reading(config.max_file_size_bytes, config.index_notebook_outputs)


def load_file(root: Path, rel: str, how: Reading) -> LoadedFile:
    """Read, extract or decode, and split one file; raise FileSkipped when it cannot or must not be indexed."""
    raw = read_regular_file(root, rel, how.max_bytes)
    content = file_content(rel, raw.data, how.notebook_outputs, max_text=how.max_bytes)
    rows = [
        (s.start_line, s.end_line, s.heading, database.indexed_text(s.body), database.compress(s.body), said_key(s.body),
         database.outline_text(s.outline))
        for s in sections(content)
    ]
    return LoadedFile(
        path=rel, mtime_ns=raw.mtime_ns, size=raw.size, inode=raw.inode, ctime_ns=raw.ctime_ns, content_hash=raw.content_hash,
        read_at_ns=raw.read_at_ns, encoding=content.encoding, fallback_decoded=content.fallback_decoded, title=content.title,
        sections=rows, sketch=sketch(content.text), tags=front_matter_tags(content.padded),
    )


def load_or_skip(root: Path, rel: str, how: Reading) -> LoadedFile | FileSkipped:
    try:
        return load_file(root, rel, how)
    except FileSkipped as skipped:
        return skipped
    except SourceUnavailableError:  # the source is another folder now: the scan stops before its next commit
        return FileSkipped(rel, "unavailable", NOT_THE_INDEXED_FOLDER)
    except Exception as exc:  # noqa: BLE001 - a file the code did not foresee must not stop the scan
        logger.exception("reading %r failed", rel)
        return FileSkipped(rel, "unreadable", f"reading it failed: {type(exc).__name__}: {reason_of(exc)[:200]}")


def load_chunk(root: Path, paths: list[str], how: Reading) -> list[LoadedFile | FileSkipped]:
    """What a loader process runs: a chunk of files at a time, to keep the cost per task small."""
    return [load_or_skip(root, rel, how) for rel in paths]


def run_loader() -> None:
    """A loader process's main: read (root, chunks, reading) from stdin, then write each chunk's
    results to stdout, pickled, in order. A full pipe pauses it; a closed one (the writer's process
    is gone) ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the writer's process to handle
    root, chunks, how, expected = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    try:
        with reading_from(expected):  # the folder the scan reads, as in the writer's process
            for paths in chunks:
                pickle.dump(load_chunk(Path(root), paths, Reading(*how)), out, pickle.HIGHEST_PROTOCOL)
                out.flush()
    except BrokenPipeError:
        os._exit(0)


def _chunks(files: list[DiskFile]) -> list[tuple[list[str], int]]:
    """(paths, bytes) of consecutive files: at most CHUNK_FILES files, and CHUNK_BYTES unless one file
    is larger on its own."""
    chunks: list[tuple[list[str], int]] = []
    paths: list[str] = []
    size = 0
    for disk in files:
        if paths and (len(paths) >= CHUNK_FILES or size + disk.size > CHUNK_BYTES):
            chunks.append((paths, size))
            paths, size = [], 0
        paths.append(disk.path)
        size += disk.size
    if paths:
        chunks.append((paths, size))
    return chunks


class _ReadAhead:
    """How far loader processes may run ahead of the writer: READ_AHEAD_BYTES of files, except that
    the chunk the writer needs next is always let through (so nobody waits on a later chunk)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.used = 0
        self.next_chunk = 0
        self.stopping = False

    def take(self, chunk: int, size: int) -> bool:
        """Wait until chunk ``chunk`` may be held in memory; False if loading is being stopped."""
        with self.changed:
            while not self.stopping and chunk != self.next_chunk and self.used + size > READ_AHEAD_BYTES:
                self.changed.wait()
            self.used += size
            return not self.stopping

    def consumed(self, size: int) -> None:
        with self.changed:
            self.used -= size
            self.next_chunk += 1
            self.changed.notify_all()

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify_all()


class _LoaderResults(pickle.Unpickler):
    """Unpickles what a loader process sends, which can only be these classes: nothing in a
    loader's output can make the writer's process construct anything else."""

    ALLOWED = {("models", "LoadedFile"), ("exceptions", "FileSkipped")}

    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"a loader process sent {module}.{name}, which it never sends")
        return super().find_class(module, name)


#: How a loader process starts: isolated mode (-I: no current directory, script directory,
#: PYTHONPATH or user site-packages on sys.path, no PYTHON* variables), from "/", importing this
#: install's modules by their absolute folder. Nothing in the folder the server was started in
#: (an untrusted project, often) can be imported in its place; and a module of one of our names
#: that a .pth file imported at startup (-I still runs them) is dropped first, as the launcher does.
#: The one package the loader needs besides the standard library, typing_extensions, is found last
#: where this process found it: in site-packages, the same folder; in the .mcpb bundle, its lib/
#: folder, which no interpreter knows of.
_MODULES_FOLDER = Path(__file__).resolve().parent
_OWN_MODULES = sorted(path.stem for path in _MODULES_FOLDER.glob("*.py") if path.stem != "__init__")
_TYPING_EXTENSIONS_FOLDER = Path(typing_extensions.__file__).parent
LOADER_COMMAND = [
    sys.executable, "-I", "-c",
    f"import sys; sys.path.insert(0, {str(_MODULES_FOLDER)!r}); sys.path.append({str(_TYPING_EXTENSIONS_FOLDER)!r}); "
    f"[sys.modules.pop(name) for name in {_OWN_MODULES!r} if name in sys.modules]; "
    "import loader; loader.run_loader()",
]


class _LoaderProcess:
    """One loader process and the thread that feeds it its chunks and queues what it sends back."""

    def __init__(self, root: Path, chunks: list[tuple[int, list[str], int]], how: Reading, read_ahead: _ReadAhead) -> None:
        self.process = subprocess.Popen(LOADER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        self.results: queue.SimpleQueue[list[LoadedFile | FileSkipped] | None] = queue.SimpleQueue()
        task = (str(root), [paths for _, paths, _ in chunks], tuple(how), expected_source())
        self.thread = threading.Thread(target=self._exchange, args=(task, chunks, read_ahead), name="loader-pipe", daemon=True)
        self.thread.start()

    def _exchange(self, task: tuple, chunks: list[tuple[int, list[str], int]], read_ahead: _ReadAhead) -> None:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            with stdin:
                pickle.dump(task, stdin, pickle.HIGHEST_PROTOCOL)
            for number, _, size in chunks:
                if not read_ahead.take(number, size):
                    return
                # One unpickler per message, as pickle.load does: each dump numbers its memo from 0.
                self.results.put(_LoaderResults(stdout).load())
        except Exception as exc:  # noqa: BLE001 - a pipe, a pickle or anything else: the writer must not wait for ever
            if not read_ahead.stopping:
                logger.warning("a loader process stopped (%s); loading the rest in the writer's process", exc or "died")
            self.results.put(None)

    def next_result(self) -> list[LoadedFile | FileSkipped] | None:
        """The next chunk's files, or None if the process died."""
        return self.results.get()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.thread.join()
        if self.process.stdout:
            self.process.stdout.close()


def _load_in_processes(root: Path, files: list[DiskFile], how: Reading) -> Iterator[LoadedFile | FileSkipped]:
    """Load files in LOADER_PROCESSES processes, yielding results in the order of ``files``. The
    first chunk is loaded here while the processes start (the writer would only wait); after it,
    chunk k goes to process k mod N, so order needs no sorting. If a process cannot start or dies
    (killed for memory, say), the remaining files are loaded here."""
    first, *chunks = _chunks(files)
    read_ahead = _ReadAhead()
    loaders: list[_LoaderProcess] = []

    def stop_loaders() -> None:
        read_ahead.stop()
        while loaders:
            loaders.pop().stop()

    count = min(LOADER_PROCESSES, len(chunks))
    try:
        for k in range(count):
            share = [(number + 1, paths, size) for number, (paths, size) in enumerate(chunks) if number % count == k]
            loaders.append(_LoaderProcess(root, share, how, read_ahead))
    except OSError as exc:
        logger.warning("cannot start loader processes (%s); loading files in the writer's process", exc)
        stop_loaders()
    try:
        read_ahead.take(0, first[1])
        yield from load_chunk(root, first[0], how)
        read_ahead.consumed(first[1])
        for number, (paths, size) in enumerate(chunks):
            result = loaders[number % count].next_result() if loaders else None
            if result is None:
                stop_loaders()
                result = load_chunk(root, paths, how)
            yield from result
            read_ahead.consumed(size)
    finally:
        stop_loaders()


def load_files(root: Path, files: list[DiskFile], how: Reading) -> Iterator[LoadedFile | FileSkipped]:
    """Load files in order: inline for a few, else in loader processes (see LOADER_PROCESSES)."""
    if len(files) < PROCESS_LOADING_MIN_FILES or LOADER_PROCESSES < 2:
        return (load_or_skip(root, disk.path, how) for disk in files)
    return _load_in_processes(root, files, how)
