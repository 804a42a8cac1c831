"""Walking, filtering, reading and decoding real files; refusing unsafe paths."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from exceptions import FileSkipped, UnsafePathError
from file_utils import FileFilter, check_single_file, decode_text, read_regular_file, resolve_user_path, walk_source
from tests.conftest import write


pytestmark = pytest.mark.usefixtures("no_hang")


def make_filter(tmp_path: Path, **overrides: object) -> FileFilter:
    settings = {
        "included_extensions": (".md", ".txt"),
        "excluded_extensions": (),
        "max_size_bytes": 1000,
        "index_directory": tmp_path / "indexes",
        **overrides,
    }
    return FileFilter(**settings)  # type: ignore[arg-type]


def walk(root: Path, file_filter: FileFilter) -> tuple[list[str], dict[str, str]]:
    skipped: dict[str, str] = {}
    found = [signature[0] for signature in walk_source(root, file_filter, lambda p, r, d: skipped.__setitem__(p, r))]
    return sorted(found), skipped


def test_walk_filters_by_extension_case_insensitively_and_recurses(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "x")
    write(source, "deep/er/B.TXT", "x")
    write(source, "c.log", "x")
    write(source, "d.md.bak", "x")
    found, skipped = walk(source, make_filter(tmp_path))
    assert found == ["a.md", "deep/er/B.TXT"]
    assert skipped == {"c.log": "excluded_extension", "d.md.bak": "excluded_extension"}


def test_excluded_extension_wins_and_large_files_are_skipped(source: Path, tmp_path: Path) -> None:
    write(source, "keep.md", "x")
    write(source, "drafts.secret.md", "x")
    write(source, "big.md", "x" * 1001)
    found, skipped = walk(source, make_filter(tmp_path, excluded_extensions=(".secret.md",)))
    assert found == ["keep.md"]
    assert skipped == {"drafts.secret.md": "excluded_extension", "big.md": "too_large"}


def test_vcs_folders_are_not_entered(source: Path, tmp_path: Path) -> None:
    write(source, ".git/notes.md", "x")
    write(source, "node_modules/pkg/README.md", "x")
    write(source, "real.md", "x")
    found, skipped = walk(source, make_filter(tmp_path))
    assert found == ["real.md"]
    assert skipped == {".git/": "excluded_directory", "node_modules/": "excluded_directory"}


def test_hidden_files_and_folders_are_skipped_unless_asked_for(source: Path, tmp_path: Path) -> None:
    write(source, ".obsidian/workspace.md", "x")
    write(source, "notes/.draft.md", "x")
    write(source, "notes/kept.md", "x")
    write(source, ".venv/lib/site.md", "x")
    write(source, "venv/lib/site.md", "x")
    write(source, ".trash/old.md", "x")
    found, skipped = walk(source, make_filter(tmp_path))
    assert found == ["notes/kept.md"]
    assert skipped == {
        ".obsidian/": "hidden", "notes/.draft.md": "hidden", ".venv/": "excluded_directory",
        "venv/": "excluded_directory", ".trash/": "excluded_directory",
    }
    # Asked for, hidden ones are indexed; tool folders and the trash still are not.
    found, skipped = walk(source, make_filter(tmp_path, include_hidden=True))
    assert found == [".obsidian/workspace.md", "notes/.draft.md", "notes/kept.md"]
    assert set(skipped.values()) == {"excluded_directory"}


def test_a_hidden_index_directory_is_not_counted_as_a_skipped_folder(source: Path) -> None:
    write(source, "note.md", "x")
    write(source, ".idx/notes-abc.sqlite3", "x")
    found, skipped = walk(source, make_filter(source, index_directory=source / ".idx"))
    assert found == ["note.md"] and skipped == {}


def test_a_hidden_file_is_refused_by_name_too(source: Path, tmp_path: Path) -> None:
    write(source, ".obsidian/workspace.md", "x")
    write(source, "venv/x.md", "x")
    for rel, reason in ((".obsidian/workspace.md", "hidden"), ("venv/x.md", "excluded_directory")):
        with pytest.raises(FileSkipped) as caught:
            check_single_file(source, rel, make_filter(tmp_path))
        assert caught.value.reason == reason
    assert check_single_file(source, ".obsidian/workspace.md", make_filter(tmp_path, include_hidden=True)) is not None


def test_index_directory_inside_the_source_is_never_walked(source: Path) -> None:
    write(source, "note.md", "x")
    write(source, "indexes/notes-abc.sqlite3", "x")
    write(source, "indexes/leftover.md", "x")
    found, _ = walk(source, make_filter(source, index_directory=source / "indexes"))
    assert found == ["note.md"]


def test_index_directory_equal_to_the_source_skips_only_index_files(source: Path) -> None:
    write(source, "note.md", "x")
    write(source, "notes-abc.sqlite3-wal.md", "x")
    found, _ = walk(source, make_filter(source, index_directory=source, included_extensions=(".md", ".sqlite3")))
    assert found == ["note.md"]


def test_fifo_and_socket_are_skipped_without_opening(source: Path, tmp_path: Path) -> None:
    os.mkfifo(source / "pipe.md")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(source / "sock.md"))
    try:
        found, skipped = walk(source, make_filter(tmp_path))
    finally:
        server.close()
    assert found == []
    assert skipped == {"pipe.md": "not_regular_file", "sock.md": "not_regular_file"}


def test_reading_a_file_replaced_by_a_fifo_does_not_hang(source: Path) -> None:
    os.mkfifo(source / "swap.md")
    with pytest.raises(FileSkipped) as caught:
        read_regular_file(source, "swap.md", 1000)
    assert caught.value.reason == "not_regular_file"


def test_links_are_never_followed_and_say_why(source: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.md", "top secret")
    write(source, "docs/real.md", "x")
    (source / "to_secret.md").symlink_to(outside / "secret.md")
    (source / "to_outside").symlink_to(outside)
    (source / "alias.md").symlink_to(source / "docs" / "real.md")
    (source / "docs" / "loop").symlink_to(source)
    (source / "dangling.md").symlink_to(source / "missing.md")
    (source / "self.md").symlink_to("self.md")
    found, skipped = walk(source, make_filter(tmp_path))
    assert found == ["docs/real.md"]
    assert skipped["to_secret.md"] == "symlink_outside_source"
    assert skipped["to_outside/"] == "symlink_outside_source"
    assert skipped["alias.md"] == "duplicate_link"
    assert skipped["docs/loop/"] == "duplicate_link"
    assert skipped["dangling.md"] == "broken_symlink"
    assert skipped["self.md"] == "symlink_loop"


@pytest.mark.parametrize("link_name", ["sublink", "a_link", "sub2"])
def test_the_real_path_of_a_linked_folder_wins_whatever_the_names(source: Path, tmp_path: Path, link_name: str) -> None:
    """A link sorted before or after its target, or one level down: the files keep their real paths."""
    write(source, "sub/target.md", "x")
    write(source, "sub/deeper/more.md", "y")
    (source / link_name).symlink_to("sub")
    (source / "sub" / "deeper" / "up").symlink_to("..")
    found, skipped = walk(source, make_filter(tmp_path))
    assert found == ["sub/deeper/more.md", "sub/target.md"]
    assert skipped[f"{link_name}/"] == "duplicate_link"
    assert skipped["sub/deeper/up/"] == "duplicate_link"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_walk_closes_each_directory_it_lists(source: Path, tmp_path: Path) -> None:
    for i in range(20):
        write(source, f"d{i}/e/note.md", "x")
    open_before = len(os.listdir("/proc/self/fd"))
    found, _ = walk(source, make_filter(tmp_path))
    assert len(found) == 20
    abandoned = walk_source(source, make_filter(tmp_path), lambda p, r, d: None)
    next(abandoned)
    abandoned.close()
    assert len(os.listdir("/proc/self/fd")) == open_before


def test_deeply_nested_folders_do_not_hit_the_recursion_limit(source: Path, tmp_path: Path) -> None:
    deep = source
    for _ in range(250):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom.md").write_text("x")
    found, _ = walk(source, make_filter(tmp_path))
    assert found == ["d/" * 250 + "bottom.md"]


@pytest.mark.parametrize(
    ("data", "text", "encoding", "fallback"),
    [
        ("héllo wörld".encode(), "héllo wörld", "utf-8", False),
        (b"\xef\xbb\xbfbom text", "bom text", "utf-8-sig", False),
        ("ünïcode".encode("utf-16"), "ünïcode", "utf-16-le", False),
        (b"\xfe\xff" + "big end".encode("utf-16-be"), "big end", "utf-16-be", False),
        ("wide".encode("utf-32"), "wide", "utf-32-le", False),
        ("no bom here".encode("utf-16-le"), "no bom here", "utf-16-le", False),
        ("café crème".encode("latin-1"), "café crème", "cp1252", True),
        (b"\x93smart quotes\x94 \x80", "\u201csmart quotes\u201d \u20ac", "cp1252", True),
        (b"", "", "utf-8", False),
    ],
)
def test_decoding(data: bytes, text: str, encoding: str, fallback: bool) -> None:
    assert decode_text("f.txt", data) == (text, encoding, fallback)


@pytest.mark.parametrize(
    "data",
    [
        b"PNG\x00\x00\x00\rIHDR",
        bytes(range(256)) * 4,
        b"\x01\x02\x03\x04\x05\x06 mostly control \x07\x0e\x0f\x10\x11\x12\x13\x14\x15",
        b"\xff\xfe" + b"\x00\xd8",  # a UTF-16 BOM followed by a lone surrogate
    ],
)
def test_binary_content_is_refused(data: bytes) -> None:
    with pytest.raises(FileSkipped) as caught:
        decode_text("x.txt", data)
    assert caught.value.reason == "binary"


def test_read_regular_file_enforces_the_size_limit(source: Path) -> None:
    write(source, "big.txt", "x" * 2000)
    with pytest.raises(FileSkipped) as caught:
        read_regular_file(source, "big.txt", 1000)
    assert caught.value.reason == "too_large"
    with pytest.raises(FileSkipped) as gone:
        read_regular_file(source, "missing.txt", 1000)
    assert gone.value.reason == "vanished"


@pytest.mark.parametrize(
    ("user_path", "expected"),
    [
        ("a.md", "a.md"),
        ("./sub/../a.md", None),
        ("sub//b.md", "sub/b.md"),
        ("../etc/passwd", None),
        ("sub/../../x", None),
        ("..\\..\\etc\\passwd", None),
        ("%2e%2e/%2e%2e/etc/passwd", None),
        ("a.md\x00.txt", None),
        ("/etc/passwd", None),
        ("", None),
        (".", None),
        ("link_out/secret.md", None),
        ("indexes/notes.sqlite3", None),
        ("x.sqlite3-wal", None),
    ],
)
def test_resolve_user_path(source: Path, tmp_path: Path, user_path: str, expected: str | None) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.md", "x")
    (source / "link_out").symlink_to(outside)
    if expected is None:
        with pytest.raises(UnsafePathError) as caught:
            resolve_user_path(source, user_path, source / "indexes")
        assert caught.value.reason
    else:
        assert resolve_user_path(source, user_path, source / "indexes") == expected


def test_absolute_path_inside_the_source_is_accepted(source: Path, tmp_path: Path) -> None:
    write(source, "sub/a.md", "x")
    assert resolve_user_path(source, str(source / "sub" / "a.md"), tmp_path / "idx") == "sub/a.md"
