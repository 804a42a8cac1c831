"""Turning user text into a safe FTS5 plan: what it asks for, as MATCH expressions within bounds.

User text never reaches MATCH raw: it is split into words the way FTS5's unicode61 tokenizer
splits text, and every word or phrase is re-quoted. What a user can still express:
``"quoted phrases"``, ``prefix*``, and ``-excluded`` words or phrases. Everything else (FTS5
operators, column filters, parentheses, ``^``, NEAR) is searched for as plain words.

Up to MAX_AND_TERMS words are keywords, all required in the file. Longer questions drop stopwords
and OR the remaining words (a compound's words separately, but a number such as 7.4 as the phrase
of its parts), each counted at most MAX_REPEATS times.
Phrases and questions whose words are in so many sections that ranking them would be slow are
loosened (fit_phrases, fit_question), and the query's warnings say so. search.py ranks the plan.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import database
import index_queries
from exceptions import QueryError
from models import QueryReading

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
#: Up to this many words (stopwords included) are AND-ed; more are treated as a question and OR-ed.
MAX_AND_TERMS = 3
#: A question counts each of its words (by stem: "shape" and "shapes" are one) at most this often:
#: a long request repeats its key words, but a generic word said five times must not rule it.
MAX_REPEATS = 2
#: bm25 scores each section a question matches once per OR-ed part, and reads every position of
#: its words there: a question costs about the sections it matches times its parts, plus its words'
#: positions in them over POSITIONS_PER_PART (on the realistic corpus a word costs 2-3 us a section,
#: ~1 us a section and part in a question, however dense up to ~20 positions a section; a corpus of
#: 40 words in 30 KB sections, ~125 positions of each word a section, took 3.9 s for 64 words in
#: 3,000 sections: ~0.14 us a position). Every question is
#: estimated before it runs, from the index alone (sections among the first QUESTION_SAMPLE_FILES
#: files, positions among each word's first POSITIONS_SAMPLE), so what it ranks never depends on the
#: machine's load; past QUESTION_MAX_COST, a repeated word counts once, then its costliest words are
#: left out (the reply names them) until it fits. Those words are in most sections, where bm25 gives
#: them little or no weight (none past half of them).
QUESTION_MAX_COST = 1_000_000
QUESTION_SAMPLE_FILES = 2000
POSITIONS_PER_PART = 10
POSITIONS_SAMPLE = 500
#: A phrase costs about the sections holding all of its words times its words: FTS5 reads each
#: word's positions there to check their order. Past PHRASE_MAX_COST (over all phrases, compounds
#: and excluded phrases, estimated like a question), the costliest are loosened (see fit_phrases):
#: "the the the ..." holds only words found in nearly every section.
PHRASE_MAX_COST = 300_000
#: Phrases of this many words in all are not estimated: at worst they cost a few times a word in
#: every section, and most queries with a phrase are no more.
PHRASE_FREE_WORDS = 4

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
    (index_queries.query_words). A term is one word, or a compound like ``e-mail`` that FTS5 indexed as
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
    parts = _parts(_within_length(text, parsed))
    after_command = _starts_with_command(parts)
    budget = MAX_QUERY_TERMS
    for part in parts:
        words = _part_words(part, after_command, parsed)
        if not words:
            continue
        words = _within_budget(words, budget, parsed)
        if not words:
            break
        budget -= len(words)
        _add_part(parsed, part, words)
    _leave_out_both(parsed)
    _search_exclusions_alone(parsed)
    return parsed


@dataclass
class _Part:
    """One part of a query's text (_QUERY_PART): a "phrase" or a run of non-space characters."""

    #: What is inside the quotes, or the run without its leading -.
    raw: str
    #: The words FTS5 reads in it (index_queries.query_words).
    words: list[str]
    #: Those of the character before a trailing "*": a prefix needs a letter there.
    before_star: list[str]
    quoted: bool
    #: Written with a leading -.
    excluded: bool


def _within_length(text: str, parsed: ParsedQuery) -> str:
    """``text`` cut to MAX_QUERY_CHARS; a cut is named in ``parsed``'s warnings."""
    if len(text) > MAX_QUERY_CHARS:
        text = text[:MAX_QUERY_CHARS]
        parsed.warnings.append(f"only the first {MAX_QUERY_CHARS:,} characters of the query were read")
    return text


