"""Several phrasings of one need in one search: checked, searched, and fused into one list where
each answer appears once (phrasings.py), through the MCP tool and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from exceptions import ArgumentError
from indexer import TextIndexer
from models import ServerConfig
from phrasings import AGREEMENT, MAX_ALTERNATIVES, RANK_OFFSET, _fused, _show_bare, alternatives_given, fused_search
from search import search, searched_page
from tests.conftest import MAIN_PY, write
from tests.mcp_client import call, server_params, wait_for


def test_alternatives_are_checked_and_repeats_of_the_query_dropped() -> None:
    assert alternatives_given(None, "q") == []
    assert alternatives_given(["birds of prey", " Q ", "birds  of prey"], "q") == ["birds of prey"]
    assert alternatives_given(["Hauptstrasse"], "Hauptstraße") == ["Hauptstrasse"]  # other words to the index
    for bad in ("one string", ["ok", 3], ["a"] * (MAX_ALTERNATIVES + 1), ["x" * 10_001], ["ok", " \t"]):
        with pytest.raises(ArgumentError, match="alternatives"):
            alternatives_given(bad, "q")


def hit(path: str, *copies: str) -> dict:
    return {"path": path, "snippet": path, "score": 1.0, "line_start": 1, "line_end": 2, "last_modified": "x",
            "also_in": list(copies), "also_in_count": len(copies)}


def reply(*hits: dict) -> dict:
    return {"query": "q", "results": list(hits), "files_matched": len(hits), "indexing": False, "offset": 0,
            "has_more": False, "next_offset": None, "warnings": [], "query_read": {"mode": "keywords"}, "suggestions": []}


def test_fusion_ranks_what_phrasings_agree_on_first_and_shows_each_answer_once() -> None:
    first = reply(hit("a.md"), hit("b.md", "b-copy.md"), hit("c.md"))
    second = reply(hit("b-copy.md", "b.md"), hit("d.md"))
    fused, sources = _fused([(1.0, first), (1.0, second)], 0, 10, [])
    paths = [found["path"] for found in fused["results"]]
    assert paths == ["b-copy.md", "a.md", "d.md", "c.md"]  # b in both lists, shown as its best place shows it
    assert fused["results"][0]["score"] == pytest.approx((1 / (RANK_OFFSET + 2) + 1 / (RANK_OFFSET + 1)) * 2 ** AGREEMENT)
    assert fused["results"][0]["also_in"] == ["b.md"]  # the copy is named, not a result of its own
    assert sources == [1, 0, 1, 0]  # each shown from the list it ranks best in (b-copy first in the second)
    page, _ = _fused([(1.0, first), (1.0, second)], 1, 2, [])
    assert [found["path"] for found in page["results"]] == ["a.md", "d.md"] and page["has_more"] and page["next_offset"] == 3


@pytest.mark.anyio
async def test_one_search_with_alternatives_finds_what_each_phrasing_finds_once(source: Path, tmp_path: Path) -> None:
    write(source, "kestrel.md", "# Kestrel\n\nA small falcon hovering over the verge.\n")
    write(source, "raptors.md", "# Raptors\n\nBirds of prey hunt mice at dusk.\n")
    write(source, "v1/raptors.md", "# Raptors\n\nBirds of prey hunt mice at dusk.\n")
    write(source, "owls.md", "# Owls\n\nOwls are birds of prey that hunt at night.\n")
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        async def idle() -> bool:
            return (await call(client, "get_index_status"))["state"] == "idle"

        await wait_for(idle)
        alone = await call(client, "search", {"query": "falcon"})
        assert [found["path"] for found in alone["results"]] == ["kestrel.md"]
        fused = await call(client, "search", {"query": "falcon", "alternatives": ["birds of prey", "raptor hunting", "falcon"]})
        paths = [found["path"] for found in fused["results"]]
        assert set(paths) == {"kestrel.md", "raptors.md", "owls.md"} and len(paths) == 3, fused  # v1/ folded in also_in
        assert all({"path", "snippet", "score", "last_modified"} <= set(found) for found in fused["results"])
        too_many = await client.call_tool("search", {"query": "falcon", "alternatives": ["a", "b", "c", "d", "e"]})
        assert too_many.is_error and "alternatives" in too_many.content[0].text
        weak = await call(client, "search", {"query": "falcon", "alternatives": ["***"]})
        assert [found["path"] for found in weak["results"]] == ["kestrel.md"] and "was not searched" in weak["warnings"][0]
    cli = subprocess.run([sys.executable, str(MAIN_PY), "search", "falcon", "--alt", "birds of prey", "--json",
                          "--source", str(source), "--index-dir", str(tmp_path / "idx")], capture_output=True, text=True, timeout=60)
    assert {found["path"] for found in json.loads(cli.stdout)["results"]} == {"kestrel.md", "raptors.md", "owls.md"}, cli.stderr
    index = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    for alternative in ("-night birds of prey", "-night"):  # a phrasing that starts with an excluded word is still the phrasing
        excluding = subprocess.run([sys.executable, str(MAIN_PY), "search", "falcon", "--alt", alternative, "--json", *index],
                                   capture_output=True, text=True, timeout=60)
        assert excluding.returncode == 0, excluding.stderr
        found = json.loads(excluding.stdout)
        # (a phrasing of excluded words only is searched for them, as a query is)
        assert {hit["path"] for hit in found["results"]} == ({"kestrel.md", "raptors.md"} if " " in alternative else {"kestrel.md", "owls.md"})
    blank = subprocess.run([sys.executable, str(MAIN_PY), "search", "falcon", "--alt", " ", *index], capture_output=True, text=True, timeout=60)
    assert blank.returncode != 0 and "phrasing 1 is empty" in blank.stderr


def test_pages_of_a_fused_search_never_repeat_a_file(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    for n in range(40):
        write(source, f"t{n % 4}/doc{n}.md", f"# Doc {n}\n\nwidget {'timeout ' * (n % 3)}{'kernel ' * (n % 5)} number{n}\n")
    indexer.scan()
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = fused_search(config.db_path, "widget", 7, offset=offset, alternatives=["timeout kernel", "kernel"])
        seen += [hit["path"] for hit in page["results"]]
        offset = page["next_offset"]
    assert len(seen) == len(set(seen)) and len(seen) >= 20, seen


def test_only_the_query_is_widened_by_feedback_words_the_alternatives_are_the_agents_own(
    source: Path, indexer: TextIndexer, config: ServerConfig
) -> None:
    for n in range(4):
        write(source, f"owls/owl{n}.md", f"# Owl {n}\n\nThe owl hunts at night; a nocturnal bird number {n}.\n")
    write(source, "bats.md", "# Bats\n\nBats are nocturnal too.\n")
    write(source, "kestrel.md", "# Kestrel\n\nA falcon of the day.\n")
    for n in range(12):
        write(source, f"filler/f{n}.md", f"# Filler {n}\n\nNothing of interest in filler page {n}.\n")
    indexer.scan()
    question = "how do owls hunt at night?"
    assert "bats.md" in [hit["path"] for hit in search(config.db_path, question, 30)["results"]]  # found by "nocturnal"
    as_query = fused_search(config.db_path, question, 30, alternatives=["falcon"])
    assert "bats.md" in [hit["path"] for hit in as_query["results"]]
    as_alternative = fused_search(config.db_path, "falcon", 30, alternatives=[question])
    paths = [hit["path"] for hit in as_alternative["results"]]
    assert "bats.md" not in paths and "owls/owl0.md" in paths and "kestrel.md" in paths


def test_an_answer_the_phrasings_agree_on_below_the_places_they_show_is_shown_whole(
    source: Path, indexer: TextIndexer, config: ServerConfig
) -> None:
    for word in ("alpha", "beta", "gamma"):
        for n in range(2):
            write(source, f"{word}{n}.md", f"# {word.title()} {n}\n\n{word} {word} {word} {word}, {('one', 'two')[n]} way.\n")
    filler = "\n\n".join(f"Plain line {n} of the long page." for n in range(60))
    write(source, "shared.md", f"# Shared\n\n{filler}\n\n## The part that answers\n\nHere alpha, beta and gamma meet.\n\n{filler}\n")
    indexer.scan()
    assert [hit["path"] for hit in search(config.db_path, "alpha", 3)["results"]][2] == "shared.md"  # third in each list
    fused = fused_search(config.db_path, "alpha", 2, alternatives=["beta", "gamma"])
    [hit] = [hit for hit in fused["results"] if hit["path"] == "shared.md"]
    assert fused["results"][0] is hit  # three lists agree on it
    assert hit["heading"] == "Shared > The part that answers" and "**alpha**" in hit["snippet"], hit
    assert all(hit["snippet"] for hit in fused["results"])


def test_answers_alike_are_one_fused_result_on_every_page(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    for n in range(6):  # the same answering section in six different handbooks
        lines = "\n".join(f"Line {x} about team {n} thing{x}{n} other{n}{x}" for x in range(40))
        write(source, f"t{n}/handbook.md", f"# Handbook {n}\n\n{lines}\n\n## Firewall port\n\nTo open a firewall port ask the network team.\n")
    for n in range(8):  # versions of one page; only two hold the alternative's word
        extra = "\nThe legacyword setting applies here.\n" if n < 2 else ""
        body = "\n\n".join(f"Line {x} of the long description, with policy number {x}." for x in range(20))
        write(source, f"ref/7.{n}/about_Signing.md", f"# about_Signing\n\n## Short description\n\nHow to sign scripts.\n\n{body}\n{extra}")
    indexer.scan()
    whole = fused_search(config.db_path, "firewall port", 10, alternatives=["network team ticket"])
    assert [hit["path"] for hit in whole["results"]] == ["t0/handbook.md"] and whole["results"][0]["also_in_count"] == 5
    first = fused_search(config.db_path, "firewall port", 1, alternatives=["network team ticket"])
    assert [hit["path"] for hit in first["results"]] == ["t0/handbook.md"] and first["next_offset"] is None
    signing = fused_search(config.db_path, "sign scripts", 10, alternatives=["legacyword"])["results"]
    assert len(signing) == 1 and signing[0]["also_in_count"] == 7, signing  # not the page again from the alternative


def test_the_querys_excluded_words_leave_files_out_of_every_phrasings_list(
    source: Path, indexer: TextIndexer, config: ServerConfig
) -> None:
    write(source, "a.md", "# Firewall\n\nOpen a port in the firewall with iptables.\n")
    write(source, "b.md", "# Ports\n\nOpen a port with ufw allow.\n")
    indexer.scan()
    fused = fused_search(config.db_path, "firewall -ufw", 10, alternatives=["open a port"])
    assert [hit["path"] for hit in fused["results"]] == ["a.md"], fused["results"]


def test_a_file_gone_before_its_result_is_shown_is_left_out(source: Path, indexer: TextIndexer, config: ServerConfig) -> None:
    for n in range(3):
        write(source, f"doc{n}.md", f"# Doc {n}\n\nwombat number {n} {'x ' * n}\n")
    indexer.scan()
    reply, detail = searched_page(config.db_path, "wombat", 3, shown=1)
    assert len(reply["results"]) == 3 and len(detail.bare) == 2 and not reply["results"][2]["snippet"]
    gone = reply["results"][2]["path"]
    (source / gone).unlink()
    indexer.scan()
    results = [dict(hit) for hit in reply["results"]]
    _show_bare(config.db_path, results, [0] * len(results), [("wombat", reply, detail)])
    assert [hit["path"] for hit in results] == [hit["path"] for hit in reply["results"][:2]]
    assert "**wombat**" in results[1]["snippet"]


def test_a_warning_about_an_alternative_names_it_and_the_reply_answers_the_query(
    source: Path, indexer: TextIndexer, config: ServerConfig
) -> None:
    write(source, "a.md", "# Owls\n\nOwls hunt at night.\n")
    indexer.scan()
    fused = fused_search(config.db_path, "!!!", 10, alternatives=["owls -day"])
    assert fused["query"] == "!!!" and [hit["path"] for hit in fused["results"]] == ["a.md"]
    fused = fused_search(config.db_path, "owls", 10, alternatives=["-night"])  # excluded words only: searched for them
    assert any(warning.startswith("the phrasing '-night': ") for warning in fused["warnings"]), fused["warnings"]
