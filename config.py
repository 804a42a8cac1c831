"""Load and validate the configuration once, at start; fail fast with a message naming the key.

Precedence, later wins: built-in defaults < the config file < environment variables <
command-line flags. The config file is one the user chose: ``--config FILE``, else the file named
by ``DOCSEARCH_CONFIG``, else the install's own (see user_files). Never one from the working
directory: MCP clients start the server inside whatever project is open, and that project must not
be able to choose what is indexed or where the index is written.

Relative paths are resolved against the config file's folder for values from the file, and
against the current directory for values from the environment or flags. The default index
directory does not depend on the working directory either, so an MCP client that starts the
server from anywhere still writes to the same place.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from exceptions import ConfigError
from ignore_rules import MAX_EXCLUDE_PATTERNS, MAX_PATTERN_CHARS, PatternError, compile_exclude_patterns
from code_outline import CODE_EXTENSIONS
from models import SOURCE_NAME, SOURCE_SETTINGS, ServerConfig, Source, default_source_name, identity

PROJECT_DIR = Path(__file__).resolve().parent
#: The CPUs this process may run on (its affinity, not the machine's count): sizes the indexer's
#: loader processes and the threads a large search is split over.
USABLE_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
#: Names a config file, as --config does (the flag wins).
CONFIG_ENV_VAR = "DOCSEARCH_CONFIG"
#: Upper bounds, so that a value that passes validation cannot overflow later: a file is read into
#: memory whole, and threading's waits take at most threading.TIMEOUT_MAX seconds.
MAX_FILE_SIZE_MB = 1024.0
MIN_FILE_SIZE_MB = 1 / (1024 * 1024)  # one byte
MAX_SCAN_INTERVAL_SECONDS = 365 * 24 * 3600.0
#: A periodic rescan more often than this would only burn CPU walking the tree.
MIN_SCAN_INTERVAL_SECONDS = 0.1
#: A config file larger than this is refused unread: room for the largest valid one (as many
#: exclude_patterns as allowed, each as long as allowed), not for /dev/zero.
MAX_CONFIG_FILE_BYTES = 4 * MAX_EXCLUDE_PATTERNS * MAX_PATTERN_CHARS

#: key -> environment variable that sets it. Lists are comma-separated there.
ENV_VARS: dict[str, str] = {
    "source_directory": "DOCSEARCH_SOURCE_DIRECTORY",
    "index_output_directory": "DOCSEARCH_INDEX_OUTPUT_DIRECTORY",
    "included_extensions": "DOCSEARCH_INCLUDED_EXTENSIONS",
    "excluded_extensions": "DOCSEARCH_EXCLUDED_EXTENSIONS",
    "scan_interval_seconds": "DOCSEARCH_SCAN_INTERVAL_SECONDS",
    "max_file_size_mb": "DOCSEARCH_MAX_FILE_SIZE_MB",
    "include_hidden": "DOCSEARCH_INCLUDE_HIDDEN",
    "respect_gitignore": "DOCSEARCH_RESPECT_GITIGNORE",
    "exclude_patterns": "DOCSEARCH_EXCLUDE_PATTERNS",
    "index_notebook_outputs": "DOCSEARCH_INDEX_NOTEBOOK_OUTPUTS",
}
#: key -> command-line flag that sets it.
FLAGS: dict[str, str] = {
    "source_directory": "--source",
    "index_output_directory": "--index-dir",
    "included_extensions": "--include-ext",
    "excluded_extensions": "--exclude-ext",
    "scan_interval_seconds": "--scan-interval",
    "max_file_size_mb": "--max-file-size-mb",
    "include_hidden": "--include-hidden",
    "respect_gitignore": "--respect-gitignore",
    "exclude_patterns": "--exclude-patterns",
    "index_notebook_outputs": "--index-notebook-outputs",
}
#: The config file also takes ``sources``: {"name": "folder", ...}, beside or instead of source_directory;
#: a source may be {"path": "folder", ...} with its own settings of models.SOURCE_SETTINGS.
KNOWN_KEYS = frozenset(ENV_VARS) | {"sources"}
#: At most this many sources per server: each has its own loop thread and inotify instance
#: (a user has 128 of those by default, fs.inotify.max_user_instances).
MAX_SOURCES = 32
#: Named sets of extensions, written ``@name`` among included_extensions (``--include-ext @code``).
#: A source tree: its code (code_outline.CODE_EXTENSIONS), its docs and its configuration.
EXTENSION_PRESETS: dict[str, tuple[str, ...]] = {
    "code": (*sorted(CODE_EXTENSIONS), ".md", ".markdown", ".rst", ".txt", ".toml", ".yaml", ".yml", ".cfg", ".ini"),
}
#: What a source's name may be (models.SOURCE_NAME), as messages say it.
NAME_RULE = "letters, digits, '.', '_', '-' (up to 64, a letter or digit first)"


def user_files(environ: Mapping[str, str], project_dir: Path | None = None) -> tuple[Path | None, Path | None]:
    """The settings file read when none is named, and the default index directory.

    Run from a clone (``pyproject.toml`` beside the modules, also an editable install): the
    clone's ``config.json`` and ``indexes/``. Installed as a package (pipx, uv tool, a wheel: the
    modules are in site-packages/docsearch_mcp): never there, but in the XDG base directories,
    ``~/.config/docsearch/config.json`` (read if it exists) and ``~/.local/share/docsearch/indexes``;
    None for each when the user has no home folder to find them in."""
    project_dir = project_dir or PROJECT_DIR
    installed = {project_dir.name, project_dir.parent.name} & {"site-packages", "dist-packages"}
    if (project_dir / "pyproject.toml").is_file() and not installed:
        return project_dir / "config.json", project_dir / "indexes"
    return _xdg_dir(environ, "XDG_CONFIG_HOME", ".config", "config.json"), _xdg_dir(environ, "XDG_DATA_HOME", ".local/share", "indexes")


def _xdg_dir(environ: Mapping[str, str], variable: str, fallback: str, name: str) -> Path | None:
    """``name`` in this program's folder under an XDG base directory. A relative value is ignored,
    as the specification says, and so is a relative HOME: both would follow the working directory."""
    base = environ.get(variable, "")
    if os.path.isabs(base):
        return Path(base) / "docsearch" / name
    home = environ.get("HOME", "")
    if not os.path.isabs(home):
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except (KeyError, OSError):  # a user with no entry in the password database
            return None
    return Path(home) / fallback / "docsearch" / name if os.path.isabs(home) else None


@dataclass(frozen=True)
class _Value:
    """A raw setting and where it came from, so errors can point at the right place."""

    raw: Any
    origin: str
    base_dir: Path
    textual: bool = True  # environment and flags give strings; a config file gives JSON types


def load_config(
    flags: Mapping[str, Any],
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Merge file, environment and flags (flags hold only what the user gave) into a ServerConfig."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd()
    if config_file is None and environ.get(CONFIG_ENV_VAR):
        config_file = _path(_Value(environ[CONFIG_ENV_VAR], f"environment variable {CONFIG_ENV_VAR}", cwd), "config")
    default_file, default_index_dir = user_files(environ)
    values: dict[str, _Value] = {}
    values.update(_read_config_file(config_file, default_file))
    for key, var in ENV_VARS.items():
        if var in environ:
            values[key] = _Value(environ[var], f"environment variable {var}", cwd)
    for key, raw in flags.items():
        if key not in ENV_VARS:
            raise ConfigError(key, "unknown setting", "command line")
        if raw is not None and raw != []:
            values[key] = _Value(raw, FLAGS[key], cwd)
    if not values.get("source_directory", _Value(None, "config file", cwd)).origin.startswith("config file"):
        values.pop("sources", None)  # sources given on the command line or in the environment replace the file's
    return _validate(values, default_index_dir)


def _read_config_file(config_file: Path | None, default_file: Path | None) -> dict[str, _Value]:
    if config_file is None:
        if default_file is None or not default_file.is_file():
            return {}
        config_file = default_file
    origin = f"config file {config_file}"
    try:
        # Numbers as written (Decimal): a float would read 1e-400 as 0 and 1e400 as infinity.
        data = json.loads(_config_bytes(config_file).decode("utf-8"), parse_float=Decimal, parse_int=Decimal)
    except UnicodeDecodeError as exc:
        raise ConfigError("config", f"cannot read: {exc}", str(config_file)) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or arrays nested past the stack
        raise ConfigError("config", f"not valid JSON: {exc}", str(config_file)) from None
    except InvalidOperation:
        raise ConfigError("config", "holds a number with an exponent out of range", str(config_file)) from None
    if not isinstance(data, dict):
        raise ConfigError("config", "must be a JSON object of settings", str(config_file))
    unknown = sorted(set(data) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(unknown[0], f"unknown setting (known: {', '.join(sorted(KNOWN_KEYS))})", origin)
    base = Path(config_file).resolve().parent
    return {key: _Value(raw, origin, base, textual=False) for key, raw in data.items()}


def _config_bytes(config_file: Path) -> bytes:
    """The config file's bytes, read only if it is a regular file of at most MAX_CONFIG_FILE_BYTES:
    a FIFO must not block the start, nor /dev/zero fill the memory."""
    try:
        descriptor = os.open(config_file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise ConfigError("config", "file not found", str(config_file)) from None
    except OSError as exc:
        raise ConfigError("config", f"cannot read: {exc.strerror or exc}", str(config_file)) from None
    try:
        info = os.fstat(descriptor)  # of what was opened: the name may have been swapped since
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("config", "is not a regular file (a folder, FIFO or device): give a JSON file", str(config_file))
        chunks: list[bytes] = []
        left = MAX_CONFIG_FILE_BYTES + 1
        while left > 0 and (chunk := os.read(descriptor, left)):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ConfigError("config", f"cannot read: {exc.strerror or exc}", str(config_file)) from None
    finally:
        os.close(descriptor)
    if left <= 0:
        raise ConfigError("config", f"is larger than {MAX_CONFIG_FILE_BYTES:,} bytes: it should hold only settings", str(config_file))
    return b"".join(chunks)


def _validate(values: dict[str, _Value], default_index_dir: Path | None) -> ServerConfig:
    if "source_directory" not in values and "sources" not in values:
        raise ConfigError(
            "source_directory", "required: pass --source DIR, set DOCSEARCH_SOURCE_DIRECTORY, or put it in the config file"
        )
    if "index_output_directory" in values:
        index_dir = _resolved(values["index_output_directory"], "index_output_directory")
    elif default_index_dir is not None:
        index_dir = default_index_dir
    else:
        raise ConfigError(
            "index_output_directory", "no home folder to keep the index in (HOME is not set to an absolute path and the"
            " user has none): set HOME or XDG_DATA_HOME, or give --index-dir DIR"
        )
    sources = _sources(values, index_dir)
    defaults = ServerConfig(source_directory=sources[0].directory, index_output_directory=index_dir)
    return ServerConfig(
        source_directory=sources[0].directory,
        sources=sources,
        index_output_directory=index_dir,
        included_extensions=_extensions(values.get("included_extensions"), "included_extensions", defaults.included_extensions),
        excluded_extensions=_extensions(values.get("excluded_extensions"), "excluded_extensions", defaults.excluded_extensions),
        scan_interval_seconds=_scan_interval(values.get("scan_interval_seconds"), defaults.scan_interval_seconds),
        max_file_size_mb=_file_size(values.get("max_file_size_mb"), defaults.max_file_size_mb),
        include_hidden=_boolean(values.get("include_hidden"), "include_hidden", defaults.include_hidden),
        respect_gitignore=_boolean(values.get("respect_gitignore"), "respect_gitignore", defaults.respect_gitignore),
        exclude_patterns=_patterns(values.get("exclude_patterns"), defaults.exclude_patterns),
        index_notebook_outputs=_boolean(values.get("index_notebook_outputs"), "index_notebook_outputs", defaults.index_notebook_outputs),
    )


def _sources(values: dict[str, _Value], index_dir: Path) -> tuple[Source, ...]:
    """Every source, named and checked: each an existing, readable folder, no two of one name, none
    inside another, none the index folder or inside it."""
    named = _named_folders(values)
    if len(named) > MAX_SOURCES:
        raise ConfigError("sources", f"at most {MAX_SOURCES} sources, got {len(named)}", named[0][2].origin)
    sources: list[Source] = []
    for name, raw, value in named:
        settings: tuple[tuple[str, object], ...] = ()
        if isinstance(raw, dict) and name:
            raw, settings = _source_settings(name, raw, value)
        folder = _source_folder(_Value(raw, value.origin, value.base_dir, value.textual), name)
        name = name or _unique(default_source_name(folder), {s.name for s in sources} | {n for n, _, _ in named if n})
        if any(s.name == name for s in sources):
            raise ConfigError("sources", f"two sources are named {name!r}: give each its own name (NAME=DIR)", value.origin)
        for other in sources:
            if folder == other.directory:
                raise ConfigError("sources", f"{folder} is given twice (as {other.name!r} too)", value.origin)
            if is_under(folder, other.directory) or is_under(other.directory, folder):
                inner, outer = (folder, other.directory) if is_under(folder, other.directory) else (other.directory, folder)
                raise ConfigError("sources", f"{inner} is inside {outer}, another source: serve the outer one, or two"
                                  " folders side by side", value.origin)
        if is_under(folder, index_dir):
            raise ConfigError("sources", f"{folder} is the index folder {index_dir} or inside it: index another folder", value.origin)
        sources.append(Source(name, folder, identity(os.stat(folder)), settings))
    return tuple(sources)


def _source_settings(name: str, entry: dict[str, object], value: _Value) -> tuple[object, tuple[tuple[str, object], ...]]:
    """A source given as {"path": folder, setting: value, ...}: its folder as given and its own
    settings (models.SOURCE_SETTINGS), validated as the server-wide ones are."""
    key = f"sources.{name}"
    if "path" not in entry:
        raise ConfigError(key, f'needs "path", the folder: {{"path": "~/repo", "included_extensions": "@code"}}', value.origin)
    unknown = sorted(set(entry) - {"path", *SOURCE_SETTINGS})
    if unknown:
        raise ConfigError(key, f"unknown setting {unknown[0][:80]!r}; a source may set path, {', '.join(SOURCE_SETTINGS)}", value.origin)
    given = {setting: _Value(raw, value.origin, value.base_dir, value.textual) for setting, raw in entry.items() if setting != "path"}
    readers = {
        "included_extensions": lambda v: _extensions(v, "included_extensions", ()),
        "excluded_extensions": lambda v: _extensions(v, "excluded_extensions", ()),
        "max_file_size_mb": lambda v: _file_size(v, 0.0),
        "include_hidden": lambda v: _boolean(v, "include_hidden", False),
        "respect_gitignore": lambda v: _boolean(v, "respect_gitignore", True),
        "exclude_patterns": lambda v: _patterns(v, ()),
        "index_notebook_outputs": lambda v: _boolean(v, "index_notebook_outputs", False),
    }
    try:
        settings = tuple((setting, readers[setting](given[setting])) for setting in SOURCE_SETTINGS if setting in given)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.key}", exc.problem, value.origin) from None
    return entry["path"], settings


def _named_folders(values: dict[str, _Value]) -> list[tuple[str | None, object, _Value]]:
    """(name or None, folder as given, where it came from) of each source, in the order given:
    source_directory's (several from the command line, each DIR or NAME=DIR), then the file's
    ``sources``."""
    named: list[tuple[str | None, object, _Value]] = []
    given = values.get("source_directory")
    if given is not None:
        for raw in given.raw if isinstance(given.raw, list) else [given.raw]:
            name, folder = _split_named(raw, given.origin) if given.textual else (None, raw)
            named.append((name, folder, given))
    listed = values.get("sources")
    if listed is not None:
        if not isinstance(listed.raw, dict) or not listed.raw:
            raise ConfigError("sources", f'must be an object of name: folder, like {{"notes": "~/notes"}}, got {_shown(listed.raw)}', listed.origin)
        for name, folder in listed.raw.items():
            if not SOURCE_NAME.fullmatch(name):
                raise ConfigError("sources", f"{name[:80]!r} is not a source name: {NAME_RULE}", listed.origin)
            named.append((name, folder, listed))
    return named


def _split_named(raw: object, origin: str) -> tuple[str | None, object]:
    """NAME=DIR -> (NAME, DIR); anything else is a folder (write ./a=b for a folder named so). A
    NAME that is not a valid name, given for a folder that does not exist, is refused as a name."""
    if isinstance(raw, str) and "=" in raw:
        name, folder = raw.split("=", 1)
        if SOURCE_NAME.fullmatch(name):
            return name, folder
        if "/" not in name and not os.path.lexists(raw):
            raise ConfigError("sources", f"{name[:80]!r} is not a source name: {NAME_RULE}", origin)
    return None, raw


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``... if taken."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name[:60]}-{n}"
    return candidate


def _source_folder(value: _Value, name: str | None) -> Path:
    """A source's folder, resolved; it must be a folder this user can list."""
    key = f"sources.{name}" if name else "source_directory"
    folder = _resolved(value, key)
    try:
        is_dir = folder.is_dir()
    except OSError as exc:
        raise ConfigError(key, f"{folder}: {exc.strerror or exc}", value.origin) from None
    if not is_dir:
        problem = "is not a directory" if folder.exists() else "does not exist"
        raise ConfigError(key, f"{folder} {problem}", value.origin)
    if not os.access(folder, os.R_OK | os.X_OK):
        raise ConfigError(key, f"{folder} cannot be read (permission denied)", value.origin)
    return folder