def _parts(text: str) -> list[_Part]:
    """The parts of ``text``, with their words (all read by FTS5's tokenizer in one call)."""
    matches = list(_QUERY_PART.finditer(text))
    raws = [match.group(4) if match.group(2) is None else match.group(2) for match in matches]
    words_of = index_queries.query_words([*raws, *(raw.rstrip("*")[-1:] for raw in raws)])
    return [
        _Part(raw, words, before_star, quoted=match.group(2) is not None, excluded=bool(match.group(1) or match.group(3)))
        for match, raw, words, before_star in zip(matches, raws, words_of, words_of[len(raws):])
    ]


def _starts_with_command(parts: list[_Part]) -> bool:
    """Whether the query starts with a Verb-Noun command (_COMMAND): its -words are then options."""
    return bool(parts) and not parts[0].quoted and not parts[0].excluded and bool(_COMMAND.match(parts[0].raw))


def _part_words(part: _Part, after_command: bool, parsed: ParsedQuery) -> list[str]:
    """The words of ``part`` to search, within MAX_TERM_CHARS and MAX_PHRASE_WORDS (none if none
    is left). A -option of a command line (_is_option) is made a part to search, not to leave out."""
    words = _searchable(part.words, parsed)
    if not words:
        return words
    if part.excluded and not part.quoted and _is_option(part.raw, after_command):
        part.excluded = False
        parsed.warnings.append(
            f"-{part.raw} was searched as a word (an option of a command line); write -\"{' '.join(words)}\" to leave out"
            " files with it"
        )
    if len(words) > MAX_PHRASE_WORDS:
        parsed.warnings.append(f"a phrase of {len(words)} words was searched as its first {MAX_PHRASE_WORDS}")
        words = words[:MAX_PHRASE_WORDS]
    return words


def _within_budget(words: list[str], budget: int, parsed: ParsedQuery) -> list[str]:
    """``words`` cut to the ``budget`` of words the query has left (of MAX_QUERY_TERMS); a cut is
    named in ``parsed``'s warnings."""
    if len(words) > budget:
        parsed.warnings.append(f"only the first {MAX_QUERY_TERMS} words of the query were searched")
        words = words[:budget]
    return words


def _add_part(parsed: ParsedQuery, part: _Part, words: list[str]) -> None:
    """Add ``words``, read from ``part``, as a prefix*, an exclusion, a phrase or a term."""
    starred = not part.quoted and part.raw.endswith("*") and bool(part.before_star)
    if starred and len(words) == 1:
        _add_prefix(parsed, words[0], part.excluded)
        return
    if starred:
        parsed.warnings.append(f"{part.raw} was searched as the phrase {' '.join(words)!r}: a prefix* is one word")
    chosen = parsed.excluded if part.excluded else parsed.phrases if part.quoted else parsed.terms
    _add_unique(chosen, words, repeats=not part.quoted and not part.excluded)


def _leave_out_both(parsed: ParsedQuery) -> None:
    """Terms both searched and left out are left out."""
    both = [words for words in parsed.terms if words in parsed.excluded]
    if both:
        parsed.terms = [words for words in parsed.terms if words not in parsed.excluded]
        parsed.warnings.append(f"{', '.join(map(_joined, both))}: both searched and left out; left out")


def _search_exclusions_alone(parsed: ParsedQuery) -> None:
    """A query of exclusions only searches for them instead: it would otherwise find nothing."""
    if not parsed.has_words() and (parsed.excluded or parsed.excluded_prefixes):
        parsed.warnings.append("the query had only words to leave out, so they were searched for instead")
        parsed.terms, parsed.excluded = parsed.excluded, []
        parsed.prefixes, parsed.excluded_prefixes = parsed.excluded_prefixes, []


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


def quote(words: list[str]) -> str:
    """``words`` as one FTS5 string, a word or a phrase: in double quotes, its own quotes doubled."""
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


def _is_number(term: list[str]) -> bool:
    """Whether ``term`` is a number of several parts (7.4, 1.2.3, 2024-05-01): FTS5 reads its
    digits as adjacent words, and only together do they mean that number."""
    return len(term) > 1 and all(word.isdecimal() for word in term)


