"""Turning user text into a safe FTS5 expression, ranking, snippets and one hit per file.

User text never reaches MATCH raw: it is split into words the way FTS5's unicode61 tokenizer
splits text, and every word or phrase is re-quoted. What a user can still express:
``"quoted phrases"``, ``prefix*``, and ``-excluded`` words or phrases. Everything else (FTS5
operators, column filters, parentheses, ``^``, NEAR) is searched for as plain words.

Up to MAX_AND_TERMS words are keywords, all required in the file: files with them in one section
first, then files with them in different sections, then files with only some of them, each
group scored below the one before. Longer questions drop stopwords and OR the remaining words (a
compound's words separately), so bm25 ranks files by how many rare words they share with the
question; then the words that best tell the best files of that first pass from the rest join the
question (pseudo-relevance feedback), their score scaled to FEEDBACK_SHARE of the question's.
bench/relevance.py measures what each choice gives.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import database
from config import USABLE_CPUS
from exceptions import ArgumentError, Cancelled, IndexUnavailableError, QueryError
from file_utils import disk_signature, has_surrogates
from models import QueryReading, SearchHit, SearchReply

MAX_LIMIT = 100
#: Bounds on what one query may ask of SQLite (bench/worst_query.py measures the worst query they
#: allow). Text beyond MAX_QUERY_CHARS and words beyond MAX_QUERY_TERMS (counted across every
#: phrase, compound, prefix and exclusion) are ignored: a pasted page must not become a 100k-term
#: OR. A phrase or compound keeps its first MAX_PHRASE_WORDS words: FTS5 reads the positions of
#: every word of a phrase. A prefix* reads the doclists of every word it starts, so it needs
#: MIN_PREFIX_CHARS characters (shorter, it is searched as a word) and a query takes at most
#: MAX_PREFIXES of them (further ones are searched as words). Each cut is named in the reply.
MAX_QUERY_CHARS = 10_000
MAX_QUERY_TERMS = 64
MAX_PHRASE_WORDS = 12
MIN_PREFIX_CHARS = 3
MAX_PREFIXES = 4
MAX_TERM_CHARS = 200
#: A query of stopwords only requires all of them; at most this many distinct ones.
MAX_STOPWORD_TERMS = 8
#: A safety net under those bounds: SQLite is stopped after this long and the query refused.
SEARCH_TIME_LIMIT_SECONDS = 10.0
#: A snippet shows at most this many characters of the file; a reply (its results' text) at most
#: MAX_REPLY_CHARS: further results are left out, and the reply says so.
SNIPPET_MAX_CHARS = 500
MAX_REPLY_CHARS = 100_000
#: Up to this many words (stopwords included) are AND-ed; more are treated as a question and OR-ed.
MAX_AND_TERMS = 3
#: bm25 column weights for (title, heading, body). A title or heading is also a line of the text,
#: so its words count twice; more made short files with a generic title outrank the rest.
COLUMN_WEIGHTS = (1.0, 1.0, 1.0)
#: A question counts each of its words (by stem: "shape" and "shapes" are one) at most this often:
#: a long request repeats its key words, but a generic word said five times must not rule it.
MAX_REPEATS = 2
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
SNIPPET_TOKENS = 32
#: FTS5 tokenizes a section twice to make its snippet (into a temporary index, then to cut the
#: snippet), ~0.2 ms per 1,000 words. A section longer than 2 * SNIPPET_WINDOW_CHARS is shown from a
#: window of that many characters: around the first place where the most distinct searched words
#: are found within SNIPPET_CLUSTER_CHARS (about the snippet's length), looking at the first
#: SNIPPET_MAX_FINDS places each word starts a word in the text. Only the words as typed are looked
#: for; a section where FTS5 matched other forms of them only ("indexes" for "indexing") is
#: tokenized whole, as is one whose window FTS5 does not match (a find was "cupboard" for "cup").
SNIPPET_WINDOW_CHARS = 800
SNIPPET_CLUSTER_CHARS = 200
SNIPPET_MAX_FINDS = 50
#: A window is placed by the first SNIPPET_MAX_WORDS different words searched (a question's first).
SNIPPET_MAX_WORDS = 16
ELLIPSIS = "…"
#: A query matching about PARALLEL_MIN_ROWS sections or more is ranked in SEARCH_PARTS spans of file
#: ids at once, one thread and reader connection each (SQLite runs without the GIL): bm25 must score
#: every matching section, so a word in most files costs time in proportion to the index. Fewer
#: matches are not worth the threads' hand-offs. The number is estimated by counting the matches in
#: the first 1/PARALLEL_SAMPLE of file ids.
SEARCH_PARTS = min(8, USABLE_CPUS)
PARALLEL_MIN_ROWS = 20_000
PARALLEL_SAMPLE = 32
#: bm25 scores each section a question matches once per OR-ed part: a question costs about the
#: sections it matches times its parts. A question of more than QUESTION_FREE_PARTS parts is
#: estimated (from the first QUESTION_SAMPLE_FILES files); past QUESTION_MAX_COST, a repeated word
#: counts once, then its commonest words are left out (the reply names them) until it fits. Those
#: words are in most sections, where bm25 gives them little or no weight (none past half of them).
QUESTION_FREE_PARTS = 8
QUESTION_MAX_COST = 1_000_000
QUESTION_SAMPLE_FILES = 2000
#: A phrase costs about the sections holding all of its words times its words: FTS5 reads each
#: word's positions there to check their order. Past PHRASE_MAX_COST (over all phrases, compounds
#: and excluded phrases, estimated like a question), the costliest are loosened (see fit_phrases):
#: "the the the ..." holds only words found in nearly every section.
PHRASE_MAX_COST = 300_000
#: Phrases of this many words in all are not estimated: at worst they cost a few times a word in
#: every section, and most queries with a phrase are no more.
PHRASE_FREE_WORDS = 4
#: The attempts at ranking a question (see rank_in_time): how long each may take (seconds) and
#: the share of the question's words it keeps, the rarest (at least one). The last is bounded by
#: SEARCH_TIME_LIMIT_SECONDS only.
QUESTION_ATTEMPTS = ((0.5, 1.0), (0.25, 0.25), (math.inf, 0.0))
_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"  # private-use markers, replaced by ** after locating lines
HIGHLIGHT = "**"
#: The file's own "**" (Markdown bold, Python's **kwargs) is shown escaped, so that a bare "**"
#: in a snippet always marks a match.
ESCAPED_HIGHLIGHT = r"\*\*"

_WORD = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s")
#: A query's parts: a "phrase", opened at the start of a part and closed by the next quote (or the
#: end), or a run of non-space characters. A quote inside a run (12" pizza) opens nothing.
_QUERY_PART = re.compile(r'(?<!\S)(-?)"([^"]*)(?:"|$)|(-?)(\S+)')

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t d ll m re ve don""".split()
)


@dataclass
class ParsedQuery:
    """The searchable parts of a user's text, as lists of the words FTS5 reads in them
    (database.query_words). A term is one word, or a compound like ``e-mail`` that FTS5 indexed as
    adjacent words and so must match as a phrase."""

    terms: list[list[str]] = field(default_factory=list)
    phrases: list[list[str]] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    #: Words and phrases whose files are left out, and prefixes (``-draft*``) likewise.
    excluded: list[list[str]] = field(default_factory=list)
    excluded_prefixes: list[str] = field(default_factory=list)
    #: What of the text was not searched as typed, and why (see MAX_QUERY_CHARS and below it).
    warnings: list[str] = field(default_factory=list)
    #: A query of stopwords only is searched as a phrase first, unless fit_phrases says it is costly.
    stopword_phrase: bool = True

    def has_words(self) -> bool:
        """Whether anything is left to search for (exclusions alone leave nothing)."""
        return bool(self.terms or self.phrases or self.prefixes)