def _path(value: _Value, key: str) -> Path:
    """The absolute path a setting names (not resolved). A relative path from the command line or
    the environment must not pass through a link inside the working directory: that directory is
    often an untrusted project, which could point "docs" at the user's private folder."""
    if not isinstance(value.raw, (str, os.PathLike)) or not str(value.raw).strip():
        raise ConfigError(key, f"must be a non-empty path string, got {_shown(value.raw)}", value.origin)
    if "\x00" in str(value.raw):
        raise ConfigError(key, "must not contain a NUL byte", value.origin)
    try:
        path = Path(value.raw).expanduser()
    except RuntimeError as exc:  # "~nosuchuser"
        raise ConfigError(key, f"{value.raw!r}: {exc}", value.origin) from None
    if path.is_absolute():
        return path
    if value.textual:
        _refuse_links_under(value.base_dir, path, key, value)
    return value.base_dir / path


def _refuse_links_under(base: Path, relative: Path, key: str, value: _Value) -> None:
    inside = base
    for part in relative.parts:
        inside = Path(os.path.normpath(inside / part))
        if not is_under(inside, base):
            return
        try:
            is_link = inside.is_symlink()
        except OSError as exc:  # a name too long, a folder that may not be searched
            raise ConfigError(key, f"{value.raw!r}: {exc.strerror or exc}", value.origin) from None
        if is_link:
            raise ConfigError(
                key, f"{value.raw!r} goes through {inside}, a link (to {os.path.realpath(inside)}) inside the working"
                " directory; give the real path if you mean it", value.origin,
            )


