"""Hostile configuration: a config file that is not a regular file, or too large, or nested past
the stack; numbers that a float would silently round to 0 or to infinity, or that are not finite."""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from config import MAX_CONFIG_FILE_BYTES, load_config
from exceptions import ConfigError
from tests.conftest import MAIN_PY

pytestmark = pytest.mark.usefixtures("no_hang")


def limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_a_config_file_that_is_a_device_is_refused_unread(source: Path) -> None:
    # Run apart, its memory bounded: /dev/zero used to be read until the memory ran out.
    done = subprocess.run([sys.executable, str(MAIN_PY), "status", "--source", str(source), "--config", "/dev/zero"],
                          capture_output=True, text=True, timeout=60, preexec_fn=limited_memory)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "config: is not a regular file" in done.stderr and "/dev/zero" in done.stderr


def test_a_config_file_that_is_a_fifo_is_refused_without_waiting_for_a_writer(source: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):  # used to block in open() for ever
        load_config({"source_directory": str(source)}, fifo, {})
    with pytest.raises(ConfigError, match="not a regular file"):  # named by the environment, too
        load_config({"source_directory": str(source)}, None, {"DOCSEARCH_CONFIG": str(fifo)})
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config({"source_directory": str(source)}, tmp_path, {})  # a folder


def test_a_config_file_too_large_or_nested_too_deep_is_refused(source: Path, tmp_path: Path) -> None:
    large = tmp_path / "large.json"
    with large.open("wb") as out:
        out.truncate(MAX_CONFIG_FILE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match="larger than"):
        load_config({"source_directory": str(source)}, large, {})
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 1_000_000)  # used to end in a RecursionError traceback
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config({"source_directory": str(source)}, deep, {})
    digits = tmp_path / "digits.json"  # an integer past Python's 4300-digit limit used to end in a ValueError traceback
    digits.write_text(json.dumps({"source_directory": str(source)})[:-1] + ', "max_file_size_mb": ' + "9" * 5000 + "}")
    with pytest.raises(ConfigError, match="max_file_size_mb: must be at most 1024"):
        load_config({}, digits, {})


def test_a_config_file_at_the_size_limit_is_read(source: Path, tmp_path: Path) -> None:
    settings = json.dumps({"source_directory": str(source), "scan_interval_seconds": 7})
    config_file = tmp_path / "c.json"
    config_file.write_text(settings + " " * (MAX_CONFIG_FILE_BYTES - len(settings)))
    assert load_config({}, config_file, {}).scan_interval_seconds == 7


def test_cli_exits_2_at_once_on_a_config_file_that_is_a_fifo(source: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, str(MAIN_PY), "status", "--source", str(source), "--config", str(fifo)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("written", ["1e-400", "-1e-400", "1e400", "-1e400", "inf", "-inf", "nan", "1e-320", "1e9999999999999999999"])
@pytest.mark.parametrize("key", ["scan_interval_seconds", "max_file_size_mb"])
def test_numbers_a_float_cannot_hold_are_refused_by_name(source: Path, tmp_path: Path, key: str, written: str) -> None:
    env = {"DOCSEARCH_SOURCE_DIRECTORY": str(source), f"DOCSEARCH_{key.upper()}": written}
    with pytest.raises(ConfigError) as caught:  # 1e-400 used to be read as 0: no periodic rescan
        load_config({}, None, env)
    assert caught.value.key == key and written in str(caught.value)
    json_number = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}.get(written, written)
    config_file = tmp_path / "c.json"
    config_file.write_text(f'{{"source_directory": {json.dumps(str(source))}, "{key}": {json_number}}}')
    with pytest.raises(ConfigError) as caught:
        load_config({}, config_file, {})
    assert caught.value.key in (key, "config") and str(config_file) in str(caught.value)


@pytest.mark.parametrize(("written", "seconds"), [("0", 0.0), ("-0", 0.0), ("0.1", 0.1), ("1e-1", 0.1), (" 2.5 ", 2.5), ("31536000", 31536000.0)])
def test_numbers_within_bounds_are_read_as_written(source: Path, tmp_path: Path, written: str, seconds: float) -> None:
    config = load_config({"source_directory": str(source), "scan_interval_seconds": written}, None, {})
    assert config.scan_interval_seconds == seconds and math.copysign(1, config.scan_interval_seconds) == 1
    config_file = tmp_path / "c.json"
    config_file.write_text(f'{{"source_directory": {json.dumps(str(source))}, "scan_interval_seconds": {written.strip()}}}')
    assert load_config({}, config_file, {}).scan_interval_seconds == seconds


def test_a_number_from_the_config_file_is_quoted_as_written(source: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"source_directory": str(source), "include_hidden": 1.5}))
    with pytest.raises(ConfigError, match=r"include_hidden: must be true or false, got 1\.5 "):
        load_config({}, config_file, {})
