"""A reply reads only from the folder the index was made from: a source renamed away and replaced
by a link (or another folder) is refused by get_document and refresh_index with the scan's reason,
and search leaves its files out and says so, naming the source and how many it left out; as does
a source that cannot be read. Real folders, real index files, real MCP sessions."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
from tests.conftest import MAIN_PY, write
from tests.reliability_helpers import rel_unprivileged
from tests.mcp_client import call, server_params, wait_for

pytestmark = pytest.mark.anyio

REPLACED = "not the folder the index was made from"


async def idle(client: Client, files: int) -> None:
    async def done() -> bool:
        status = await call(client, "get_index_status")
        return status["state"] == "idle" and status["indexed_files"] >= files

    await wait_for(done)


def swap_for_link(folder: Path, target: Path) -> None:
    """What `mv notes notes.old; ln -s private notes` does."""
    folder.rename(folder.with_name(folder.name + ".old"))
    folder.symlink_to(target, target_is_directory=True)


async def test_a_source_swapped_for_a_link_is_not_read_by_any_tool(tmp_path: Path) -> None:
    notes, private = tmp_path / "notes", tmp_path / "private"
    write(notes, "heron.md", "# Heron\n\nThe grey heron waits by the water.\n")
    write(private, "diary.md", "# Diary\n\nMy secret heron diary.\n")
    write(private, "heron.md", "# Private heron\n\nA private heron page.\n")
    async with Client(server_params(notes, tmp_path / "idx", "--scan-interval", "0")) as client:
        await idle(client, 1)
        swap_for_link(notes, private)
        for path in ("diary.md", "heron.md"):
            refused = await client.call_tool("get_document", {"path": path})
            assert refused.is_error and REPLACED in refused.content[0].text, refused.content[0].text
        absolute = await client.call_tool("get_document", {"path": str(notes / "diary.md")})
        assert absolute.is_error and "secret" not in absolute.content[0].text
        refresh = await client.call_tool("refresh_index", {"filepath": "diary.md"})
        assert refresh.is_error or not refresh.structured_content["success"]
        assert "secret" not in refresh.content[0].text
        found = await call(client, "search", {"query": "heron"})
        assert found["results"] == []
        assert any("1 matching file was left out" in w and REPLACED in w for w in found["warnings"]), found
        listed = await call(client, "search", {"query": "diary"})
        assert listed["results"] == []
        # A rescan (the watcher's, or one asked for) reads nothing from the folder put in its place,
        # though it holds a file of an indexed name.
        await anyio.sleep(0.5)
        rescan = await call(client, "refresh_index")
        assert not rescan["success"] and "not the folder this server was started on" in rescan["errors"][0], rescan
        for word in ("private", "secret"):
            assert (await call(client, "search", {"query": word}))["results"] == []
        status = await call(client, "get_index_status")
        assert status["state"] == "error" and "not the folder this server was started on" in status["last_error"], status
        assert (await client.call_tool("get_document", {"path": "diary.md"})).is_error


async def test_with_several_sources_only_the_swapped_one_is_refused_and_named(tmp_path: Path) -> None:
    alpha, beta, private = tmp_path / "alpha", tmp_path / "beta", tmp_path / "private"
    write(alpha, "a1.md", "# Alpha\n\nAn egret in alpha.\n")
    write(beta, "b1.md", "# Beta\n\nAn egret in beta.\n")
    write(beta, "b2.md", "# Beta two\n\nAnother egret in beta.\n")
    write(private, "secret.md", "# Secret\n\nA secret egret.\n")
    args = [str(MAIN_PY), "--source", str(alpha), "--source", str(beta), "--index-dir", str(tmp_path / "idx"), "--scan-interval", "0"]
    async with Client(StdioServerParameters(command=sys.executable, args=args)) as client:
        await idle(client, 3)
        swap_for_link(beta, private)
        refused = await client.call_tool("get_document", {"path": "secret.md", "collection": "beta"})
        assert refused.is_error and REPLACED in refused.content[0].text
        named = await client.call_tool("get_document", {"path": "beta:secret.md"})
        assert named.is_error and "secret egret" not in named.content[0].text
        found = await call(client, "search", {"query": "egret"})
        assert [(hit["collection"], hit["path"]) for hit in found["results"]] == [("alpha", "a1.md")]
        assert any(w.startswith("2 matching files were left out: source 'beta'") for w in found["warnings"]), found
        assert (await call(client, "get_document", {"path": "a1.md", "collection": "alpha"}))["text"].startswith("# Alpha")


async def test_list_files_names_each_listed_source_that_cannot_be_read_now(tmp_path: Path) -> None:
    """list_files listed a source's files as indexed, with no word that the source was gone (search
    said so): a source renamed away, one swapped for a link; the index's files are still listed."""
    alpha, beta, gamma, private = tmp_path / "alpha", tmp_path / "beta", tmp_path / "gamma", tmp_path / "private"
    for folder in (alpha, beta, gamma):
        write(folder, f"{folder.name}.md", f"# {folder.name}\n\nA page of {folder.name}.\n")
    write(private, "secret.md", "# Secret\n\nA secret page.\n")
    args = [str(MAIN_PY), *(arg for folder in (alpha, beta, gamma) for arg in ("--source", str(folder))),
            "--index-dir", str(tmp_path / "idx"), "--scan-interval", "0"]
    async with Client(StdioServerParameters(command=sys.executable, args=args)) as client:
        await idle(client, 3)
        assert (await call(client, "list_files")).get("warnings", []) == []
        alpha.rename(tmp_path / "alpha.old")
        swap_for_link(beta, private)
        listed = await call(client, "list_files")
        assert [(f["collection"], f["path"]) for f in listed["files"]] == [("alpha", "alpha.md"), ("beta", "beta.md"), ("gamma", "gamma.md")]
        warnings = listed["warnings"]
        assert len(warnings) == 2, warnings
        assert warnings[0].startswith("1 listed file is as last indexed, not readable now: source 'alpha'") and "cannot be opened" in warnings[0], warnings
        assert warnings[1].startswith("1 listed file is as last indexed, not readable now: source 'beta'") and REPLACED in warnings[1], warnings
        only_gamma = await call(client, "list_files", {"collection": "gamma"})
        assert only_gamma.get("warnings", []) == [] and len(only_gamma["files"]) == 1, only_gamma


