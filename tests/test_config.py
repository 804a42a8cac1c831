"""Configuration: precedence file < environment < flags, and one clear error per bad value."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from config import PROJECT_DIR, load_config, user_files
from exceptions import ConfigError
from tests.conftest import MAIN_PY


def test_defaults_need_only_a_source(source: Path) -> None:
    config = load_config({"source_directory": str(source)}, environ={})
    assert config.source_directory == source.resolve()
    assert config.index_output_directory == PROJECT_DIR / "indexes"
    assert config.included_extensions == (".txt", ".md", ".rst")
    assert config.excluded_extensions == ()
    assert config.scan_interval_seconds == 300
    assert config.max_file_size_mb == 10
    assert config.include_hidden is False


def test_include_hidden_from_each_place_and_its_own_index(source: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"source_directory": str(source), "include_hidden": True}))
    assert load_config({}, config_file, {}).include_hidden is True
    assert load_config({}, config_file, {"DOCSEARCH_INCLUDE_HIDDEN": "off"}).include_hidden is False
    assert load_config({"include_hidden": "Yes"}, config_file, {"DOCSEARCH_INCLUDE_HIDDEN": "0"}).include_hidden is True
    with pytest.raises(ConfigError) as caught:
        load_config({"include_hidden": "maybe"}, config_file, {})
    assert caught.value.key == "include_hidden" and "--include-hidden" in str(caught.value)
    plain = load_config({"source_directory": str(source)}, environ={})
    hidden = load_config({"source_directory": str(source), "include_hidden": "true"}, environ={})
    assert plain.db_path != hidden.db_path  # two settings, two indexes; the default keeps its old name
    assert "include_hidden" not in plain.index_settings


def test_file_then_environment_then_flags(source: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "conf" / "c.json"
    config_file.parent.mkdir()
    config_file.write_text(json.dumps({
        "source_directory": str(source), "index_output_directory": "out", "scan_interval_seconds": 10,
        "max_file_size_mb": 1, "included_extensions": ["MD", ".txt"],
    }))
    env = {"DOCSEARCH_SCAN_INTERVAL_SECONDS": "20", "DOCSEARCH_EXCLUDED_EXTENSIONS": ".log,.tmp"}
    config = load_config({"max_file_size_mb": "2.5"}, config_file, env)
    assert config.index_output_directory == config_file.parent.resolve() / "out"  # relative to the file
    assert config.included_extensions == (".md", ".txt")  # normalised
    assert config.scan_interval_seconds == 20  # env beats file
    assert config.excluded_extensions == (".log", ".tmp")
    assert config.max_file_size_mb == 2.5  # flag beats file


@pytest.mark.parametrize(
    ("overrides", "key", "fragment"),
    [
        ({"scan_interval_seconds": -1}, "scan_interval_seconds", "0 or more"),
        ({"scan_interval_seconds": "soon"}, "scan_interval_seconds", "must be a number"),
        ({"scan_interval_seconds": True}, "scan_interval_seconds", "must be a number"),
        ({"max_file_size_mb": 0}, "max_file_size_mb", "greater than 0"),
        ({"max_file_size_mb": 1e308}, "max_file_size_mb", "at most 1024"),
        ({"max_file_size_mb": 10**400}, "max_file_size_mb", "at most 1024"),
        ({"scan_interval_seconds": 1e10}, "scan_interval_seconds", "at most 3.1536e+07"),
        ({"scan_interval_seconds": 0.001}, "scan_interval_seconds", "at least 0.1"),
        ({"included_extensions": ".md"}, "included_extensions", "list of extensions"),
        ({"included_extensions": [".md", 3]}, "included_extensions", "list of extensions"),
        ({"excluded_extensions": [""]}, "excluded_extensions", "must not be empty"),
        ({"source_directory": 42}, "source_directory", "path string"),
        ({"colour": "blue"}, "colour", "unknown setting"),
        ({"include_hidden": "true"}, "include_hidden", "true or false"),  # a JSON string is not a boolean
        ({"include_hidden": 1}, "include_hidden", "true or false"),
    ],
)
def test_bad_values_name_the_key(source: Path, tmp_path: Path, overrides: dict, key: str, fragment: str) -> None:
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"source_directory": str(source), **overrides}))
    with pytest.raises(ConfigError) as caught:
        load_config({}, config_file, {})
    assert caught.value.key == key
    assert fragment in str(caught.value)
    assert str(config_file) in str(caught.value)


def test_missing_source_and_source_that_is_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="source_directory: required"):
        load_config({}, None, {})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({"source_directory": str(tmp_path / "nope")}, None, {})
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="is not a directory"):
        load_config({"source_directory": str(a_file)}, None, {})


def test_config_file_that_is_not_json(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config({}, bad, {})


def test_two_sources_never_share_an_index_file(tmp_path: Path) -> None:
    (tmp_path / "a" / "notes").mkdir(parents=True)
    (tmp_path / "b" / "notes").mkdir(parents=True)
    shared = {"index_output_directory": str(tmp_path / "idx")}
    first = load_config({**shared, "source_directory": str(tmp_path / "a" / "notes")}, None, {})
    second = load_config({**shared, "source_directory": str(tmp_path / "b" / "notes")}, None, {})
    assert first.db_path.parent == second.db_path.parent
    assert first.db_path != second.db_path


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--scan-interval", "-5"], "scan_interval_seconds: must be 0 or more"),
        (["--max-file-size-mb", "lots"], "max_file_size_mb: must be a number"),
        (["--max-file-size-mb", "1e308"], "max_file_size_mb: must be at most 1024"),
        (["--max-file-size-mb", "inf"], "max_file_size_mb: must be at most 1024"),
        (["--scan-interval", "1e10"], "scan_interval_seconds: must be at most"),
        (["--scan-interval", "nan"], "scan_interval_seconds: must be a number"),
    ],
)
def test_cli_exits_2_with_one_line(source: Path, args: list[str], fragment: str) -> None:
    run = subprocess.run(
        [sys.executable, str(MAIN_PY), "index", "--source", str(source), *args],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in run.stderr


def test_cli_missing_source_exits_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(MAIN_PY), "status", "--source", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert run.returncode == 2
    assert "source_directory" in run.stderr and "does not exist" in run.stderr


def test_the_largest_accepted_values_run(source: Path, tmp_path: Path) -> None:
    """The bounds are where the server still works: it indexes, its rescan loop waits, and it serves."""
    from reliability_helpers import RelStdioServer

    (source / "a.md").write_text("alpha")
    args = ("--source", str(source), "--index-dir", str(tmp_path / "idx"), "--max-file-size-mb", "1024",
            "--scan-interval", str(365 * 24 * 3600))
    with RelStdioServer(*args) as server:
        assert server.wait_for_scan()["indexed_files"] == 1
        assert server.call("search", {"query": "alpha"})["structuredContent"]["results"]
        assert server.close() == 0
        assert "Traceback" not in server.stderr, server.stderr


@pytest.mark.parametrize("bad", ["n" * 300, "~nosuchuser/notes"])
def test_unusable_relative_paths_are_one_line_errors(tmp_path: Path, bad: str) -> None:
    run = subprocess.run(
        [sys.executable, str(MAIN_PY), "status", "--source", bad], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "source_directory" in run.stderr and "Traceback" not in run.stderr


def test_run_from_a_clone_the_settings_and_index_stay_beside_the_modules(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "pyproject.toml").write_text("[project]\n")
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_DATA_HOME": str(tmp_path / "data")}
    assert user_files(environ, clone) == (clone / "config.json", clone / "indexes")


@pytest.mark.parametrize(
    ("environ", "config_home", "data_home"),
    [
        ({"XDG_CONFIG_HOME": "/x/cfg", "XDG_DATA_HOME": "/x/data"}, "/x/cfg", "/x/data"),
        ({}, "~/.config", "~/.local/share"),
        # A relative value is ignored, as the XDG specification says (it would follow the cwd).
        ({"XDG_CONFIG_HOME": "cfg", "XDG_DATA_HOME": "./data"}, "~/.config", "~/.local/share"),
        ({"XDG_CONFIG_HOME": "", "XDG_DATA_HOME": ""}, "~/.config", "~/.local/share"),
    ],
)
def test_installed_the_settings_and_index_are_in_the_users_xdg_folders(
    tmp_path: Path, environ: dict[str, str], config_home: str, data_home: str
) -> None:
    package = tmp_path / "site-packages" / "docsearch_mcp"
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text("")  # a stray file: still installed
    home = {"HOME": str(Path.home())}
    settings, index_dir = user_files({**home, **environ}, package)
    assert settings == Path(config_home).expanduser() / "docsearch" / "config.json"
    assert index_dir == Path(data_home).expanduser() / "docsearch" / "indexes"


@pytest.mark.parametrize("home", [None, "", "relhome", "./x"])
def test_a_home_that_is_missing_or_relative_is_not_followed_into_the_working_directory(tmp_path: Path, home: str | None) -> None:
    package = tmp_path / "site-packages" / "docsearch_mcp"
    package.mkdir(parents=True)
    settings, index_dir = user_files({} if home is None else {"HOME": home}, package)
    passwd_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert (settings, index_dir) == (passwd_home / ".config/docsearch/config.json", passwd_home / ".local/share/docsearch/indexes")


def test_without_any_home_the_index_directory_must_be_given(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import config as config_module

    monkeypatch.setattr(config_module, "PROJECT_DIR", tmp_path)  # as if installed: no pyproject.toml
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: (_ for _ in ()).throw(KeyError(uid)))  # a uid with no passwd entry
    with pytest.raises(ConfigError, match="no home folder to keep the index in.*--index-dir"):
        load_config({"source_directory": str(source)}, environ={})
    given = load_config({"source_directory": str(source), "index_output_directory": str(tmp_path / "idx")}, environ={})
    assert given.index_output_directory == (tmp_path / "idx").resolve()
