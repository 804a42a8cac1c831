"""Ranking the files a query matches and building the reply: one hit per text, best first.

The query's plan comes from query.py, the files a search may return from filters.py, and what
each hit shows from snippets.py. Keywords: files with them all in one section first, then files
with them in different sections, then files with only some of them, each group scored below the
one before. A question's words are OR-ed, so bm25 ranks files by how many rare words they share
with the question; then the words that best tell the best files of that first pass from the rest
join the question (pseudo-relevance feedback), their score scaled to FEEDBACK_SHARE of the
question's. Files holding the same text (sections.said_key), or nearly the same (copies.py: versions
of a page), are one result. bench/relevance.py measures what each choice gives.
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar, cast

import copies
import database
import index_queries
from config import USABLE_CPUS
from exceptions import ArgumentError, Cancelled, IndexUnavailableError, QueryError, SourceUnavailableError
from file_utils import UNREADABLE, disk_signatures, has_surrogates, reading_from
from filters import NO_FILTERS, Filters, search_scope
from models import QueryReading, SearchHit, SearchReply, ServerConfig, Signature
from query import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    MAX_TERM_CHARS,
    QUESTION_SAMPLE_FILES,
    STOPWORDS,
    MatchPlan,
    ParsedQuery,
    feedback_match,
    parse_query,
    plan_within_bounds,
    query_reading,
    quote,
)
from snippets import answering_spans, bare_hit, section_hit, section_snippets, showable, shown_score
from sources import indexed_folders

MAX_LIMIT = 100
#: A safety net under the query's bounds (query.py): SQLite is stopped after this long and the
#: query refused.
SEARCH_TIME_LIMIT_SECONDS = 10.0
#: A reply (its results' text) holds at most this many characters: further results are left out,
#: and the reply says so.
MAX_REPLY_CHARS = 100_000
#: bm25 column weights for (title, heading, body). A title or heading is also a line of the text,
#: so its words count twice; more made short files with a generic title outrank the rest.
COLUMN_WEIGHTS = (1.0, 1.0, 1.0)
#: Pseudo-relevance feedback for questions: the FEEDBACK_FILES best files of a first pass are taken
#: as relevant, and up to FEEDBACK_WORDS words found in at least FEEDBACK_MIN_FILES of them and that
#: best tell them from the other files (feedback_words) are searched too. Their score is scaled so
#: that the best of it is FEEDBACK_SHARE of the best question score: feedback reorders close calls
#: and never outweighs the question, however short. bench/relevance.py: 0.1 to 0.2 all beat plain
#: FTS5 on the seven collections; 0.3 and more lose on the short precise ones (time, npl).
FEEDBACK_FILES = 10
FEEDBACK_WORDS = 10
FEEDBACK_MIN_FILES = 3
#: Of the words in that many of them, the ones in most of them are weighed, at most this many:
#: weighing a word reads its whole doclist (to count the sections holding it), and ten files of one
#: folder can share hundreds of words.
FEEDBACK_CANDIDATES = 50
FEEDBACK_SHARE = 0.15
#: Feedback keeps every section matching the question in a temp table and reads the feedback
#: words' doclists: skipped when the question matches more files than this.
FEEDBACK_MAX_FILES = 10_000
FEEDBACK_MIN_CHARS = 3
#: A query matching about PARALLEL_MIN_ROWS sections or more is ranked in SEARCH_PARTS spans of file
#: ids at once, one thread and reader connection each (SQLite runs without the GIL): bm25 must score
#: every matching section, so a word in most files costs time in proportion to the index. Fewer
#: matches are not worth the threads' hand-offs. The number is estimated by counting the matches in
#: the first 1/PARALLEL_SAMPLE of file ids.
SEARCH_PARTS = min(8, USABLE_CPUS)
PARALLEL_MIN_ROWS = 20_000
PARALLEL_SAMPLE = 32
_WORD = re.compile(r"[^\W_]+")


def search(
    db_path: Path, query: str, limit: int = 10, indexing: bool = False, cancelled: Callable[[], bool] | None = None, *,
    filters: Filters = NO_FILTERS, offset: int = 0, collapse_duplicates: bool = True, freshness: Freshness | None = None,
    feedback: bool = True,
) -> SearchReply:
    """Search the index at ``db_path``: the best section of each file, from the ``offset``-th file
    on, at most ``limit`` of them, among the files ``filters`` let through. With
    ``collapse_duplicates``, files whose best section is the same text, or whose texts are nearly
    the same, are one result (see _first_groups). With ``freshness``, each file is checked on disk first (see Freshness).
    Without ``feedback``, a question is ranked by its own words only (see _rank_question).

    ``cancelled``: polled while SQLite works; once it returns true the search stops and raises
    Cancelled. A search still running after SEARCH_TIME_LIMIT_SECONDS is stopped as well.
    """
    return searched_page(
        db_path, query, limit, indexing, cancelled, filters=filters, offset=offset, collapse_duplicates=collapse_duplicates,
        freshness=freshness, feedback=feedback,
    )[0]


def searched_page(
    db_path: Path, query: str, limit: int = 10, indexing: bool = False, cancelled: Callable[[], bool] | None = None, *,
    filters: Filters = NO_FILTERS, offset: int = 0, collapse_duplicates: bool = True, freshness: Freshness | None = None,
    feedback: bool = True, shown: int | None = None,
) -> tuple[SearchReply, PageDetail]:
    """search(), with only the first ``shown`` results of the page (all if None) shown as search
    shows them; the others are bare: their best section's heading and lines, no snippet, not
    narrowed to the span that answers. Returns the reply and its PageDetail. A fused search ranks
    each phrasing deeper than the page it shows."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise ArgumentError("limit", f"must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_OFFSET:
        raise ArgumentError("offset", f"must be a whole number from 0 to {MAX_OFFSET:,}, got {offset!r}")
    limits = Limits(cancelled, time.monotonic() + SEARCH_TIME_LIMIT_SECONDS)
    asking = Asking(db_path, query, limit, offset, filters, collapse_duplicates, freshness, feedback, shown)
    reply, outdated, detail = _answer(asking, limits)
    if outdated and freshness is not None and freshness.refresh is not None and freshness.refresh(outdated):
        reply, _, detail = _answer(asking, limits)  # from the index as it is now; what changed again is stale
    reply["indexing"] = indexing
    return reply, detail


class PageDetail(NamedTuple):
    """What searched_page knows of its results beyond the reply, by each result's path: the section
    of each bare one (for show_sections), and every copy folded into each (also_in names a few)."""

    bare: dict[str, int]
    copies: dict[str, list[str]]


