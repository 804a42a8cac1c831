""".gitignore, .ignore, .git/info/exclude and exclude_patterns: the walk's verdict for every file of a
tree of tricky cases is git's (``git ls-files --others --exclude-standard`` lists what git would add),
and hostile rule files cannot hang, slow down or escape the source."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import indexer as indexer_module
from config import load_config
from exceptions import ConfigError, FileSkipped
from file_utils import FileFilter, check_single_file, ignored_by_rules, walk_source
from ignore_rules import PatternError, Rules, compile_exclude_patterns, compile_rule, parse_rules
from index_writer import IndexWriter
from indexer import TextIndexer
from models import ServerConfig
from search import search
from status import read_status
from tests.conftest import write

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


pytestmark = pytest.mark.usefixtures("no_hang")


def every_file_filter(tmp: Path, **overrides: object) -> FileFilter:
    """A filter that skips nothing but what the ignore rules skip (any name, hidden ones too)."""
    settings_ = {
        "included_extensions": ("",), "excluded_extensions": (), "max_size_bytes": 1 << 30,
        "index_directory": tmp / "no-index-here", "include_hidden": True, **overrides,
    }
    return FileFilter(**settings_)  # type: ignore[arg-type]


def walk_verdict(root: Path, file_filter: FileFilter) -> tuple[set[str], dict[str, str]]:
    """The files the walk yields, and every skip with its reason (a folder's path ends in "/")."""
    skipped: dict[str, str] = {}
    found = {sig[0] for sig in walk_source(root, file_filter, lambda p, r, d: skipped.__setitem__(p, r))}
    return found, skipped


def not_ignored_by_walk(root: Path, files: set[str], file_filter: FileFilter) -> set[str]:
    """Of ``files``, those the rules do not skip (themselves or a folder they are in)."""
    _, skipped = walk_verdict(root, file_filter)
    ignored = {path for path, reason in skipped.items() if reason in ("ignored", "excluded_pattern")}
    folders = tuple(path for path in ignored if path.endswith("/"))
    return {path for path in files if path not in ignored and not path.startswith(folders)}


def git_env(home: Path) -> dict[str, str]:
    """Git without the user's or the system's configuration (no core.excludesFile of theirs)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", HOME=str(home), XDG_CONFIG_HOME=str(home / "xdg"))
    return env


def git_init(root: Path, home: Path) -> None:
    subprocess.run([GIT, "init", "-q", str(root)], check=True, env=git_env(home))  # type: ignore[list-item]


def not_ignored_by_git(root: Path, home: Path) -> set[str]:
    listed = subprocess.run(
        [GIT, "-C", str(root), "ls-files", "--others", "--exclude-standard", "-z"],  # type: ignore[list-item]
        check=True, capture_output=True, env=git_env(home),
    ).stdout
    return {os.fsdecode(item) for item in listed.split(b"\0") if item}


def tree_files(root: Path) -> set[str]:
    found = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if not (folder == str(root) and name == ".git")]
        for name in names:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


ROOT_RULES = r"""# a comment, then blank lines

*.log
!important.log
build/
/root.txt
doc/frotz
**/x
a/**/b
xdir/**
!xdir/keep.txt
*.md
!keep.md
[abc].txt
[!q-s]z.txt
r[0-3].txt
\#hash.txt
\!bang.txt
space\ 
trail.txt   
excluded/
!excluded/inner.txt
logs/
foo**/bar
m?d/*.dat
[[:digit:]][[:upper:]].cls
dirs/**/deep/
\[x].lit
""".encode()

TRICKY_FILES = [
    "app.log", "important.log", "sub/app.log", "sub/important.log",
    "build/out.txt", "sub/build", "sub/build2/build/x.txt",
    "root.txt", "sub/root.txt",
    "doc/frotz", "sub/doc/frotz", "doc/frotzle",
    "x", "deep/er/x", "x.txt", "deep/x/in.txt", "xx/x/in.txt",
    "a/b", "a/c/b", "a/c/d/b", "a/bb", "c/a/b", "b",
    "xdir/one.txt", "xdir/keep.txt", "xdir/sub/keep.txt",
    "notes.md", "keep.md", "sub/keep.md", "sub/notes.md", "sub2/notes.md", "sub2/deeper/n.md",
    "a.txt", "b.txt", "d.txt", "qz.txt", "tz.txt", "az.txt", "r2.txt", "r5.txt",
    "#hash.txt", "hash.txt", "!bang.txt", "bang.txt",
    "space ", "space", "trail.txt", "trail.txt  x",
    "excluded/inner.txt", "excluded/other.txt",
    "logs", "var/logs/today.txt", "var/logs2",
    "foobar", "foo/bar", "foox/y/bar", "fo/bar",
    "mid/1.dat", "mad/2.dat", "mid/sub/3.dat",
    "1A.cls", "aA.cls", "1a.cls",
    "dirs/deep/f.txt", "dirs/a/b/deep/f.txt", "dirs/deep.txt",
    "[x].lit", "x.lit",
    "crlf/one.txt", "crlf/two.txt", "crlf/three.txt",
    "bom/first.txt", "bom/second.txt",
    "info-excluded.txt", "sub/info-excluded.txt",
    "tabs/t.txt",
    "ünï/é.txt", "ünï/e.txt", "ünï/é.dat", "ünï/e.dat",
]

NESTED_RULES = {
    "sub/.gitignore": b"!app.log\n*.txt\n!keep.txt\n",
    "sub2/.gitignore": b"!*.md\n",
    "sub2/deeper/.gitignore": b"*.md\n",
    "crlf/.gitignore": b"one.txt\r\n# c\r\n\r\ntwo.txt  \r\n",
    "bom/.gitignore": b"\xef\xbb\xbffirst.txt\n",
    "tabs/.gitignore": b"t.txt\t\n",
    "ünï/.gitignore": "?.txt\n??.dat\n".encode(),  # ? is one byte, as in git
    "deep/.gitignore": b"!x\n",
}


def make_tricky_tree(root: Path) -> None:
    for rel in TRICKY_FILES:
        write(root, rel, "text\n")
    write(root, ".gitignore", ROOT_RULES)
    for rel, data in NESTED_RULES.items():
        write(root, rel, data)


@needs_git
def test_a_tree_of_tricky_cases_is_ignored_as_git_ignores_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git_init(root, tmp_path)
    make_tricky_tree(root)
    (root / ".git" / "info" / "exclude").write_bytes(b"# git's own comment\ninfo-excluded.txt\n")
    files = tree_files(root)
    expected = not_ignored_by_git(root, tmp_path)
    assert not_ignored_by_walk(root, files, every_file_filter(tmp_path)) == expected
    # A sample of git's verdicts, so that this test says what it checks.
    for kept in ("important.log", "sub/app.log", "sub/build", "keep.md", "sub2/notes.md",
                 "d.txt", "qz.txt", "hash.txt", "bang.txt", "space", "xdir/keep.txt", "doc/frotzle", "sub/doc/frotz",
                 "logs", "fo/bar", "aA.cls", "x.lit", "crlf/three.txt", "bom/second.txt", "tabs/t.txt", "ünï/é.txt", "ünï/e.dat",
                 "deep/x/in.txt", "deep/er/x", "sub/keep.md"):
        assert kept in expected, kept
    for gone in ("app.log", "build/out.txt", "root.txt", "doc/frotz", "a/b", "a/c/d/b", "notes.md",
                 "a.txt", "tz.txt", "r2.txt", "#hash.txt", "!bang.txt", "space ", "trail.txt", "excluded/inner.txt",
                 "var/logs/today.txt", "foobar", "foox/y/bar", "mid/1.dat", "xx/x/in.txt", "1A.cls", "dirs/a/b/deep/f.txt",
                 "[x].lit", "crlf/one.txt", "crlf/two.txt", "bom/first.txt", "info-excluded.txt", "sub2/deeper/n.md",
                 "sub/notes.md", "ünï/e.txt", "ünï/é.dat", "sub/root.txt"):
        assert gone in files and gone not in expected, gone
    # check_single_file agrees with the walk on every file.
    file_filter = every_file_filter(tmp_path)
    for rel in sorted(files):
        try:
            verdict = check_single_file(root, rel, file_filter) is not None
        except FileSkipped as skipped:
            assert skipped.reason == "ignored", (rel, skipped.reason)
            verdict = False
        assert verdict == (rel in expected), rel


@needs_git
def test_respect_gitignore_false_reads_no_rule_file(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    make_tricky_tree(root)
    files = tree_files(root)
    assert not_ignored_by_walk(root, files, every_file_filter(tmp_path, respect_gitignore=False)) == files


def test_ignore_file_wins_over_gitignore_in_its_folder_and_deeper_files_win(source: Path, tmp_path: Path) -> None:
    write(source, ".gitignore", "*.txt\n!kept-by-git.txt\n")
    write(source, ".ignore", "!*.txt\nsecret.txt\n")
    write(source, "deep/.gitignore", "*.txt\n")
    for rel in ("a.txt", "secret.txt", "kept-by-git.txt", "deep/b.txt", "deep/secret.txt"):
        write(source, rel, "x")
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    # .ignore re-includes every .txt at the top but secret.txt; deep/.gitignore is deeper than both.
    assert {"a.txt", "kept-by-git.txt"} <= found
    assert skipped["secret.txt"] == "ignored" and skipped["deep/b.txt"] == "ignored"
    assert skipped["deep/secret.txt"] == "ignored"


def test_alike_gitignore_and_ignore_with_many_star_rules(source: Path, tmp_path: Path) -> None:
    """Two rule files alike are one parsed set, in force twice: on 3.10, where atomic groups are
    named groups, its rules' regexes must still be joined into one regex only once."""
    for name in (".gitignore", ".ignore"):
        write(source, name, "d**/q*r*s*t\nn*m*o\n")
    for rel in ("dz/qArBsCt", "d/qrst", "d/qrs", "nqmro"):
        write(source, rel, "x")
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    assert "d/qrs" in found and skipped == {"dz/qArBsCt": "ignored", "d/qrst": "ignored", "nqmro": "ignored"}


def test_the_default_filter_skips_hidden_rule_files_but_reads_them(source: Path, tmp_path: Path) -> None:
    write(source, ".gitignore", "drafts/\n*.tmp.md\n")
    for rel in ("note.md", "drafts/d.md", "x.tmp.md", "node_modules/p/README.md", ".obsidian/w.md"):
        write(source, rel, "x")
    filt = FileFilter((".md",), (), 1000, tmp_path / "idx")
    found, skipped = walk_verdict(source, filt)
    assert found == {"note.md"}
    assert skipped == {
        ".gitignore": "excluded_extension", "drafts/": "ignored", "x.tmp.md": "ignored",
        "node_modules/": "excluded_directory", ".obsidian/": "hidden",
    }


def test_a_folder_rule_does_not_leak_past_a_re_included_folder(source: Path, tmp_path: Path) -> None:
    """"a/**" then "!b": a/b is re-included and entered, and a/b/a is still inside a/ (git agrees)."""
    write(source, ".gitignore", "a/**\n!b\n")
    write(source, "a/b/a", "x")
    write(source, "a/c", "x")
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    assert skipped == {"a/b/a": "ignored", "a/c": "ignored"} and ".gitignore" in found
    assert ignored_by_rules(source, ["a", "b"], every_file_filter(tmp_path), is_dir=True) is None
    assert ignored_by_rules(source, ["a", "b", "a"], every_file_filter(tmp_path)) == "ignored"


def test_many_wildcard_rules_stay_fast(source: Path, tmp_path: Path) -> None:
    """A hostile .gitignore of 10,000 wildcard rules, each matching some file: the rules a name can
    match are looked up, not all tried."""
    write(source, ".gitignore", "".join(f"*x{i:05d}*\n" for i in range(10_000)))
    for i in range(0, 10_000, 40):
        write(source, f"d{i % 7}/f{i}x{i:05d}.md", "x")
    write(source, "kept.md", "x")
    started = time.process_time()  # CPU: what another process does to the machine does not count
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    assert time.process_time() - started < 10
    assert "kept.md" in found and len(skipped) == 250


# ---- exclude_patterns ----------------------------------------------------------------------------


def test_exclude_patterns_use_gitignore_syntax_at_the_root_and_win_over_rule_files(source: Path, tmp_path: Path) -> None:
    write(source, ".gitignore", "*.log\n!keep/**\n")
    for rel in ("drafts/a.md", "drafts/sub/b.md", "x.tmp", "deep/y.tmp", "z.log", "build/out.md", "docs/build",
                "keep/k.md", "keep/k.tmp", "ok.md"):
        write(source, rel, "x")
    filt = every_file_filter(tmp_path, exclude_patterns=("drafts/**", "**/*.tmp", "build/", "!keep/k.tmp"))
    found, skipped = walk_verdict(source, filt)
    assert found >= {"ok.md", "docs/build", "keep/k.md", "keep/k.tmp"}
    assert skipped["drafts/a.md"] == skipped["drafts/sub/"] == "excluded_pattern"  # a folder: not entered
    assert skipped["x.tmp"] == skipped["deep/y.tmp"] == skipped["build/"] == "excluded_pattern"
    assert skipped["z.log"] == "ignored"
    with pytest.raises(FileSkipped) as caught:
        check_single_file(source, "drafts/sub/b.md", filt)
    assert caught.value.reason == "excluded_pattern"
    # Without .gitignore rules the patterns still apply.
    found, skipped = walk_verdict(source, every_file_filter(tmp_path, respect_gitignore=False, exclude_patterns=("*.tmp",)))
    assert "z.log" in found and skipped.get("x.tmp") == "excluded_pattern"


def test_exclude_patterns_from_the_config_file_environment_and_flags(source: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"source_directory": str(source), "exclude_patterns": ["drafts/**", "*.tmp"]}))
    assert load_config({}, config_file, {}).exclude_patterns == ("drafts/**", "*.tmp")
    env = {"DOCSEARCH_EXCLUDE_PATTERNS": "**/*.bak, build/,,"}
    assert load_config({}, config_file, env).exclude_patterns == ("**/*.bak", "build/")
    assert load_config({"exclude_patterns": "a/**"}, config_file, env).exclude_patterns == ("a/**",)
    assert load_config({"exclude_patterns": ""}, config_file, env).exclude_patterns == ()
    plain = load_config({"source_directory": str(source)}, environ={})
    assert plain.exclude_patterns == () and plain.respect_gitignore is True and plain.index_notebook_outputs is False
    assert not {"exclude_patterns", "respect_gitignore", "index_notebook_outputs"} & set(plain.index_settings)
    excluding = load_config({"source_directory": str(source), "exclude_patterns": "drafts/**"}, environ={})
    assert excluding.db_path != plain.db_path and excluding.index_settings["exclude_patterns"] == ["drafts/**"]
    other = load_config({"source_directory": str(source), "exclude_patterns": "*.tmp"}, environ={})
    assert other.db_path != excluding.db_path


