"""The command line as a user runs it: real subprocesses over a real tree."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import index_files
from models import VERSION
from tests.conftest import MAIN_PY, PROJECT_DIR, write


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(MAIN_PY), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def run_on_terminal(*args: str, stream: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run main.py with its ``stream`` ("stdout" or "stderr") a terminal (a pty), the other one
    discarded: its exit code, and what the terminal was sent."""
    controller, terminal = pty.openpty()
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: terminal}
    with subprocess.Popen([sys.executable, str(MAIN_PY), *args], stdin=subprocess.DEVNULL, env=env, **streams) as process:
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
        code = process.wait(60)
    os.close(controller)
    return code, shown.decode()


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
        " main.main(['get', 'a.md', '--source', sys.argv[2], '--index-dir', sys.argv[3]]),"
        " main.main(['status', '--source', sys.argv[2], '--index-dir', sys.argv[3]])];"
        "loaded = sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'));"
        "print(codes, loaded)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(PROJECT_DIR), str(source), str(tmp_path / "idx")],
        capture_output=True, text=True, timeout=120,
    )
    assert out.stdout.strip().endswith("[0, 0, 0, 0] []"), out.stdout + out.stderr


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
    assert re.search(r"^state +error$", damaged.stdout, re.M), damaged.stdout
    assert re.search(r"^errors +1; last: the index cannot be read \(.*not a database\)", damaged.stdout, re.M), damaged.stdout


def test_index_draws_a_progress_bar_on_a_terminal(source: Path, tmp_path: Path) -> None:
    for number in range(50):
        write(source, f"n{number}.md", f"note {number}")
    code, text = run_on_terminal("index", "--source", str(source), "--index-dir", str(tmp_path / "idx"), stream="stderr")
    assert code == 0
    assert "\r\x1b[K" in text and f"[{'#' * 30}] 50/50 files" in text, text
    # Log lines and the summary start on a line of their own: the bar is cleared or left first.
    assert re.search(r"\r\x1b\[K[^\r\n]*INFO indexer: scan done", text), text
    assert re.search(r"(\n|\x1b\[K)indexed 50 files", text), text


GUIDE = "# Guide\n\nintro line\n\n## Install\n\nstep one\nstep two\n\n## Use\n\nrun it\n"


def test_get_prints_a_file_or_a_part_of_it(source: Path, tmp_path: Path) -> None:
    write(source, "docs/guide.md", GUIDE)
    write(source, "odd.txt", "tab\there\nbidi \u202e here\n")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    lines = GUIDE.splitlines()
    whole = run("get", "docs/guide.md", *idx)  # no index needed: the file is read from disk
    assert whole.returncode == 0 and whole.stdout == GUIDE and whole.stderr == "", whole.stderr
    assert run("get", str(source / "docs/guide.md"), *idx).stdout == GUIDE  # absolute inside the source
    assert run("get", "docs/guide.md", "--heading", "Install", *idx).stdout == "\n".join(lines[4:9]) + "\n"
    assert run("get", "docs/guide.md", "--lines", "3:3", *idx).stdout == "intro line\n"
    assert run("get", "docs/guide.md", "--lines", "12:", *idx).stdout == "run it\n"
    assert run("get", "docs/guide.md", "--lines", ":1", *idx).stdout == "# Guide\n"
    assert run("get", "docs/guide.md", "--heading", "Install", "--lines", "7:", *idx).stdout == "step one\nstep two\n\n"
    assert "outline" not in json.loads(run("get", "docs/guide.md", "--json", *idx).stdout)
    reply = json.loads(run("get", "docs/guide.md", "--json", "--outline", *idx).stdout)
    assert reply["text"] == GUIDE.rstrip("\n") and [entry["heading"] for entry in reply["outline"]] == ["Guide", "Guide > Install", "Guide > Use"]
    # Tabs and line ends are the file's; a character that would reorder the terminal's text is shown escaped.
    assert run("get", "odd.txt", *idx).stdout == "tab\there\nbidi \\u202e here\n"