def parse_query(text: str) -> ParsedQuery:
    """Split user text into terms, "phrases", prefix* terms and -exclusions, within the bounds
    above. Never raises."""
    parsed = ParsedQuery()
    if len(text) > MAX_QUERY_CHARS:
        text = text[:MAX_QUERY_CHARS]
        parsed.warnings.append(f"only the first {MAX_QUERY_CHARS:,} characters of the query were read")
    parts = list(_QUERY_PART.finditer(text))
    raws = [match.group(4) if match.group(2) is None else match.group(2) for match in parts]
    # Each part's words, and those of the character before a trailing "*": a prefix needs a letter there.
    words_of = database.query_words([*raws, *(raw.rstrip("*")[-1:] for raw in raws)])
    budget = MAX_QUERY_TERMS
    command = bool(parts) and parts[0].group(2) is None and not parts[0].group(3) and bool(_COMMAND.match(raws[0]))
    for match, raw, words, before_star in zip(parts, raws, words_of, words_of[len(raws):]):
        words = _searchable(words, parsed)
        if not words:
            continue
        quoted, excluded = match.group(2) is not None, bool(match.group(1) or match.group(3))
        if excluded and not quoted and _is_option(raw, command):
            excluded = False
            parsed.warnings.append(
                f"-{raw} was searched as a word (an option of a command line); write -\"{' '.join(words)}\" to leave out"
                " files with it"
            )
        if len(words) > MAX_PHRASE_WORDS:
            parsed.warnings.append(f"a phrase of {len(words)} words was searched as its first {MAX_PHRASE_WORDS}")
            words = words[:MAX_PHRASE_WORDS]
        if len(words) > budget:
            parsed.warnings.append(f"only the first {MAX_QUERY_TERMS} words of the query were searched")
            words = words[:budget]
            if not words:
                break
        budget -= len(words)
        if not quoted and raw.endswith("*") and len(words) == 1 and before_star:
            _add_prefix(parsed, words[0], excluded)
            continue
        if not quoted and raw.endswith("*") and before_star:
            parsed.warnings.append(f"{raw} was searched as the phrase {' '.join(words)!r}: a prefix* is one word")
        _add_unique(parsed.excluded if excluded else parsed.phrases if quoted else parsed.terms, words, repeats=not quoted and not excluded)
    both = [words for words in parsed.terms if words in parsed.excluded]
    if both:
        parsed.terms = [words for words in parsed.terms if words not in parsed.excluded]
        parsed.warnings.append(f"{', '.join(map(_joined, both))}: both searched and left out; left out")
    if not parsed.has_words() and (parsed.excluded or parsed.excluded_prefixes):
        parsed.warnings.append("the query had only words to leave out, so they were searched for instead")
        parsed.terms, parsed.excluded = parsed.excluded, []
        parsed.prefixes, parsed.excluded_prefixes = parsed.excluded_prefixes, []
    return parsed


#: A command in PowerShell's Verb-Noun form (Get-ChildItem, ConvertTo-Json): the -words after it are
#: its parameters.
_COMMAND = re.compile(r"[A-Z][a-z]+-[A-Z][A-Za-z0-9]*$")


def _is_option(raw: str, after_command: bool) -> bool:
    """Whether ``-raw`` (raw: what follows the first dash) is a command line's option, searched as a
    word, rather than a word to leave out: a long option (--amend), one or two letters (-r, -la),
    mixed case (-Recurse, -sSL), or anything after a Verb-Noun command."""
    name = raw.lstrip("-")
    return after_command or raw.startswith("-") or len(name) <= 2 or (name != name.lower() and name != name.upper())


def _searchable(words: list[str], parsed: ParsedQuery) -> list[str]:
    long = [word for word in words if len(word) > MAX_TERM_CHARS]
    if long:
        parsed.warnings.append(f"a word of {len(long[0]):,} characters was not searched: words are searched up to {MAX_TERM_CHARS}")
    return [word for word in words if len(word) <= MAX_TERM_CHARS]


def _add_unique(parts: list[list[str]], words: list[str], repeats: bool) -> None:
    """Add a part; the same phrase or exclusion twice would only cost twice (a question's repeated
    words count, see fit_question)."""
    if repeats or words not in parts:
        parts.append(words)


def _add_prefix(parsed: ParsedQuery, prefix: str, excluded: bool) -> None:
    """A prefix* term, or the word itself if it is too short or the query has enough of them."""
    taken = len(parsed.prefixes) + len(parsed.excluded_prefixes)
    if len(prefix) < MIN_PREFIX_CHARS:
        parsed.warnings.append(f"{prefix}* was searched as the word {prefix!r}: a prefix needs {MIN_PREFIX_CHARS} characters")
    elif taken >= MAX_PREFIXES:
        parsed.warnings.append(f"{prefix}* was searched as the word {prefix!r}: a query takes {MAX_PREFIXES} prefixes at most")
    else:
        chosen = parsed.excluded_prefixes if excluded else parsed.prefixes
        if prefix not in chosen:
            chosen.append(prefix)
        return
    _add_unique(parsed.excluded if excluded else parsed.terms, [prefix], repeats=not excluded)


def _quote(words: list[str]) -> str:
    return '"' + " ".join(words).replace('"', '""') + '"'


def _joined(words: list[str]) -> str:
    """The words of a phrase or compound as a reader would write them: space-separated, but CJK
    characters side by side (database.CJK_SEPARATOR)."""
    joined = words[0] if words else ""
    for before, word in itertools.pairwise(words):
        cjk = database.CJK_WORD.fullmatch(before[-1:]) or database.CJK_WORD.fullmatch(word[:1])
        joined += word if cjk else " " + word
    return joined


def _is_cjk_run(term: list[str]) -> bool:
    """Whether ``term`` is a run of Chinese or Japanese characters (database.CJK_SEPARATOR)."""
    return len(term) > 1 and all(database.CJK_WORD.fullmatch(word) for word in term)


def _is_stopword(term: list[str]) -> bool:
    return all(word.lower() in STOPWORDS for word in term)


@dataclass(frozen=True)
class MatchPlan:
    """The FTS5 expressions to run: ``precise`` first, then ``broad`` (if any) to fill up.
    ``question``: the words are OR-ed as a question, which feedback may extend."""

    precise: str
    broad: str | None
    question: bool = False
    #: ``precise`` needs several words together (AND-ed, or as a phrase): FTS5 then spends its time
    #: deciding which rows match, so ranking and counting them are done in one pass.
    intersects: bool = False
    #: The quoted words, phrases and prefix* terms the user searched for: what snippets highlight.
    #: A question's ``precise`` is these OR-ed (repeats included).
    shown: tuple[str, ...] = ()
    #: What the -exclusions match, OR-ed: files holding it are left out (see search), or None.
    excluded: str | None = None
    #: Sections a question matches, when fit_question estimated it.
    estimated_rows: int | None = None
    #: "keywords", "question" or "stopwords" (see models.QueryReading).
    mode: str = "keywords"


def build_match(parsed: ParsedQuery) -> MatchPlan:
    """Turn a parsed query into FTS5 MATCH expressions; raise QueryError if nothing is searchable."""
    terms = parsed.terms
    content = [t for t in terms if not _is_stopword(t)]
    required = [_quote(p) for p in parsed.phrases] + [_quote([p]) + "*" for p in parsed.prefixes]
    if not parsed.has_words():
        raise QueryError("", "the query has no words to search for")
    question = bool(content) and len(terms) > MAX_AND_TERMS
    if question:
        # A question describes, it does not filter: its "phrases" and prefix* terms rank files
        # higher instead of being required, and a compound counts word by word ("two-dimensional"
        # as a phrase would give no credit for "two dimensions"). Its stopwords only add noise.
        words = [w for t in content if not _is_cjk_run(t) for w in t if w not in STOPWORDS]
        words += [w for p in parsed.phrases for w in p if w not in STOPWORDS]
        runs = list(dict.fromkeys(_quote(t) for t in content if _is_cjk_run(t)))  # a CJK word is the phrase of its characters
        shown = [_quote([w]) for w in _capped_repeats(words)] + runs + required
        precise, broad = f"({' OR '.join(shown)})", None
        intersects = False
    elif not content and len(terms) > MAX_AND_TERMS:
        # Only stopwords ("to be or not to be"): the exact phrase first, then all of the words.
        distinct = list(dict.fromkeys(_quote(t) for t in terms))
        if len(distinct) > MAX_STOPWORD_TERMS:
            parsed.warnings.append(f"a query of stopwords only requires its first {MAX_STOPWORD_TERMS} different words")
        shown = required + distinct[:MAX_STOPWORD_TERMS]
        phrase = [w for t in terms for w in t]
        if len(phrase) > MAX_PHRASE_WORDS:
            parsed.warnings.append(f"a query of stopwords only was searched as the phrase of its first {MAX_PHRASE_WORDS} words")
        broad = f"({' AND '.join(shown)})"
        precise = f"({' AND '.join(required + [_quote(phrase[:MAX_PHRASE_WORDS])])})" if parsed.stopword_phrase else broad
        intersects = True
    else:
        chosen = list(dict.fromkeys(map(tuple, terms)))
        quoted = [_quote(list(t)) for t in chosen]
        shown = required + quoted
        precise = f"({' AND '.join(shown)})"
        broad = f"({' AND '.join(required + [highlight_match(quoted)])})" if len(quoted) > 1 else None
        intersects = len(required) + len(chosen) > 1 or any(len(t) > 1 for t in [*chosen, *map(tuple, parsed.phrases)])
    excluded = [_quote(words) for words in parsed.excluded] + [_quote([p]) + "*" for p in parsed.excluded_prefixes]
    mode = "question" if question else "keywords" if content or len(terms) <= MAX_AND_TERMS else "stopwords"
    return MatchPlan(precise, broad, question, intersects, tuple(shown), highlight_match(excluded) if excluded else None, mode=mode)