def is_under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _resolved(value: _Value, key: str) -> Path:
    """_path, with every link resolved; an unusable path is a ConfigError."""
    path = _path(value, key)
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # a link loop, a name too long
        raise ConfigError(key, f"{path}: {getattr(exc, 'strerror', None) or exc}", value.origin) from None


def _extensions(value: _Value | None, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    if value is None:
        return default
    raw = value.raw
    items = raw.split(",") if isinstance(raw, str) and (value.textual or raw.startswith("@")) else raw
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, str) for item in items):
        raise ConfigError(key, f"must be a list of extensions like [\".md\", \".txt\"], got {_shown(raw)}", value.origin)
    result = []
    for item in items:
        ext = item.strip().lower()
        if ext.startswith("@") and key == "included_extensions":
            if ext[1:] not in EXTENSION_PRESETS:
                raise ConfigError(key, f"{item[:80]!r} is not a preset; the presets: {', '.join('@' + p for p in EXTENSION_PRESETS)}", value.origin)
            result.extend(EXTENSION_PRESETS[ext[1:]])
            continue
        if not ext:
            if value.textual:
                continue  # tolerate "a,,b" and a trailing comma in env/flag lists
            raise ConfigError(key, "an extension must not be empty", value.origin)
        ext = ext if ext.startswith(".") else "." + ext
        if "/" in ext or "\x00" in ext or ext == ".":
            raise ConfigError(key, f"{item!r} is not a file extension", value.origin)
        result.append(ext)
    if not result and key == "included_extensions":
        raise ConfigError(key, "needs at least one extension, e.g. .md", value.origin)
    return tuple(dict.fromkeys(result))