def test_respect_gitignore_and_index_notebook_outputs_from_each_place(source: Path, tmp_path: Path) -> None:
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"source_directory": str(source), "respect_gitignore": False}))
    assert load_config({}, config_file, {}).respect_gitignore is False
    assert load_config({}, config_file, {"DOCSEARCH_RESPECT_GITIGNORE": "yes"}).respect_gitignore is True
    assert load_config({"respect_gitignore": "off"}, config_file, {"DOCSEARCH_RESPECT_GITIGNORE": "1"}).respect_gitignore is False
    assert load_config({}, config_file, {"DOCSEARCH_INDEX_NOTEBOOK_OUTPUTS": "true"}).index_notebook_outputs is True
    assert load_config({"index_notebook_outputs": "on"}, config_file, {}).index_notebook_outputs is True
    plain = load_config({"source_directory": str(source)}, environ={})
    for flags, key, value in (({"respect_gitignore": "false"}, "respect_gitignore", False),
                              ({"index_notebook_outputs": "true"}, "index_notebook_outputs", True)):
        changed = load_config({"source_directory": str(source), **flags}, environ={})
        assert changed.index_settings[key] is value and changed.db_path != plain.db_path
    for key in ("respect_gitignore", "index_notebook_outputs"):
        with pytest.raises(ConfigError) as caught:
            load_config({key: "maybe"}, config_file, {})
        assert caught.value.key == key


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("drafts/**", None),
        (["ok", 3], "list of patterns"),
        ({"a": 1}, "list of patterns"),
        ([""], "empty"),
        (["   "], "nothing"),
        (["!"], "nothing"),
        (["a\x00b"], "NUL"),
        (["a\nb"], "one non-empty line"),
        (["x" * 1001], "longer than 1000"),
        (["p"] * 1001, "at most 1000"),
        (["[abc"], "not closed"),
        (["[[:nope:]]"], "not a character class"),
        (["trailing\\"], "backslash"),
        (["#comment"], "comment"),
        (["../outside"], "'..'"),
    ],
)
def test_bad_exclude_patterns_name_the_key_the_pattern_and_where(source: Path, tmp_path: Path, raw: object, fragment: str | None) -> None:
    config_file = tmp_path / "c.json"
    config_file.write_text(json.dumps({"source_directory": str(source), "exclude_patterns": raw}))
    if fragment is None:  # a string in the file is not a list
        with pytest.raises(ConfigError) as caught:
            load_config({}, config_file, {})
        assert "list of patterns" in str(caught.value)
        return
    with pytest.raises(ConfigError) as caught:
        load_config({}, config_file, {})
    assert caught.value.key == "exclude_patterns" and fragment in str(caught.value) and str(config_file) in str(caught.value)
    if isinstance(raw, list) and len(raw) == 1 and raw[0].strip() and "," not in raw[0] and "\n" not in raw[0]:
        assert repr(raw[0][:20])[1:-1] in str(caught.value)
        with pytest.raises(ConfigError) as caught:
            load_config({"source_directory": str(source)}, None, {"DOCSEARCH_EXCLUDE_PATTERNS": raw[0]})
        assert caught.value.key == "exclude_patterns" and "DOCSEARCH_EXCLUDE_PATTERNS" in str(caught.value)
        with pytest.raises(ConfigError) as caught:
            load_config({"source_directory": str(source), "exclude_patterns": raw[0]}, None, {})
        assert "--exclude-patterns" in str(caught.value)


