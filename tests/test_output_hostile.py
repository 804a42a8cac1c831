"""Every reply, error message, log line and CLI output can be written as UTF-8, whatever the names
on disk: a source folder (or an index folder, or a file) whose name is not UTF-8 is held by Python
with lone surrogates, which the MCP SDK cannot write. Status says how to index skipped PDFs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from exceptions import SourceUnavailableError, writable
from exceptions import writable_reply
from main import printable
from tests.conftest import MAIN_PY, write

LATIN1 = os.fsdecode(b"caf\xe9")  # "caf\udce9": the folder name's byte 0xe9 is not UTF-8


@pytest.fixture
def latin1_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A source folder named in Latin-1 holding a readable note, a PDF (read only with pdftotext),
    a file and a folder named in Latin-1; an index folder named in Latin-1; a PATH without pdftotext."""
    source = tmp_path / LATIN1
    write(source, "a.md", "# Alpha\n\nthe wombat burrows\n")
    write(source, "paper.pdf", b"%PDF-1.4\n%%EOF\n")
    write(source, os.fsdecode(b"n\xe9e.md"), "an undecodable name\n")
    write(source, os.fsdecode(b"d\xe9r/inner.md"), "under an undecodable folder\n")
    no_tools = tmp_path / "empty-bin"
    no_tools.mkdir()
    return source, tmp_path / os.fsdecode(b"ind\xe9x"), no_tools


def test_writable_shows_each_lone_surrogate_as_a_replacement_character() -> None:
    assert writable(LATIN1) == "caf\ufffd"
    assert writable("plain") == "plain" and writable("東京 \ud800x") == "東京 \ufffdx"
    assert str(SourceUnavailableError(LATIN1, "cannot list it")) == "source directory caf\ufffd: cannot list it"
    assert printable(f"{LATIN1}\x1b[2J") == "caf\ufffd\\x1b[2J"
    reply = writable_reply({"a": [LATIN1, {"b": LATIN1}], "n": 3, "none": None})
    assert reply == {"a": ["caf\ufffd", {"b": "caf\ufffd"}], "n": 3, "none": None}


