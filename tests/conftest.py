"""Shared fixtures: a source tree in tmp_path, a config for it, and an indexer over a real SQLite file."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from index_writer import IndexWriter  # noqa: E402
from indexer import TextIndexer  # noqa: E402
from models import ServerConfig  # noqa: E402

PROJECT_DIR = Path(__file__).resolve().parent.parent
MAIN_PY = PROJECT_DIR / "main.py"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    return root


@pytest.fixture
def config(source: Path, tmp_path: Path) -> ServerConfig:
    return ServerConfig(source_directory=source.resolve(), index_output_directory=(tmp_path / "indexes").resolve())


@pytest.fixture
def indexer(config: ServerConfig) -> Iterator[TextIndexer]:
    writer = IndexWriter(config.db_path)
    yield TextIndexer(config, writer)
    writer.close()


def write(root: Path, rel: str, content: str | bytes) -> Path:
    """Create a file (and its folders) under root with the given text or bytes."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A test that would hang (on a FIFO, a quadratic parser, a regex that backtracks for ever)
    fails after 60 s instead of hanging CI. Modules use it with pytest.mark.usefixtures."""
    def fail(*_: object) -> None:
        raise TimeoutError("test hung")
    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