def query_reading(parsed: ParsedQuery, plan: MatchPlan, feedback: Sequence[str]) -> QueryReading:
    """How the query was read (models.QueryReading), from the plan that was ranked."""
    phrases = [_joined(words) for words in parsed.phrases]
    prefixes = [prefix + "*" for prefix in parsed.prefixes if _quote([prefix]) + "*" in plan.shown]
    words = [_joined(list(words)) for words in dict.fromkeys(map(tuple, parsed.terms))]
    if plan.question:
        searched = {part[1:-1] for part in plan.shown if part.endswith('"')}
        words = [word for word in dict.fromkeys(w for t in parsed.terms for w in t) if word in searched]
        words += [w for phrase in parsed.phrases for w in phrase if w in searched and w not in words]
        words += [_joined(t) for t in parsed.terms if _is_cjk_run(t) and " ".join(t) in searched and _joined(t) not in words]
    return {
        "mode": plan.mode,
        "required": [] if plan.question else words,
        "optional": words if plan.question else [],
        "phrases": phrases,
        "prefixes": prefixes,
        "excluded": [_joined(words) for words in parsed.excluded] + [prefix + "*" for prefix in parsed.excluded_prefixes],
        "feedback": list(feedback),
    }


def _capped_repeats(words: list[str]) -> list[str]:
    """``words`` with each stem kept at most MAX_REPEATS times ("shape" and "shapes" are one)."""
    seen: Counter[str] = Counter()
    kept = []
    for word, stem in zip(words, database.stems(words)):
        seen[stem] += 1
        if seen[stem] <= MAX_REPEATS:
            kept.append(word)
    return kept


def feedback_match(feedback: Sequence[str]) -> str:
    """The feedback words OR-ed."""
    return highlight_match([_quote([w]) for w in feedback])


def highlight_match(shown: Sequence[str]) -> str:
    """An FTS5 expression matching any of ``shown`` (quoted words, phrases and prefix* terms)."""
    return f"({' OR '.join(shown)})"


def fit_question(conn: sqlite3.Connection, plan: MatchPlan) -> tuple[MatchPlan, list[str]]:
    """A question's plan within QUESTION_MAX_COST (see there), and what was left out of it."""
    parts = list(plan.shown)
    if not plan.question or len(parts) <= QUESTION_FREE_PARTS:
        return plan, []
    # A prefix* costs as much to sample as to run; MAX_PREFIXES bounds it apart.
    words = list(dict.fromkeys(part for part in parts if not part.endswith("*")))
    if not words:
        return plan, []
    union, *rows_each = database.estimated_rows_each(conn, [highlight_match(words), *words], QUESTION_SAMPLE_FILES)
    rows = dict(zip(words, rows_each))
    notes: list[str] = []
    if union * len(parts) > QUESTION_MAX_COST and len(set(parts)) < len(parts):
        parts = list(dict.fromkeys(parts))
        notes.append("each repeated word of the question was counted once: the question matches too many sections to count them again")
    kept = sorted(words, key=lambda word: rows[word])  # rarest first
    left_out: list[str] = []
    while len(kept) > 1 and min(union, sum(rows[word] for word in kept)) * (len(parts) - len(left_out)) > QUESTION_MAX_COST:
        left_out.append(kept.pop())
    if left_out:
        parts = [part for part in parts if part not in left_out]
        names = ", ".join(word.strip('"') for word in left_out)
        notes.append(f"these words are in too many sections to rank them all quickly and were left out: {names}")
    if not notes:
        return replace(plan, estimated_rows=union), []
    precise = highlight_match(parts)
    return replace(plan, precise=precise, shown=tuple(parts), estimated_rows=min(union, sum(rows[w] for w in kept))), notes


@dataclass(frozen=True)
class Filters:
    """Which files a search may return, as read_filters makes it from the caller's arguments.

    ``prefix``: every path starts with it (read from the index on paths). ``glob``: an SQLite GLOB
    that every path matches, looser than ``pattern`` (its * also crosses /), run inside SQLite
    first; ``pattern``: the exact rule, run in Python on the paths the GLOB let through.
    ``extensions``: lowercase, with their dot. ``modified``: mtime in ns, from (inclusive) and until
    (exclusive). ``path``: the path filter these were read from (see _path_text), for messages."""

    prefix: str = ""
    glob: str | None = None
    pattern: re.Pattern[str] | None = None
    extensions: tuple[str, ...] = ()
    modified: tuple[int | None, int | None] = (None, None)
    path: str | None = None

    @property
    def narrows(self) -> bool:
        return self != NO_FILTERS


NO_FILTERS = Filters()
MAX_PATH_PATTERN_CHARS = 1024
MAX_EXTENSIONS = 50
#: A * matches within one folder or file name, and ** any number of folders. A regular expression
#: tries every split of a name among its *s, and every split of a path among its **s: bounded
#: here, a glob costs at most about (path length) x (name length)^2 steps per path, never the
#: exponential time a hostile pattern could take over a deep hostile tree.
MAX_STARS_PER_SEGMENT = 2
MAX_FOLDER_SPANS = 1
_EXTENSION = re.compile(r"\.[^\s/\\*?\[\]]{1,32}")


def read_filters(
    path: str | None = None, extensions: Sequence[str] | None = None, modified_after: str | None = None, modified_before: str | None = None
) -> Filters:
    """The Filters of a search's arguments; ArgumentError names the one that is wrong.

    ``path``: a glob relative to the source, matched against the whole path: ``*`` and ``?`` within
    one segment, ``**`` any number of segments (none too), ``[abc]`` one of those characters. Without
    any of them it is a folder or a file: ``guides/`` and ``guides`` hold guides/install.md.
    ``extensions``: ".md" or "md", any case. Dates: ISO 8601, a date or a date and time; without a
    timezone, UTC. Paths are compared in their case (see _case_hint)."""
    text = _path_text(path) if path is not None else None
    prefix, glob, pattern = _path_filter(text, path) if text else ("", None, None)
    modified = (_instant("modified_after", modified_after), _instant("modified_before", modified_before))
    return Filters(prefix, glob, pattern, _extensions(extensions), modified, text or None)


def _path_text(path: str) -> str:
    """The path filter ``path`` checked, with / for \\, and without spaces around or a leading ./;
    "" for the whole source."""
    if not isinstance(path, str):
        raise ArgumentError("path", f"must be a string, got {type(path).__name__}")
    text = path.strip().replace("\\", "/")
    if len(text) > MAX_PATH_PATTERN_CHARS:
        raise ArgumentError("path", f"is longer than {MAX_PATH_PATTERN_CHARS} characters")
    if "\x00" in text:
        raise ArgumentError("path", "contains a NUL byte")
    if has_surrogates(text):
        raise ArgumentError("path", "is not valid Unicode (a lone surrogate)")
    if text.startswith("/"):
        raise ArgumentError("path", f"{path!r} is absolute: give a glob relative to the source directory, e.g. 'guides/**/*.md'")
    while text.startswith("./"):
        text = text[2:]
    segments = text.split("/")
    if ".." in segments:
        raise ArgumentError("path", f"{path!r}: '..' is not allowed; the filter is relative to the source directory")
    return text if text.strip("/") else ""


def _path_filter(text: str, path: str) -> tuple[str, str | None, re.Pattern[str] | None]:
    """(prefix, glob, pattern) of Filters for the path filter ``text`` (see _path_text), which
    the caller gave as ``path``."""
    segments = text.split("/")
    wild = _WILDCARD.search(text)
    if wild is None:
        folder = text.rstrip("/")
        return (folder + "/", None, None) if text.endswith("/") else (folder, None, re.compile(_path_regex(text), re.S))
    for segment in segments:
        if segment != "**" and len(re.findall(r"\*+", segment)) > MAX_STARS_PER_SEGMENT:
            raise ArgumentError("path", f"{path!r}: at most {MAX_STARS_PER_SEGMENT} * in one folder or file name")
    spans = [segment for segment, _ in itertools.groupby(segments[:-1]) if segment == "**"]  # a last ** costs nothing
    if len(spans) > MAX_FOLDER_SPANS:
        raise ArgumentError("path", f"{path!r}: at most {MAX_FOLDER_SPANS} ** before the last folder")
    try:
        pattern = re.compile(_path_regex(text), re.S)
    except re.error as exc:
        raise ArgumentError("path", f"{path!r} is not a valid glob: {exc}") from None
    loose = None if "[" in text else re.sub(r"\*+/?", "*", text)
    if _GLOB_SAYS_IT.fullmatch(text):
        return text[:wild.start()], loose, None  # SQLite's GLOB alone is exact, and runs in C
    return text[:wild.start()], loose, pattern


