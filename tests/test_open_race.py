"""Nothing outside the source is ever opened, even when a name in it is swapped for a link while it
is read: every read, stat and listing resolves names below the source without following a link.

"Opened" is what the kernel says: an inotify watch with IN_OPEN on the outside folder sees every
open(2) of it or of a file in it (a FIFO, a regular file), whoever makes it. Each case runs twice:
with openat2(2) and with the name-by-name descent used where the kernel has no openat2.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import file_utils
from documents import read_document
from exceptions import ArgumentError, FileSkipped, UnsafePathError
from file_utils import FileFilter, check_single_file, disk_signatures, read_regular_file, resolve_user_path, walk_source
from models import ServerConfig
from watcher import SourceWatcher
from tests.conftest import write

pytestmark = [
    pytest.mark.usefixtures("no_hang"),
    pytest.mark.skipif(sys.platform != "linux", reason="inotify tells whether a file was opened"),
]

INSIDE = b"inside text\n"
OUTSIDE = b"zqoutsidesecretqz\n"
IN_OPEN = 0x20
#: Reads per racing case at most (a second or two), and how many of each outcome end it sooner.
READS = 20_000
ENOUGH = 500


@pytest.fixture(params=["openat2", "by_name"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with openat2, then with the descent that opens one name at a time."""
    if request.param == "by_name":
        monkeypatch.setattr(file_utils, "_openat2", None, raising=False)
    elif getattr(file_utils, "_openat2", "unknown") is None:
        pytest.skip("this kernel has no openat2")
    return request.param


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the source holding a secret file and a FIFO with no writer."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "note.md").write_bytes(OUTSIDE)
    os.mkfifo(folder / "pipe")
    return folder