# ---- through the indexer: status counts, and rules that change -------------------------------------


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexer_module, "RACY_WINDOW_NS", 0)


def scan_and_status(config: ServerConfig) -> tuple[dict, list[str]]:
    writer = IndexWriter(config.db_path)
    try:
        indexer = TextIndexer(config, writer)
        assert indexer.scan()["success"]
        status = read_status(config, indexer)
    finally:
        writer.close()
    found = sorted(hit["path"] for hit in search(config.db_path, "marker", 50)["results"])
    return status, found


def test_status_counts_ignored_and_excluded_pattern(source: Path, tmp_path: Path) -> None:
    write(source, ".gitignore", "build/\n*.gen.md\n")
    for rel in ("a.md", "b.gen.md", "c.gen.md", "build/x.md", "build/y.md", "drafts/d.md", "drafts/e.md"):
        write(source, rel, "marker text")
    config = ServerConfig(source_directory=source.resolve(), index_output_directory=(tmp_path / "idx").resolve(),
                          exclude_patterns=("drafts/*",))
    status, found = scan_and_status(config)
    assert found == ["a.md"]
    skipped = status["skipped_files"]
    assert skipped["ignored"] == 3 and skipped["excluded_pattern"] == 2, skipped
    assert status["errors_encountered"] == 0 and not status["last_error"]


