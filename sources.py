"""Which of a server's sources a tool's ``collection`` and ``path`` arguments name."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Sequence

import database
import index_queries
from exceptions import ArgumentError, IndexUnavailableError, UnsafePathError
from file_utils import is_inside
from models import SOURCE_NAME, ServerConfig, Source

#: At most this many names in a ``collection`` list (more than a server may serve: config.MAX_SOURCES).
MAX_COLLECTIONS = 64


def named_sources(config: ServerConfig, collection: str | Sequence[str] | None) -> list[Source]:
    """The sources ``collection`` names (one name or a list; None: all); an unknown name is an
    ArgumentError that lists the known ones."""
    if collection is None:
        return list(config.sources)
    names = [collection] if isinstance(collection, str) else collection
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(name, str) for name in names):
        raise ArgumentError("collection", f"must be a source's name or a list of them, got {collection!r}")
    chosen = []
    names = list(dict.fromkeys(names))
    if len(names) > MAX_COLLECTIONS:
        raise ArgumentError("collection", f"at most {MAX_COLLECTIONS} names, got {len(names)}")
    for name in names:
        source = config.source_named(name)
        if source is None:
            raise ArgumentError("collection", f"no source is named {name[:100]!r}; known: {_known(config)}")
        chosen.append(source)
    return chosen


def filter_prefixes(config: ServerConfig, collection: str | Sequence[str] | None, path: str | None) -> list[str] | None:
    """The key prefixes a search or listing keeps (filters.read_filters' ``under``): None when it
    keeps every source's files and has no path filter to apply within each."""
    chosen = named_sources(config, collection)
    if not config.several or (collection is None and path is None):
        return None
    return [config.key_prefix(source.name) for source in chosen]


def source_of(config: ServerConfig, collection: str | None, user_path: str) -> tuple[ServerConfig, str]:
    """The config of the source holding ``user_path`` (get_document, refresh_index), and the path
    within it: the named ``collection``'s; else, with several sources, the one an absolute path is
    inside, or the one ``NAME:path`` names when a source is named NAME (as ``also_in`` writes another
    source's file; a file literally named so is read with ``collection``), or the only one whose
    index (else folder) has a file at that path (an ArgumentError when several do, naming them)."""
    if collection is not None:
        if not isinstance(collection, str):
            raise ArgumentError("collection", f"must be a source's name, got {collection!r}")
        return config.for_source(named_sources(config, collection)[0]), user_path
    if not config.several or not isinstance(user_path, str):
        return config, user_path
    if os.path.isabs(user_path):
        for source in config.sources:
            if is_inside(os.path.normpath(user_path), str(source.directory)):  # config resolved it
                return config.for_source(source), user_path
        raise UnsafePathError(user_path, f"it is outside every source's folder ({_known(config)})")
    named = re.fullmatch(f"({SOURCE_NAME.pattern}):(.+)", user_path, re.S)
    if named and config.source_named(named[1]) is not None:  # also_in's way of naming another source's file
        return config.for_source(config.source_named(named[1])), named[2]  # type: ignore[arg-type]
    holding = [source for source in config.sources if _indexed(config, source, user_path)]
    holding = holding or [source for source in config.sources if _on_disk(source, user_path)]
    if len(holding) > 1:
        names = ", ".join(source.name for source in holding)
        raise ArgumentError("collection", f"{user_path[:200]!r} is in several sources ({names}): give collection")
    if holding:
        return config.for_source(holding[0]), user_path
    return config.for_source(config.sources[0]), user_path


def indexed_folders(config: ServerConfig, source: Source) -> dict[str, str]:
    """The identities of the folders ``source``'s index was made from, as its last scan recorded
    them ("" for the source itself, "a/b/" for a mount point in it), the source's else as it was
    when the server started: what a reply may read (file_utils.reading_from)."""
    try:
        recorded = index_queries.recorded_folders(database.reader(config.db_path), config.key_prefix(source.name))
    except (IndexUnavailableError, sqlite3.Error):
        recorded = {}
    if "" not in recorded and source.identity is not None:
        recorded[""] = source.identity
    return recorded


def _relative(user_path: str) -> str | None:
    relative = user_path.strip().replace("\\", "/").lstrip("/")
    return None if not relative or "\x00" in relative or ".." in relative.split("/") else relative


def _indexed(config: ServerConfig, source: Source, user_path: str) -> bool:
    """Whether the index holds a file of ``source`` at ``user_path``."""
    relative = _relative(user_path)
    try:
        return relative is not None and index_queries.stored_file(database.reader(config.db_path), config.key(source.name, relative)) is not None
    except (IndexUnavailableError, sqlite3.Error):
        return False


def _on_disk(source: Source, user_path: str) -> bool:
    """Whether ``source``'s folder has something at ``user_path`` (a file not indexed yet, say; a last link not followed)."""
    relative = _relative(user_path)
    try:
        return relative is not None and os.path.lexists(os.path.join(source.directory, relative))
    except (OSError, ValueError):
        return False


def _known(config: ServerConfig) -> str:
    return ", ".join(source.name for source in config.sources)
