"""Settings per source: a config file's source may carry its own file-selection settings, so one
server serves notes as Markdown and a repository as code (the @code preset); through a real MCP
session, a hit in the repository names its definition and get_document returns it."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from config import EXTENSION_PRESETS, load_config
from exceptions import ConfigError
from tests.conftest import MAIN_PY, write
from tests.mcp_client import call, wait_for

REPO_CODE = '''"""Retry policy for outgoing calls."""


class Backoff:
    def next_delay(self, attempt):
        """Doubles the wait after each failed attempt, the zebra way."""
        return 2 ** attempt
'''


def folders(tmp_path: Path) -> tuple[Path, Path]:
    notes, repo = tmp_path / "notes", tmp_path / "repo"
    write(notes, "retry.md", "# Retries\n\nWe retry with a zebra backoff.\n")
    write(notes, "scratch.py", "zebra = 'not indexed: notes hold Markdown only'\n")
    write(repo, "backoff.py", REPO_CODE)
    write(repo, "vendor/copy.py", "zebra = 'excluded by the source's own pattern'\n")
    return notes, repo


def config_file(tmp_path: Path, repo_entry: object) -> Path:
    notes, repo = folders(tmp_path)
    path = tmp_path / "config.json"
    entry = {"path": str(repo), **repo_entry} if isinstance(repo_entry, dict) else repo_entry
    path.write_text(json.dumps({"sources": {"notes": str(notes), "repo": entry}, "index_output_directory": str(tmp_path / "idx")}))
    return path


def test_each_source_has_its_own_settings_and_one_index(tmp_path: Path) -> None:
    config = load_config({}, config_file(tmp_path, {"included_extensions": "@code", "exclude_patterns": ["vendor/**"]}), {})
    notes, repo = (config.for_source(source) for source in config.sources)
    assert notes.included_extensions == (".txt", ".md", ".rst") and notes.exclude_patterns == ()
    assert repo.included_extensions == EXTENSION_PRESETS["code"] and repo.exclude_patterns == ("vendor/**",)
    assert notes.db_path == repo.db_path == config.db_path
    plain = load_config({}, config_file(tmp_path / "plain", {}), {})
    assert replace(plain, index_output_directory=config.index_output_directory).db_path.name.rsplit("-", 1)[1] != config.db_path.name.rsplit("-", 1)[1]


def test_a_folder_alone_keeps_the_server_settings(tmp_path: Path) -> None:
    config = load_config({"included_extensions": ".md,.py"}, config_file(tmp_path, str(tmp_path / "repo")), {})
    assert all(config.for_source(source).included_extensions == (".md", ".py") for source in config.sources)


@pytest.mark.parametrize(("entry", "message"), [
    ({"included_extension": [".py"]}, "unknown setting 'included_extension'"),
    ({"included_extensions": "@nope"}, "'@nope' is not a preset"),
    ({"max_file_size_mb": 0}, "sources.repo.max_file_size_mb"),
    ({"include_hidden": "maybe"}, "sources.repo.include_hidden"),
])
def test_a_bad_source_setting_is_named(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(ConfigError, match="sources.repo") as raised:
        load_config({}, config_file(tmp_path, entry), {})
    assert message in str(raised.value)


def test_a_source_object_needs_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='needs "path"'):
        load_config({}, _without_path(tmp_path), {})


def _without_path(tmp_path: Path) -> Path:
    path = config_file(tmp_path, {})
    values = json.loads(path.read_text())
    values["sources"]["repo"] = {"included_extensions": "@code"}
    path.write_text(json.dumps(values))
    return path


@pytest.mark.anyio
async def test_notes_and_a_repository_in_one_mcp_session(tmp_path: Path) -> None:
    path = config_file(tmp_path, {"included_extensions": "@code", "exclude_patterns": ["vendor/**"]})
    params = StdioServerParameters(command=sys.executable, args=[str(MAIN_PY), "--config", str(path)])
    async with Client(params) as client:
        async def indexed() -> bool:
            status = await call(client, "get_index_status")
            return status["state"] == "idle" and status["indexed_files"] == 2
        await wait_for(indexed)
        hits = (await call(client, "search", {"query": "zebra"}))["results"]
        assert {(hit["collection"], hit["path"]) for hit in hits} == {("notes", "retry.md"), ("repo", "backoff.py")}
        code = next(hit for hit in hits if hit["collection"] == "repo")
        assert code["heading"] == "class Backoff > def next_delay"
        assert code["title"] == "Retry policy for outgoing calls."
        document = await call(client, "get_document", {"path": "backoff.py", "collection": "repo", "heading": code["heading"]})
        assert document["text"].startswith("    def next_delay(self, attempt):") and "class Backoff" not in document["text"]
