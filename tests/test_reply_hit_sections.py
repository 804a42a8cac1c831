"""Hits at the section that answers (the heading whose own lines hold the words), and clean snippets."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from indexer import TextIndexer
from models import ServerConfig
from search import search
from sections import heading_spans, split_sections
from snippets import ELLIPSIS, SNIPPET_MAX_CHARS, bounded_snippet, clean_snippet, without_heading
from tests.conftest import write
from tests.test_mcp_stdio import call, server_params, wait_for

M_OPEN, M_CLOSE = "\ue000", "\ue001"  # the private markers a snippet's matches are between


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("# Firewall ##", "Firewall"),
        ("---\ntitle: Notes\n---\n# Notes\ntext", "Notes\ntext"),
        ("Heading\n=======\ntext", "Heading\ntext"),
        (f"**{M_OPEN}WhatIf{M_CLOSE}** switch", f"{M_OPEN}WhatIf{M_CLOSE} switch"),
        ("*em* and _em_ and ***both***", "em and em and both"),
        ("about_Signing and snake_case_name", "about_Signing and snake_case_name"),
        (r"\*not emphasis\* and 3 \* 4", "*not emphasis* and 3 * 4"),
        ("see [the guide](https://example.com/guide.md) or ![logo](logo.png)", "see the guide or logo"),
        ("<https://example.com> [ref][1]", "https://example.com ref"),
        ("a<br/>b <span class='x'>c</span> <!-- hidden --> <String[]> <String>", "a b  c    <String[]> <String>"),
        ("| Name | Value |\n|---|:---:|\n| a \\| b | c |", "Name; Value\na | b; c"),
        ("```powershell\nGet-Process | Sort-Object **x\n```\nafter", "Get-Process | Sort-Object **x\nafter"),
        ("`**kwargs` and **bold *nested* x**", "`**kwargs` and bold nested x"),
        ("…## Part\n- one\n* two\n> quoted…", "…Part\none\ntwo\nquoted…"),
        ("---\n\nabove a rule", "\nabove a rule"),
        ("[a](../x(v=1).md), cut](../y.md) and [cut](../z", "a, cut and [cut"),  # links the snippet's ends cut
        ("[`Get-Item`](xref:Get-Item) and [`Select-String`][22]; `[a](b)` is code", "`Get-Item` and `Select-String`; `[a](b)` is code"),
        ("> [!NOTE]\n> Be careful.", "NOTE:\nBe careful."),
    ],
)
def test_clean_snippet_keeps_the_text_and_drops_the_markup(raw: str, clean: str) -> None:
    assert clean_snippet(raw) == clean


def test_a_snippet_that_starts_inside_code_keeps_it_until_the_fence() -> None:
    assert clean_snippet("Get-Item **x**\n```\n> **Note** text") == "Get-Item x\n> **Note** text"
    assert clean_snippet("Get-Item **x**\n```\n> **Note** text", in_fence=True) == "Get-Item **x**\nNote text"


def test_a_snippet_leaves_out_the_heading_it_starts_with_when_the_rest_shows_a_match() -> None:
    heading = "about_Signing > Sign a script"
    assert without_heading(f"{M_OPEN}Sign{M_CLOSE} a {M_OPEN}script{M_CLOSE} Signing a {M_OPEN}script{M_CLOSE} permits", heading) == (
        f"Signing a {M_OPEN}script{M_CLOSE} permits")
    assert without_heading(f"about_Signing Sign a script Run {M_OPEN}it{M_CLOSE}.", heading) == f"Run {M_OPEN}it{M_CLOSE}."  # the path's parts
    kept = [
        f"{M_OPEN}Sign{M_CLOSE} a script Nothing matched here.",  # the heading's words are the only match
        f"{M_OPEN}Sign a script permits{M_CLOSE} you.",  # a phrase across the heading's end
        f"{ELLIPSIS}Sign a script {M_OPEN}x{M_CLOSE}",  # cut: not the section's start
        f"Sign a scripting {M_OPEN}x{M_CLOSE}",  # another word
    ]
    assert [without_heading(text, heading) for text in kept] == kept


def test_a_long_snippet_is_cut_around_the_most_matched_words_at_spaces() -> None:
    words = [f"{M_OPEN}alpha{M_CLOSE}", *["filler"] * 40, f"{M_OPEN}alpha{M_CLOSE}", "and", f"{M_OPEN}beta{M_CLOSE}", "then",
             f"{M_OPEN}gamma{M_CLOSE}", *["tail"] * 40]
    cut = bounded_snippet(" ".join(words))
    assert cut.startswith(ELLIPSIS) and cut.endswith(ELLIPSIS) and len(cut) <= SNIPPET_MAX_CHARS + 2
    assert all(f"{M_OPEN}{word}{M_CLOSE}" in cut for word in ("alpha", "beta", "gamma"))
    assert set(cut.strip(ELLIPSIS).split(" ")) <= set(words)  # no word shown in part
    phrase = f"{M_OPEN}{'long phrase ' * 20}{M_CLOSE}"
    assert M_CLOSE in bounded_snippet(f"lead {phrase} after")  # a match longer than a snippet is closed


def _rows(text: str, name: str) -> list[tuple[int, int, str]]:
    return [(s.start_line, s.end_line, s.body) for s in split_sections(text, name)[1]]


def test_every_heading_starts_a_span_named_by_its_path() -> None:
    text = "---\ntitle: T\n---\n# Page\n\n## Short\nSays a.\n\n## Long\nSays b.\n\n### Deep\nSays c.\n"
    spans = heading_spans(_rows(text, "p.md"), "p.md")
    # The title has no text of its own: it goes with the span after it, and its name counts there.
    assert [(s.heading, s.name, s.start_line, s.end_line) for s in spans] == [
        ("Page > Short", "Page Short", 4, 7),
        ("Page > Long", "Long", 9, 10),
        ("Page > Long > Deep", "Deep", 12, 13),
    ]
    assert spans[2].text == "### Deep\nSays c."
    assert heading_spans(_rows("plain text\n", "notes.txt"), "notes.txt") == []


def _long_page() -> str:
    filler = "\n\n".join(f"Paragraph {i} on policies, scopes and other matters." for i in range(700))
    return (
        "---\ntitle: about_Signing\n---\n# about_Signing\n\n## Short description\nExplains how policies work.\n\n"
        f"## Long description\n{filler}\n\n## Sign a script\n\n"
        "Signing a script permits you to run the script. Use **-WhatIf** with a [certificate](https://x.example/c.md).\n\n"
        "### Details\n| Name | Value |\n|---|---|\n| a | b |\n"
    )


def test_a_hit_names_the_deepest_heading_holding_the_words(indexer: TextIndexer, config: ServerConfig) -> None:
    text = _long_page()
    write(config.source_directory, "about_Signing.md", text)
    assert len(split_sections(text, "about_Signing.md")[1]) > 1  # merged rows: the heading is not a row's first
    indexer.scan()
    [hit] = search(config.db_path, "how do I sign a script")["results"]
    lines = text.split("\n")
    start = lines.index("## Sign a script") + 1
    assert hit["heading"] == "about_Signing > Sign a script"
    assert (hit["line_start"], hit["line_end"]) == (start, start + 2)
    assert hit["snippet"].startswith("**Signing** a **script** permits")  # the heading's words are in heading only
    # Clean: no heading marker, link target or escaped bold; the source's own ** are gone.
    assert "#" not in hit["snippet"] and "https" not in hit["snippet"] and "\\*" not in hit["snippet"]
    assert "-WhatIf with a certificate." in hit["snippet"]
    long = search(config.db_path, "paragraph matters")["results"][0]["snippet"]  # a long section: cut to the bound
    assert len(long.replace("**", "").strip(ELLIPSIS)) <= SNIPPET_MAX_CHARS and "**Paragraph**" in long and "**matters**" in long

    [whatif] = search(config.db_path, "WhatIf")["results"]
    assert "**WhatIf**" in whatif["snippet"] and "\\*" not in whatif["snippet"]
    [details] = search(config.db_path, "details name")["results"]
    assert details["heading"] == "about_Signing > Sign a script > Details"
    assert details["snippet"] == "**Name**; Value a; b"
    [page] = search(config.db_path, "about_Signing")["results"]
    assert page["heading"] == "about_Signing > Short description"  # the title's words, with the text under it


@pytest.mark.anyio
async def test_get_document_reads_only_the_section_a_hit_names(source: Path, tmp_path: Path) -> None:
    write(source, "about_Signing.md", _long_page())
    async with Client(server_params(source, tmp_path / "idx", "--scan-interval", "0")) as client:
        async def indexed() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 1

        await wait_for(indexed)
        [hit] = (await call(client, "search", {"query": "how do I sign a script"}))["results"]
        assert hit["heading"] == "about_Signing > Sign a script"
        part = await call(client, "get_document", {"path": hit["path"], "heading": hit["heading"]})
        assert part["text"].startswith("## Sign a script\n\nSigning a script permits")
        assert "Paragraph" not in part["text"] and len(part["text"]) < 300  # that section and its subsection only
