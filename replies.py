"""The replies the tools send: structured content and the same as compact JSON, without the fields that say nothing."""

import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, cast

from models import DocumentReply, FileList, QueryReading, RefreshReply, SearchHit, SearchReply, StatusReply
from query import STOPWORDS

#: A refresh_index of several sources names at most this many errors.
MAX_REFRESH_ERRORS = 20


def tool_result(reply: Mapping[str, Any]) -> Any:
    """A tool's reply as sent: the structured content, and the same as compact JSON for the text
    content (the SDK's own text is indented: a third more characters, paid for by the agent)."""
    from mcp.types import CallToolResult, TextContent

    text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(reply))


def refused_refresh(reason: str) -> Any:
    """A refresh_index that could not run, as a tool error that still holds the spec's fields."""
    reply = tool_result({"success": False, "files_processed": 0, "files_removed": 0, "errors": [reason]})
    reply.is_error = True
    return reply


def _said(reply: Mapping[str, Any], optional: tuple[str, ...]) -> dict[str, Any]:
    """``reply`` without those of its ``optional`` fields that say nothing (false, 0, empty, None)."""
    return {key: value for key, value in reply.items() if value or key not in optional}


_TYPED_WORD = re.compile(r"[^\W_]+")


def read_differently(query: str, reading: QueryReading) -> bool:
    """Whether ``query`` was read other than as the words typed: phrases, exclusions (a command
    line's -Option), feedback words, a query of stopwords, or words other than stopwords dropped."""
    if reading["phrases"] or reading["excluded"] or reading["feedback"] or reading["mode"] == "stopwords":
        return True
    searched = set(_TYPED_WORD.findall(" ".join(reading["required"] + reading["optional"] + reading["prefixes"]).lower()))
    return set(_TYPED_WORD.findall(query.lower())) - STOPWORDS != searched - STOPWORDS


def lean_search(reply: SearchReply, query: str, explain: bool = False) -> SearchReply:
    """The search reply an agent is sent: the fields that say nothing left out (docs/tools.md);
    ``query_read`` only when the query was read differently or ``explain``."""
    lean = _said(reply, ("indexing", "offset", "next_offset", "warnings", "suggestions"))
    if reply["query"] == query:
        del lean["query"]
    if explain or read_differently(query, reply["query_read"]):
        lean["query_read"] = cast(QueryReading, _said(reply["query_read"], ("required", "optional", "phrases", "prefixes", "excluded", "feedback")))
    else:
        del lean["query_read"]
    lean["results"] = [lean_hit(hit) for hit in reply["results"]]
    return cast(SearchReply, lean)


def lean_hit(hit: SearchHit) -> SearchHit:
    """A search hit without what says nothing: a title that repeats the heading's first part or
    the file's name, ``stale`` when false, ``also_in`` when empty, an ``also_in_count`` that is
    its length; versioned copies in ``also_in`` named by the folder that differs (named_copies).
    The score keeps 3 significant digits; the spec's fields are always there."""
    lean = _said(hit, ("heading", "stale", "also_in", "tags"))
    lean["score"] = float(f"{hit['score']:.3g}")
    if hit["also_in_count"] == len(hit["also_in"]):
        del lean["also_in_count"]
    if hit["title"] in ("", hit["heading"].split(" > ")[0], PurePosixPath(hit["path"]).stem):
        del lean["title"]
    if lean.get("also_in"):
        del lean["also_in"]
        lean.update(named_copies(hit["path"], hit["also_in"]))
    return cast(SearchHit, lean)


def named_copies(path: str, also_in: list[str]) -> dict[str, Any]:
    """A hit's ``also_in`` as a reply names it. When every entry is ``path`` with one and the same
    folder or file name changed (the version folder of versioned copies), that name is found in
    ``path`` only there, and it is shorter: in ``also_in`` what each entry has instead, and that
    name as ``also_in_replaces`` (an entry's path is ``path`` with also_in_replaces replaced by
    the entry); else ``also_in`` as it is."""
    named: dict[str, Any] = {"also_in": also_in}
    parts = path.split("/")
    changed: set[int] = set()
    for other in also_in:
        theirs = other.split("/")
        differ = [n for n, (mine, its) in enumerate(zip(parts, theirs)) if mine != its] if len(theirs) == len(parts) else []
        if len(differ) != 1:
            return named
        changed.add(differ[0])
    if len(changed) != 1:
        return named
    (at,) = changed
    if path.count(parts[at]) != 1:  # a plain replace of it in path must change that name only
        return named
    short = {"also_in": [other.split("/")[at] for other in also_in], "also_in_replaces": parts[at]}
    return short if len(json.dumps(short, ensure_ascii=False)) < len(json.dumps(named, ensure_ascii=False)) else named


def lean_document(reply: DocumentReply) -> DocumentReply:
    """A get_document reply without what says nothing: flags that are false, read-on positions
    when there is nothing more, and a title that is the file's name."""
    lean = _said(reply, ("truncated", "next_start_line", "next_start_char", "changed_since_indexed", "stale", "outline_truncated"))
    if reply["title"] in ("", PurePosixPath(reply["path"]).stem):
        del lean["title"]
    return cast(DocumentReply, lean)


def lean_status(status: Mapping[str, Any], part: bool = False) -> StatusReply:
    """A get_index_status reply (or with ``part``, a source's part of it) without what says
    nothing: counts that are 0, values never set, and ``progress`` when no scan is running. The
    spec's fields are in every reply: only a part leaves out a last_scan never set and no errors."""
    spec_fields = ("last_scan", "errors_encountered") if part else ()
    lean = _said(status, (*spec_fields, "last_error", "skipped_files", "fallback_decoded_files", "writer_pid"))
    if status["state"] != "indexing":
        lean.pop("progress", None)
    lean["watching"] = _said(status["watching"], ("problem",))
    if "sources" in status:
        lean["sources"] = [lean_status(part, part=True) for part in status["sources"]]
    return cast(StatusReply, lean)


def merged_refresh(replies: Mapping[str, RefreshReply]) -> RefreshReply:
    """One refresh_index reply for the scans of several sources (by name): each error after its source's name."""
    return {
        "success": all(reply["success"] for reply in replies.values()),
        "files_processed": sum(reply["files_processed"] for reply in replies.values()),
        "files_removed": sum(reply["files_removed"] for reply in replies.values()),
        "errors": [f"{name}: {error}" for name, reply in replies.items() for error in reply.get("errors", [])][:MAX_REFRESH_ERRORS],
    }


def lean_listing(reply: FileList) -> FileList:
    """A list_files reply without what says nothing: no next_offset on the last page, no warnings,
    and each file without an empty title or tags."""
    lean = _said(reply, ("next_offset", "warnings"))
    lean["files"] = [_said(listed, ("title", "tags")) for listed in reply["files"]]
    return cast(FileList, lean)
