"""Started inside an untrusted project: nothing in the working directory, PYTHONPATH or the source
changes what the server runs or reads, what it indexes, or where it writes; and what it writes is
readable by its owner only."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import config as config_module
import loader
from config import load_config
from exceptions import ConfigError
from models import DiskFile
from reliability_helpers import RelStdioServer, rel_db_path, rel_run_main
from tests.conftest import MAIN_PY, write

PAYLOAD = "import os\nopen({marker!r}, 'a').write(str(os.getpid()) + '\\n')\n"
#: Modules a loader process imports, or Python runs at start, planted where an attacker can put them.
PLANTED = ("json.py", "hashlib.py", "pickle.py", "zlib.py", "codecs.py", "sitecustomize.py", "usercustomize.py")


def plant(folder: Path, marker: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in PLANTED:
        (folder / name).write_text(PAYLOAD.format(marker=str(marker)))
    (folder / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'a').write('pth\\n')\n")


def many_files(source: Path, count: int) -> list[DiskFile]:
    files = []
    for n in range(count):
        path = write(source, f"d{n % 7}/n{n}.md", f"# Note {n}\n\nloaderword{n} text\n")
        st = path.stat()
        files.append(DiskFile(path.relative_to(source).as_posix(), st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns))
    return files


def test_loader_processes_import_nothing_from_the_working_directory_or_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "PWNED"
    project, on_path, source = tmp_path / "proj", tmp_path / "pypath", tmp_path / "src"
    plant(project, marker)
    plant(on_path, marker)
    plant(source, marker)
    files = many_files(source, 300)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PYTHONPATH", f"{on_path}{os.pathsep}{source}")
    monkeypatch.setenv("PYTHONSTARTUP", str(on_path / "json.py"))
    loaded = list(loader._load_in_processes(source, files, loader.Reading(1 << 20)))
    assert [item.path for item in loaded] == [disk.path for disk in files]
    assert all(item.sections[0][3].startswith(f"# Note {n}") for n, item in enumerate(loaded))
    assert not marker.exists(), f"planted code ran in a loader process: {marker.read_text()}"


def test_a_loader_process_drops_a_module_of_our_names_imported_before_it_starts(tmp_path: Path) -> None:
    # A .pth file in site-packages runs even under -I: here, as one would, it imports another
    # distribution's `config` before the loader's own code runs.
    other = tmp_path / "site"
    other.mkdir()
    (other / "config.py").write_text("FOREIGN = True\n")
    before = f"import sys; sys.path.insert(0, {str(other)!r}); import config; sys.path.remove({str(other)!r}); "
    code = loader.LOADER_COMMAND[-1].replace("loader.run_loader()", "print(sys.modules['config'].__file__)")
    shown = subprocess.run([*loader.LOADER_COMMAND[:-1], before + code], capture_output=True, text=True, cwd="/", check=True)
    assert Path(shown.stdout.strip()) == Path(config_module.__file__).resolve(), shown


def test_index_started_in_a_hostile_project_runs_none_of_its_code(tmp_path: Path) -> None:
    """The issue's repro: main.py index run from a folder holding json.py and hashlib.py."""
    marker = tmp_path / "PWNED"
    project, source = tmp_path / "proj", tmp_path / "src"
    plant(project, marker)
    many_files(source, 250)
    done = subprocess.run(
        [sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(tmp_path / "idx")],
        cwd=project, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "indexed 250 files" in done.stderr
    assert not marker.exists(), f"planted code ran: {marker.read_text()}"


def test_a_config_json_in_the_working_directory_is_never_read(tmp_path: Path) -> None:
    source, project, index_dir = tmp_path / "notes", tmp_path / "repo", tmp_path / "idx"
    write(source, "todo.md", "# Todo\n\nbuy kumquats\n")
    write(source, ".env", "API_KEY=zqsecretkeyqz\n")
    project.mkdir()
    (project / "config.json").write_text(json.dumps(
        {"index_output_directory": "./.cache", "included_extensions": [".md", ".env"], "scan_interval_seconds": 1}
    ))
    args = ("--source", str(source), "--index-dir", str(index_dir))
    assert rel_run_main("index", *args, cwd=project).returncode == 0
    assert not (project / ".cache").exists(), "the project's config chose where the notes were copied"
    assert json.loads(rel_run_main("search", "zqsecretkeyqz", *args, "--json", cwd=project).stdout)["results"] == []
    assert json.loads(rel_run_main("search", "kumquats", *args, "--json", cwd=project).stdout)["results"]
    # An unrelated config.json (a Node or app project's) does not stop the server either.
    (project / "config.json").write_text(json.dumps({"name": "my-app", "version": "1.0.0"}))
    status = rel_run_main("status", *args, "--json", cwd=project)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["indexed_files"] == 1


def test_config_comes_from_the_flag_the_environment_or_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "notes"
    source.mkdir()
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "pyproject.toml").write_text("[project]\n")
    chosen, by_env, install = tmp_path / "chosen.json", tmp_path / "env.json", clone / "config.json"
    for path, interval in ((chosen, 11), (by_env, 22), (install, 33)):
        path.write_text(json.dumps({"source_directory": str(source), "scan_interval_seconds": interval}))
    monkeypatch.setattr(config_module, "PROJECT_DIR", clone)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"source_directory": str(source), "scan_interval_seconds": 44}))
    assert load_config({}, None, {}).scan_interval_seconds == 33
    assert load_config({}, None, {"DOCSEARCH_CONFIG": str(by_env)}).scan_interval_seconds == 22
    assert load_config({}, chosen, {"DOCSEARCH_CONFIG": str(by_env)}).scan_interval_seconds == 11
    with pytest.raises(ConfigError, match="file not found"):
        load_config({}, None, {"DOCSEARCH_CONFIG": str(tmp_path / "nope.json")})


