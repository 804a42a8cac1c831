"""Exception hierarchy: one base class, subclasses carry the context a person needs to act; and
text made writable for messages and replies."""

from __future__ import annotations

import os
import re
from typing import TypeVar, cast

_T = TypeVar("_T")
_SURROGATE = re.compile("[\ud800-\udfff]")


def writable(text: str) -> str:
    """``text`` as it can be written out as UTF-8 (a reply, a message, a log line): each lone
    surrogate, which is how Python holds a byte of a file name that is not UTF-8, as U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def reason_of(exc: BaseException) -> str:
    """What a reply, a status or a message says of a failure: a file system error by its reason
    and the last name of the file it names, never the whole path (a file's absolute path, which
    OSError's own text holds, says where the user's folders are; a race in the kernel's answer is
    no reason to show it); anything else by its own text."""
    if isinstance(exc, OSError) and exc.strerror:
        names = [os.path.basename(str(name).rstrip("/")) for name in (exc.filename, exc.filename2) if name is not None]
        return writable(f"{exc.strerror}{': ' + ' -> '.join(names) if names else ''}")
    return writable(str(exc))


class DocSearchError(Exception):
    """Base class for every error this daemon raises on purpose. Its message is always writable:
    the paths it names may be under a folder whose name is not UTF-8 (the attributes keep them as given)."""

    def __str__(self) -> str:
        return writable(super().__str__())


class ConfigError(DocSearchError):
    """A configuration value is missing, of the wrong type or out of range."""

    def __init__(self, key: str, problem: str, origin: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.origin = origin
        where = f" (from {origin})" if origin else ""
        super().__init__(f"{key}: {problem}{where}")


class UnsafePathError(DocSearchError):
    """A user-given path is refused because it leaves the source or is otherwise unsafe."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"path {path!r} refused: {reason}")


class QueryError(DocSearchError):
    """A search query cannot be turned into a search (e.g. it has no searchable term)."""

    def __init__(self, query: str, reason: str) -> None:
        self.query = query
        self.reason = reason
        shown = query if len(query) <= 80 else query[:77] + "..."
        super().__init__(f"query {shown!r}: {reason}")


class ArgumentError(DocSearchError):
    """A tool's argument other than the query is out of range or malformed (a filter, an offset,
    a heading or line range)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = name
        self.problem = problem
        super().__init__(f"{name}: {problem}")


class IndexUnavailableError(DocSearchError):
    """The index database cannot be opened or used right now."""

    def __init__(self, db_path: str, reason: str, *, not_made_yet: bool = False, damaged: bool = False) -> None:
        self.db_path = db_path
        self.reason = reason
        #: No index yet (its first scan has not made it): nothing is wrong.
        self.not_made_yet = not_made_yet
        #: The file is damaged or not a database: the next scan moves it aside and rebuilds it.
        self.damaged = damaged
        super().__init__(f"index {db_path}: {reason}")


class SourceUnavailableError(DocSearchError):
    """The source directory itself cannot be listed: nothing in the index may be taken as deleted."""

    def __init__(self, path: str, reason: str, named: str = "source directory") -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{named} {path}: {reason}")


class Cancelled(DocSearchError):
    """Work stopped because its caller went away, cancelled it, or the process is stopping."""


class FileSkipped(DocSearchError):
    """A file is not indexed; ``reason`` is one of file_utils.SKIP_REASONS and is counted in status."""

    def __init__(self, path: str, reason: str, detail: str = "") -> None:
        self.path = path
        self.reason = reason
        self.detail = detail
        super().__init__(f"{path}: skipped ({reason}{': ' + detail if detail else ''})")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        # Loader processes send these back to the writer; pickle the fields, not the message.
        return (FileSkipped, (self.path, self.reason, self.detail))


def writable_reply(reply: _T) -> _T:
    """``reply`` with every text in it writable (writable): a path under a folder
    whose name is not UTF-8 must not stop a reply being written, and with it the stdio server."""
    if isinstance(reply, str):
        return cast(_T, writable(reply))
    if isinstance(reply, dict):
        return cast(_T, {key: writable_reply(value) for key, value in reply.items()})
    if isinstance(reply, list):
        return cast(_T, [writable_reply(item) for item in reply])
    return reply
