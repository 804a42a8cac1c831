"""Several folders, one server (#24): sources named on the command line and in the config file,
results that say where they come from, narrowing, list_files, tags, status per source, refusals.
Real folders, real index files, real MCP sessions through the SDK's client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from config import load_config
from exceptions import ConfigError
from tests.conftest import MAIN_PY, write
from tests.mcp_client import call, wait_for

pytestmark = pytest.mark.anyio


def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    notes, docs, repo = tmp_path / "notes", tmp_path / "docs", tmp_path / "repo"
    write(notes, "README.md", "# Notes\n\nMy kestrel sightings, by month.\n")
    write(notes, "birds/kestrel.md", "---\ntags: [birds, Field-Notes]\n---\n# Kestrel\n\nA kestrel hovers over the verge.\n")
    write(notes, "birds/owl.md", "---\ntags:\n  - birds\n  - night\n---\n# Owl\n\nThe owl hunts at night.\n")
    write(notes, "plain.md", "---\nkeywords: field-notes, walks\n---\n# Walks\n\nA walk along the verge.\n")
    write(notes, "broken.md", "---\ntags: [unclosed, \n: : :\n# Broken\n\nA broken front matter, still indexed: kestrel.\n")
    write(docs, "README.md", "# Docs\n\nInstall the kestrel package with pip.\n")
    write(docs, "guide/install.md", "# Install\n\nRun pip install kestrel, then kestrel --help.\n")
    write(repo, "src/README.md", "# Source\n\nThe kestrel command line lives here.\n")
    return notes, docs, repo


def params(index_dir: Path, *sources: str, extra: tuple[str, ...] = ()) -> StdioServerParameters:
    args = [str(MAIN_PY)]
    for source in sources:
        args += ["--source", source]
    return StdioServerParameters(command=sys.executable, args=[*args, "--index-dir", str(index_dir), *extra])


async def indexed(client: Client, files: int) -> None:
    async def done() -> bool:
        status = await call(client, "get_index_status")
        return status["state"] == "idle" and status["indexed_files"] >= files

    await wait_for(done)


async def test_three_sources_in_one_session(tmp_path: Path) -> None:
    notes, docs, repo = folders(tmp_path)
    sources = (f"notes={notes}", str(docs), f"code={repo}")
    async with Client(params(tmp_path / "idx", *sources)) as client:
        await indexed(client, 8)
        instructions = client.instructions or ""
        assert all(f"- {name}: {folder}" in instructions for name, folder in (("notes", notes), ("docs", docs), ("code", repo)))
        status = await call(client, "get_index_status")
        assert [(s["name"], s["indexed_files"]) for s in status["sources"]] == [("notes", 5), ("docs", 2), ("code", 1)]
        assert all(s["source_directory"] for s in status["sources"]) and status["indexed_files"] == 8

        found = await call(client, "search", {"query": "kestrel", "limit": 20})
        places = {(hit["collection"], hit["path"]) for hit in found["results"]}
        assert {("notes", "README.md"), ("docs", "README.md"), ("code", "src/README.md"), ("notes", "broken.md")} <= places

        only = await call(client, "search", {"query": "kestrel", "collection": "docs"})
        assert {hit["collection"] for hit in only["results"]} == {"docs"}
        two = await call(client, "search", {"query": "kestrel", "collection": ["docs", "code"], "path": "**/README.md"})
        assert {(h["collection"], h["path"]) for h in two["results"]} == {("docs", "README.md"), ("code", "src/README.md")}
        unknown = await client.call_tool("search", {"query": "kestrel", "collection": "nope"})
        assert unknown.is_error and "known: notes, docs, code" in unknown.content[0].text

        # The same relative path in two sources: collection picks one; without it, the server asks.
        ambiguous = await client.call_tool("get_document", {"path": "README.md"})
        assert ambiguous.is_error and "notes, docs" in ambiguous.content[0].text
        for hit in (h for h in found["results"] if h["path"] == "README.md"):
            read = await call(client, "get_document", {"path": hit["path"], "collection": hit["collection"]})
            assert read["collection"] == hit["collection"] and ("sightings" in read["text"]) == (hit["collection"] == "notes")
        unique = await call(client, "get_document", {"path": "guide/install.md"})
        assert unique["collection"] == "docs"

        # refresh_index of a hit from each source, after an edit.
        write(notes, "README.md", "# Notes\n\nNow about a merlin.\n")
        write(docs, "README.md", "# Docs\n\nNow about a merlin too.\n")
        for collection in ("notes", "docs"):
            refreshed = await call(client, "refresh_index", {"filepath": "README.md", "collection": collection})
            assert refreshed["success"] and refreshed["files_processed"] == 1
        merlin = await call(client, "search", {"query": "merlin"})
        assert {(h["collection"], h["path"]) for h in merlin["results"]} == {("notes", "README.md"), ("docs", "README.md")}

        # Browsing: by path, paged, by glob, by tag, by source.
        page = await call(client, "list_files", {"limit": 3})
        assert page["total"] == 8 and page["has_more"] and page["next_offset"] == 3 and len(page["files"]) == 3
        rest = await call(client, "list_files", {"limit": 10, "offset": 3})
        listed = [(f.get("collection"), f["path"]) for f in page["files"] + rest["files"]]
        assert listed == sorted(listed, key=lambda item: (item[0] + "/" + item[1])) and len(set(listed)) == 8
        birds = await call(client, "list_files", {"path": "birds/*.md"})
        assert [f["path"] for f in birds["files"]] == ["birds/kestrel.md", "birds/owl.md"]
        tagged = await call(client, "list_files", {"tags": ["field-notes"]})
        assert [f["path"] for f in tagged["files"]] == ["birds/kestrel.md", "plain.md"]
        assert tagged["files"][0]["tags"] == ["birds", "Field-Notes"]
        both = await call(client, "list_files", {"tags": ["BIRDS", "night"]})
        assert [f["path"] for f in both["files"]] == ["birds/owl.md"]
        hits = await call(client, "search", {"query": "verge", "tags": ["walks"]})
        assert [(h["path"], h["tags"]) for h in hits["results"]] == [("plain.md", ["field-notes", "walks"])]
        code = await call(client, "list_files", {"collection": "code"})
        assert [(f["collection"], f["path"]) for f in code["files"]] == [("code", "src/README.md")]


async def test_a_source_removed_and_back_keeps_its_files(tmp_path: Path) -> None:
    notes, docs, _ = folders(tmp_path)
    async with Client(params(tmp_path / "idx", str(notes), str(docs), extra=("--scan-interval", "0.5"))) as client:
        await indexed(client, 7)
        moved = tmp_path / "moved-away"
        docs.rename(moved)
        rescan = await call(client, "refresh_index", {"collection": "docs"})
        assert not rescan["success"]
        status = await call(client, "get_index_status")
        gone = next(s for s in status["sources"] if s["name"] == "docs")
        assert gone["indexed_files"] == 2 and "No such file" in gone["last_error"] and "docs: " in status["last_error"]
        found = await call(client, "search", {"query": "kestrel", "collection": "notes"})
        assert found["results"]
        moved.rename(docs)
        write(docs, "new.md", "# New\n\nA hobby about falcons.\n")
        back = await call(client, "refresh_index", {"collection": "docs"})
        assert back["success"]
        falcons = await call(client, "search", {"query": "falcons"})
        assert [(h["collection"], h["path"]) for h in falcons["results"]] == [("docs", "new.md")]


async def test_two_servers_with_overlapping_sources_work_side_by_side(tmp_path: Path) -> None:
    notes, docs, repo = folders(tmp_path)
    index = tmp_path / "idx"
    async with Client(params(index, str(notes), str(docs))) as first, Client(params(index, str(docs), str(repo))) as second:
        await indexed(first, 7)
        await indexed(second, 3)
        write(docs, "shared.md", "# Shared\n\nA peregrine note.\n")
        for client in (first, second):
            assert (await call(client, "refresh_index", {"filepath": "shared.md", "collection": "docs"}))["success"]
            hits = await call(client, "search", {"query": "peregrine"})
            assert [(h["collection"], h["path"]) for h in hits["results"]] == [("docs", "shared.md")]
    # The same set of sources shares one index file; other sets keep their own.
    assert len(list(index.glob("*.sqlite3"))) == 2


def test_sources_from_the_config_file_and_their_names(tmp_path: Path) -> None:
    notes, docs, repo = folders(tmp_path)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"source_directory": str(repo), "sources": {"n": str(notes), "d": str(docs)},
                                       "index_output_directory": str(tmp_path / "idx")}))
    config = load_config({}, config_file, environ={})
    assert [(s.name, s.directory) for s in config.sources] == [("repo", repo), ("n", notes), ("d", docs)]
    flagged = load_config({"source_directory": [f"x={notes}", str(docs)]}, config_file, environ={})
    assert [(s.name, s.directory) for s in flagged.sources] == [("x", notes), ("docs", docs)]  # flags replace the file's
    twins = tmp_path / "other" / "docs"
    twins.mkdir(parents=True)
    same_name = load_config({"source_directory": [str(docs), str(twins)]}, config_file, environ={})
    assert [s.name for s in same_name.sources] == ["docs", "docs-2"]
    single = load_config({"source_directory": [str(notes)]}, config_file, environ={})
    assert not single.several and single.key("notes", "a.md") == "a.md"


@pytest.mark.parametrize("case", ["missing", "unreadable", "same name", "nested", "twice", "index folder", "inside index", "bad name"])
def test_every_refusal_exits_2_with_one_line_naming_it(tmp_path: Path, case: str) -> None:
    notes, docs, _ = folders(tmp_path)
    index = tmp_path / "idx"
    index.mkdir()
    locked = tmp_path / "locked"
    locked.mkdir()
    given = {
        "missing": [str(notes), str(tmp_path / "nowhere")],
        "unreadable": [str(notes), str(locked)],
        "same name": [f"a={notes}", f"a={docs}"],
        "nested": [str(notes), str(notes / "birds")],
        "twice": [str(notes), f"again={notes}"],
        "index folder": [str(notes), str(index)],
        "inside index": [str(notes), str(index / "x")],
        "bad name": [],
    }[case]
    if case == "inside index":
        (index / "x").mkdir()
    if case == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads every folder")
        locked.chmod(0)
    args = [a for folder in given for a in ("--source", folder)]
    config_args = []
    if case == "bad name":
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"sources": {"no/slash": str(docs)}}))
        config_args = ["--config", str(bad)]
    result = subprocess.run([sys.executable, str(MAIN_PY), "status", *args, *config_args, "--index-dir", str(index)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    named = {"missing": "nowhere", "unreadable": "locked", "same name": "'a'", "nested": "birds", "twice": "given twice",
             "index folder": "index folder", "inside index": "index folder", "bad name": "no/slash"}[case]
    assert named in result.stderr


def test_config_refuses_an_empty_or_malformed_sources_object(tmp_path: Path) -> None:
    config_file = tmp_path / "config.json"
    for value in ({}, ["a"], {"a": 3}):
        config_file.write_text(json.dumps({"sources": value, "index_output_directory": str(tmp_path / "idx")}))
        with pytest.raises(ConfigError):
            load_config({}, config_file, environ={})


def test_cli_lists_and_narrows_by_source(tmp_path: Path) -> None:
    notes, docs, _ = folders(tmp_path)
    common = ["--source", str(notes), "--source", str(docs), "--index-dir", str(tmp_path / "idx")]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(MAIN_PY), *args, *common], capture_output=True, text=True, timeout=120)

    assert run("index").returncode == 0
    listed = run("list", "--collection", "docs")
    assert listed.stdout.splitlines()[0].startswith("docs:README.md") and len(listed.stdout.splitlines()) == 2
    searched = json.loads(run("search", "kestrel", "--collection", "notes", "--json").stdout)
    assert {hit["collection"] for hit in searched["results"]} == {"notes"}
    status = run("status")
    assert "[notes]" in status.stdout and "[docs]" in status.stdout
    got = run("get", "README.md", "--collection", "docs")
    assert "Install the kestrel" in got.stdout
    shutil.rmtree(tmp_path / "idx")


async def test_collection_colon_path_names_that_sources_file_as_also_in_writes_it(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "b:x.md", "# Colon\n\nThe file named with a colon, about herons.\n")
    write(b, "x.md", "# Plain\n\nThe other source's file, about egrets.\n")
    async with Client(params(tmp_path / "idx", str(a), str(b))) as client:
        await indexed(client, 2)
        named = await call(client, "get_document", {"path": "b:x.md"})
        assert (named["collection"], named["path"]) == ("b", "x.md") and "egrets" in named["text"]
        literal = await call(client, "get_document", {"path": "b:x.md", "collection": "a"})
        assert (literal["collection"], literal["path"]) == ("a", "b:x.md") and "herons" in literal["text"]
        plain = await call(client, "get_document", {"path": "x.md"})
        assert plain["collection"] == "b" and "egrets" in plain["text"]


async def test_an_index_deleted_under_a_server_of_several_sources_is_filled_again_by_each(tmp_path: Path) -> None:
    notes, docs, repo = folders(tmp_path)
    index = tmp_path / "idx"
    async with Client(params(index, str(notes), str(docs), str(repo), extra=("--scan-interval", "3600"))) as client:
        await indexed(client, 8)
        for path in index.glob("*.sqlite3*"):
            path.unlink()
        assert (await call(client, "refresh_index", {"collection": "notes"}))["success"]
        await indexed(client, 8)  # the other sources' loops scan again, long before their next rescan is due
        status = await call(client, "get_index_status")
        assert [(s["name"], s["indexed_files"]) for s in status["sources"]] == [("notes", 5), ("docs", 2), ("repo", 1)]


def test_tags_count_toward_the_reply_budget(tmp_path: Path) -> None:
    from index_writer import IndexWriter
    from indexer import TextIndexer
    from models import ServerConfig
    from search import MAX_REPLY_CHARS, search

    source = tmp_path / "src"
    tags = ", ".join(f"tag{n:03d}-" + "x" * 90 for n in range(100))
    for n in range(60):
        write(source, f"n{n}.md", f"---\ntags: [{tags}]\n---\n# Note {n}\n\nkestrel\n")
    config = ServerConfig(source_directory=source, index_output_directory=tmp_path / "idx")
    writer = IndexWriter(config.db_path)
    try:
        TextIndexer(config, writer).scan()
    finally:
        writer.close()
    reply = search(config.db_path, "kestrel", 60, collapse_duplicates=False)
    assert len(reply["results"][0]["tags"]) == 100
    assert len(json.dumps(reply)) < 1.2 * MAX_REPLY_CHARS and len(reply["results"]) < 60 and reply["warnings"]