def test_the_install_config_json_holds_the_documented_defaults() -> None:
    install_file = config_module.user_files({})[0]
    assert install_file == MAIN_PY.parent / "config.json", "run from the clone, the clone's config.json is read"
    data = json.loads(install_file.read_text())
    config = load_config({"source_directory": str(MAIN_PY.parent)}, None, {})
    assert config.index_output_directory == (MAIN_PY.parent / data["index_output_directory"]).resolve()
    assert list(config.included_extensions) == data["included_extensions"]


def modes(folder: Path) -> dict[str, int]:
    return {path.name: stat.S_IMODE(path.lstat().st_mode) for path in folder.iterdir()}


def test_index_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "deep" / "idx"
    for n in range(20):
        write(source, f"n{n}.md", f"private words {n}\n")
    args = ("--source", str(source), "--index-dir", str(index_dir), "--scan-interval", "0")
    done = subprocess.run([sys.executable, str(MAIN_PY), "index", *args], capture_output=True, text=True, timeout=120, umask=0)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(index_dir.stat().st_mode) == 0o700
    assert set(modes(index_dir).values()) == {0o600}, modes(index_dir)
    with RelStdioServer(*args) as server:  # a running server has its WAL and shared memory open
        server.wait_for_scan()
        found = modes(index_dir)
        db = rel_db_path(source, index_dir).name
        assert {db, db + "-wal", db + "-shm", db + ".lock"} <= set(found), found
        assert set(found.values()) == {0o600}, found
        server.close()


def indexed_once(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    """One note indexed by main.py index: the index file and the arguments that name it."""
    source, index_dir = tmp_path / "notes", tmp_path / "idx"
    write(source, "a.md", "alpha words\n")
    args = ("--source", str(source), "--index-dir", str(index_dir))
    assert rel_run_main("index", *args).returncode == 0
    return rel_db_path(source, index_dir), args


def test_an_index_left_readable_by_an_older_version_is_made_private(tmp_path: Path) -> None:
    db, args = indexed_once(tmp_path)
    db.chmod(0o644)
    assert rel_run_main("index", *args).returncode == 0
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_an_index_directory_others_can_write_to_is_refused_by_writers_and_readers(tmp_path: Path) -> None:
    db, args = indexed_once(tmp_path)
    index_dir = db.parent
    for mode in (0o777, 0o1777):  # with or without the sticky bit: others could plant files at its names
        index_dir.chmod(mode)
        for command in ("index", "search", "status"):
            done = rel_run_main(command, *args, *(["alpha"] if command == "search" else []))
            assert "any user may write to" in done.stdout + done.stderr, (command, done.stdout, done.stderr)
            assert command == "status" or done.returncode == 1
    index_dir.chmod(0o700)
    assert json.loads(rel_run_main("search", "alpha", *args, "--json").stdout)["results"]


def test_missing_folders_above_the_index_directory_are_made_private_too(tmp_path: Path) -> None:
    source, index_dir = tmp_path / "notes", tmp_path / "a" / "b" / "idx"
    write(source, "a.md", "alpha\n")
    done = subprocess.run([sys.executable, str(MAIN_PY), "index", "--source", str(source), "--index-dir", str(index_dir)],
                          capture_output=True, text=True, timeout=60, umask=0)
    assert done.returncode == 0, done.stderr
    assert [stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "a", tmp_path / "a" / "b", index_dir)] == [0o700] * 3


