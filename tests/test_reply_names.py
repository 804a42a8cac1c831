"""Issue #23, names and numbers: a query that is a file's name finds that file first, a dotted
number is matched as that number, a wrong path suggests real ones, the outline only when asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

import database
import index_queries
from documents import document_reply
from exceptions import ArgumentError
from filters import Filters
from indexer import TextIndexer
from models import ServerConfig
from search import search
from tests.conftest import write
from tests.mcp_client import call, server_params, wait_for

FILLER = "".join(f"Paragraph {n} tells of other matters entirely, one after another.\n\n" for n in range(60))


def pages(source: Path) -> None:
    """A page named about_Signing that says "signing" little, and a page about another thing
    that says "about signing" often: by its words alone, the second ranks first."""
    write(source, "ref/7.4/about_Signing.md", "---\ntitle: about_Signing\n---\n# about_Signing\n\n" + FILLER + "## Certificates\n\nSigning scripts.\n")
    write(source, "ref/7.4/about_Types.md", "# about_Types\n\n## Signing about Types\n\nAbout signing: about signing a types file, about signing.\n")
    write(source, "ref/5.1/about_Signing.tests.md", "# Tests\n\nabout signing tests, about signing checks.\n")
    write(source, "cmd/set-policy.md", "---\ntitle: Set-ExecutionPolicy\n---\n# Set-ExecutionPolicy\n\n" + FILLER + "Sets a policy.\n")
    write(source, "cmd/policies.md", "# Policies\n\nSet-ExecutionPolicy and Set-ExecutionPolicy again: set executionpolicy.\n")


def first_hit(config: ServerConfig, query: str) -> dict:
    return search(config.db_path, query, 5)["results"][0]


@pytest.mark.parametrize("query", ["about_Signing", "ABOUT_SIGNING", "about_Signing.md", '"about_Signing"'])
def test_a_query_naming_a_file_puts_it_first_at_its_top(indexer: TextIndexer, config: ServerConfig, source: Path, query: str) -> None:
    pages(source)
    indexer.scan()
    hit = first_hit(config, query)
    assert hit["path"] == "ref/7.4/about_Signing.md" and hit["heading"] == "about_Signing"  # its first section


def test_a_query_naming_a_title_puts_its_file_first(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    pages(source)
    indexer.scan()
    assert first_hit(config, "Set-ExecutionPolicy")["path"] == "cmd/set-policy.md"


def test_files_named_reads_name_stem_and_title_and_keeps_to_the_scope(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    pages(source)
    indexer.scan()
    conn = database.reader(config.db_path)
    path_of = dict(conn.execute("SELECT id, path FROM files").fetchall())
    named = [path_of[file_id] for file_id in index_queries.files_named(conn, "About_signing", 10)]
    assert named == ["ref/7.4/about_Signing.md"]  # not about_Signing.tests.md: its name without extension is longer
    assert [path_of[f] for f in index_queries.files_named(conn, "about_signing.tests.md", 10)] == ["ref/5.1/about_Signing.tests.md"]
    everything_but = index_queries.scope_of(index_queries.files_named(conn, "about_Signing", 10), None)
    assert index_queries.files_named(conn, "about_Signing", 10, everything_but) == []
    outside = search(config.db_path, "about_Signing", 5, filters=Filters(prefix="cmd/"))["results"]
    assert all(hit["path"].startswith("cmd/") for hit in outside)


def test_a_name_among_other_words_is_favoured(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    write(source, "a/Get-Thing.md", "# Get-Thing\n\nGet-Thing lists things.\n\n" + FILLER + "## Depth\n\nThe depth of Get-Thing.\n")
    write(source, "b/walk.md", "# Walking\n\n## Get-Thing depth\n\nGet-Thing depth, and Get-Thing depth again, Get-Thing depth.\n\n" + FILLER)
    indexer.scan()
    assert first_hit(config, "Get-Thing depth")["path"] == "a/Get-Thing.md"


def numbers(source: Path) -> None:
    write(source, "news/whats-new-74.md", "# What's new in Version 7.4\n\n" + FILLER + "Release notes of version 7.4.\n")
    write(source, "spec/chapter.md", "# Chapter 7\n\nIt is new: 7 rules, 4 cases, 7 and 4, version 4 of 7, new 7, new 4.\n")


def test_a_dotted_number_in_a_question_is_matched_as_that_number(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    numbers(source)
    indexer.scan()
    reply = search(config.db_path, "what is new in version 7.4", 5)
    assert reply["query_read"]["mode"] == "question" and "7 4" in reply["query_read"]["optional"]
    assert reply["results"][0]["path"] == "news/whats-new-74.md"


def test_a_path_that_is_no_file_names_the_indexed_paths_it_may_mean(indexer: TextIndexer, config: ServerConfig, source: Path) -> None:
    pages(source)
    write(source, "ref/7.5/about_Signing.md", "# about_Signing\n\nThe 7.5 page.\n")
    indexer.scan()
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "ref/about_Signing.md")  # the right name in the wrong folder
    message = str(raised.value)
    assert "ref/7.4/about_Signing.md" in message and "ref/7.5/about_Signing.md" in message and "about_Types" not in message
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "ref/7.4/about_Signin.md")  # a letter missing
    assert "may mean: ref/7.4/about_Signing.md" in str(raised.value)
    with pytest.raises(ArgumentError) as raised:
        document_reply(config, "nothing/like/it.md")
    assert "may mean" not in str(raised.value)


def test_the_outline_only_when_asked(config: ServerConfig, source: Path) -> None:
    write(source, "guide.md", "# Guide\n\nintro\n\n## Install\n\nstep\n")
    plain = document_reply(config, "guide.md", heading="Install")
    assert "outline" not in plain and "outline_truncated" not in plain and plain["text"] == "## Install\n\nstep"
    outlined = document_reply(config, "guide.md", outline=True)
    assert [entry["heading"] for entry in outlined["outline"]] == ["Guide", "Guide > Install"] and outlined["outline_truncated"] is False


@pytest.mark.anyio
async def test_names_numbers_paths_and_outline_through_mcp(source: Path, tmp_path: Path) -> None:
    pages(source)
    numbers(source)
    async with Client(server_params(source, tmp_path / "idx")) as client:
        async def indexed() -> bool:
            return (await call(client, "get_index_status"))["indexed_files"] == 7

        await wait_for(indexed)
        assert (await call(client, "search", {"query": "about_Signing"}))["results"][0]["path"] == "ref/7.4/about_Signing.md"
        question = await call(client, "search", {"query": "what is new in version 7.4"})
        assert question["results"][0]["path"] == "news/whats-new-74.md"
        document = await call(client, "get_document", {"path": "ref/7.4/about_Signing.md", "heading": "Certificates"})
        assert document["text"].startswith("## Certificates") and "outline" not in document
        document = await call(client, "get_document", {"path": "ref/7.4/about_Signing.md", "outline": True})
        assert [entry["heading"] for entry in document["outline"]] == ["about_Signing", "about_Signing > Certificates"]
        wrong = await client.call_tool("get_document", {"path": "ref/about_Signing.md"})
        assert wrong.is_error and "may mean: ref/7.4/about_Signing.md" in wrong.content[0].text