def test_a_file_ignored_after_it_was_indexed_leaves_the_index_and_comes_back(source: Path, config: ServerConfig) -> None:
    write(source, "keep.md", "marker one")
    write(source, "later.md", "marker two")
    write(source, "folder/inside.md", "marker three")
    _, found = scan_and_status(config)
    assert found == ["folder/inside.md", "keep.md", "later.md"]
    write(source, ".gitignore", "later.md\nfolder/\n")
    _, found = scan_and_status(config)
    assert found == ["keep.md"]
    with pytest.raises(FileSkipped) as caught:
        check_single_file(source, "folder/inside.md", indexer_module.file_filter(config))
    assert caught.value.reason == "ignored"
    (source / ".gitignore").write_text("# nothing now\n")
    _, found = scan_and_status(config)
    assert found == ["folder/inside.md", "keep.md", "later.md"]


# ---- hostile rule files ---------------------------------------------------------------------------


def test_a_linked_rule_file_is_not_followed(source: Path, tmp_path: Path) -> None:
    outside = write(tmp_path, "outside/rules", "*.md\n")
    os.symlink(outside, source / ".gitignore")
    os.symlink(outside, source / ".ignore")
    write(source, "note.md", "x")
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    assert "note.md" in found and "ignored" not in skipped.values()
    assert check_single_file(source, "note.md", every_file_filter(tmp_path)) is not None