def test_a_reader_never_follows_a_linked_index_to_another_index(tmp_path: Path) -> None:
    """A project holding the index directory could link the index's name to the user's other index."""
    private_db, private_args = indexed_once(tmp_path / "private")
    source, index_dir = tmp_path / "project" / "docs", tmp_path / "project" / ".index"
    write(source, "readme.md", "project words\n")
    index_dir.mkdir(parents=True)
    args = ("--source", str(source), "--index-dir", str(index_dir))
    rel_db_path(source, index_dir).symlink_to(private_db)
    found = rel_run_main("search", "alpha", *args)
    assert found.returncode == 1 and "a symbolic link, not an index file" in found.stderr, found.stderr
    status = json.loads(rel_run_main("status", *args, "--json").stdout)
    assert status["indexed_files"] == 0 and "symbolic link" in status["last_error"], status
    assert rel_run_main("index", *args).returncode == 0  # the writer moves the link aside
    assert json.loads(rel_run_main("search", "project", *args, "--json").stdout)["results"]
    assert json.loads(rel_run_main("search", "alpha", *args, "--json").stdout)["results"] == []


def test_a_relative_path_through_a_link_in_the_working_directory_is_refused(tmp_path: Path) -> None:
    private, project = tmp_path / "private", tmp_path / "project"
    write(private, "diary.md", "secret words\n")
    project.mkdir()
    (project / "docs").symlink_to(private)
    done = rel_run_main("index", "--source", "docs", "--index-dir", str(tmp_path / "idx"), cwd=project)
    assert done.returncode == 2 and "a link (to " in done.stderr and "give the real path" in done.stderr, done.stderr
    assert not (tmp_path / "idx").exists()
    done = rel_run_main("index", "--source", str(project / "docs"), "--index-dir", str(tmp_path / "idx"), cwd=project)
    assert done.returncode == 0, "an absolute path is the user's own choice"


def test_a_fifo_at_the_lock_never_blocks_status(tmp_path: Path) -> None:
    db, args = indexed_once(tmp_path)
    Path(f"{db}.lock").unlink()
    os.mkfifo(f"{db}.lock")
    status = rel_run_main("status", *args, "--json", timeout=30)
    assert json.loads(status.stdout)["writer_pid"] is None
    assert rel_run_main("index", *args, timeout=30).returncode == 0
    assert stat.S_ISREG(Path(f"{db}.lock").lstat().st_mode)


def test_an_index_file_replaced_by_a_link_is_moved_aside_not_followed(tmp_path: Path) -> None:
    db, args = indexed_once(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.symlink_to(victim)
    assert rel_run_main("index", *args).returncode == 0
    assert victim.read_text() == "precious\n"
    assert db.is_file() and not db.is_symlink()
    assert json.loads(rel_run_main("search", "alpha", *args, "--json").stdout)["results"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal", ".lock"])
def test_a_link_planted_where_the_index_keeps_a_file_is_never_written_through(tmp_path: Path, suffix: str) -> None:
    """An index directory inside a cloned project could come with links in it (git stores links)."""
    source, index_dir = tmp_path / "notes", tmp_path / "project" / ".index"
    write(source, "a.md", "alpha words\n")
    index_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    db = rel_db_path(source, index_dir)
    Path(f"{db}{suffix}").symlink_to(victim)
    args = ("--source", str(source), "--index-dir", str(index_dir))
    done = rel_run_main("index", *args)
    assert done.returncode == 0, done.stderr
    assert "not a file, where the index keeps a file of its own" in done.stderr
    assert json.loads(rel_run_main("search", "alpha", *args, "--json").stdout)["results"]
    assert victim.read_text() == "precious\n"