def _patterns(value: _Value | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """exclude_patterns: a list of .gitignore patterns (comma-separated in the environment and on the
    command line, where spaces around each are dropped and empty ones skipped). Each must be one
    the walk can match: ignore_rules.compile_exclude_patterns says why not."""
    key = "exclude_patterns"
    if value is None:
        return default
    raw = value.raw
    if isinstance(raw, str) and value.textual:
        items = [item.strip() for item in raw.split(",") if item.strip()]
    elif isinstance(raw, (list, tuple)) and all(isinstance(item, str) for item in raw):
        items = list(raw)
    else:
        raise ConfigError(key, f"must be a list of patterns like [\"drafts/**\", \"*.tmp\"], got {_shown(raw)}", value.origin)
    if len(items) > MAX_EXCLUDE_PATTERNS:
        raise ConfigError(key, f"at most {MAX_EXCLUDE_PATTERNS} patterns, got {len(items)}", value.origin)
    for item in items:
        if not item:
            raise ConfigError(key, "a pattern must not be empty", value.origin)
    try:
        compile_exclude_patterns(tuple(items))
    except PatternError as exc:
        raise ConfigError(key, f"pattern {exc}", value.origin) from None
    return tuple(items)


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _boolean(value: _Value | None, key: str, default: bool) -> bool:
    """true or false: a JSON boolean in the config file; true/false, 1/0, yes/no, on/off elsewhere."""
    if value is None:
        return default
    raw = value.raw
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and value.textual and raw.strip().lower() in _TRUE + _FALSE:
        return raw.strip().lower() in _TRUE
    raise ConfigError(key, f"must be true or false, got {_shown(raw)}", value.origin)


def _file_size(value: _Value | None, default: float) -> float:
    if value is None:
        return default
    return _number(value, "max_file_size_mb", MIN_FILE_SIZE_MB, MAX_FILE_SIZE_MB, f"at least one byte ({MIN_FILE_SIZE_MB:.7f})")


def _scan_interval(value: _Value | None, default: float) -> float:
    """0 (scan only at start and on request), or a period within the bounds above."""
    if value is None:
        return default
    return _number(
        value, "scan_interval_seconds", MIN_SCAN_INTERVAL_SECONDS, MAX_SCAN_INTERVAL_SECONDS,
        f"0 (no periodic rescan) or at least {MIN_SCAN_INTERVAL_SECONDS:g}", zero_allowed=True,
    )


def _number(value: _Value, key: str, minimum: float, maximum: float, at_least: str, zero_allowed: bool = False) -> float:
    """A number from ``minimum`` to ``maximum`` (``at_least`` says the lower bound to a person), or 0
    when ``zero_allowed``. Judged as written, not as rounded to a float: 1e-400 is too small, not 0."""
    raw = value.raw
    exact = _decimal(value)
    if exact is None or exact.is_nan():
        raise ConfigError(key, f"must be a number, got {_shown(raw)}", value.origin)
    if exact < 0 or (exact == 0 and not zero_allowed):
        raise ConfigError(key, f"must be {'0 or more' if zero_allowed else 'greater than 0'}, got {_shown(raw)}", value.origin)
    if exact == 0:
        return 0.0  # also for "-0"
    number = float(exact)  # 0.0 when too small for a float, inf when too large
    if number > maximum:
        raise ConfigError(key, f"must be at most {maximum:g}, got {_shown(raw)}", value.origin)
    if number < minimum:
        raise ConfigError(key, f"must be {at_least}, got {_shown(raw)}", value.origin)
    return number


def _decimal(value: _Value) -> Decimal | None:
    """The number a setting holds, exactly; None if it holds none (or one with an exponent past
    Decimal's range)."""
    raw = value.raw
    if isinstance(raw, str) and value.textual:
        try:
            return Decimal(raw.strip())
        except InvalidOperation:
            return None
    return Decimal(raw) if isinstance(raw, (int, float, Decimal)) and not isinstance(raw, bool) else None


def _shown(raw: Any) -> str:
    """A setting's value as its message quotes it (a number from the config file as written)."""
    return str(raw) if isinstance(raw, Decimal) else repr(raw)
