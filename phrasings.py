"""Several phrasings of one need, searched and fused into one ranked list of distinct answers.

The agent calling the server is a language model: it can guess the words the documents use and
phrase a need several ways. Each phrasing is searched as ``search`` searches one query; the lists
are fused by reciprocal rank (a file's fused score is the sum over the lists that hold it of
``weight / (RANK_OFFSET + rank)``, times the number of those lists to the power AGREEMENT), so a
file several phrasings agree on rises, and each file is one result however many lists, or copies
of it, name it.

Tuned on the seven test collections with phrasings an LLM wrote without seeing the documents
(bench/phrasings/, bench/relevance.py --phrasings): a small RANK_OFFSET, unlike the usual 60, lets
each phrasing's own strength count (its first places weigh much more), and a list deeper than the
page finds what several phrasings agree on lower down (30 places: 40 gained on one collection and
lost on others). The query's own words may be widened by feedback words as a search's are; the
alternatives are not: they are the agent's own widening. Without their feedback the fused lists
were as good (mean nDCG@10 0.5720 against 0.5701, 20 places deep) in 59 s instead of 100 s for the
seven collections' 576 fused searches; 30 places deep took 87 s for 0.5747.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from config import USABLE_CPUS
from exceptions import ArgumentError, QueryError
from filters import NO_FILTERS, Filters
from models import SearchHit, SearchReply
from query import MAX_QUERY_CHARS, parse_query
from search import MAX_ALSO_IN, MAX_LIMIT, MAX_OFFSET, Freshness, PageDetail, searched_page, show_sections

#: At most this many phrasings besides the query.
MAX_ALTERNATIVES = 4
#: Reciprocal rank fusion's constant: how much the first places weigh more than the next ones (60 in
#: the literature; 3 measured best on the seven collections).
RANK_OFFSET = 3
#: The query the agent sent first weighs this much against each alternative's 1.
QUERY_WEIGHT = 1.2
#: A file's fused score is multiplied by the number of lists holding it to this power.
AGREEMENT = 0.25
#: The phrasings are searched on this many threads at once.
PHRASING_THREADS = USABLE_CPUS
#: Each phrasing is ranked this deep, whatever the page asked for, so that consecutive pages are cut
#: from one fused list (at most this many times the phrasings' answers) and never repeat a file.
FUSION_DEPTH = 30
#: Of those, each phrasing shows this many whole (their answering spans, snippets, and copies that
#: answer alike made one), whatever the page: a fused result ranked below them in every list is
#: shown afterwards (_show_bare). The same for every page, so that every page is cut from one list.
FUSION_SHOWN = 10


def alternatives_given(alternatives: object, query: str) -> list[str]:
    """The alternatives to search besides ``query``: distinct (ignoring case and spacing), none
    the query itself; ArgumentError for anything but a list of at most MAX_ALTERNATIVES strings
    that are not blank."""
    if alternatives is None:
        return []
    if not isinstance(alternatives, (list, tuple)) or not all(isinstance(text, str) for text in alternatives):
        raise ArgumentError("alternatives", f"must be a list of strings, got {str(alternatives)[:100]!r}")
    if len(alternatives) > MAX_ALTERNATIVES:
        raise ArgumentError("alternatives", f"at most {MAX_ALTERNATIVES} phrasings besides the query, got {len(alternatives)}")
    seen = {" ".join(query.split()).lower()}
    kept = []
    for number, text in enumerate(alternatives, 1):
        if len(text) > MAX_QUERY_CHARS:
            raise ArgumentError("alternatives", f"each at most {MAX_QUERY_CHARS:,} characters, got {len(text):,}")
        said = " ".join(text.split()).lower()  # not casefold: the index reads "strasse" and "straße" apart
        if not said:
            raise ArgumentError("alternatives", f"phrasing {number} is empty: give it words, or leave it out")
        if said not in seen:
            seen.add(said)
            kept.append(text)
    return kept


def fused_search(
    db_path: Path, query: str, limit: int = 10, indexing: bool = False, cancelled: Callable[[], bool] | None = None, *,
    alternatives: Sequence[str] = (), filters: Filters = NO_FILTERS, offset: int = 0, collapse_duplicates: bool = True,
    freshness: Freshness | None = None,
) -> SearchReply:
    """search() of ``query`` and each of ``alternatives`` (see alternatives_given), fused into one
    reply: the page ``offset`` to ``offset + limit`` of the fused list, each file once, shown as the
    phrasing that ranked it best shows it. The reply's ``query_read`` is the query's; a phrasing
    with nothing to search is named in ``warnings`` (an error only when none has anything)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise ArgumentError("limit", f"must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_OFFSET:
        raise ArgumentError("offset", f"must be a whole number from 0 to {MAX_OFFSET:,}, got {offset!r}")
    depth = FUSION_DEPTH  # the same for every page and limit: pages are cut from one fused list

    def searched(text: str) -> tuple[SearchReply, PageDetail] | QueryError:
        try:
            feedback = text == query  # the agent's phrasings are its own widening of the query
            return searched_page(
                db_path, text, depth, indexing, cancelled, filters=filters, collapse_duplicates=collapse_duplicates,
                freshness=freshness, feedback=feedback, shown=FUSION_SHOWN,
            )
        except QueryError as exc:
            return exc

    left_out = _exclusions(query)  # the query's -words leave files out of every phrasing's list
    phrasings = [(QUERY_WEIGHT, query), *((1.0, f"{text} {left_out}".strip()) for text in alternatives)]
    replies: list[tuple[float, SearchReply]] = []
    searches: list[tuple[str, SearchReply, PageDetail]] = []
    skipped: list[str] = []
    first_error: QueryError | None = None
    for (weight, text), found in zip(phrasings, _pool().map(searched, [text for _, text in phrasings])):
        if isinstance(found, QueryError):
            first_error = first_error or found
            skipped.append(f"the phrasing {text[:100]!r} was not searched: {found.reason}")
        else:
            reply, detail = found
            if text != query:  # its warnings are about the alternative, not the query
                reply = {**reply, "warnings": [f"the phrasing {text[:100]!r}: {warning}" for warning in reply["warnings"]]}  # type: ignore[typeddict-item]
            replies.append((weight, reply))
            searches.append((text, reply, detail))
    if not replies:
        raise first_error  # type: ignore[misc]
    fused, sources = _fused(replies, offset, limit, skipped, [detail.copies for _, _, detail in searches])
    fused["query"] = query[:MAX_QUERY_CHARS]  # the reply answers the query, whichever phrasing was searched first
    _show_bare(db_path, fused["results"], sources, searches)
    return fused


def _exclusions(query: str) -> str:
    """The query's excluded words, phrases and prefixes, written to be added to another phrasing."""
    parsed = parse_query(query)
    return " ".join([*(f'-"{" ".join(words)}"' for words in parsed.excluded), *(f"-{prefix}*" for prefix in parsed.excluded_prefixes)])


def _show_bare(
    db_path: Path, results: list[SearchHit], sources: Sequence[int], searches: list[tuple[str, SearchReply, PageDetail]]
) -> None:
    """Show the ``results`` that the phrasing each is shown from (``sources``: its number in
    ``searches``) ranked below the places it showed (searched_page's bare results) as that phrasing
    shows them (search.show_sections): a file several phrasings agree on deep in their lists gets
    the span that answers and its snippet. One pass per phrasing, on the phrasings' threads; a
    result whose section left the index meanwhile is left out."""
    wanted: dict[int, dict[str, int]] = {}
    for hit, number in zip(results, sources):
        if hit["path"] in searches[number][2].bare:
            wanted.setdefault(number, {})[hit["path"]] = searches[number][2].bare[hit["path"]]

    def show(number: int) -> dict[str, SearchHit]:
        text, reply, _ = searches[number]
        return show_sections(db_path, text, reply["query_read"].get("feedback", []), wanted[number])

    shown: dict[str, SearchHit] = {}
    for found in _pool().map(show, list(wanted)):
        shown.update(found)
    gone = {path for paths in wanted.values() for path in paths} - shown.keys()  # out of the index since it was ranked
    results[:] = [hit for hit in results if hit["path"] not in gone]
    for hit in results:
        if hit["path"] in shown:
            hit.update({key: shown[hit["path"]][key] for key in ("title", "heading", "snippet", "line_start", "line_end")})


_workers: ThreadPoolExecutor | None = None
_workers_made = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads the phrasings are searched on, side by side (SQLite lets go of the GIL)."""
    global _workers
    with _workers_made:
        if _workers is None:
            _workers = ThreadPoolExecutor(max_workers=PHRASING_THREADS, thread_name_prefix="phrasing")
        return _workers


def _fused(
    replies: list[tuple[float, SearchReply]], offset: int, limit: int, skipped: list[str], folded: Sequence[Mapping[str, list[str]]] = (),
) -> tuple[SearchReply, list[int]]:
    """One reply from the phrasings' replies (see fused_search), and for each of its results the
    number of the reply it is shown from (its best place, the first such reply); ``folded``: for
    each reply, every copy folded into each of its results by path (also_in names only a few)."""
    scores: dict[str, float] = {}
    holding: dict[str, int] = {}  # how many lists hold each answer
    shown: dict[str, tuple[int, int, SearchHit]] = {}  # each answer's best place, the reply, and its hit there
    copies: dict[str, list[str]] = {}
    counted: dict[str, int] = {}
    answer_of: dict[str, str] = {}  # a file (or a copy named with it) -> the answer it belongs to
    for number, (weight, reply) in enumerate(replies):
        for rank, hit in enumerate(reply["results"], 1):
            files = [hit["path"], *(folded[number].get(hit["path"], []) if folded else hit.get("also_in", []))]
            answer = next((answer_of[path] for path in files if path in answer_of), hit["path"])
            for path in files:
                answer_of.setdefault(path, answer)
            scores[answer] = scores.get(answer, 0.0) + weight / (RANK_OFFSET + rank)
            holding[answer] = holding.get(answer, 0) + 1
            if answer not in shown or rank < shown[answer][0]:
                shown[answer] = (rank, number, hit)
            copies.setdefault(answer, []).extend(path for path in files if path not in copies[answer])
            counted[answer] = max(counted.get(answer, 0), hit.get("also_in_count", 0))
    for answer in scores:
        scores[answer] *= holding[answer] ** AGREEMENT
    ranked = sorted(scores, key=lambda answer: (-scores[answer], shown[answer][0]))
    page = ranked[offset:offset + limit]
    results = []
    for answer in page:
        hit = dict(shown[answer][2])
        others = [path for path in copies[answer] if path != hit["path"]]
        hit.update(score=scores[answer], also_in=others[:MAX_ALSO_IN], also_in_count=max(counted[answer], len(others)))
        results.append(hit)
    first = replies[0][1]
    warnings = list(dict.fromkeys([*skipped, *(warning for _, reply in replies for warning in reply["warnings"])]))
    has_more = len(ranked) > offset + limit
    return {
        "query": first["query"], "results": results,  # type: ignore[typeddict-item]
        "files_matched": max(max(reply["files_matched"] for _, reply in replies), len(ranked)),
        "indexing": any(reply["indexing"] for _, reply in replies), "offset": offset, "has_more": has_more,
        "next_offset": offset + len(results) if has_more else None, "warnings": warnings,
        "query_read": first["query_read"], "suggestions": first["suggestions"] if not ranked else [],
    }, [shown[answer][1] for answer in page]