@pytest.mark.anyio
async def test_every_tool_answers_over_stdio_for_a_source_whose_name_is_not_utf8(latin1_tree: tuple[Path, Path, Path]) -> None:
    source, index_dir, no_tools = latin1_tree
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(MAIN_PY), "--source", str(source), "--index-dir", str(index_dir), "--include-ext", ".md,.pdf", "--scan-interval", "0"],
        env={"PATH": str(no_tools), "HOME": os.environ.get("HOME", "/")},
    )

    async def answer(client: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[bool, str, dict[str, Any] | None]:
        result = await client.call_tool(tool, args or {})
        return result.is_error, result.content[0].text, result.structured_content

    with anyio.fail_after(60):  # a server that died mid-request leaves the client waiting
        async with Client(params) as client:
            for tool, args in [("get_document", {"path": "/etc/passwd"}), ("refresh_index", {"filepath": "/etc/hosts"})]:
                failed, text, _ = await answer(client, tool, args)  # a refusal that named the source killed the server
                assert failed and "refused" in text, text
            while True:  # get_index_status used to fail outright here
                failed, text, status = await answer(client, "get_index_status")
                assert not failed, text
                assert status is not None
                if status["state"] == "idle":
                    break
                await anyio.sleep(0.1)
            assert status["source_directory"] == writable(str(source)) and status["source_directory"].endswith("caf\ufffd")
            assert "ind\ufffdx" in status["index_path"] and "caf\ufffd" in text  # structured and text content alike
            assert status["indexed_files"] == 1
            assert status["skipped_files"] == {"undecodable_name": 2, "no_extractor": 1}
            assert "poppler-utils" in status["hint"] and "PATH" in status["hint"] and text.count("poppler-utils") == 1

            failed, text, _ = await answer(client, "get_document", {"path": "n\ufffde.md"})
            assert failed and "no such file" in text
            failed, text, found = await answer(client, "search", {"query": "wombat"})
            assert not failed and found is not None and [hit["path"] for hit in found["results"]] == ["a.md"]
            failed, text, document = await answer(client, "get_document", {"path": "a.md"})
            assert not failed and document is not None and "wombat" in document["text"]
            for args in [{}, {"filepath": "a.md"}]:
                failed, text, refreshed = await answer(client, "refresh_index", args)
                assert not failed and refreshed is not None and refreshed["success"], text
            source.rename(source.with_name("moved"))  # a scan now fails, naming the source
            failed, text, refreshed = await answer(client, "refresh_index")
            assert "caf" in text and (failed or not refreshed["success"]), text
            source.with_name("moved").rename(source)
            failed, text, status = await answer(client, "get_index_status")  # still alive, still answering
            assert not failed and status is not None and status["indexed_files"] == 1


def run_strict(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """main.py with stdout and stderr strict UTF-8 (as in a UTF-8 locale other than C.UTF-8)."""
    return subprocess.run(
        [sys.executable, str(MAIN_PY), *args], capture_output=True, timeout=120, env={**env, "PYTHONIOENCODING": "utf-8:strict"},
    )


def test_cli_index_status_and_search_write_names_that_are_not_utf8(latin1_tree: tuple[Path, Path, Path]) -> None:
    source, index_dir, no_tools = latin1_tree
    env = {"PATH": str(no_tools), "HOME": os.environ.get("HOME", "/")}
    settings = ["--source", str(source), "--index-dir", str(index_dir), "--include-ext", ".md,.pdf"]
    outputs = {}
    for command in (["index"], ["status"], ["status", "--json"], ["search", "wombat", "--json"], ["search", "wombat"]):
        done = run_strict(*command, *settings, env=env)
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
        outputs[command[0], len(command)] = (done.stdout.decode("utf-8"), done.stderr.decode("utf-8"))  # strict: valid UTF-8
    index_err = outputs["index", 1][1]
    assert "ind\ufffdx" in index_err and "undecodable_name 2" in index_err and "\\udc" not in index_err
    text = outputs["status", 1][0]
    assert "caf\ufffd" in text and "ind\ufffdx" in text and text.count("poppler-utils") == 1
    status = json.loads(outputs["status", 2][0])
    assert status["source_directory"].endswith("caf\ufffd") and "poppler-utils" in status["hint"]
    assert [hit["path"] for hit in json.loads(outputs["search", 3][0])["results"]] == ["a.md"]


@pytest.mark.parametrize("pdftotext_missing", [True, False])
def test_status_says_once_how_to_index_pdfs_skipped_for_want_of_pdftotext(source: Path, tmp_path: Path, pdftotext_missing: bool) -> None:
    write(source, "a.md", "alpha\n")
    if pdftotext_missing:
        write(source, "one.pdf", b"%PDF-1.4\n%%EOF\n")
        write(source, "two.pdf", b"%PDF-1.4\n%%EOF\n")
    (tmp_path / "empty-bin").mkdir()
    env = {"PATH": str(tmp_path / "empty-bin"), "HOME": os.environ.get("HOME", "/")}
    settings = ["--source", str(source), "--index-dir", str(tmp_path / "idx"), "--include-ext", ".md,.pdf"]
    assert run_strict("index", *settings, env=env).returncode == 0
    text = run_strict("status", *settings, env=env).stdout.decode()
    status = json.loads(run_strict("status", "--json", *settings, env=env).stdout)
    if not pdftotext_missing:
        assert "hint" not in status and "hint" not in text
        return
    assert status["skipped_files"] == {"no_extractor": 2}
    assert status["hint"].startswith("2 PDFs not indexed") and "poppler-utils" in status["hint"] and "PATH" in status["hint"]
    assert text.count("poppler-utils") == 1 and f"hint       {status['hint']}" in text


@pytest.mark.anyio
async def test_errors_naming_an_index_folder_that_is_not_utf8_reach_the_client(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "alpha\n")
    blocker = tmp_path / os.fsdecode(b"ind\xe9x")
    blocker.write_text("a file where the index folder should be")
    params = StdioServerParameters(command=sys.executable, args=[str(MAIN_PY), "--source", str(source), "--index-dir", str(blocker / "idx")])
    with anyio.fail_after(60):  # a server that died mid-request leaves the client waiting
        async with Client(params) as client:
            while True:
                status = await client.call_tool("get_index_status", {})
                assert not status.is_error, status.content[0].text
                if status.structured_content["state"] == "error":
                    break
                await anyio.sleep(0.1)
            assert "ind\ufffdx" in status.structured_content["last_error"]
            for tool, args in [("search", {"query": "alpha"}), ("refresh_index", {"filepath": "a.md"}), ("refresh_index", {})]:
                result = await client.call_tool(tool, args)
                assert result.is_error and "ind\ufffdx" in result.content[0].text, (tool, result.content[0].text)
