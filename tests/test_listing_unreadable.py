"""list_files says which of the files it lists cannot be read now, as search says of those it
leaves out: a source folder gone, unreadable or replaced, a folder in it that cannot be entered, a
drive mounted in it and unmounted; only of the files the page shows. From a hostile review
(attack18, a0e7ed5) of the first form, which opened each source folder only (O_PATH: no
permission needed) and warned of every row asked for. Real servers, real folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write
from tests.reliability_helpers import RelStdioServer, rel_notes, rel_serving, rel_mount_tmpfs, rel_umount, rel_unprivileged


def structured(server: RelStdioServer, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = server.call(tool, args)
    assert not result["isError"], result["content"][0]["text"]
    return result["structuredContent"]


def test_list_files_names_a_source_folder_that_cannot_be_listed(tmp_path: Path) -> None:
    """A source folder made unreadable (chmod 000) after the first scan: search says "the source
    ...: it cannot be read (Permission denied)" and get_document refuses its files, but list_files
    lists them with no warning. The source is opened with O_PATH, which needs no permission on the
    folder, so the one opening list_files makes never fails for this."""
    source = tmp_path / "notes"
    rel_notes(source)
    try:
        with rel_serving(source, index_dir=tmp_path / "idx", prefix=rel_unprivileged()) as server:
            assert server.wait_for_scan()["state"] == "idle"
            source.chmod(0)
            searched = structured(server, "search", {"query": "heron"})
            assert searched["results"] == [] and any("cannot be read" in w for w in searched["warnings"]), searched
            assert server.call("get_document", {"path": "n0.md"})["isError"]
            listed = structured(server, "list_files")
            assert len(listed["files"]) == 3
            assert any("cannot be read" in w or "Permission denied" in w for w in listed.get("warnings", [])), listed.get("warnings")
    finally:
        source.chmod(0o755)


def test_list_files_names_a_drive_unmounted_inside_a_source(tmp_path: Path) -> None:
    """A drive mounted inside the source (recorded by the scan as a mount point), then unmounted:
    search leaves its files out ("their folder cannot be read now (disk/)"), get_document refuses
    them ("the mount point disk/: ... unmounted?"), list_files lists them with no warning. Only the
    source folder itself is checked, not the mount points the index recorded in it."""
    source = tmp_path / "notes"
    rel_notes(source)
    disk = source / "disk"
    if not rel_mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        write(disk, "kestrel.md", "# Kestrel\n\nThe kestrel hovers.\n")
        with rel_serving(source, index_dir=tmp_path / "idx") as server:
            assert server.wait_for_scan()["state"] == "idle"
            assert structured(server, "list_files").get("warnings", []) == []  # no warning while it is mounted
            rel_umount(disk)
            assert "disk/kestrel.md" not in [hit["path"] for hit in structured(server, "search", {"query": "kestrel"})["results"]]
            assert server.call("get_document", {"path": "disk/kestrel.md"})["isError"]
            listed = structured(server, "list_files")
            assert "disk/kestrel.md" in [f["path"] for f in listed["files"]]
            assert any("disk" in w for w in listed.get("warnings", [])), listed.get("warnings")
    finally:
        rel_umount(disk)


def test_list_files_warns_only_of_the_sources_of_the_files_it_shows(tmp_path: Path) -> None:
    """The warnings are made from every row the page asked for, before the reply is cut to
    MAX_LIST_CHARS: a page that shows only alpha's files (cut at 174 of 401) says "source 'beta'
    ...: its files are listed as last indexed", and no file of beta is listed. The next page says
    it again, where beta's file is."""
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    for number in range(400):
        write(alpha, f"{number:04}-{'x' * 120}.md", f"# A{number}\n\nheron\n")
    write(beta, "b.md", "# B\n\nheron\n")
    with rel_serving(alpha, beta, index_dir=tmp_path / "idx") as server:
        assert server.wait_for_scan()["state"] == "idle"
        beta.rename(tmp_path / "beta.old")
        listed = structured(server, "list_files", {"limit": 1000})
        shown = {f["collection"] for f in listed["files"]}
        assert listed["has_more"] and shown == {"alpha"}, (shown, listed["total"])
        assert not any("'beta'" in w for w in listed["warnings"]), listed["warnings"]


def test_list_files_warns_of_a_gone_source_with_filters_and_pages_and_not_of_a_linked_one(tmp_path: Path) -> None:
    """Held: a source given as a link to its folder is not warned of; one renamed away is, once per
    page that lists its files, naming it, with a path filter and a collection filter; a page with no
    file of it (offset past the end, another collection) says nothing; the files are still listed."""
    real, beta = tmp_path / "real", tmp_path / "beta"
    rel_notes(real)
    rel_notes(beta)
    (tmp_path / "alpha").symlink_to(real, target_is_directory=True)
    with rel_serving(tmp_path / "alpha", beta, index_dir=tmp_path / "idx") as server:
        assert server.wait_for_scan()["state"] == "idle"
        assert structured(server, "list_files").get("warnings", []) == []
        beta.rename(tmp_path / "beta.old")
        for args in ({}, {"collection": "beta"}, {"path": "n1.md"}, {"limit": 1, "offset": 0}):
            listed = structured(server, "list_files", args)
            warned = [w for w in listed.get("warnings", []) if "source 'beta'" in w]
            assert len(warned) == 1 and str(tmp_path / "beta.old") not in warned[0], (args, listed.get("warnings"))
            assert any(f["collection"] == "beta" for f in listed["files"])
        for args in ({"collection": "real"}, {"offset": 6}, {"path": "nothing/**"}):
            assert structured(server, "list_files", args).get("warnings", []) == [], args