async def test_a_source_that_cannot_be_read_is_named_in_search_warnings(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    write(notes, "sub/heron.md", "# Heron\n\nThe grey heron.\n")
    write(notes, "top.md", "# Top\n\nA heron at the top.\n")
    prefix = rel_unprivileged()
    params = server_params(notes, tmp_path / "idx", "--scan-interval", "0")
    params = StdioServerParameters(command=prefix[0] if prefix else params.command, args=[*prefix[1:], params.command, *params.args] if prefix else params.args)
    async with Client(params) as client:
        await idle(client, 2)
        os.chmod(notes / "sub", 0)
        try:
            partly = await call(client, "search", {"query": "heron"})
            assert [hit["path"] for hit in partly["results"]] == ["top.md"]
            assert "1 matching file was left out: their folder cannot be read now (sub/)" in partly["warnings"], partly
            os.chmod(notes, 0)
            found = await call(client, "search", {"query": "heron"})
            assert found["results"] == []
            assert any("2 matching files were left out: the source" in w and "cannot be read" in w for w in found["warnings"]), found
        finally:
            os.chmod(notes, 0o755)
            os.chmod(notes / "sub", 0o755)


async def test_a_mount_point_in_the_source_mounted_over_is_not_read(tmp_path: Path) -> None:
    from tests.reliability_helpers import rel_mount_tmpfs, rel_umount

    notes = tmp_path / "notes"
    write(notes, "top.md", "# Top\n\nA kiwi at the top.\n")
    mount = notes / "mnt"
    if not rel_mount_tmpfs(mount, "1m"):
        pytest.skip("needs root and tmpfs mounts")
    try:
        write(mount, "m.md", "# M\n\nA kiwi on the drive.\n")
        async with Client(server_params(notes, tmp_path / "idx", "--scan-interval", "0")) as client:
            await idle(client, 2)
            assert rel_mount_tmpfs(mount, "1m")  # another file system mounted over it
            write(mount, "secret.md", "# S\n\nA secret kiwi.\n")
            write(mount, "m.md", "# M\n\nA secret kiwi too.\n")
            for path in ("mnt/secret.md", "mnt/m.md"):
                refused = await client.call_tool("get_document", {"path": path})
                assert refused.is_error and "secret" not in refused.content[0].text, refused.content[0].text
                assert str(tmp_path) not in refused.content[0].text
            found = await call(client, "search", {"query": "kiwi"})
            assert [hit["path"] for hit in found["results"]] == ["top.md"], found
            assert any("left out" in warning and "mnt/" in warning for warning in found["warnings"]), found
            rel_umount(mount)
    finally:
        rel_umount(mount)
        rel_umount(mount)


def test_a_rescan_of_a_source_gone_says_it_processed_nothing(source: Path, tmp_path: Path) -> None:
    for n in range(5):
        write(source, f"n{n}.md", f"# N{n}\n\nword{n}\n")
    config = ServerConfig(source_directory=source, index_output_directory=tmp_path / "idx", scan_interval_seconds=0)
    writer = IndexWriter(config.db_path)
    try:
        indexer = TextIndexer(config, writer)
        assert indexer.scan()["files_processed"] == 5
        source.rename(tmp_path / "gone")
        reply = indexer.scan()
        assert not reply["success"] and reply["files_processed"] == 0 and "cannot be opened" in reply["errors"][0], reply
    finally:
        writer.close()