def show_sections(db_path: Path, query: str, feedback: Sequence[str], bare: Mapping[str, int]) -> dict[str, SearchHit]:
    """The hits of the bare results ``bare`` (path -> section id, from searched_page) as a search
    of ``query`` that found ``feedback`` words shows them: the span that answers, its snippet; by
    path. A section no longer in the index, or now another file's, is left out."""
    parsed = parse_query(query)
    conn = database.reader(db_path)
    try:
        with database.snapshot(conn):
            plan = plan_within_bounds(conn, parsed)
            found = index_queries.load_sections(conn, list(bare.values()))
            sections = {rowid: showable(section) for rowid, section in found.items() if bare.get(str(section["path"])) == rowid}
            _, hits = _shown_as_answers(conn, plan, feedback, sections)
    except sqlite3.Error as exc:
        database.drop_reader(db_path)
        raise IndexUnavailableError(str(db_path), f"search failed: {database.problem_of(exc, db_path)}") from exc
    return {str(hit["path"]): hit for hit in hits.values()}


def _shown_as_answers(
    conn: sqlite3.Connection, plan: MatchPlan, feedback: Sequence[str], sections: dict[int, dict]
) -> tuple[dict[int, dict], dict[int, SearchHit]]:
    """``sections`` (loaded with their text) each narrowed to the heading span that holds the
    searched words best (snippets.answering_spans), and the hit shown for each (its snippet, its
    score 0 until a result sets it). Both look for the user's own words; a file found only by
    ``feedback`` words is shown with those."""
    highlights = [plan.shown, [quote([word]) for word in feedback]]
    leaders = answering_spans(conn, highlights, sections)
    snippet_text = section_snippets(conn, highlights, leaders)
    return leaders, {rowid: section_hit(section, snippet_text.get(rowid, ""), 0.0) for rowid, section in leaders.items()}


#: Results are paged up to this offset.
MAX_OFFSET = 1000
#: To collapse duplicates, this many times the files asked for are ranked (more if they turn out
#: to hold fewer texts, up to MAX_RANKED_FILES). Each further ranking pass costs a whole ranking,
#: and a longer first one little more: on a corpus holding every text ~40 times, 30 took the
#: queries of bench/run.py from 3 or 4 passes to 1 or 2 (two words 37 -> 15 ms, a question 86 ->
#: 49 ms), and cost 0-17% on corpora without copies (measured with a bench removed since, 1632e43).
COLLAPSE_WINDOW = 30
MAX_RANKED_FILES = 4000
#: A result names at most this many of the files holding the same text (also_in); also_in_count counts them all.
MAX_ALSO_IN = 5


@dataclass(frozen=True)
class Freshness:
    """Check the files a search returns on disk: ``source`` is the indexed folder. A file that is
    gone is never returned; one that changed since it was indexed is passed to ``refresh`` (with
    the gone ones) if there is one, which brings the index up to date and returns true if it did
    in time; else such a file is returned marked stale."""

    source: Path
    refresh: Callable[[list[str]], bool] | None = None
    #: With several sources: each one's key prefix -> folder (see ServerConfig.key_prefix).
    roots: Mapping[str, Path] | None = None
    #: The config, to name each folder's source and know which folder its index was made from.
    config: ServerConfig | None = None

    @classmethod
    def of(cls, config: ServerConfig, refresh: Callable[[list[str]], bool] | None = None) -> Freshness:
        roots = {config.key_prefix(s.name): s.directory for s in config.sources} if config.several else None
        return cls(config.source_directory, refresh, roots, config)

    def signatures(self, root: Path, rels: set[str]) -> dict[str, Signature | None]:
        """disk_signatures of the files ``rels`` of the source at ``root``, read only from the folder
        its index was made from (SourceUnavailableError otherwise, naming the source)."""
        source = next((s for s in self.config.sources if s.directory == root), None) if self.config else None
        if source is None:
            return disk_signatures(root, rels)
        try:
            folders = indexed_folders(self.config, source)  # type: ignore[arg-type]
            with reading_from(folders.get(""), folders):
                return disk_signatures(root, rels)
        except SourceUnavailableError as exc:
            named = f"source {source.name!r}" if self.config.several else "the source"  # type: ignore[union-attr]
            raise SourceUnavailableError(exc.path, exc.reason, named) from None

    def place(self, key: str) -> tuple[Path, str]:
        """The folder an index key's file is in, and its path there."""
        if self.roots:
            prefix = key.partition("/")[0] + "/"
            if prefix in self.roots:
                return self.roots[prefix], key[len(prefix):]
        return self.source, key


@dataclass(frozen=True)
class Asking:
    """One search's arguments (see search)."""

    db_path: Path
    query: str
    limit: int
    offset: int
    filters: Filters
    collapse: bool
    freshness: Freshness | None
    feedback: bool = True
    #: How many of the page's results are shown whole (None: all); see searched_page.
    shown: int | None = None


def _answer(asking: Asking, limits: Limits) -> tuple[SearchReply, list[str], PageDetail]:
    """The reply, the paths among the files ranked that changed or were deleted since they were
    indexed (if asked to check), and its PageDetail (see searched_page)."""
    parsed = parse_query(asking.query)
    if not parsed.has_words():
        raise QueryError(asking.query, _nothing_to_search(parsed))
    conn = database.reader(asking.db_path)
    wanted = asking.offset + asking.limit
    try:
        with database.snapshot(conn), database.interruptible(conn, limits.reached):
            plan = plan_within_bounds(conn, parsed)
            scope, case_hint = search_scope(conn, plan, asking.filters)
            run = Searching(asking.db_path, conn, limits.reached, scope, asking.filters, asking.feedback)
            loaded = Loaded()
            (ranked, feedback, files_matched), reading, groups = _rank_enough(run, parsed, plan, asking, loaded)
            sections, gone, changed = loaded.sections, loaded.gone, loaded.changed
            page = [_led_by_newest(group, sections, asking.query) for group in groups[asking.offset:wanted]]
            if not asking.collapse:
                page = _ties_newest_first(page, sections, asking.query)
            whole = page if asking.shown is None else page[:asking.shown]
            leaders, hits = _shown_as_answers(conn, plan, feedback, loaded.with_text(conn, [group[0][0] for group in whole]))
            sections.update(leaders)
            suggestions = [] if ranked or asking.offset else suggest(conn, parsed)
    except sqlite3.Error as exc:
        if database.is_interruption(exc):
            if limits.cancelled is not None and limits.cancelled():
                raise Cancelled("the search was cancelled") from None
            raise QueryError(
                asking.query, f"stopped after {SEARCH_TIME_LIMIT_SECONDS:g} s: search for fewer, rarer words or fewer prefix* terms"
            ) from None
        database.drop_reader(asking.db_path)
        raise IndexUnavailableError(str(asking.db_path), f"search failed: {database.problem_of(exc, asking.db_path)}") from exc
    answers, first_of = _one_per_answer(page, leaders, hits, asking.query) if asking.collapse else (page, list(range(len(page))))
    results = [_result(group, sections, hits, changed) for group in answers]
    warnings = list(dict.fromkeys(parsed.warnings + ([case_hint] if case_hint else []) + _hidden_warnings(loaded)))
    kept = _within_reply_budget(results)
    if kept < len(results):
        warnings.append(f"{len(results) - kept} more results were left out to keep the reply under {MAX_REPLY_CHARS:,} characters")
    has_more = len(groups) > wanted or kept < len(results)
    consumed = first_of[kept] if kept < len(results) else len(page)  # the page's groups the kept results stand for
    unreadable = {rowid for rowids in loaded.hidden.values() for rowid in rowids}
    outdated = [str(sections[rowid]["path"]) for rowid in sorted((gone - unreadable) | changed)]
    return {
        "query": asking.query[:MAX_QUERY_CHARS], "results": results[:kept],
        "files_matched": max(files_matched - len(gone), len(results) and asking.offset + len(results)),
        "indexing": False, "offset": asking.offset, "has_more": has_more,
        "next_offset": asking.offset + consumed if has_more else None,
        "warnings": warnings, "query_read": reading, "suggestions": suggestions,
    }, outdated, PageDetail(
        {str(sections[group[0][0]]["path"]): group[0][0] for group in answers[:kept] if group[0][0] not in leaders},
        {str(sections[group[0][0]]["path"]): [str(sections[rowid]["path"]) for rowid, _ in group[1:]] for group in answers[:kept]},
    )