def test_a_linked_folder_is_not_read_for_rules_by_check_single_file(source: Path, tmp_path: Path) -> None:
    write(tmp_path, "outside/.gitignore", "*.md\n")
    write(tmp_path, "outside/n.md", "x")
    os.symlink(tmp_path / "outside", source / "linked")
    with pytest.raises(FileSkipped) as caught:  # nothing is looked at through a link, rules or file
        check_single_file(source, "linked/n.md", every_file_filter(tmp_path))
    assert caught.value.reason == "vanished"


def test_a_fifo_named_gitignore_does_not_hang(source: Path, tmp_path: Path) -> None:
    os.mkfifo(source / ".gitignore")
    os.mkfifo(source / ".ignore")
    write(source, "note.md", "x")
    found, _ = walk_verdict(source, every_file_filter(tmp_path))
    assert "note.md" in found
    assert check_single_file(source, "note.md", every_file_filter(tmp_path)) is not None


def test_rules_are_read_only_inside_the_source(tmp_path: Path) -> None:
    write(tmp_path, ".gitignore", "*\n")
    source = tmp_path / "src"
    write(source, "n.md", "x")
    found, _ = walk_verdict(source, every_file_filter(tmp_path))
    assert found == {"n.md"}


def test_a_50_mb_gitignore_is_read_up_to_its_bound(source: Path, tmp_path: Path) -> None:
    line = b"never-matching-name-%07d\n"
    with open(source / ".gitignore", "wb") as out:
        out.write(b"first.md\n")
        block = b"".join(line % i for i in range(100_000))
        while out.tell() < 50 * 1024 * 1024:
            out.write(block)
        out.write(b"last.md\n")
    for rel in ("first.md", "last.md", "other.md"):
        write(source, rel, "x")
    started = time.process_time()  # CPU: what another process does to the machine does not count
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    assert time.process_time() - started < 20
    assert skipped.get("first.md") == "ignored" and {"last.md", "other.md"} <= found