def _is_run(term: list[str]) -> bool:
    """Whether a question searches ``term`` as one phrase: a CJK word is the phrase of its
    characters, a number of several parts the phrase of its parts (_is_number)."""
    return _is_cjk_run(term) or _is_number(term)


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
    #: What the -exclusions match, OR-ed: files holding it are left out (see filters.search_scope),
    #: or None.
    excluded: str | None = None
    #: Sections a question matches, when fit_question estimated it.
    estimated_rows: int | None = None
    #: "keywords", "question" or "stopwords" (see models.QueryReading).
    mode: str = "keywords"


def build_match(parsed: ParsedQuery) -> MatchPlan:
    """Turn a parsed query into FTS5 MATCH expressions; raise QueryError if nothing is searchable."""
    content = [t for t in parsed.terms if not _is_stopword(t)]
    required = [quote(p) for p in parsed.phrases] + [quote([p]) + "*" for p in parsed.prefixes]
    if not parsed.has_words():
        raise QueryError("", "the query has no words to search for")
    if content and len(parsed.terms) > MAX_AND_TERMS:
        plan = _question_plan(parsed, content, required)
    elif not content and len(parsed.terms) > MAX_AND_TERMS:
        plan = _stopwords_plan(parsed, required)
    else:
        plan = _keywords_plan(parsed, required)
    return replace(plan, excluded=_excluded_match(parsed))


def _question_plan(parsed: ParsedQuery, content: list[list[str]], required: list[str]) -> MatchPlan:
    """A question's plan: its words (``content``: its terms but stopwords) OR-ed, with its phrases'
    words and its prefix* terms (``required``)."""
    # A question describes, it does not filter: its "phrases" and prefix* terms rank files
    # higher instead of being required, and a compound counts word by word ("two-dimensional"
    # as a phrase would give no credit for "two dimensions"). Its stopwords only add noise.
    words = [w for t in content if not _is_run(t) for w in t if w not in STOPWORDS]
    words += [w for p in parsed.phrases for w in p if w not in STOPWORDS]
    runs = list(dict.fromkeys(quote(t) for t in content if _is_run(t)))
    shown = [quote([w]) for w in _capped_repeats(words)] + runs + required
    return MatchPlan(f"({' OR '.join(shown)})", None, question=True, intersects=False, shown=tuple(shown), mode="question")


def _stopwords_plan(parsed: ParsedQuery, required: list[str]) -> MatchPlan:
    """The plan of a query of stopwords only ("to be or not to be"): the exact phrase first, then
    all of the words; with the phrases and prefix* terms (``required``)."""
    terms = parsed.terms
    distinct = list(dict.fromkeys(quote(t) for t in terms))
    if len(distinct) > MAX_STOPWORD_TERMS:
        parsed.warnings.append(f"a query of stopwords only requires its first {MAX_STOPWORD_TERMS} different words")
    shown = required + distinct[:MAX_STOPWORD_TERMS]
    phrase = [w for t in terms for w in t]
    if len(phrase) > MAX_PHRASE_WORDS:
        parsed.warnings.append(f"a query of stopwords only was searched as the phrase of its first {MAX_PHRASE_WORDS} words")
    broad = f"({' AND '.join(shown)})"
    precise = f"({' AND '.join(required + [quote(phrase[:MAX_PHRASE_WORDS])])})" if parsed.stopword_phrase else broad
    return MatchPlan(precise, broad, question=False, intersects=True, shown=tuple(shown), mode="stopwords")


def _keywords_plan(parsed: ParsedQuery, required: list[str]) -> MatchPlan:
    """The plan of keywords: all of them (and the phrases and prefix* terms, ``required``) in one
    section, then in the file (``broad``, if there are several)."""
    chosen = list(dict.fromkeys(map(tuple, parsed.terms)))
    quoted = [quote(list(t)) for t in chosen]
    shown = required + quoted
    precise = f"({' AND '.join(shown)})"
    broad = f"({' AND '.join(required + [highlight_match(quoted)])})" if len(quoted) > 1 else None
    intersects = len(required) + len(chosen) > 1 or any(len(t) > 1 for t in [*chosen, *map(tuple, parsed.phrases)])
    return MatchPlan(precise, broad, question=False, intersects=intersects, shown=tuple(shown), mode="keywords")


def _excluded_match(parsed: ParsedQuery) -> str | None:
    """What the query's -exclusions match, OR-ed (MatchPlan.excluded); None if it has none."""
    excluded = [quote(words) for words in parsed.excluded] + [quote([p]) + "*" for p in parsed.excluded_prefixes]
    return highlight_match(excluded) if excluded else None