#: How _outdated keys the files left out for a folder on their way that cannot be entered.
_UNREADABLE_FOLDER = "folder: "
#: A warning names at most this many of the folders that cannot be read.
MAX_FOLDERS_NAMED = 3


def _led_by_newest(group: list[tuple[int, float]], sections: dict[int, dict], query: str) -> list[tuple[int, float]]:
    """``group`` led by its newest version (copies.newest_first) among the files a result shows,
    which were checked on disk: "environment variables" answers from the 7.5 folder, with 5.1 and
    7.4 in also_in, whatever ranked first; the leader keeps the group's score."""
    shown = [(rowid, score) for rowid, score in group[:1 + MAX_ALSO_IN] if rowid in sections]
    lead = copies.newest_first([str(sections[rowid]["path"]) for rowid, _ in shown], query)
    if not lead:
        return group
    leader = (shown[lead][0], group[0][1])
    return [leader, *(member for member in group if member[0] != leader[0])]


def _ties_newest_first(page: list[list[tuple[int, float]]], sections: dict[int, dict], query: str) -> list[list[tuple[int, float]]]:
    """``page`` with each run of equal scores (copies of one text, shown apart) ordered newest
    version first, as copies.newest_first picks a leader."""
    ordered: list[list[tuple[int, float]]] = []
    for _, tied in itertools.groupby(page, key=lambda group: group[0][1]):
        run = list(tied)
        while run:
            ordered.append(run.pop(copies.newest_first([str(sections[group[0][0]]["path"]) for group in run], query)))
    return ordered


def _one_per_answer(
    page: list[list[tuple[int, float]]], leaders: dict[int, dict], hits: dict[int, SearchHit], query: str
) -> tuple[list[list[tuple[int, float]]], list[int]]:
    """The page's groups that answer alike made one, in the place of the best-ranked, led by the
    newest version among their leaders (copies.newest_first); and the place in ``page`` of each
    one's first group. Alike: their answering sections say the same (copies.answer_key: the same
    text but for versions, dates and spacing), or versions of one page (paths the same but for
    names carrying a version: copies.versionless) would be shown alike, under the same heading
    with the same snippet (their sections differing below it: a reply showing both would say the
    same twice; the other's path is in also_in)."""
    merged: list[list[list[tuple[int, float]]]] = []
    slot_of: dict[object, int] = {}
    first_of: list[int] = []
    for place, group in enumerate(page):
        keys = _answer_keys(leaders[group[0][0]], hits[group[0][0]]) if group[0][0] in leaders else [place]
        slot = next((slot_of[key] for key in keys if key in slot_of), None)
        if slot is None:
            slot = len(merged)
            merged.append([])
            first_of.append(place)
        slot_of.update((key, slot) for key in keys if key not in slot_of)
        merged[slot].append(group)
    answers = []
    for groups in merged:
        lead = copies.newest_first([str(leaders[group[0][0]]["path"]) for group in groups], query) if len(groups) > 1 else 0
        best = groups[0][0][1]
        leader = groups[lead]
        members = [member for group in groups if group is not leader for member in group]
        answers.append([(leader[0][0], best), *leader[1:], *members])
    return answers, first_of


#: A snippet at least this long, under the same heading, shows the same answer (a shorter one may
#: be a few words that many sections hold).
MIN_ALIKE_SNIPPET_CHARS = 40


def _answer_keys(leader: dict, hit: SearchHit) -> list[object]:
    """What a result answers by (_one_per_answer): its answering section's text, and what it shows."""
    keys: list[object] = [copies.answer_key(str(leader["body"]))]
    if len(hit["snippet"]) >= MIN_ALIKE_SNIPPET_CHARS:
        keys.append((copies.versionless(hit["path"]), hit["heading"], hit["snippet"]))
    return keys


def _hidden_warnings(loaded: Loaded) -> list[str]:
    """What a reply says of the results it left out because their files cannot be read now."""
    def said(count: int, why: str) -> str:
        return f"{count} matching file{'s were' if count > 1 else ' was'} left out: {why}"

    paths = {why: {loaded.sections[rowid]["path"] for rowid in rowids} for why, rowids in loaded.hidden.items()}
    return unreadable_warnings(paths, said)


def unreadable_warnings(hidden: Mapping[str, set[str]], said: Callable[[int, str], str]) -> list[str]:
    """Warnings of the files ``hidden`` holds by why they cannot be read now (see _outdated): one
    line per source that cannot be, one for all folders that cannot be entered (naming a few), each
    ``said(files, why)``."""
    folders = sorted(why[len(_UNREADABLE_FOLDER):] for why in hidden if why.startswith(_UNREADABLE_FOLDER))
    lines = [said(len(paths), why) for why, paths in hidden.items() if not why.startswith(_UNREADABLE_FOLDER)]
    if folders:
        named = ", ".join(folders[:MAX_FOLDERS_NAMED]) + (f" and {len(folders) - MAX_FOLDERS_NAMED} more" if len(folders) > MAX_FOLDERS_NAMED else "")
        left = set().union(*(paths for why, paths in hidden.items() if why.startswith(_UNREADABLE_FOLDER)))
        lines.append(said(len(left), f"their folder{'s' if len(folders) > 1 else ''} cannot be read now ({named})"))
    return lines