#: Globs that SQLite's GLOB (whose * crosses /) reads exactly as _glob_regex does once ** and */
#: become *: a folder and all under it (guides/**), or all under it ending in a name's last
#: characters (**/*.md, guides/**/*.md).
_GLOB_SAYS_IT = re.compile(r"[^*?\[]*\*\*(?:/\*[^*?\[/]*)?")


#: What makes a path filter a glob rather than a folder or a file.
_WILDCARD = re.compile(r"[*?\[]")


def _path_regex(text: str, grouped: bool = False) -> str:
    """A regular expression for the path filter ``text`` (see read_filters): a glob, or a folder or
    file. ``grouped``: each piece that matches by case is a group (see _segment_pieces)."""
    if _WILDCARD.search(text) is None:
        return _glob_regex(text.rstrip("/").split("/"), grouped) + ("/.*" if text.endswith("/") else "(?:/.*)?")
    return _glob_regex(text.split("/"), grouped)


def _glob_regex(segments: list[str], grouped: bool = False) -> str:
    """A regular expression for a glob split at its slashes (see read_filters)."""
    parts: list[str] = []
    for number, segment in enumerate(segments):
        last = number == len(segments) - 1
        if segment == "**":
            if parts and parts[-1] == "(?:[^/]*/)*":
                parts.pop()  # **/** is **
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        pieces = "".join(f"({regex})" if grouped and cased else regex for _, regex, cased in _segment_pieces(segment))
        parts.append(pieces + ("" if last else "/"))
    return "".join(parts)


def _segment_pieces(segment: str) -> Iterator[tuple[str, str, bool]]:
    """A folder or file name of a glob, piece by piece: its text, its regular expression, and
    whether what it matches depends on case (a character, or a [class])."""
    at = 0
    while at < len(segment):
        char = segment[at]
        if char == "*":
            start = at
            while at + 1 < len(segment) and segment[at + 1] == "*":
                at += 1
            yield segment[start:at + 1], "[^/]*", False
        elif char == "?":
            yield char, "[^/]", False
        elif char == "[" and "]" in segment[at + 2:]:
            end = segment.index("]", at + 2)
            inner = segment[at + 1:end]
            negated = inner[:1] in ("!", "^")
            body = re.sub(r"([\\\]\[^])", r"\\\1", inner[1:] if negated else inner)
            yield segment[at:end + 1], f"[^/{body}]" if negated else f"(?!/)[{body}]", True  # a range such as [--0] holds "/"
            at = end
        else:
            yield char, re.escape(char), True
        at += 1


#: A path filter that lets no file through is tried on the files again ignoring case, up to this
#: many files that it then lets through; the reply names at most MAX_CASE_HINTS spellings of it.
CASE_PROBE_FILES = 50
MAX_CASE_HINTS = 3


def _case_hint(conn: sqlite3.Connection, filters: Filters) -> str | None:
    """For filters that let no file through: if their path filter would, ignoring case, a warning
    naming its spellings that do. Paths are compared in their case, as the file system does
    (docs/ and Docs/ may both be there) and as the index on paths is ordered."""
    if filters.path is None:
        return None
    probe = _path_regex(filters.path, grouped=True)
    condition = database.file_condition("", None, filters.extensions, filters.modified, "(?i)" + probe, _caseless_like(filters.path))
    found = database.paths_passing(conn, condition, CASE_PROBE_FILES)
    matches = [re.fullmatch(probe, path, re.S | re.I) for path in found]
    spellings = list(dict.fromkeys(_spelled_as(filters.path, match) for match in matches if match))
    if not spellings:
        return None
    named = ", ".join(map(repr, spellings[:MAX_CASE_HINTS])) + (", ..." if len(spellings) > MAX_CASE_HINTS else "")
    return f"path {filters.path!r} matches no file: paths are case-sensitive; ignoring case it matches {named}"


def _caseless_like(text: str) -> str:
    """An SQLite LIKE pattern looser than the path filter ``text`` read ignoring case
    (re.IGNORECASE), so that SQLite passes over most paths (as fast as a GLOB) before the regular
    expression runs on the rest. LIKE takes an ASCII letter in either case; i, k and s, which
    re.IGNORECASE also takes for İ, ı, K (Kelvin) and ſ, any other character, and a [class] are
    one character (_)."""
    folder = _WILDCARD.search(text) is None
    segments = text.rstrip("/").split("/") if folder else text.split("/")
    like = ""
    for number, segment in enumerate(segments):
        if segment == "**":
            like += "%"  # any folders or none: the slash after it is its own
            continue
        for piece, _, cased in _segment_pieces(segment):
            if not cased:
                like += "%" if piece.startswith("*") else "_"
            elif len(piece) > 1 or not piece.isascii() or piece.lower() in "iks":
                like += "_"
            else:
                like += "\\" + piece if piece in "%_\\" else piece
        like += "/" if number < len(segments) - 1 else ""
    return like + "%" if folder else like


def _spelled_as(text: str, found: re.Match[str]) -> str:
    """The path filter ``text`` spelled as the path ``found`` (by _path_regex(text, grouped=True),
    ignoring case) has it: each character as there, a [class] that does not hold it replaced by it."""
    matched = iter(found.groups())
    segments: list[str] = []
    for segment in text.split("/"):
        spelled = ""
        for piece, regex, cased in [] if segment == "**" else _segment_pieces(segment):
            there = next(matched) if cased else piece
            spelled += there if cased and not re.fullmatch(regex, there, re.S) else piece
        segments.append(spelled or segment)
    return "/".join(segments)


def _extensions(extensions: Sequence[str] | None) -> tuple[str, ...]:
    if extensions is None:
        return ()
    if isinstance(extensions, str) or not isinstance(extensions, Sequence):
        raise ArgumentError("extensions", f"must be a list of extensions such as [\".md\"], got {extensions!r}"[:200])
    if len(extensions) > MAX_EXTENSIONS:
        raise ArgumentError("extensions", f"at most {MAX_EXTENSIONS} extensions, got {len(extensions)}")
    read = []
    for extension in extensions:
        dotted = extension.strip().lower() if isinstance(extension, str) else ""
        dotted = dotted if dotted.startswith(".") else "." + dotted
        if not _EXTENSION.fullmatch(dotted) or has_surrogates(dotted):
            raise ArgumentError("extensions", f"{extension!r} is not an extension such as \".md\""[:200])
        read.append(dotted)
    return tuple(dict.fromkeys(read))


if sys.version_info >= (3, 11):
    _fromisoformat = datetime.fromisoformat
else:
    # 3.10's fromisoformat reads only what isoformat() writes; this reads what 3.11's reads too:
    # basic and week dates, times and offsets without colons, fractions of any length.
    _ISO_DATETIME = re.compile(
        r"([0-9]{4})(?:(-?)W([0-9]{2})(?:\2([0-9]))?|(-?)([0-9]{2})\5([0-9]{2}))(?:.([^Z+-]+)(?:(Z)|([+-])(.+))?)?", re.S
    )
    _ISO_CLOCK = re.compile(r"([0-9]{2})(?:(:?)([0-9]{2})(?:\2([0-9]{2}))?)?(?:[.,]([0-9]+))?")

    def _clock(text: str) -> tuple[int, int, int, int]:
        parts = _ISO_CLOCK.fullmatch(text)
        if parts is None:
            raise ValueError(f"Invalid isoformat time: {text!r}")
        hour, _, minute, second, fraction = parts.groups()
        return int(hour), int(minute or 0), int(second or 0), int((fraction or "")[:6].ljust(6, "0"))

    def _fromisoformat(text: str) -> datetime:
        try:
            return datetime.fromisoformat(text)  # what it reads, it reads as 3.11's does
        except ValueError:
            pass
        parts = _ISO_DATETIME.fullmatch(text)
        if parts is None:
            raise ValueError(f"Invalid isoformat string: {text!r}")
        year, _, week, weekday, _, month, day, clock, utc, sign, offset = parts.groups()
        when = date.fromisocalendar(int(year), int(week), int(weekday or 1)) if week else date(int(year), int(month), int(day))
        zone = timezone.utc if utc else None
        if sign:
            hours, minutes, seconds, microseconds = _clock(offset)
            zone = timezone((-1 if sign == "-" else 1) * timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=microseconds))
        return datetime(when.year, when.month, when.day, *(_clock(clock) if clock else ()), tzinfo=zone)