def test_invalid_utf8_and_pathological_patterns(source: Path, tmp_path: Path) -> None:
    write(source, ".gitignore", b"\xff\xfe*.bad\n\xe9t\xe9.md\n**/**/**/**/**/**/*a*a*a*a*a*a*a*a*b\n[unclosed\n")
    write(source, "x.md", "x")
    latin1_name = os.fsdecode(b"\xe9t\xe9.md")  # a name that is not UTF-8: the rule's bytes match it
    long_name = "a" * 200 + ".md"
    deep = "/".join(["a" * 20] * 10)
    write(source, f"{deep}/{long_name}", "x")
    write(source, f"{deep}/{'a' * 200}b", "x")
    started = time.process_time()  # CPU: what another process does to the machine does not count
    found, skipped = walk_verdict(source, every_file_filter(tmp_path))
    assert time.process_time() - started < 5
    assert f"{deep}/{long_name}" in found and skipped[f"{deep}/{'a' * 200}b"] == "ignored"
    assert "x.md" in found and latin1_name not in found
    rule = compile_rule("**/**/**/**/**/**/*a*a*a*a*a*a*a*a*b")
    assert rule is not None and rule.kind == "name" and "(?:[^/]*/)" not in rule.regex  # the "**/" collapse into one


def test_the_engine_decides_from_the_rules_bytes_alone() -> None:
    """ignore_rules is pure logic: a rule file's bytes in, each folder's verdicts out, no file system."""
    gitignore = parse_rules(b"*.log\n!keep.log\nbuild/\ndoc/frotz\n", "", "ignored", ".gitignore")
    top = Rules(None, (), ()).entered("", [gitignore])
    here = top.matcher("")
    assert here is not None
    assert here.decide("app.log", "app.log", False) == "ignored" and here.decide("keep.log", "keep.log", False) is None
    assert here.decide("build", "build", True) == "ignored" and here.decide("build", "build", False) is None
    assert here.decide("frotz", "frotz", False) is None
    in_doc = top.entered("doc/", []).matcher("doc/")
    assert in_doc is not None and in_doc.decide("frotz", "doc/frotz", False) == "ignored"
    patterns = compile_exclude_patterns(("drafts/",))
    assert patterns is not None and Rules(patterns, (), ()).matcher("").decide("drafts", "drafts", True) == "excluded_pattern"
    with pytest.raises(PatternError):
        compile_exclude_patterns(("[unclosed",))