def query_reading(parsed: ParsedQuery, plan: MatchPlan, feedback: Sequence[str]) -> QueryReading:
    """How the query was read (models.QueryReading), from the plan that was ranked."""
    phrases = [_joined(words) for words in parsed.phrases]
    prefixes = [prefix + "*" for prefix in parsed.prefixes if quote([prefix]) + "*" in plan.shown]
    words = [_joined(list(words)) for words in dict.fromkeys(map(tuple, parsed.terms))]
    if plan.question:
        searched = {part[1:-1] for part in plan.shown if part.endswith('"')}
        words = [word for word in dict.fromkeys(w for t in parsed.terms for w in t) if word in searched]
        words += [w for phrase in parsed.phrases for w in phrase if w in searched and w not in words]
        words += [_joined(t) for t in parsed.terms if _is_run(t) and " ".join(t) in searched and _joined(t) not in words]
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
    for word, stem in zip(words, index_queries.stems(words)):
        seen[stem] += 1
        if seen[stem] <= MAX_REPEATS:
            kept.append(word)
    return kept


def feedback_match(feedback: Sequence[str]) -> str:
    """The feedback words OR-ed."""
    return highlight_match([quote([w]) for w in feedback])


def highlight_match(shown: Sequence[str]) -> str:
    """An FTS5 expression matching any of ``shown`` (quoted words, phrases and prefix* terms)."""
    return f"({' OR '.join(shown)})"


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
    together = [" AND ".join(quote([w]) for w in dict.fromkeys(group)) for _, _, group in groups]
    estimates = index_queries.estimated_rows_each(conn, [*together, *(quote([w]) for w in words)], QUESTION_SAMPLE_FILES)
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


def fit_question(conn: sqlite3.Connection, plan: MatchPlan) -> tuple[MatchPlan, list[str]]:
    """A question's plan within QUESTION_MAX_COST (see there), and what was left out of it."""
    parts = list(plan.shown)
    if not plan.question:
        return plan, []
    # A prefix* costs as much to sample as to run; MAX_PREFIXES bounds it apart.
    words = list(dict.fromkeys(part for part in parts if not part.endswith("*")))
    if not words:
        return plan, []
    union, *rows_each = index_queries.estimated_rows_each(conn, [highlight_match(words), *words], QUESTION_SAMPLE_FILES)
    rows = dict(zip(words, rows_each))
    positions = {word: rows[word] * dense / POSITIONS_PER_PART for word, dense in zip(words, _positions_per_section(conn, words))}

    def cost(kept: list[str], counted_parts: int) -> float:
        return min(union, sum(rows[word] for word in kept)) * counted_parts + sum(positions[word] for word in kept)

    notes: list[str] = []
    if cost(words, len(parts)) > QUESTION_MAX_COST and len(set(parts)) < len(parts):
        parts = list(dict.fromkeys(parts))
        notes.append("each repeated word of the question was counted once: the question matches too many sections to count them again")
    kept = sorted(words, key=lambda word: rows[word] + positions[word])  # cheapest first
    left_out: list[str] = []
    while len(kept) > 1 and cost(kept, len(parts) - len(left_out)) > QUESTION_MAX_COST:
        left_out.append(kept.pop())
    if left_out:
        parts = [part for part in parts if part not in left_out]
        names = ", ".join(word.strip('"') for word in left_out)
        notes.append(f"these words are in too many sections to rank them all quickly and were left out: {names}")
    if not notes:
        return replace(plan, estimated_rows=union), []
    precise = highlight_match(parts)
    return replace(plan, precise=precise, shown=tuple(parts), estimated_rows=min(union, sum(rows[w] for w in kept))), notes


def _positions_per_section(conn: sqlite3.Connection, parts: list[str]) -> list[float]:
    """For each of ``parts`` (quoted words or phrases), the positions of its words per section that
    holds them, summed over its words: estimated from each word's first POSITIONS_SAMPLE positions."""
    words = [part[1:-1].replace('""', '"').split(" ") for part in parts]
    distinct = list(dict.fromkeys(w for part in words for w in part))
    dense = dict(zip(distinct, index_queries.positions_per_section(conn, index_queries.stems(distinct), POSITIONS_SAMPLE)))
    return [sum(dense[w] for w in part) for part in words]