def _instant(name: str, value: str | None) -> int | None:
    """An ISO 8601 date or datetime as ns since the epoch (UTC unless it names a timezone)."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    try:
        when = _fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
    except ValueError:
        raise ArgumentError(name, f"{value!r} is not an ISO 8601 date or datetime, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"[:200]) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    # Nanoseconds fit SQLite's integers from 1677 to 2262; any file's mtime is within.
    try:
        return min(max(int(when.timestamp() * 1_000_000) * 1000, -(2**63)), 2**63 - 1)
    except OverflowError:  # a zone that moves it past year 1 or 9999
        return -(2**63) if when.year < 5000 else 2**63 - 1


#: A filter letting through at most this many files is applied as the list of them, with the
#: rowid range they span (FTS5 skips the rest of every doclist); a wider one by looking up the file
#: of each section that matches, which costs nothing for a rare word and about what listing the
#: files would for a common one (bench/run.py).
MAX_LISTED_FILES = 5000


def _scope(conn: sqlite3.Connection, plan: MatchPlan, filters: Filters) -> tuple[database.Scope, str | None]:
    """The files this search may return: those the filters let through, but the ones the plan's
    -exclusions match, in this snapshot; and a warning when the filters let none through only
    because of case (see _case_hint)."""
    excluded = database.matching_files(conn, plan.excluded) if plan.excluded else []
    if not filters.narrows:
        return database.scope_of(excluded, None), None
    pattern = filters.pattern.pattern if filters.pattern is not None else None
    condition = database.file_condition(filters.prefix, filters.glob, filters.extensions, filters.modified, pattern)
    allowed = database.files_passing(conn, condition, MAX_LISTED_FILES)
    return database.scope_of(excluded, allowed, condition), _case_hint(conn, filters) if allowed == [] else None


def search(
    db_path: Path, query: str, limit: int = 10, indexing: bool = False, cancelled: Callable[[], bool] | None = None, *,
    filters: Filters = NO_FILTERS, offset: int = 0, collapse_duplicates: bool = True, freshness: Freshness | None = None,
) -> SearchReply:
    """Search the index at ``db_path``: the best section of each file, from the ``offset``-th file
    on, at most ``limit`` of them, among the files ``filters`` let through. With
    ``collapse_duplicates``, files whose best section is the same text are one result (see
    _first_groups). With ``freshness``, each file is checked on disk first (see Freshness).

    ``cancelled``: polled while SQLite works; once it returns true the search stops and raises
    Cancelled. A search still running after SEARCH_TIME_LIMIT_SECONDS is stopped as well.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise QueryError(query, f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_OFFSET:
        raise ArgumentError("offset", f"must be a whole number from 0 to {MAX_OFFSET:,}, got {offset!r}")
    limits = Limits(cancelled, time.monotonic() + SEARCH_TIME_LIMIT_SECONDS)
    asking = Asking(db_path, query, limit, offset, filters, collapse_duplicates, freshness)
    reply, outdated = _answer(asking, limits)
    if outdated and freshness is not None and freshness.refresh is not None and freshness.refresh(outdated):
        reply, _ = _answer(asking, limits)  # from the index as it is now; what changed again is stale
    reply["indexing"] = indexing
    return reply


#: Results are paged up to this offset.
MAX_OFFSET = 1000
#: To collapse duplicates, this many times the files asked for are ranked (more if they turn out
#: to hold fewer texts, up to MAX_RANKED_FILES). Each further ranking pass costs a whole ranking,
#: and a longer first one little more: on a corpus holding every text ~40 times, 30 took the
#: queries of bench/run.py from 3 or 4 passes to 1 or 2 (two words 37 -> 15 ms, a question 86 ->
#: 49 ms), and cost 0-17% on corpora without copies (bench/collapse_window.py).
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


def _answer(asking: Asking, limits: Limits) -> tuple[SearchReply, list[str]]:
    """The reply, and the paths among the files ranked that changed or were deleted since they
    were indexed (if asked to check)."""
    parsed = parse_query(asking.query)
    if not parsed.has_words():
        raise QueryError(asking.query, _nothing_to_search(parsed))
    conn = database.reader(asking.db_path)
    wanted = asking.offset + asking.limit
    window = min(wanted * COLLAPSE_WINDOW, MAX_RANKED_FILES) if asking.collapse else wanted + 1
    try:
        with database.snapshot(conn), database.interruptible(conn, limits.reached):
            plan = plan_within_bounds(conn, parsed)
            scope, case_hint = _scope(conn, plan, asking.filters)
            run = Searching(asking.db_path, conn, limits.reached, scope, asking.filters)
            need = wanted + 1  # results: one more tells whether more follow
            loaded = Loaded()
            while True:
                plan, (ranked, feedback, files_matched) = rank_in_time(run, parsed, plan, window, limits, need)
                reading = query_reading(parsed, plan, feedback)
                ranked = with_weighed_words(conn, reading, ranked)
                groups = _first_groups(conn, ranked, wanted + 1, asking, loaded)
                if len(groups) > wanted or window >= MAX_RANKED_FILES:
                    break  # (past MAX_RANKED_FILES files of copies, further results are not looked for)
                # Fewer texts than asked for: copies and deleted files took places. Rank further.
                lost = len(loaded.sections) - len(groups)
                if len(ranked) < window:
                    if need >= wanted + 1 + lost:
                        break  # the ranking has no more files
                    need = wanted + 1 + lost  # keywords: files with only some of the words may follow
                else:
                    window = min(MAX_RANKED_FILES, max(2 * window, (wanted + 1) * len(loaded.sections) // max(1, len(groups))))
            sections, gone, changed = loaded.sections, loaded.gone, loaded.changed
            page = groups[asking.offset:wanted]
            leaders = loaded.with_text(conn, [group[0][0] for group in page])
            # Snippets highlight the user's own words; a file found only by feedback words is shown
            # with those.
            snippet_text = _snippets(conn, [plan.shown, [_quote([w]) for w in feedback]], leaders)
            suggestions = [] if ranked or asking.offset else suggest(conn, parsed)
    except sqlite3.Error as exc:
        if database.is_interruption(exc):
            if limits.cancelled is not None and limits.cancelled():
                raise Cancelled("the search was cancelled") from None
            raise QueryError(
                asking.query, f"stopped after {SEARCH_TIME_LIMIT_SECONDS:g} s: search for fewer, rarer words or fewer prefix* terms"
            ) from None
        database.drop_reader(asking.db_path)
        raise IndexUnavailableError(str(asking.db_path), f"search failed: {exc}") from exc
    results = [_result(group, sections, snippet_text, changed) for group in page]
    warnings = list(dict.fromkeys(parsed.warnings + ([case_hint] if case_hint else [])))
    kept = _within_reply_budget(results)
    if kept < len(results):
        warnings.append(f"{len(results) - kept} more results were left out to keep the reply under {MAX_REPLY_CHARS:,} characters")
    has_more = len(groups) > wanted or kept < len(results)
    outdated = [str(sections[rowid]["path"]) for rowid in sorted(gone | changed)]
    return {
        "query": asking.query[:MAX_QUERY_CHARS], "results": results[:kept],
        "files_matched": max(files_matched - len(gone), len(results) and asking.offset + len(results)),
        "indexing": False, "offset": asking.offset, "has_more": has_more,
        "next_offset": asking.offset + kept if has_more else None,
        "warnings": warnings, "query_read": reading, "suggestions": suggestions,
    }, outdated


@dataclass
class Loaded:
    """The sections of a search's ranked files loaded so far, kept across its ranking passes:
    each one's group key (see _first_groups), and those whose files are gone or changed."""

    sections: dict[int, dict] = field(default_factory=dict)
    keys: dict[int, object] = field(default_factory=dict)
    gone: set[int] = field(default_factory=set)
    changed: set[int] = field(default_factory=set)

    def load(self, conn: sqlite3.Connection, rowids: list[int], asking: Asking) -> None:
        """Where the sections are and what they say (their said key), without their text."""
        batch = database.load_sections(conn, [rowid for rowid in rowids if rowid not in self.sections], text=False)
        gone, changed = _outdated(asking.freshness, batch)
        self.sections.update(batch)
        self.gone |= gone
        self.changed |= changed
        for rowid, section in batch.items():
            if rowid not in gone:
                self.keys[rowid] = section["said"] if asking.collapse else rowid

    def with_text(self, conn: sqlite3.Connection, rowids: list[int]) -> dict[int, dict]:
        """The sections ``rowids`` with their text, as a reply may show them (kept in ``sections`` too)."""
        found = {rowid: showable(section) for rowid, section in database.load_sections(conn, rowids).items()}
        self.sections.update(found)
        return found


def _first_groups(
    conn: sqlite3.Connection, ranked: list[tuple[int, float]], wanted: int, asking: Asking, loaded: Loaded
) -> list[list[tuple[int, float]]]:
    """The first ``wanted`` groups of ``ranked`` (fewer if it runs out), best first, each led by
    its best-ranked file: files whose best section says the same (see _said) are one group;
    without ``asking.collapse``, each file is its own. Sections are loaded as needed, in batches
    that double, into ``loaded``; files that are gone are left out."""
    groups: dict[object, list[tuple[int, float]]] = {}
    position, batch = 0, wanted
    while position < len(ranked) and len(groups) < wanted:
        chunk = ranked[position:position + batch]
        position, batch = position + len(chunk), 2 * batch
        loaded.load(conn, [rowid for rowid, _ in chunk], asking)
        for rowid, score in chunk:
            if rowid in loaded.keys:
                groups.setdefault(loaded.keys[rowid], []).append((rowid, score))
    return list(groups.values())


def _outdated(freshness: Freshness | None, sections: dict[int, dict]) -> tuple[set[int], set[int]]:
    """The sections (rowids) whose file is gone from disk, and those whose file changed since it
    was indexed: one stat per file (file_utils.disk_signature), nothing if not asked to check."""
    gone: set[int] = set()
    changed: set[int] = set()
    if freshness is None:
        return gone, changed
    for rowid, section in sections.items():
        now = disk_signature(freshness.source, str(section["path"]))
        if now is None:
            gone.add(rowid)
        elif now != section["signature"]:
            changed.add(rowid)
    return gone, changed


#: What leads a section before what it says: YAML front matter, Markdown heading lines, blank lines.
_LEAD = re.compile(r"(?:\s*---[^\S\n]*\n.*?\n(?:---|\.\.\.)[^\S\n]*(?:\n|\Z))?(?:[^\S\n]*(?:#{1,6}(?:[^\S\n][^\n]*)?)?(?:\n|\Z))*", re.S)


#: How far into a section its lead (front matter, headings) is looked for.
MAX_LEAD_CHARS = 4096


def said_key(body: str) -> bytes:
    """A short digest of what a section says (_said): sections whose keys are equal are copies of
    one text. Made when a file is indexed, so a search groups copies without reading them."""
    return hashlib.blake2b(_said(body).encode("utf-8", "surrogatepass"), digest_size=8).digest()


def _said(body: str) -> str:
    """What a section says, to tell copies apart: its text after its front matter and heading lines
    (versioned copies of a page differ in a date or a title holding the version); the text itself
    if nothing else is left. Only the start is looked at: a section starts at its heading."""
    said = body[_LEAD.match(body, 0, MAX_LEAD_CHARS).end():].rstrip()
    return said or body


@dataclass
class Limits:
    """When a search's SQLite work must stop: the caller cancelled it, it passed its deadline, or
    the attempt at ranking a question that rank_in_time is making ran out of its time."""

    cancelled: Callable[[], bool] | None
    deadline: float
    attempt_ends: float = math.inf

    def reached(self) -> bool:
        return self.outer_reached() or time.monotonic() > self.attempt_ends

    def outer_reached(self) -> bool:
        return (self.cancelled is not None and self.cancelled()) or time.monotonic() > self.deadline


def rank_in_time(
    run: Searching, parsed: ParsedQuery, plan: MatchPlan, limit: int, limits: Limits, need: int | None = None
) -> tuple[MatchPlan, Ranking]:
    """rank(), with each attempt at a question bounded in time (QUESTION_ATTEMPTS): bm25 reads every
    position of every word of a question in the sections it matches, and how densely a word fills
    them is something fit_question's estimate cannot see. An attempt that runs out is made again
    with the question's rarest words only; the reply names the words left out. Returns the plan
    that was ranked, with its ranking."""
    steps = QUESTION_ATTEMPTS if plan.question else ((math.inf, 1.0),)
    original = plan
    for number, (seconds, share) in enumerate(steps):
        left_out: list[str] = []
        if number:
            plan, left_out = _rarest_words(run.conn, original, share)
        limits.attempt_ends = time.monotonic() + seconds
        try:
            ranking = rank(run, parsed, plan, limit, need)
        except sqlite3.Error as exc:
            if not database.is_interruption(exc) or limits.outer_reached():
                raise
            if not run.conn.in_transaction:  # SQLite ended the snapshot with the interrupted write
                run.conn.execute("BEGIN")
                run = replace(run, scope=_scope(run.conn, plan, run.filters))
            continue
        finally:
            limits.attempt_ends = math.inf
        if left_out:
            parsed.warnings.append(f"the question took too long to rank with all its words; these were left out: {', '.join(left_out)}")
        return plan, ranking
    raise AssertionError("the last of QUESTION_ATTEMPTS has no time limit")


def _rarest_words(conn: sqlite3.Connection, plan: MatchPlan, share: float) -> tuple[MatchPlan, list[str]]:
    """The question's plan with only the rarest ``share`` of its words (at least one) and none of
    its prefix* terms (which cost the same in every attempt), and what was left out."""
    words = list(dict.fromkeys(part for part in plan.shown if not part.endswith("*")))
    rows = dict(zip(words, database.estimated_rows_each(conn, words, QUESTION_SAMPLE_FILES)))
    # A word not in the sample may be in no file at all (quick to tell: its doclist is short).
    present = [w for w in words if rows[w] or database.first_section_matching(conn, w) is not None] or words
    kept = set(sorted(present, key=rows.__getitem__)[: max(1, int(len(present) * share))])
    parts = [part for part in plan.shown if part in kept]
    left_out = [part.replace('"', "") for part in dict.fromkeys(plan.shown) if part not in kept]
    return replace(plan, precise=highlight_match(parts), shown=tuple(parts)), left_out


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
    sections, _ = database.index_totals(conn)
    held = _sections_holding(conn, words, database.stems(words))
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
    counts = database.estimated_rows_each(conn, [_quote([w]) for w in stem_of], QUESTION_SAMPLE_FILES)
    held: dict[str, int] = {}
    for stem, count in zip(stem_of.values(), counts):
        if count:
            held[stem] = max(count, held.get(stem, 0))
    return held


def _nothing_to_search(parsed: ParsedQuery) -> str:
    if parsed.warnings:
        return f"nothing was left to search for: {'; '.join(parsed.warnings)}"
    return "the query has no words to search for (only punctuation, symbols or operators)"


def plan_within_bounds(conn: sqlite3.Connection, parsed: ParsedQuery) -> MatchPlan:
    """The query's plan, after its costly phrases are loosened and a costly question is fitted;
    what was changed is added to the query's warnings."""
    fit_phrases(conn, parsed)
    plan, notes = fit_question(conn, build_match(parsed))
    parsed.warnings.extend(notes)
    return plan


def fit_phrases(conn: sqlite3.Connection, parsed: ParsedQuery) -> None:
    """Loosen the phrases (quoted, compounds, excluded, or a query of stopwords only searched as
    one) whose words are together in so many sections that checking their order would be slow (see
    PHRASE_MAX_COST), costliest first: a phrase is searched as its rarest word, an excluded one is
    not applied, a query of stopwords only skips its phrase."""
    groups: list[tuple[str, int, list[str]]] = [
        (kind, number, words)
        for kind, parts in (("phrase", parsed.phrases), ("term", parsed.terms), ("excluded", parsed.excluded))
        for number, words in enumerate(parts) if len(words) > 1
    ]
    if parsed.terms and all(_is_stopword(t) for t in parsed.terms) and len(parsed.terms) > MAX_AND_TERMS:
        groups.append(("stopwords", 0, [w for t in parsed.terms for w in t][:MAX_PHRASE_WORDS]))
    if sum(len(group) for _, _, group in groups) <= PHRASE_FREE_WORDS:
        return
    words = list(dict.fromkeys(w for _, _, group in groups for w in group))
    together = [" AND ".join(_quote([w]) for w in dict.fromkeys(group)) for _, _, group in groups]
    estimates = database.estimated_rows_each(conn, [*together, *(_quote([w]) for w in words)], QUESTION_SAMPLE_FILES)
    rows_of = dict(zip(words, estimates[len(groups):]))
    costs = [rows * len(group) for rows, (_, _, group) in zip(estimates, groups)]
    while sum(costs) > PHRASE_MAX_COST:
        costliest = max(range(len(groups)), key=costs.__getitem__)
        costs[costliest] = 0
        kind, number, group = groups[costliest]
        shown, rarest = " ".join(group), min(group, key=rows_of.__getitem__)
        if kind == "excluded":
            parsed.excluded[number] = []
            parsed.warnings.append(f'-"{shown}" was not applied: its words are in too many sections to match them in order quickly')
        elif kind == "stopwords":
            parsed.stopword_phrase = False
            parsed.warnings.append("a query of stopwords only was not searched as a phrase: its words are in too many sections")
        else:
            (parsed.phrases if kind == "phrase" else parsed.terms)[number] = [rarest]
            parsed.warnings.append(f'"{shown}" was searched as its rarest word {rarest!r}: its words are in too many sections to match them in order quickly')
    parsed.excluded = [words for words in parsed.excluded if words]


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
    stems = database.stems(words)
    held = database.sections_with(conn, stems)
    found: dict[str, tuple[int, int, str]] = {}  # stem -> (edits, -sections, a word FTS5 stems to it)
    for word, stem in zip(words, stems):
        if stem in held or not stem:
            continue
        # The word's own edits are stemmed: "meetnig" is one edit from "meeting", three from its stem "meet".
        edited = _one_edit(word)
        spelled = dict(zip(database.stems(edited), edited))
        close = {term: (1, -count, spelled[term]) for term, count in database.sections_with(conn, spelled).items()}
        if not close:
            for term, count in database.terms_starting(conn, stem[0], (len(stem) - 2, len(stem) + 2)):
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
    rowid = database.first_section_matching(conn, _quote([word]))
    section = database.load_sections(conn, [rowid]).get(rowid) if rowid is not None else None
    if section is None:
        return word
    text = " ".join(str(section[key]) for key in ("title", "heading", "body"))
    spelled = list(dict.fromkeys(_words(text)))
    return next((w for w, w_stem in zip(spelled, database.stems(spelled)) if w_stem == stem), word)


def _within_reply_budget(results: list[SearchHit]) -> int:
    """How many of ``results`` fit in MAX_REPLY_CHARS (at least one)."""
    used = 0
    for count, hit in enumerate(results):
        used += sum(len(hit[key]) for key in ("path", "title", "heading", "snippet")) + 200  # 200: keys, numbers, date
        if used > MAX_REPLY_CHARS and count:
            return count
    return len(results)


#: (section rowid, score: higher is better) best first, the feedback words that helped find them, files matched.
Ranking = tuple[list[tuple[int, float]], list[str], int]
StopCheck = Callable[[], bool] | None


@dataclass(frozen=True)
class Searching:
    """What the steps of one search share: the index, the caller's connection (inside the search's
    snapshot), when to stop, and the files it may return (see _scope)."""

    db_path: Path
    conn: sqlite3.Connection
    should_stop: StopCheck = None
    scope: database.Scope = database.EVERY_FILE
    filters: Filters = NO_FILTERS


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
        spread = [f for f in database.files_with_each(run.conn, plan.shown, run.scope) if f not in seen]
        if spread:
            ranked = _below(ranked, database.best_section_of_files(run.conn, plan.broad, COLUMN_WEIGHTS, spread, limit - len(ranked)))
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
    """bm25 over the question's words; then, if few enough files matched, with feedback words too.

    The question is scored once into a temporary table; the feedback pass reads only the feedback
    words' doclists and adds their scores (see database.best_with_feedback)."""

    def count_in_span(part: sqlite3.Connection, span: database.Span) -> int:
        return database.count_matching_files(part, plan.precise, span, run.scope)

    files_matched = sum(_over_parts(run, plan.precise, count_in_span, plan.estimated_rows))
    if files_matched > FEEDBACK_MAX_FILES:
        ranked, _ = _best_files(run, plan.precise, limit, one_pass=False, count=False, estimated_rows=plan.estimated_rows)
        return [(rowid, -bm25) for rowid, bm25 in ranked], [], files_matched
    conn = run.conn
    database.score_question(conn, plan.precise, COLUMN_WEIGHTS, run.scope)
    first = database.best_question_hits(conn, max(limit, FEEDBACK_FILES))
    feedback = feedback_words(conn, first[:FEEDBACK_FILES], parsed)
    if not feedback:
        return [(rowid, -bm25) for rowid, bm25 in first[:limit]], [], files_matched
    ranked = database.best_with_feedback(conn, feedback_match(feedback), COLUMN_WEIGHTS, FEEDBACK_SHARE, limit, run.scope)
    return [(rowid, -bm25) for rowid, bm25 in ranked], feedback, files_matched


def _best_files(
    run: Searching, match: str, limit: int, *, one_pass: bool, count: bool = True, estimated_rows: int | None = None
) -> tuple[list[tuple[int, float]], int]:
    """The best section of each of the top ``limit`` files [(rowid, bm25)], best first, and how
    many files match (if ``count``, else at least how many were returned). ``one_pass``: rank by
    grouping every match, which counts them on the way. ``estimated_rows``: see _over_parts."""

    def in_span(part: sqlite3.Connection, span: database.Span) -> tuple[list[tuple[int, float]], int]:
        if one_pass:
            rows = database.best_section_of_every_file(part, match, COLUMN_WEIGHTS, limit, span, run.scope)
            return [(rowid, bm25) for rowid, bm25, _ in rows], rows[0][2] if rows else 0
        best = database.best_section_per_file(part, match, COLUMN_WEIGHTS, limit, span, run.scope)
        counted = database.count_matching_files(part, match, span, run.scope) if count and len(best) >= limit else len(best)
        return best, counted

    parts = _over_parts(run, match, in_span, estimated_rows)
    merged = sorted((hit for best, _ in parts for hit in best), key=lambda hit: (hit[1], hit[0]))
    return merged[:limit], sum(count for _, count in parts)


_T = TypeVar("_T")
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _over_parts(
    run: Searching, match: str, work: Callable[[sqlite3.Connection, database.Span], _T], estimated_rows: int | None = None
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
    spans = database.file_spans(conn, SEARCH_PARTS) if split else [database.EVERY_ROW]
    seen = database.generation(conn) if len(spans) > 1 else None
    if estimated_rows is None and seen is not None:
        estimated_rows = database.estimated_matching_rows(conn, match, PARALLEL_SAMPLE)
    if seen is not None and (estimated_rows or 0) >= PARALLEL_MIN_ROWS:
        futures = [_parts_pool().submit(_work_in_span, run, seen, work, span) for span in spans[1:]]
        results = [work(conn, spans[0])] + [future.result() for future in futures]
        if all(result is not _OTHER_GENERATION for result in results):
            return results
    return [work(conn, database.EVERY_ROW)]


_OTHER_GENERATION = object()


def _work_in_span(
    run: Searching, expected: str, work: Callable[[sqlite3.Connection, database.Span], _T], span: database.Span
) -> _T | object:
    try:
        conn = database.reader(run.db_path)
    except IndexUnavailableError:  # deleted or replaced since the caller's snapshot began
        return _OTHER_GENERATION
    try:
        with database.snapshot(conn), database.interruptible(conn, run.should_stop):
            if database.generation(conn) != expected:
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
    one word of the same spelling are taken (database.query_words), so that a feedback word is
    never a phrase in disguise."""
    if len(top) < FEEDBACK_MIN_FILES:
        return []
    files_with: Counter[str] = Counter()
    for section in database.load_sections(conn, [rowid for rowid, _ in top]).values():
        words = (w.lower() for w in _words(section["body"]))
        # dict.fromkeys: each word once per file, in reading order, so ties break the same way every run.
        files_with.update(dict.fromkeys(
            w for w in words if len(w) >= FEEDBACK_MIN_CHARS and not w.isdigit() and w not in STOPWORDS
        ).keys())
    candidates = [w for w, n in files_with.most_common() if n >= FEEDBACK_MIN_FILES]
    candidates = [w for w, read in zip(candidates, database.query_words(candidates)) if read == [w]][:FEEDBACK_CANDIDATES]
    if not candidates:
        return []
    known = set(database.stems([w for t in parsed.terms + parsed.phrases + parsed.excluded for w in t]))
    sections, _ = database.index_totals(conn)
    offers: dict[str, tuple[float, str]] = {}
    stems = database.stems(candidates)
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


def _words(text: str) -> list[str]:
    """Words by Python's notion of a letter: a quick first pass over section text (feedback_words)."""
    return [w for w in _WORD.findall(text) if len(w) <= MAX_TERM_CHARS]


def _snippets(conn: sqlite3.Connection, highlights: Sequence[Sequence[str]], sections: dict[int, dict]) -> dict[int, str]:
    """Each section's snippet, highlighting the first of ``highlights`` (lists of quoted words,
    phrases and prefix* terms) that it matches; from a window of a long section (see
    SNIPPET_WINDOW_CHARS)."""
    shown: dict[int, str] = {}
    for parts in highlights:
        bodies = {rowid: section["body"] for rowid, section in sections.items() if rowid not in shown}
        if not parts or not bodies:
            continue
        match = highlight_match(parts)
        words = list(dict.fromkeys(part.strip('*"').split(" ")[0].lower() for part in parts))[:SNIPPET_MAX_WORDS]
        windows = {rowid: snippet_window(body, words) for rowid, body in bodies.items()}
        while windows:
            texts = {
                rowid: (sections[rowid]["title"], sections[rowid]["heading"], bodies[rowid][start:end])
                for rowid, (start, end) in windows.items()
            }
            for rowid, text in database.snippets(conn, match, texts, (_MARK_OPEN, _MARK_CLOSE), SNIPPET_TOKENS).items():
                shown[rowid] = _with_ellipses(text, windows[rowid], len(bodies[rowid]))
            # A window FTS5 does not match (its finds were other words) is tried again whole.
            windows = {
                rowid: (0, len(bodies[rowid]))
                for rowid, window in windows.items()
                if rowid not in shown and window != (0, len(bodies[rowid]))
            }
    return shown


def _with_ellipses(text: str, window: tuple[int, int], length: int) -> str:
    """FTS5 marks only the cuts it made; a window's own cuts are marked here."""
    start, end = window
    lead = ELLIPSIS if start > 0 and not text.startswith(ELLIPSIS) else ""
    tail = ELLIPSIS if end < length and not text.endswith(ELLIPSIS) else ""
    return lead + text + tail


def snippet_window(body: str, words: Sequence[str]) -> tuple[int, int]:
    """(start, end) of the part of ``body`` to make a snippet from: all of it if it is short or if
    none of ``words`` (lowercase) starts a word in it (see SNIPPET_WINDOW_CHARS)."""
    if len(body) <= 2 * SNIPPET_WINDOW_CHARS:
        return 0, len(body)
    lowered = body.lower()
    if len(lowered) != len(body):  # a few characters change length in lower(): offsets would differ
        return 0, len(body)
    finds: list[tuple[int, int]] = []
    for number, word in enumerate(words):
        at, found = lowered.find(word), 0
        while at >= 0 and found < SNIPPET_MAX_FINDS:
            if at == 0 or not lowered[at - 1].isalnum():
                finds.append((at, number))
                found += 1
            at = lowered.find(word, at + len(word))
    if not finds:
        return 0, len(body)
    finds.sort()
    # The finds within SNIPPET_CLUSTER_CHARS of each find, counted per word as the span slides.
    best, best_distinct, last = 0, 0, 0
    in_span: Counter[int] = Counter()
    for at, number in finds:
        while last < len(finds) and finds[last][0] < at + SNIPPET_CLUSTER_CHARS:
            in_span[finds[last][1]] += 1
            last += 1
        if len(in_span) > best_distinct:  # ties go to the earliest, as in FTS5's own choice
            best, best_distinct = at, len(in_span)
        in_span[number] -= 1
        if not in_span[number]:
            del in_span[number]
    start = min(max(0, best - (SNIPPET_WINDOW_CHARS - SNIPPET_CLUSTER_CHARS) // 2), len(body) - SNIPPET_WINDOW_CHARS)
    end = start + SNIPPET_WINDOW_CHARS
    # Cut at whitespace, so that no word is shown in part.
    space = _SPACE.search(body, start, best) if start > 0 else None
    start = space.end() if space else start
    last_space = max(body.rfind(" ", best, end), body.rfind("\n", best, end))
    end = last_space if end < len(body) and last_space > best else end
    return start, end


#: Characters a reply shows as U+FFFD: controls (but tab and line ends), which JSON would spell out
#: six times longer and which mean nothing to a reader, and the private-use characters that mark
#: matches here, so that a file's own copy of them never reads as a match. One for one: offsets hold.
_UNSHOWABLE = dict.fromkeys([*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0), ord(_MARK_OPEN), ord(_MARK_CLOSE)], "\ufffd")
#: Finds one of them: most text has none, and a search is far cheaper than translate() over it.
_HAS_UNSHOWABLE = re.compile("[" + "".join(map(chr, _UNSHOWABLE)) + "]")


def visible_text(text: str) -> str:
    """``text`` as a reply may show it (_UNSHOWABLE)."""
    return text.translate(_UNSHOWABLE) if _HAS_UNSHOWABLE.search(text) else text


def showable(section: dict[str, object]) -> dict[str, object]:
    """A loaded section with its text, heading and title as a reply may show them (visible_text)."""
    return {key: visible_text(value) if key in ("body", "title", "heading") else value for key, value in section.items()}


def _result(group: list[tuple[int, float]], sections: dict[int, dict], snippets: dict[int, str], changed: set[int]) -> SearchHit:
    """The hit for a group of files holding one text (see _first_groups): its first file's."""
    (rowid, score), others = group[0], [str(sections[other]["path"]) for other, _ in group[1:]]
    hit = _hit(sections[rowid], snippets.get(rowid, ""), score)
    hit.update(stale=rowid in changed, also_in=others[:MAX_ALSO_IN], also_in_count=len(others))
    return hit


def _hit(section: dict, snippet: str, score: float) -> SearchHit:
    body: str = section["body"]
    start, end = _snippet_lines(body, snippet, section["start_line"], section["end_line"])
    # The file's own "**" is escaped before the cut, so the cut bounds what is shown.
    text = bounded_snippet(" ".join(snippet.split()).replace(HIGHLIGHT, ESCAPED_HIGHLIGHT))
    text = text.replace(_MARK_OPEN, HIGHLIGHT).replace(_MARK_CLOSE, HIGHLIGHT)
    modified = datetime.fromtimestamp(section["mtime_ns"] / 1e9, tz=timezone.utc).isoformat(timespec="seconds")
    return {
        "path": section["path"],
        "title": section["title"],
        "heading": section["heading"],
        "snippet": text,
        "score": round(max(score, 1e-6), 6),
        "line_start": start,
        "line_end": end,
        "last_modified": modified,
        "stale": False,
        "also_in": [],
        "also_in_count": 0,
    }


def bounded_snippet(text: str) -> str:
    """``text`` (a snippet with its matches between the private markers) cut to SNIPPET_MAX_CHARS
    characters around its first match, at spaces where there are any, with … at each cut; a
    match cut in two is closed. FTS5 cuts snippets by tokens, and a token can be very long."""
    if len(text) <= SNIPPET_MAX_CHARS:
        return text
    first = max(text.find(_MARK_OPEN), 0)
    # start <= first < end: the first match is always shown.
    start = max(0, min(first - SNIPPET_MAX_CHARS // 4, len(text) - SNIPPET_MAX_CHARS))
    end = start + SNIPPET_MAX_CHARS
    if start > 0:
        space = text.find(" ", start, first)
        start = space + 1 if space >= 0 else start
    if end < len(text):
        space = text.rfind(" ", first, end)
        end = space if space > first else end
    cut = text[start:end].strip(ELLIPSIS)
    if cut.count(_MARK_OPEN) > cut.count(_MARK_CLOSE):
        cut += _MARK_CLOSE
    lead = ELLIPSIS if start > 0 or text.startswith(ELLIPSIS) else ""
    tail = ELLIPSIS if end < len(text) or text.endswith(ELLIPSIS) else ""
    return lead + cut + tail


def _snippet_lines(body: str, snippet: str, first: int, last: int) -> tuple[int, int]:
    """Lines of the file that the snippet shows; the section's range if it cannot be located."""
    clean = snippet.replace(_MARK_OPEN, "").replace(_MARK_CLOSE, "").strip("…").strip()
    at = body.find(clean) if clean else -1
    if at < 0:
        return first, last
    start = first + body.count("\n", 0, at)
    return start, min(last, start + clean.count("\n"))