def unreadable_files(freshness: Freshness, keys: Iterable[str]) -> dict[str, set[str]]:
    """The files (index keys) of ``keys`` that cannot be read now, by why, as _outdated keys them:
    each source and each folder on their way opened once (with the checks a read makes), no file
    opened."""
    folders: dict[Path, dict[str, tuple[str, list[str]]]] = {}
    for key in keys:
        root, rel = freshness.place(key)
        folders.setdefault(root, {}).setdefault(rel.rpartition("/")[0], (rel, []))[1].append(key)
    hidden: dict[str, set[str]] = {}
    for root, in_root in folders.items():
        try:
            found = freshness.signatures(root, {rel for rel, _ in in_root.values()})
        except SourceUnavailableError as exc:
            hidden[str(exc)] = {key for _, held in in_root.values() for key in held}
            continue
        for rel, held in in_root.values():
            if found[rel] is UNREADABLE:
                hidden.setdefault(_folder_why(rel), set()).update(held)
    return hidden


def _folder_why(rel: str) -> str:
    """How _outdated and unreadable_files key a file whose folder cannot be entered now."""
    return _UNREADABLE_FOLDER + rel.rpartition("/")[0] + "/"


def _rank_enough(
    run: Searching, parsed: ParsedQuery, plan: MatchPlan, asking: Asking, loaded: Loaded
) -> tuple[Ranking, QueryReading, list[list[tuple[int, float]]]]:
    """Rank until the groups of copies (_first_groups) fill the page asked for and one more, ranking
    further while copies and deleted files take places, up to MAX_RANKED_FILES files: the ranking,
    how the query was read, and the groups, best first."""
    wanted = asking.offset + asking.limit
    window = min(wanted * COLLAPSE_WINDOW, MAX_RANKED_FILES) if asking.collapse else wanted + 1
    need = wanted + 1  # results: one more tells whether more follow
    while True:
        ranked, feedback, files_matched = rank(run, parsed, plan, window, need)
        reading = query_reading(parsed, plan, feedback)
        ranked = tests_below(run.conn, asking.query, names_first(run, asking.query, plan, with_weighed_words(run.conn, reading, ranked)))
        groups = _first_groups(run.conn, ranked, wanted + 1, asking, loaded)
        if len(groups) > wanted or window >= MAX_RANKED_FILES:
            break  # (past MAX_RANKED_FILES files of copies, further results are not looked for)
        # Fewer texts than asked for: copies and deleted files took places. Rank further.
        lost = len(loaded.sections) - len(groups)
        if len(ranked) < window:
            if need >= wanted + 1 + lost or not plan.broad or plan.question:
                break  # the ranking has no more files (only keywords' broad pass looks further when more are needed)
            need = wanted + 1 + lost  # keywords: files with only some of the words may follow
        else:
            window = min(MAX_RANKED_FILES, max(2 * window, (wanted + 1) * len(loaded.sections) // max(1, len(groups))))
    return (ranked, feedback, files_matched), reading, groups


@dataclass
class Loaded:
    """The sections of a search's ranked files loaded so far, kept across its ranking passes:
    each one's group key (see _first_groups), and, among those checked on disk (see check), the
    ones whose files are gone or changed."""

    sections: dict[int, dict] = field(default_factory=dict)
    keys: dict[int, object] = field(default_factory=dict)
    checked: set[int] = field(default_factory=set)
    #: Files gone, and files that cannot be read now (also in ``gone``: never shown), by why.
    gone: set[int] = field(default_factory=set)
    changed: set[int] = field(default_factory=set)
    hidden: dict[str, set[int]] = field(default_factory=dict)

    def load(self, conn: sqlite3.Connection, rowids: list[int], asking: Asking) -> None:
        """Where the sections are and what they say (their said key), without their text."""
        new = [rowid for rowid in rowids if rowid not in self.sections]
        if not new:
            return
        batch = index_queries.load_sections(conn, new, text=False)
        self.sections.update(batch)
        for rowid, section in batch.items():
            self.keys[rowid] = section["said"] if asking.collapse else rowid

    def check(self, rowids: list[int], freshness: Freshness | None) -> None:
        """Check the files of ``rowids`` on disk, each once (see _outdated)."""
        batch = {rowid: self.sections[rowid] for rowid in rowids if rowid not in self.checked}
        gone, changed, hidden = _outdated(freshness, batch)
        self.checked |= batch.keys()
        self.gone |= gone
        self.changed |= changed
        for why, rowids in hidden.items():
            self.hidden.setdefault(why, set()).update(rowids)
            self.gone |= rowids

    def with_text(self, conn: sqlite3.Connection, rowids: list[int]) -> dict[int, dict]:
        """The sections ``rowids`` with their text, as a reply may show them (kept in ``sections`` too)."""
        found = {rowid: showable(section) for rowid, section in index_queries.load_sections(conn, rowids).items()}
        self.sections.update(found)
        return found


def _first_groups(
    conn: sqlite3.Connection, ranked: list[tuple[int, float]], wanted: int, asking: Asking, loaded: Loaded
) -> list[list[tuple[int, float]]]:
    """The groups of ``ranked`` (see _groups), best first, the first ``wanted`` at least if it has them,
    once the files they show (each one's leader and the MAX_ALSO_IN copies named with it) are
    checked on disk: when some are gone, the groups are made again without them (nothing is loaded
    or checked twice), and the files of twice as many groups more are checked the next time, so
    that a thousand gone files cost a few rounds, not a thousand. Only what is shown is checked: on
    texts held ~40 times each a search loads hundreds of files, and checking them all (a folder
    opened for each) cost a fifth of the search."""
    ahead = 0
    while True:
        groups = _groups(conn, ranked, wanted + ahead, asking, loaded)
        gone = len(loaded.gone)
        loaded.check([rowid for group in groups[:wanted + ahead] for rowid, _ in group[:1 + MAX_ALSO_IN]], asking.freshness)
        if len(loaded.gone) == gone:
            return groups
        ahead = max(wanted, 2 * ahead)


def _groups(
    conn: sqlite3.Connection, ranked: list[tuple[int, float]], wanted: int, asking: Asking, loaded: Loaded
) -> list[list[tuple[int, float]]]:
    """Groups of ``ranked``, best first, until there are ``wanted`` (fewer if it runs out), each led
    by its best-ranked file: files whose best section says the same (see sections.said_key) are one
    group, and a file that is a near-copy of a group's leader (copies.NEAR_COPY) joins that group;
    without ``asking.collapse``, each file is its own. Sections are loaded as needed, in batches
    that double, into ``loaded``; files found gone are left out."""
    groups: dict[object, list[tuple[int, float]]] = {}
    leaders = copies.Leaders()
    position, batch = 0, wanted
    while position < len(ranked) and len(groups) < wanted:
        chunk = ranked[position:position + batch]
        position, batch = position + len(chunk), 2 * batch
        loaded.load(conn, [rowid for rowid, _ in chunk], asking)
        for rowid, score in chunk:
            if rowid not in loaded.keys or rowid in loaded.gone:
                continue
            key, sketch = loaded.keys[rowid], loaded.sections[rowid]["sketch"]
            if key not in groups and asking.collapse:
                key = next(leaders.near(sketch), key)
            if key not in groups:
                leaders.add(key, sketch)
            groups.setdefault(key, []).append((rowid, score))
    return list(groups.values())


def _outdated(freshness: Freshness | None, sections: dict[int, dict]) -> tuple[set[int], set[int], dict[str, set[int]]]:
    """The sections (rowids) whose file is gone from disk, those whose file changed since it was
    indexed, and those whose file cannot be looked at now, by why (its source is unreadable or
    another folder than the one indexed, or a folder on its way cannot be entered): one stat per
    file (file_utils.disk_signatures), nothing if not asked to check."""
    gone: set[int] = set()
    changed: set[int] = set()
    hidden: dict[str, set[int]] = {}
    if freshness is None:
        return gone, changed, hidden
    places = {rowid: freshness.place(str(section["path"])) for rowid, section in sections.items()}
    by_root: dict[Path, set[str]] = {}
    for root, rel in places.values():
        by_root.setdefault(root, set()).add(rel)
    on_disk: dict[Path, dict[str, Signature | None]] = {}
    unavailable: dict[Path, str] = {}
    for root, rels in by_root.items():
        try:
            on_disk[root] = freshness.signatures(root, rels)
        except SourceUnavailableError as exc:
            unavailable[root] = str(exc)
    for rowid, section in sections.items():
        root, rel = places[rowid]
        now = UNREADABLE if root in unavailable else on_disk[root][rel]
        if now is UNREADABLE:
            hidden.setdefault(unavailable.get(root) or _folder_why(rel), set()).add(rowid)
        elif now is None:
            gone.add(rowid)
        elif now[1:] != section["signature"][1:]:  # its path is the key, and the disk's is in its source
            changed.add(rowid)
    return gone, changed, hidden


@dataclass(frozen=True)
class Limits:
    """When a search's SQLite work must stop: the caller cancelled it, or it passed its deadline.
    What a search ranks never depends on how long it took: a question too costly to rank whole is
    fitted before it runs, from the index's statistics (query.fit_question)."""

    cancelled: Callable[[], bool] | None
    deadline: float

    def reached(self) -> bool:
        return (self.cancelled is not None and self.cancelled()) or time.monotonic() > self.deadline


#: A query that is a file's name (with or without its extension) or title puts up to this many
#: such files first (the same page in several version folders, say); see names_first.
MAX_NAMED_FILES = 20
#: A query's word that is written like a file's name (a letter and a -, _ or . inside:
#: Get-ChildItem, about_Signing, setup.py) multiplies the score of the files of that name by this,
#: among the files the query found. Plain words are left alone: "install" names too many files.
NAME_BOOST = 1.5
#: At most this many of a query's words are looked up as names.
MAX_NAMES_LOOKED_UP = 4
_NAME_LIKE = re.compile(r"(?=.*[^\W\d_])\w[\w.-]*[-_.][\w.-]*\w")


def names_first(run: Searching, query: str, plan: MatchPlan, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """``ranked`` with the files the whole query names (index_queries.files_named) first, scored above
    the rest (those matching the query best first), each at its first section; else the files
    named by a word of the query (_NAME_LIKE) scored NAME_BOOST times higher."""
    query = query[:MAX_QUERY_CHARS]
    if has_surrogates(query):  # SQLite cannot be given one, and no indexed name holds one
        return ranked
    whole = query.strip().strip("\"'`")
    named = index_queries.files_named(run.conn, whole, MAX_NAMED_FILES, run.scope) if whole else []
    if not named:
        return _boost_named_words(run, query, ranked)
    matching = index_queries.best_section_of_files(run.conn, plan.broad or plan.precise, COLUMN_WEIGHTS, named, len(named))
    scores = {database.file_id_of(rowid): -bm25 for rowid, bm25 in matching}  # best first
    top = max((score for _, score in ranked), default=1.0)
    leading = [*scores, *(file_id for file_id in named if file_id not in scores)]
    # Asked for by name, a page is shown from its top: its first section, not the one that says its name most.
    first = [(database.section_id(file_id, 0), 2 * top + scores.get(file_id, 0.0)) for file_id in leading]
    return first + [(rowid, score) for rowid, score in ranked if database.file_id_of(rowid) not in leading]


def _boost_named_words(run: Searching, query: str, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """``ranked`` with the files named by the query's name-like words (see NAME_BOOST) scored higher."""
    words = [part.strip("\"'`") for part in query.split()[:MAX_QUERY_TERMS]]
    names = list(dict.fromkeys(word for word in words if _NAME_LIKE.fullmatch(word)))[:MAX_NAMES_LOOKED_UP]
    boosted = {file_id for name in names for file_id in index_queries.files_named(run.conn, name, MAX_NAMED_FILES, run.scope)}
    if not boosted:
        return ranked
    rescored = [(rowid, score * NAME_BOOST if database.file_id_of(rowid) in boosted else score) for rowid, score in ranked]
    return sorted(rescored, key=lambda hit: -hit[1])


#: Test files (by path: tests/, test_*.py, *_test.go, *.spec.ts, ...) are scored this share of
#: their score, so that the code they test leads, unless the query says test or spec.
TEST_FILE_SHARE = 0.5
_TEST_PATH = re.compile(
    r"(?:^|/)(?:tests?|__tests__|testing|specs?)/|(?:^|/)(?:test_[^/]*|conftest\.py|[^/]*(?:_test|_spec|Tests?)\.\w+"
    r"|[^/]*\.(?:test|spec)\.\w+)$",
)
#: Every path _TEST_PATH finds holds one of these (in any case).
_TEST_PATH_WORDS = ("test", "spec")
_ASKS_FOR_TESTS = frozenset({"test", "tests", "testing", "tested", "spec", "specs", "unittest", "pytest", "conftest"})


def tests_below(conn: sqlite3.Connection, query: str, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """``ranked`` with test files' scores scaled by TEST_FILE_SHARE, unless the query asks for tests."""
    if not ranked or _ASKS_FOR_TESTS.intersection(word.lower() for word in _WORD.findall(query[:MAX_QUERY_CHARS])):
        return ranked
    paths = index_queries.paths_holding(conn, {database.file_id_of(rowid) for rowid, _ in ranked}, _TEST_PATH_WORDS)
    tests = {file_id for file_id, path in paths.items() if _TEST_PATH.search(path)}
    if not tests:
        return ranked
    rescored = [(rowid, score * TEST_FILE_SHARE if database.file_id_of(rowid) in tests else score) for rowid, score in ranked]
    return sorted(rescored, key=lambda hit: -hit[1])


#: A score below this came from words FTS5 gave no weight (see with_weighed_words).
UNWEIGHED_SCORE = 1e-3


def with_weighed_words(conn: sqlite3.Connection, reading: QueryReading, ranked: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """``ranked`` with scores that mean something where FTS5 gave the words found no weight.

    FTS5's bm25 weighs a word by log((N - n + 0.5) / (n + 0.5)) for n of N sections, at least
    1e-6: in a folder of a few notes most words are in half of them or more, and the files holding
    only such words would all score about 1e-6. Their scores are multiplied by 1e6 times the mean
    weight Lucene's BM25 gives those words, log(1 + (N - n + 0.5) / (n + 0.5)), never zero, and
    kept below the score before them: the same order, on the scale of any other search."""
    if not ranked or ranked[-1][1] >= UNWEIGHED_SCORE or reading["prefixes"]:
        return ranked
    words = [w for part in reading["required"] + reading["optional"] + reading["phrases"] + reading["feedback"] for w in part.split(" ")]
    sections, _ = index_queries.index_totals(conn)
    held = _sections_holding(conn, words, index_queries.stems(words))
    unweighed = [n for n in held.values() if 2 * n >= sections]
    if not unweighed:
        return ranked
    weight = 1e6 * sum(math.log(1 + (sections - n + 0.5) / (n + 0.5)) for n in unweighed) / len(unweighed)
    rescored: list[tuple[int, float]] = []
    for rowid, score in ranked:
        if score < UNWEIGHED_SCORE:
            score *= weight
            if rescored and score > rescored[-1][1]:
                score = rescored[-1][1] * 0.99  # FTS5's order stands: the words it weighed come first
        rescored.append((rowid, score))
    return rescored


def _sections_holding(conn: sqlite3.Connection, words: Sequence[str], stems: Sequence[str]) -> dict[str, int]:
    """{stem: sections holding it} for each of ``words`` (whose stems are ``stems``) the index
    holds, counted among the first QUESTION_SAMPLE_FILES files (all of a smaller index) and
    scaled: counting a common word exactly reads its whole doclist, ~10 ms at 100k files."""
    stem_of = dict(zip(words, stems))
    counts = index_queries.estimated_rows_each(conn, [quote([w]) for w in stem_of], QUESTION_SAMPLE_FILES)
    held: dict[str, int] = {}
    for stem, count in zip(stem_of.values(), counts):
        if count:
            held[stem] = max(count, held.get(stem, 0))
    return held


def _nothing_to_search(parsed: ParsedQuery) -> str:
    if parsed.warnings:
        return f"nothing was left to search for: {'; '.join(parsed.warnings)}"
    return "the query has no words to search for (only punctuation, symbols or operators)"


#: A query that finds nothing gets up to MAX_SUGGESTIONS words of the index close to its words:
#: one edit away (a letter missing, extra, changed or two swapped), else up to two edits away among
#: the words that start with the same letter; the commonest first.
MAX_SUGGESTIONS = 5
SUGGEST_MIN_CHARS = 3
_EDIT_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def suggest(conn: sqlite3.Connection, parsed: ParsedQuery) -> list[str]:
    """Words of the index close to the query's words that it does not hold (see MAX_SUGGESTIONS),
    as they are spelled in the files."""
    words = list(dict.fromkeys(
        w for parts in (parsed.terms, parsed.phrases) for t in parts for w in t
        if len(w) >= SUGGEST_MIN_CHARS and w not in STOPWORDS
    ))
    if not words:
        return []
    stems = index_queries.stems(words)
    held = index_queries.sections_with(conn, stems)
    found: dict[str, tuple[int, int, str]] = {}  # stem -> (edits, -sections, a word FTS5 stems to it)
    for word, stem in zip(words, stems):
        if stem in held or not stem:
            continue
        # The word's own edits are stemmed: "meetnig" is one edit from "meeting", three from its stem "meet".
        edited = _one_edit(word)
        spelled = dict(zip(index_queries.stems(edited), edited))
        close = {term: (1, -count, spelled[term]) for term, count in index_queries.sections_with(conn, spelled).items()}
        if not close:
            for term, count in index_queries.terms_starting(conn, stem[0], (len(stem) - 2, len(stem) + 2)):
                edits = _edits_within(stem, term, 2)
                if edits is not None:
                    close[term] = (edits, -count, term)
        for term, rank in close.items():
            found[term] = min(rank, found.get(term, rank))
    best = [item for item in sorted(found.items(), key=lambda item: item[1]) if item[0] not in STOPWORDS and len(item[1][2]) >= SUGGEST_MIN_CHARS]
    best = best[:MAX_SUGGESTIONS]
    return list(dict.fromkeys(_spelling(conn, stem, word) for stem, (_, _, word) in best))


def _one_edit(word: str) -> list[str]:
    """Every string one deletion, transposition, replacement or insertion away from ``word``."""
    letters = set(_EDIT_LETTERS) | set(word)
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    edits = {a + b[1:] for a, b in splits if b}
    edits |= {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    edits |= {a + c + b[1:] for a, b in splits if b for c in letters}
    edits |= {a + c + b for a, b in splits for c in letters}
    edits.discard(word)
    return sorted(edits)


def _edits_within(a: str, b: str, most: int) -> int | None:
    """The Levenshtein distance of ``a`` and ``b`` if it is at most ``most``, else None."""
    if abs(len(a) - len(b)) > most:
        return None
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        if min(current) > most:
            return None
        previous = current
    return previous[-1] if previous[-1] <= most else None


def _spelling(conn: sqlite3.Connection, stem: str, word: str) -> str:
    """A word of the index's text that FTS5 stems to ``stem``, found through ``word`` (which stems
    to it); ``word`` itself if none is found."""
    rowid = index_queries.first_section_matching(conn, quote([word]))
    section = index_queries.load_sections(conn, [rowid]).get(rowid) if rowid is not None else None
    if section is None:
        return word
    text = " ".join(str(section[key]) for key in ("title", "heading", "body"))
    spelled = list(dict.fromkeys(_words(text)))
    return next((w for w, w_stem in zip(spelled, index_queries.stems(spelled)) if w_stem == stem), word)


def _within_reply_budget(results: list[SearchHit]) -> int:
    """How many of ``results`` fit in MAX_REPLY_CHARS (at least one)."""
    used = 0
    for count, hit in enumerate(results):
        used += sum(len(hit[key]) for key in ("path", "title", "heading", "snippet")) + 200  # 200: keys, numbers, date
        used += sum(len(tag) + 3 for tag in hit.get("tags", ())) + sum(len(path) + 3 for path in hit.get("also_in", ()))
        if used > MAX_REPLY_CHARS and count:
            return count
    return len(results)


#: (section rowid, score: higher is better) best first, the feedback words that helped find them, files matched.
Ranking = tuple[list[tuple[int, float]], list[str], int]
StopCheck = Callable[[], bool] | None


@dataclass(frozen=True)
class Searching:
    """What the steps of one search share: the index, the caller's connection (inside the search's
    snapshot), when to stop, and the files it may return (see filters.search_scope)."""

    db_path: Path
    conn: sqlite3.Connection
    should_stop: StopCheck = None
    scope: index_queries.Scope = index_queries.EVERY_FILE
    filters: Filters = NO_FILTERS
    #: Whether a question may be widened by feedback words (see _rank_question).
    feedback: bool = True


def rank(run: Searching, parsed: ParsedQuery, plan: MatchPlan, limit: int, need: int | None = None) -> Ranking:
    """The best section of each of the top ``limit`` files, inside the caller's snapshot. ``need``:
    how many files the caller will show (``limit`` if not given; see _rank_keywords)."""
    return _rank_question(run, parsed, plan, limit) if plan.question else _rank_keywords(run, plan, limit, need or limit)


def _rank_keywords(run: Searching, plan: MatchPlan, limit: int, need: int) -> Ranking:
    """Files with a section holding every word first; if they are fewer than ``need``, then files
    holding every word in different sections, then files holding some of them (``plan.broad``),
    each group scored below the one before; ``limit`` files at most. (More than the caller needs
    are ranked to find copies among them: files matching loosely are only looked for when those
    matching fully cannot fill what is shown, so that files_matched does not depend on how many.)"""
    best, files_matched = _best_files(run, plan.precise, limit, one_pass=plan.intersects)
    ranked = [(rowid, -bm25) for rowid, bm25 in best]
    if plan.broad and len(ranked) < need:
        seen = {database.file_id_of(rowid) for rowid, _ in ranked}
        spread = [f for f in index_queries.files_with_each(run.conn, plan.shown, run.scope) if f not in seen]
        if spread:
            ranked = _below(ranked, index_queries.best_section_of_files(run.conn, plan.broad, COLUMN_WEIGHTS, spread, limit - len(ranked)))
            seen.update(spread)
        broad, files_matched = _best_files(run, plan.broad, limit + len(ranked), one_pass=False)
        ranked = _below(ranked, [(rowid, bm25) for rowid, bm25 in broad if database.file_id_of(rowid) not in seen][: limit - len(ranked)])
    return ranked, [], files_matched


def _below(ranked: list[tuple[int, float]], more: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """``ranked`` [(rowid, score)] followed by ``more`` [(rowid, bm25)], scored below its last."""
    floor = min((score for _, score in ranked), default=1.0)
    top = max((-bm25 for _, bm25 in more), default=1.0) or 1.0
    return ranked + [(rowid, floor * 0.9 * -bm25 / top) for rowid, bm25 in more]


def _rank_question(run: Searching, parsed: ParsedQuery, plan: MatchPlan, limit: int) -> Ranking:
    """bm25 over the question's words; then, if few enough files matched and ``run.feedback``, with
    feedback words too.

    The question is scored once into a temporary table; the feedback pass reads only the feedback
    words' doclists and adds their scores (see index_queries.best_with_feedback)."""

    def count_in_span(part: sqlite3.Connection, span: index_queries.Span) -> int:
        return index_queries.count_matching_files(part, plan.precise, span, run.scope)

    files_matched = sum(_over_parts(run, plan.precise, count_in_span, plan.estimated_rows))
    if files_matched > FEEDBACK_MAX_FILES or not run.feedback:
        ranked, _ = _best_files(run, plan.precise, limit, one_pass=False, count=False, estimated_rows=plan.estimated_rows)
        return [(rowid, -bm25) for rowid, bm25 in ranked], [], files_matched
    conn = run.conn
    index_queries.score_question(conn, plan.precise, COLUMN_WEIGHTS, run.scope)
    first = index_queries.best_question_hits(conn, max(limit, FEEDBACK_FILES))
    feedback = feedback_words(conn, first[:FEEDBACK_FILES], parsed)
    if not feedback:
        return [(rowid, -bm25) for rowid, bm25 in first[:limit]], [], files_matched
    ranked = index_queries.best_with_feedback(conn, feedback_match(feedback), COLUMN_WEIGHTS, FEEDBACK_SHARE, limit, run.scope)
    return [(rowid, -bm25) for rowid, bm25 in ranked], feedback, files_matched


def _best_files(
    run: Searching, match: str, limit: int, *, one_pass: bool, count: bool = True, estimated_rows: int | None = None
) -> tuple[list[tuple[int, float]], int]:
    """The best section of each of the top ``limit`` files [(rowid, bm25)], best first, and how
    many files match (if ``count``, else at least how many were returned). ``one_pass``: rank by
    grouping every match, which counts them on the way. ``estimated_rows``: see _over_parts."""

    def in_span(part: sqlite3.Connection, span: index_queries.Span) -> tuple[list[tuple[int, float]], int]:
        if one_pass:
            rows = index_queries.best_section_of_every_file(part, match, COLUMN_WEIGHTS, limit, span, run.scope)
            return [(rowid, bm25) for rowid, bm25, _ in rows], rows[0][2] if rows else 0
        best = index_queries.best_section_per_file(part, match, COLUMN_WEIGHTS, limit, span, run.scope)
        counted = index_queries.count_matching_files(part, match, span, run.scope) if count and len(best) >= limit else len(best)
        return best, counted

    parts = _over_parts(run, match, in_span, estimated_rows)
    merged = sorted((hit for best, _ in parts for hit in best), key=lambda hit: (hit[1], hit[0]))
    return merged[:limit], sum(count for _, count in parts)


_T = TypeVar("_T")
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _over_parts(
    run: Searching, match: str, work: Callable[[sqlite3.Connection, index_queries.Span], _T], estimated_rows: int | None = None
) -> list[_T]:
    """``work(connection, span)`` for each span of the index at once if ``match`` matches many
    sections (see PARALLEL_MIN_ROWS; ``estimated_rows`` if the caller knows, else a sample says),
    else for the whole index.

    ``run.conn`` is inside the caller's snapshot; the other spans run on other threads'
    connections, in their own read transactions. If any of them sees another generation of the
    index (a write landed in between, or the file was replaced) or cannot open it, their answers are
    dropped and the whole index is ranked on ``run.conn`` instead. An index with no generation yet
    is never split.
    """
    conn = run.conn
    # A prefix* term gathers all its words' doclists before the first row, in each part again, and
    # as much for a sample as for the whole: such a query is ranked on one connection, unless the
    # caller's estimate (of its other words) says they cost more than the prefix.
    split = estimated_rows is not None or "*" not in match
    spans = index_queries.file_spans(conn, SEARCH_PARTS) if split else [index_queries.EVERY_ROW]
    seen = index_queries.generation(conn) if len(spans) > 1 else None
    if estimated_rows is None and seen is not None:
        estimated_rows = index_queries.estimated_matching_rows(conn, match, PARALLEL_SAMPLE)
    if seen is not None and (estimated_rows or 0) >= PARALLEL_MIN_ROWS:
        futures = [_parts_pool().submit(_work_in_span, run, seen, work, span) for span in spans[1:]]
        results = [work(conn, spans[0])] + [future.result() for future in futures]
        if all(result is not _OTHER_GENERATION for result in results):
            return results
    return [work(conn, index_queries.EVERY_ROW)]


_OTHER_GENERATION = object()


def _work_in_span(
    run: Searching, expected: str, work: Callable[[sqlite3.Connection, index_queries.Span], _T], span: index_queries.Span
) -> _T | object:
    try:
        conn = database.reader(run.db_path)
    except IndexUnavailableError:  # deleted or replaced since the caller's snapshot began
        return _OTHER_GENERATION
    try:
        with database.snapshot(conn), database.interruptible(conn, run.should_stop):
            if index_queries.generation(conn) != expected:
                return _OTHER_GENERATION
            return work(conn, span)
    except sqlite3.Error as exc:
        if not database.is_interruption(exc):
            database.drop_reader(run.db_path)
        raise


def _parts_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=SEARCH_PARTS - 1, thread_name_prefix="search-part")
        return _pool


def feedback_words(conn: sqlite3.Connection, top: list[tuple[int, float]], parsed: ParsedQuery) -> list[str]:
    """The words that best tell the ``top`` sections (taken as relevant) from the rest of the index,
    best first: Robertson's offer weight, how many of them hold a word times its relevance weight.
    Words of the query are left out by their stem, as FTS5 matches them ("systems" for "system"),
    and so are words held by fewer than FEEDBACK_MIN_FILES of them. Only words that FTS5 reads as
    one word of the same spelling are taken (index_queries.query_words), so that a feedback word is
    never a phrase in disguise."""
    if len(top) < FEEDBACK_MIN_FILES:
        return []
    files_with: Counter[str] = Counter()
    for section in index_queries.load_sections(conn, [rowid for rowid, _ in top]).values():
        # dict.fromkeys: each word once per file, in reading order, so ties break the same way every run;
        # the words as written first (a C loop over the text), then each distinct one lowered and tested.
        written = dict.fromkeys(_WORD.findall(section["body"]))
        lowered = dict.fromkeys(w.lower() for w in written if len(w) <= MAX_TERM_CHARS)
        files_with.update(w for w in lowered if len(w) >= FEEDBACK_MIN_CHARS and not w.isdigit() and w not in STOPWORDS)
    candidates = _read_as_written([w for w, n in files_with.most_common() if n >= FEEDBACK_MIN_FILES], FEEDBACK_CANDIDATES)
    if not candidates:
        return []
    known = set(index_queries.stems([w for t in parsed.terms + parsed.phrases + parsed.excluded for w in t]))
    sections, _ = index_queries.index_totals(conn)
    offers: dict[str, tuple[float, str]] = {}
    stems = index_queries.stems(candidates)
    held_by = _sections_holding(conn, candidates, stems)
    relevant = len(top)
    for word, stem in zip(candidates, stems):
        if stem in known or stem in offers or any(word.startswith(p) for p in parsed.prefixes):
            continue
        r, n = files_with[word], max(held_by.get(stem, 0), files_with[word])
        if sections - n - relevant + r + 0.5 <= 0:
            continue  # in nearly every section: it tells nothing apart
        weight = math.log((r + 0.5) * (sections - n - relevant + r + 0.5) / ((n - r + 0.5) * (relevant - r + 0.5)))
        offers[stem] = (r * weight, word)
    best = sorted(offers.values(), key=lambda offer: -offer[0])
    return [word for offer, word in best if offer > 0][:FEEDBACK_WORDS]


def _read_as_written(words: list[str], most: int) -> list[str]:
    """The first ``most`` of ``words`` that FTS5 reads as one word of the same spelling
    (index_queries.query_words), asked of FTS5 a few at a time: only as many as it takes."""
    found: list[str] = []
    for start in range(0, len(words), 2 * most):
        chunk = words[start:start + 2 * most]
        found += [w for w, read in zip(chunk, index_queries.query_words(chunk)) if read == [w]]
        if len(found) >= most:
            break
    return found[:most]


def with_collections(reply: SearchReply, config: ServerConfig) -> SearchReply:
    """``reply`` as a server of several sources sends it: each hit's ``collection`` (its source's
    name) and its path in that source; in ``also_in``, a file of another source is written
    ``collection:path``. With one source, ``reply`` as it is."""
    if not config.several:
        return reply
    reply["results"] = [_with_collection(hit, config) for hit in reply["results"]]
    return reply


def _with_collection(hit: SearchHit, config: ServerConfig) -> SearchHit:
    collection, path = config.split_key(hit["path"])
    named = cast(SearchHit, {"collection": collection, **hit, "path": path})
    if "also_in" in hit:
        also = [config.split_key(key) for key in hit["also_in"]]
        named["also_in"] = [other if where == collection else f"{where}:{other}" for where, other in also]
    return named


def _words(text: str) -> list[str]:
    """Words by Python's notion of a letter: a quick first pass over section text (_spelling)."""
    return [w for w in _WORD.findall(text) if len(w) <= MAX_TERM_CHARS]


def _result(group: list[tuple[int, float]], sections: dict[int, dict], hits: dict[int, SearchHit], changed: set[int]) -> SearchHit:
    """The hit for a group of files holding one text (see _first_groups): its first file's (made
    already if it was shown with its text: ``hits``)."""
    (rowid, score), others = group[0], [str(sections[other]["path"]) for other, _ in group[1:]]
    hit: SearchHit = {**hits[rowid], "score": shown_score(score)} if rowid in hits else bare_hit(sections[rowid], score)
    hit.update(stale=rowid in changed, also_in=others[:MAX_ALSO_IN], also_in_count=len(others), tags=sections[rowid]["tags"])
    return hit
