"""The command line as a user runs it: real subprocesses over a real tree."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from models import VERSION
from tests.conftest import MAIN_PY, PROJECT_DIR, write


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(MAIN_PY), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_index_search_status_round_trip(source: Path, tmp_path: Path) -> None:
    write(source, "ops/firewall.md", "# Firewall\n\nOpen port 22 with ufw allow.\n")
    write(source, "shop.txt", "eggs and milk")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    indexed = run("index", *idx)
    assert indexed.returncode == 0, indexed.stderr
    assert indexed.stdout == ""
    assert "indexed 2 files" in indexed.stderr and "2/2 files" in indexed.stderr

    found = run("search", "how do I open a port in the firewall?", *idx, "--json")
    assert found.returncode == 0, found.stderr
    reply = json.loads(found.stdout)
    assert reply["results"][0]["path"] == "ops/firewall.md" and reply["files_matched"] == 1

    human = run("search", "milk", *idx)
    assert human.stdout.startswith("shop.txt:1-1")

    status = json.loads(run("status", *idx, "--json").stdout)
    assert status["indexed_files"] == 2 and status["last_scan"]

    bad = run("search", "???", *idx)
    assert bad.returncode == 1 and "no words to search for" in bad.stderr


def test_search_before_any_index_says_what_to_do(source: Path, tmp_path: Path) -> None:
    result = run("search", "x", "--source", str(source), "--index-dir", str(tmp_path / "none"))
    assert result.returncode == 1
    assert "no index yet" in result.stderr and "Traceback" not in result.stderr


def test_cli_subcommands_do_not_import_the_mcp_sdk(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "alpha")
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import main;"
        "codes = [main.main(['index', '--source', sys.argv[2], '--index-dir', sys.argv[3]]),"
        " main.main(['search', 'alpha', '--source', sys.argv[2], '--index-dir', sys.argv[3]]),"
        " main.main(['status', '--source', sys.argv[2], '--index-dir', sys.argv[3]])];"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'));"
        "print(codes, loaded)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(PROJECT_DIR), str(source), str(tmp_path / "idx")],
        capture_output=True, text=True, timeout=120,
    )
    assert out.stdout.strip().endswith("[0, 0, 0] []"), out.stdout + out.stderr


def test_serve_stops_on_ctrl_c_while_its_client_stays_connected(source: Path, tmp_path: Path) -> None:
    import signal
    import time

    write(source, "a.md", "alpha")
    proc = subprocess.Popen(
        [sys.executable, str(MAIN_PY), "--source", str(source), "--index-dir", str(tmp_path / "idx")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not list((tmp_path / "idx").glob("*.sqlite3")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # let the server reach its stdin loop
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.communicate()  # stdin is still open: the server must not wait for it to close
    assert code == 130


def test_names_and_text_from_files_cannot_drive_the_terminal(source: Path, tmp_path: Path) -> None:
    escape = "\x1b]0;OWNED\x07\x1b[2J"
    write(source, f"{escape}evil\u202e.md", f"# Title {escape}\n\nzqmarkerqz {escape} text\n")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    indexed = run("index", *idx)
    found = run("search", "zqmarkerqz", *idx)
    status = run("status", *idx)
    for output in (indexed.stderr, found.stdout, found.stderr, status.stdout):
        assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output, output
    assert "\\x1b]0;OWNED" in found.stdout and "\\u202e" in found.stdout
    reply = json.loads(run("search", "zqmarkerqz", *idx, "--json").stdout)  # JSON keeps the real name
    assert reply["results"][0]["path"] == f"{escape}evil\u202e.md"


def test_version_is_the_one_the_server_sends() -> None:
    shown = run("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"docsearch-mcp {VERSION}"


def test_a_query_that_starts_with_a_dash_is_the_query(source: Path, tmp_path: Path) -> None:
    write(source, "draft.md", "kumquat draft notes")
    write(source, "final.md", "kumquat final notes")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    assert run("index", *idx).returncode == 0
    for args in (["-draft kumquat", *idx], [*idx, "-draft kumquat"], ["--limit", "5", "-draft kumquat", *idx],
                 ["--limit=5", *idx, "-draft kumquat"], [*idx, "--", "-draft kumquat"]):
        found = run("search", "--json", *args)
        assert found.returncode == 0, (args, found.stderr)
        assert [hit["path"] for hit in json.loads(found.stdout)["results"]] == ["final.md"], args
    # Options abbreviated before the query still work.
    assert json.loads(run("search", "--lim", "1", "kumquat", *idx, "--json").stdout)["files_matched"] == 2
    # An option's name is still the option; after "--" it is the query.
    assert "required: query" in run("search", "-v", *idx).stderr
    assert run("search", *idx, "--json", "--", "-nothing kumquat").returncode == 0


def test_status_is_a_readable_layout(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "alpha")
    write(source, "b.txt", b"\x00\x01\x02binary" * 100)
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    before = run("status", *idx)
    assert before.returncode == 0
    assert before.stdout.splitlines()[2].startswith("state      not indexed yet (run index, or start the server)")
    assert run("index", *idx).returncode == 0
    lines = dict(line.split(None, 1) for line in run("status", *idx).stdout.replace("last scan", "last_scan").splitlines())
    assert list(lines) == ["source", "index", "state", "last_scan", "files", "skipped", "watching"]
    assert lines["source"] == str(source.resolve())
    assert lines["state"] == "up to date" and lines["files"] == "1 indexed" and lines["skipped"] == "binary 1"
    assert lines["watching"].startswith("no: no server is running on this index")
    assert "{" not in "".join(lines.values()), "no dictionaries printed as Python"
    index_file = next((tmp_path / "idx").glob("*.sqlite3"))
    index_file.write_bytes(b"not a database " * 1000)
    damaged = run("status", *idx)
    assert damaged.returncode == 1
    assert re.search(r"^state +cannot be read: .*not a database", damaged.stdout, re.M), damaged.stdout


def test_index_draws_a_progress_bar_on_a_terminal(source: Path, tmp_path: Path) -> None:
    for number in range(50):
        write(source, f"n{number}.md", f"note {number}")
    controller, terminal = pty.openpty()
    with subprocess.Popen(
        [sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(tmp_path / "idx")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal,
    ) as process:
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert process.wait(60) == 0
    os.close(controller)
    text = shown.decode()
    assert "\r\x1b[K" in text and f"[{'#' * 30}] 50/50 files" in text, text
    # Log lines and the summary start on a line of their own: the bar is cleared or left first.
    assert re.search(r"\r\x1b\[K[^\r\n]*INFO indexer: scan done", text), text
    assert re.search(r"(\n|\x1b\[K)indexed 50 files", text), text