# ---- random rules compared with git ---------------------------------------------------------------

PIECES = [
    "a", "b", "*", "**", "?", "[ab]", "[!a]", "[a-b]", "/", "c", "\\*", ".", "**/", "/**", "\\", "[",
    "[]a]", "[!b-c]", "[[:alpha:]]", " ", "\\ ", "!", "#", "\\!",
    *["ab", "ba", "aa", "a.b", "*.b", "a/", "b/", "ab/", "*/", "a*"] * 3,  # names of the tree: rules that match
]
NAMES = ["a", "b", "ab", "ba", "c", "aa", "a.b", "*"]

pattern_strategy = st.builds(
    lambda neg, pieces, slash: ("!" if neg else "") + "".join(pieces) + ("/" if slash else ""),
    st.sampled_from([False, False, True]), st.lists(st.sampled_from(PIECES), min_size=1, max_size=4), st.booleans(),
)
paths_strategy = st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map("/".join), min_size=1, max_size=25)


@pytest.fixture(scope="module")
def scratch_repo() -> Iterator[Path]:
    if GIT is None:
        pytest.skip("git is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git_init(repo, Path(tmp))
        yield repo


def rule_like(path: str, data: st.DataObject) -> str:
    """A rule made from a path of the tree, so that rules often match: a name turned into a
    wildcard, a leading "/" or "**/", a trailing "/", a "!"."""
    parts = path.split("/")
    for index in range(len(parts)):
        parts[index] = data.draw(st.sampled_from([parts[index]] * 3 + ["*", "**", "?" * len(parts[index]), parts[index][:1] + "*"]))
    start = data.draw(st.integers(0, len(parts) - 1))
    rule = "/".join(parts[start:])
    rule = data.draw(st.sampled_from(["", "", "/", "**/"])) + rule + data.draw(st.sampled_from(["", "", "/", "/**"]))
    return data.draw(st.sampled_from(["", "", "!"])) + rule


@needs_git
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    root_rules=st.lists(pattern_strategy, min_size=1, max_size=6),
    nested_rules=st.lists(pattern_strategy, max_size=3),
    nested_in=st.sampled_from(NAMES),
    paths=paths_strategy,
    data=st.data(),
)
def test_random_rules_match_git(
    scratch_repo: Path, root_rules: list[str], nested_rules: list[str], nested_in: str, paths: list[str], data: st.DataObject
) -> None:
    root = scratch_repo
    for child in root.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    made: set[str] = set()
    for rel in paths:
        parts = rel.split("/")
        # A name cannot be both a file and a folder: keep the paths that fit the tree so far.
        if any("/".join(parts[:i]) in made for i in range(1, len(parts))) or any(p.startswith(rel + "/") for p in made):
            continue
        write(root, rel, "x")
        made.add(rel)
    root_rules = root_rules + [rule_like(rel, data) for rel in data.draw(st.lists(st.sampled_from(sorted(made)), max_size=4))]
    write(root, ".gitignore", "\n".join(data.draw(st.permutations(root_rules))) + "\n")
    if (root / nested_in).is_dir():
        write(root, f"{nested_in}/.gitignore", "\n".join(nested_rules) + "\n")
    files = tree_files(root)
    home = root.parent
    expected = not_ignored_by_git(root, home)
    event(f"some ignored: {expected != files}")
    assert not_ignored_by_walk(root, files, every_file_filter(home)) == expected, (root_rules, nested_rules)