def test_get_says_how_to_read_on_and_that_reads_the_rest(source: Path, tmp_path: Path) -> None:
    write(source, "guide.md", GUIDE)
    write(source, "min.js", "x" * 50)
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    shown, arguments = "", ["--lines", "1:"]
    for _ in range(len(GUIDE)):
        part = run("get", "guide.md", "--max-chars", "20", *arguments, *idx)
        assert part.returncode == 0, part.stderr
        shown += part.stdout
        if not part.stderr:
            break
        assert part.stderr.count("\n") == 1 and part.stderr.startswith("main.py: lines "), part.stderr
        arguments = re.search(r"read on with (--lines [0-9]+:)", part.stderr)[1].split()
    assert shown == GUIDE
    cut = run("get", "min.js", "--include-ext", ".js", "--max-chars", "20", *idx)
    assert cut.stdout == "x" * 20 + "\n"
    assert "lines 1-1 of 1 shown; read on with --lines 1: --start-char 20 and the same other arguments" in cut.stderr
    rest = run("get", "min.js", "--include-ext", ".js", "--lines", "1:", "--start-char", "20", *idx)
    assert rest.stdout == "x" * 30 + "\n" and rest.stderr == ""
    ranged = run("get", "guide.md", "--lines", "3:8", "--max-chars", "10", *idx)
    assert "read on with --lines 4:8 " in ranged.stderr  # the end asked for stays


def test_get_errors_say_what_is_wrong(source: Path, tmp_path: Path) -> None:
    write(source, "guide.md", GUIDE)
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    missing = run("get", "gide.md", *idx)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == "main.py: path: gide.md: no such file in the source directory\n"
    spaced = run("get", "guide.md ", *idx)
    assert spaced.returncode == 1 and "did you mean 'guide.md'" in spaced.stderr
    outside = run("get", "../x.md", *idx)
    assert outside.returncode == 1 and "refused" in outside.stderr
    for bad, said in ((["--lines", "x"], "'x' is not A:B, A: or :B"), (["--lines", "3"], "is not A:B"),
                      (["--lines", ":"], "is not A:B"), (["--max-chars", "many"], "invalid int value"),
                      (["--lines", "0:2"], "main.py: --lines: lines are numbered from 1; got 0"),
                      (["--lines", "99:"], "main.py: --lines: guide.md has 12 lines; start_line 99 is past its end"),
                      (["--max-chars", "0"], "main.py: --max-chars: must be a whole number from 1 to 100,000, got 0"),
                      (["--heading", "Nope"], "main.py: --heading: 'Nope' is not a heading of guide.md; its headings: Guide;")):
        result = run("get", "guide.md", *bad, *idx)
        assert result.returncode == 2 and said in result.stderr and result.stdout == "", (bad, result.stderr)
        assert "Traceback" not in result.stderr


def test_get_into_a_reader_that_stops_early_stops_quietly(source: Path, tmp_path: Path) -> None:
    write(source, "big.txt", "".join(f"line {number} of a long file\n" for number in range(3000)))  # more than a pipe holds
    command = [sys.executable, str(MAIN_PY), "get", "big.txt", "--max-chars", "100000", "--source", str(source), "--index-dir", str(tmp_path / "idx")]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == b"line 0 of a long file\n"
        process.stdout.close()  # as `| head -1` does
        assert process.wait(60) == 141 and process.stderr.read() == b""


def test_a_mistyped_command_names_the_one_meant(source: Path, tmp_path: Path) -> None:
    typo = run("serach", "foo")
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr == "main.py: unknown command 'serach'; did you mean 'search'?\n"
    assert run("stauts").stderr == "main.py: unknown command 'stauts'; did you mean 'status'?\n"
    other = run("frobnicate")
    assert other.returncode == 2
    assert other.stderr == "main.py: unknown command 'frobnicate'; the commands are serve, index, search, get, list, status (main.py --help)\n"
    assert run("--help").returncode == 0 and run("get", "--help").returncode == 0
    serve_help = " ".join(run("serve", "--help").stdout.split())
    assert "@code: a source tree's code" in serve_help and '"sources": {"app": {"path":' in serve_help
    # Options first is still serve's (see test_serve_stops_on_ctrl_c...): a flag of no command is argparse's.
    assert "unrecognized arguments: --lines" in run("--source", str(source), "--lines", "1:2").stderr