@pytest.fixture
def opens_outside(outside: Path) -> Iterator[Callable[[], int]]:
    """A function that tells how many bytes of IN_OPEN events the outside folder has had (0: none)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    assert libc.inotify_add_watch(fd, os.fsencode(outside), IN_OPEN) >= 0, os.strerror(ctypes.get_errno())

    def seen() -> int:
        total = 0
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return total
            total += len(chunk)

    yield seen
    os.close(fd)


#: Swaps a name as fast as it can until killed, in a process of its own so that it runs alongside
#: the reader, and so that the name is always there: "file" makes argv[2] a link to argv[3], then a
#: hard link to argv[4], again and again; "folder" exchanges the folder argv[2] with a link to argv[3]
#: made at argv[4] (renameat2 RENAME_EXCHANGE), back and forth.
SWAPPER = """
import ctypes, os, sys
mode, victim, target, other = sys.argv[1:5]
spare = victim + ".spare"
if mode == "folder":
    os.symlink(target, other)
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
print("swapping", flush=True)
while True:
    if mode == "file":
        os.symlink(target, spare)
        os.replace(spare, victim)
        os.link(other, spare)
        os.replace(spare, victim)
    elif renameat2(-100, victim.encode(), -100, other.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
"""


def race(mode: str, victim: Path, target: Path, kept: Path, read_once: Callable[[], bytes | None]) -> tuple[set[bytes], int]:
    """Read while another process swaps ``victim``: at most READS times, and no more once reads
    have both returned data and been refused ENOUGH times; (what was read, how many were refused)."""
    swapper = subprocess.Popen(
        [sys.executable, "-I", "-c", SWAPPER, mode, str(victim), str(target), str(kept)], stdout=subprocess.PIPE
    )
    read: set[bytes] = set()
    refused = returned = 0
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == b"swapping\n"
        for _ in range(READS):
            data = read_once()
            if data is None:
                refused += 1
            else:
                read.add(data)
                returned += 1
            if min(refused, returned) >= ENOUGH:
                break
    finally:
        swapper.kill()
        swapper.wait()
    return read, refused


def reader(source: Path, rel: str) -> Callable[[], bytes | None]:
    def read_once() -> bytes | None:
        try:
            return read_regular_file(source, rel, 1 << 20).data
        except FileSkipped:
            return None

    return read_once


@pytest.mark.parametrize("target_name", ["pipe", "note.md"])
def test_a_file_swapped_for_a_link_out_is_never_opened(
    source: Path, outside: Path, opens_outside: Callable[[], int], resolution: str, target_name: str
) -> None:
    kept = source / "kept.tmp"
    kept.write_bytes(INSIDE)
    os.link(kept, source / "note.md")
    read, refused = race("file", source / "note.md", outside / target_name, kept, reader(source, "note.md"))
    assert opens_outside() == 0
    assert read == {INSIDE}
    assert refused > 0  # the race happened: some reads met the link


def test_a_folder_on_the_way_swapped_for_a_link_out_is_never_opened(
    source: Path, outside: Path, opens_outside: Callable[[], int], resolution: str
) -> None:
    write(source, "sub/note.md", INSIDE)
    read, refused = race("folder", source / "sub", outside, source / "held", reader(source, "sub/note.md"))
    assert opens_outside() == 0
    assert read == {INSIDE}
    assert refused > 0


def test_reading_through_a_link_says_it_changed_and_opens_nothing_outside(
    source: Path, outside: Path, opens_outside: Callable[[], int], resolution: str
) -> None:
    (source / "pipe.md").symlink_to(outside / "pipe")
    (source / "dir").symlink_to(outside)
    for rel in ("pipe.md", "dir/note.md", "dir/pipe"):
        with pytest.raises(FileSkipped) as caught:
            read_regular_file(source, rel, 1 << 20)
        assert caught.value.reason == "vanished" and "changed while being read" in caught.value.detail, rel
        assert str(outside) not in str(caught.value)
    assert opens_outside() == 0


def test_a_key_that_climbs_out_is_refused_without_opening(
    source: Path, outside: Path, opens_outside: Callable[[], int], resolution: str
) -> None:
    for rel in ("../outside/note.md", "../outside/pipe"):
        with pytest.raises(FileSkipped):
            read_regular_file(source, rel, 1 << 20)
    assert opens_outside() == 0


def test_a_folder_swapped_for_a_link_during_the_walk_is_not_listed(
    source: Path, outside: Path, opens_outside: Callable[[], int], tmp_path: Path, resolution: str
) -> None:
    write(source, "a.md", INSIDE)
    write(source, "sub/note.md", INSIDE)
    file_filter = FileFilter((".md",), (), 1 << 20, tmp_path / "indexes")
    walk = walk_source(source.resolve(), file_filter, lambda *_: None)
    first = next(walk)  # the source's own files come first; "sub" waits on the walk's stack
    (source / "sub").rename(tmp_path / "sub-away")
    (source / "sub").symlink_to(outside)
    rest = list(walk)
    assert [first[0], *(signature[0] for signature in rest)] == ["a.md"]
    assert opens_outside() == 0


def test_one_file_checks_follow_no_link(source: Path, outside: Path, tmp_path: Path, resolution: str) -> None:
    (source / "out.md").symlink_to(outside / "note.md")
    (source / "dir").symlink_to(outside)
    file_filter = FileFilter((".md",), (), 1 << 20, tmp_path / "indexes")
    with pytest.raises(FileSkipped) as caught:
        check_single_file(source, "out.md", file_filter)
    assert caught.value.reason == "symlink_outside_source"
    with pytest.raises(FileSkipped) as caught:
        check_single_file(source, "dir/note.md", file_filter)
    assert caught.value.reason == "vanished" and "changed while being read" in caught.value.detail
    (source / "real").mkdir()
    (source / "real" / "kept.md").write_text("kept")
    found = disk_signatures(source, ["dir/note.md", "out.md", "real/kept.md", "real/../out.md", "gone/x.md"])
    assert found["dir/note.md"] is None and found["out.md"] is None and found["real/../out.md"] is None and found["gone/x.md"] is None
    assert found["real/kept.md"] is not None and found["real/kept.md"][2] == 4


def test_refusals_name_no_absolute_or_outside_path(source: Path, outside: Path, tmp_path: Path) -> None:
    (source / "dir").symlink_to(outside)
    for user_path in ("/etc/passwd", str(outside / "note.md"), "dir/note.md", "dir"):
        with pytest.raises(UnsafePathError) as caught:
            resolve_user_path(source, user_path, tmp_path / "indexes")
        shown = caught.value.reason
        assert str(source.resolve()) not in shown and str(outside.resolve()) not in shown, shown


def test_get_document_says_why_a_path_is_not_a_file(source: Path, tmp_path: Path) -> None:
    write(source, "doc.md", "# Doc\n\ntext\n")
    write(source, "docs/inner.md", "x\n")
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=(tmp_path / "indexes").resolve())
    for user_path, says in (
        ("doc.md ", ["no such file", "'doc.md'"]),
        ("doc.md\n", ["no such file", "'doc.md'"]),
        ("docs", ["folder, not a file"]),
        ("docs/", ["folder, not a file"]),
        ("nothing.exe", ["no such file"]),
    ):
        with pytest.raises(ArgumentError) as caught:
            read_document(config, user_path)
        message = str(caught.value)
        assert all(part in message for part in says) and "excluded_extension" not in message, (user_path, message)
        assert str(source) not in message
    assert read_document(config, "doc.md").path == "doc.md"


def test_a_fifo_or_a_missing_parent_never_blocks_nor_errs_oddly(source: Path, resolution: str) -> None:
    os.mkfifo(source / "pipe.md")
    write(source, "file.md", INSIDE)
    with pytest.raises(FileSkipped) as caught:
        read_regular_file(source, "pipe.md", 100)
    assert caught.value.reason == "not_regular_file"
    for rel in ("missing/x.md", "file.md/x.md", "missing.md"):
        with pytest.raises(FileSkipped) as caught:
            read_regular_file(source, rel, 100)
        assert caught.value.reason == "vanished", rel
    assert read_regular_file(source, "file.md", 100).data == INSIDE


def test_the_watcher_lists_no_folder_reached_through_a_link(
    source: Path, outside: Path, opens_outside: Callable[[], int], resolution: str
) -> None:
    write(source, "a/keep.md", INSIDE)
    write(outside, "c/secret.md", OUTSIDE)
    watcher = SourceWatcher(source.resolve(), lambda rel: True)
    watcher.start()
    try:
        (source / "a" / "c").mkdir()  # announced as a new folder "a/c", looked into when the batch is read
        (source / "a").rename(source / "a.real")
        (source / "a").symlink_to(outside)  # by then "a/c" is outside/c
        batch = watcher.next_batch(5)
    finally:
        watcher.close()
    assert batch is not None and "a/c/secret.md" not in batch.paths
    assert opens_outside() == 0