def test_search_shows_matches_bold_on_a_terminal_and_plain_elsewhere(source: Path, tmp_path: Path) -> None:
    write(source, "a.md", "the kumquat is `**ripe**` today")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    assert run("index", *idx).returncode == 0
    piped = run("search", "kumquat", *idx)
    assert piped.stdout.splitlines()[1] == "    the kumquat is `**ripe**` today"  # the file's own ** (in code) as it is
    reply = json.loads(run("search", "kumquat", *idx, "--json").stdout)
    assert reply["results"][0]["snippet"] == "the **kumquat** is `\\*\\*ripe\\*\\*` today"
    colour = {name: value for name, value in os.environ.items() if name != "NO_COLOR"}
    code, shown = run_on_terminal("search", "kumquat", *idx, stream="stdout", env=colour)
    assert code == 0 and "    the \x1b[1mkumquat\x1b[0m is `**ripe**` today\r\n" in shown, shown
    code, shown = run_on_terminal("search", "kumquat", *idx, stream="stdout", env={**colour, "NO_COLOR": "1"})
    assert code == 0 and "    the kumquat is `**ripe**` today\r\n" in shown and "\x1b" not in shown, shown


def test_rough_edges_say_what_is_true(source: Path, tmp_path: Path) -> None:
    """get with words after '--', list and search with an empty comma list, a path deleted since it
    was indexed, and an outline larger than the reply's budget."""
    many = "".join(f"## Heading number {n}\n\ntext {n}\n\n" for n in range(3000))
    write(source, "many.md", "# Many\n\n" + many)
    write(source, "gone.md", "# Gone\n")
    write(source, "-dash.md", "# Dash\n")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    assert run("index", *idx).returncode == 0
    extra = run("get", "--", "many.md", *idx)
    assert extra.returncode == 2 and "one PATH only; also given: --source" in extra.stderr and "unrecognized" not in extra.stderr
    assert run("get", "-dash.md", *idx).stdout == "# Dash\n"
    for command in (["list"], ["search", "heading"]):
        for flag in ("--tags", "--ext", "--collection"):
            empty = run(*command, flag, ",,,", *idx)
            assert empty.returncode in (1, 2) and f"{flag}: ',,,' names nothing" in empty.stderr and empty.stdout == "", (command, flag)
    (source / "gone.md").unlink()
    gone = run("get", "gone.md", *idx)
    assert gone.returncode == 1 and "deleted since it was indexed" in gone.stderr and "may mean: gone.md" not in gone.stderr, gone.stderr
    outlined = run("get", "many.md", "--json", "--outline", "--max-chars", "100", *idx)
    reply = json.loads(outlined.stdout)
    assert reply["outline_truncated"] and 0 < len(json.dumps(reply["outline"])) <= 200, len(outlined.stdout)


def test_status_of_an_index_some_sources_of_which_were_never_scanned_names_them(tmp_path: Path) -> None:
    import sqlite3

    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "a.md", "# A\n")
    write(b, "b.md", "# B\n")
    idx = ["--source", str(a), "--source", str(b), "--index-dir", str(tmp_path / "idx")]
    assert run("index", *idx).returncode == 0
    (db,) = (tmp_path / "idx").glob("*.sqlite3")
    lock = index_files.WriterLock(index_files.lock_path(db))
    with lock.held():  # as an index run stopped before it reached b leaves it, written as a writer would
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM meta WHERE key LIKE 'b/%'")
        conn.close()
        lock.note_left(db)  # else status says the file was changed outside
    status = run("status", *idx)
    assert "None" not in status.stdout and "not indexed yet: b (run index" in status.stdout, status.stdout
    assert status.returncode == 0


def test_the_changelogs_newest_version_is_this_one() -> None:
    headings = re.findall(r"^## (\S+)", (PROJECT_DIR / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == VERSION, f"CHANGELOG.md's newest version {headings[:1]} is not models.VERSION {VERSION}"


def test_search_that_finds_nothing_says_did_you_mean(source: Path, tmp_path: Path) -> None:
    write(source, "firewall.md", "# Firewall\n\nOpen a port in the firewall.\n")
    idx = ["--source", str(source), "--index-dir", str(tmp_path / "idx")]
    assert run("index", *idx).returncode == 0
    typo = run("search", "firewal", *idx)
    assert typo.returncode == 0 and typo.stdout == "" and "did you mean: firewall?" in typo.stderr.lower(), typo.stderr
