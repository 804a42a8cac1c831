"""Fast paths that must give exactly what the code they replaced gave, and the bounds they keep.

Near-copy folding (copies.Leaders.near, copies._similarity) against the logic it replaced, copied
here; matching_texts' contentless temp table against the contentful one it replaced, and its texts read
without identifier parts first against every text read whole; the read-ahead
budget of loader processes when the writer's process loads the first chunk; per-file tags replaced
and removed; a damaged stored outline reported like a damaged body; identifier_parts against the
word-by-word reading it replaced, copied here; a snippet's cuts against the scan of every space it
replaced, copied here."""

from __future__ import annotations

import bisect
import heapq
import re
import string
import sqlite3
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import copies
import database
import identifiers
import index_queries
import index_writer
import loader
import snippets
from exceptions import IndexUnavailableError
from indexer import TextIndexer
from models import DiskFile, ServerConfig
from search import search
from tests.conftest import write

# ---- near-copy folding: the logic before the change, copied ----------------------------------


def _old_similarity(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    smallest = heapq.nsmallest(copies.SKETCH_SIZE, a | b)
    return sum(1 for h in smallest if h in a and h in b) / len(smallest)


def _old_near(leaders: copies.Leaders, blob: bytes) -> list[object]:
    """Every leader compared, best-ranked first (the index by hashes only spares comparisons)."""
    hashes = copies._hashes(blob)
    least = copies.NEAR_COPY * min(copies.SKETCH_SIZE, len(hashes))
    return [
        key for key, theirs in leaders.leaders
        if len(hashes & theirs) >= least and _old_similarity(hashes, theirs) >= copies.NEAR_COPY
    ]


def _blob(hashes: list[int]) -> bytes:
    return struct.pack(f"<{len(hashes)}i", *hashes)


#: Small pools of hashes, so sketches overlap a lot (near-copies and near-misses), and duplicates
#: in a blob (two lines whose hashes share their top 32 bits) happen.
_pool = st.sampled_from([-(1 << 31), -5, -1, 0, 1, 2, 3, 7, 100, (1 << 31) - 1] + list(range(1000, 1090)))
_sketch = st.lists(_pool, max_size=copies.SKETCH_SIZE + 6)


@settings(max_examples=400, deadline=None)
@given(leaders=st.lists(_sketch, max_size=30), probes=st.lists(_sketch, min_size=1, max_size=8), mutate=st.integers(0, 10))
def test_near_copies_are_folded_exactly_as_before(leaders: list[list[int]], probes: list[list[int]], mutate: int) -> None:
    group = copies.Leaders()
    for number, hashes in enumerate(leaders):
        group.add(number, _blob(hashes))
    # Probes that are leaders with a few hashes changed: the cases near the NEAR_COPY line.
    for hashes in leaders[:3]:
        probes.append(hashes[mutate:] + list(range(2000, 2000 + mutate)))
        probes.append(hashes[: max(0, len(hashes) - mutate)])
    for hashes in probes:
        assert list(group.near(_blob(hashes))) == _old_near(group, _blob(hashes))


@settings(max_examples=400, deadline=None)
@given(a=_sketch, b=_sketch)
def test_similarity_is_the_same_as_before(a: list[int], b: list[int]) -> None:
    assert copies.similarity(_blob(a), _blob(b)) == _old_similarity(copies._hashes(_blob(a)), copies._hashes(_blob(b)))


def test_a_near_copy_is_found_whose_smallest_hashes_the_other_lacks() -> None:
    # 64 hashes; the other holds 6 smaller ones it lacks and its own first 58: 58 of the 64
    # smallest of both together are shared (0.906), and the smallest shared is 7th of one of them.
    base = list(range(100, 164))
    extra = list(range(10, 16))
    for leader, probe in ((base, extra + base[:58]), (extra + base[:58], base)):
        group = copies.Leaders()
        group.add("other", _blob(list(range(500, 564))))
        group.add("copy", _blob(leader))
        assert copies.similarity(_blob(leader), _blob(probe)) >= copies.NEAR_COPY
        assert list(group.near(_blob(probe))) == ["copy"] == _old_near(group, _blob(probe))


def test_near_copies_of_real_texts_are_folded_as_before() -> None:
    lines = [f"line {n} of a page about topic {n % 13}" for n in range(300)]
    texts = ["\n".join(lines[k : k + 70]) for k in range(0, 200, 3)] + ["\n".join(lines[:5]), "", "one line"]
    group = copies.Leaders()
    for number, text in enumerate(texts[::2]):
        group.add(number, copies.sketch(text))
    for text in texts:
        assert list(group.near(copies.sketch(text))) == _old_near(group, copies.sketch(text))


# ---- matching_texts: the contentless table against the contentful one it replaced -----------


def _old_matching_texts(conn: sqlite3.Connection, texts: dict[int, tuple[str, str]], parts: list[str]) -> list[tuple[set[int], set[int]]]:
    found = []
    with database.snapshot(conn):
        conn.execute("DELETE FROM temp.snippet_fts")
        conn.executemany(
            "INSERT INTO temp.snippet_fts (rowid, title, heading, body) VALUES (?, ?, ?, ?)",
            [index_writer._fts_row(rowid, "", heading, text) for rowid, (heading, text) in texts.items()],
        )
        for part in parts:
            anywhere = conn.execute("SELECT rowid FROM temp.snippet_fts WHERE snippet_fts MATCH ?", (f"{{heading body}} : {part}",))
            headed = conn.execute("SELECT rowid FROM temp.snippet_fts WHERE snippet_fts MATCH ?", (f"heading : {part}",))
            found.append(({rowid for (rowid,) in anywhere}, {rowid for (rowid,) in headed}))
    return found


def _temp_tables() -> sqlite3.Connection:
    """A connection with the temp tables reader() makes (the same statements)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(f'CREATE VIRTUAL TABLE IF NOT EXISTS temp.snippet_fts USING fts5(title, heading, body, tokenize="{database.TOKENIZER}")')
    conn.execute(f'CREATE VIRTUAL TABLE IF NOT EXISTS temp.span_fts USING fts5(title, heading, body, content="", tokenize="{database.TOKENIZER}")')
    return conn


TEXTS = {
    0: ("Install on Linux", "Run the installer. Then configure the service."),
    1: ("Configure", "installing packages: apt install foo; configuration files live in /etc"),
    2: ("获取子项", "获取子项目录列表 API接口 说明"),
    3: ("", "running runners run quickly near the installer and far from configuration"),
    4: ("Linux > Service", "service restart service stop"),
    5: ("Über Ärger", "naïve café résumé"),
    6: ("heading only words", ""),
}
PARTS = [
    '"install"', "install*", "instal*", '"configure the service"', '"run" "installer"', 'NEAR("run" "installer", 2)',
    'NEAR("run" "configuration", 3)', '"获取"', '"获" "取"', '"子项"', '"api" "接口"', '"linux"', '"service"', '"uber"', '"cafe"',
    '"heading" "only"', '("install" OR "service")', '("install" NOT "linux")', '"running"', "ru*", '"nothingsuch"',
]


def test_span_matches_are_the_same_as_the_contentful_table_gave() -> None:
    conn = _temp_tables()
    assert index_queries.matching_texts(conn, TEXTS, PARTS) == _old_matching_texts(conn, TEXTS, PARTS)


_word = st.sampled_from(["run", "runs", "running", "install", "installer", "service", "获取", "子项", "api", "x1", "Über", "uber"])
_text = st.lists(_word, max_size=8).map(" ".join)
_part = st.one_of(
    _word.map(lambda w: f'"{w}"'),
    st.sampled_from(["run", "inst", "ser", "x"]).map(lambda w: f"{w}*"),
    st.lists(_word, min_size=2, max_size=3).map(lambda ws: "\"" + " ".join(ws) + "\""),
    st.tuples(_word, _word, st.integers(0, 4)).map(lambda t: f'NEAR("{t[0]}" "{t[1]}", {t[2]})'),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.tuples(_text, _text), max_size=8), parts=st.lists(_part, min_size=1, max_size=5))
def test_span_matches_are_the_same_on_random_texts(texts: list[tuple[str, str]], parts: list[str]) -> None:
    conn = _temp_tables()
    given_texts = dict(enumerate(texts))
    assert index_queries.matching_texts(conn, given_texts, parts) == _old_matching_texts(conn, given_texts, parts)


_ENDINGS = ["", "s", "es", "ies", "ied", "ed", "ing", "eed", "y", "ly", "ably", "ibly", "ability", "ibility", "ization", "ational",
            "iveness", "fulness", "ousness", "ically", "ities", "encies", "ancies", "ator", "alism", "iviti", "biliti", "ement", "ize"]


def test_a_word_starts_with_its_stem_but_for_a_last_letter_the_stemmer_writes() -> None:
    bases = ["happ", "relat", "condit", "organ", "valen", "oper", "activ", "stab", "possib", "prob", "sens", "mob", "gener", "cert",
             "agre", "hop", "fil", "confl", "troub", "siz", "fe", "a", "ab", "abl", "xyz", "run", "instal", "remot", "sign"]
    words = [base + ending for base in bases for ending in _ENDINGS]
    for word, stem in zip(words, index_queries.stems(words)):
        assert word.startswith(stem[:-1] if stem.endswith(tuple(index_queries.STEM_OWN_LETTERS)) else stem), (word, stem)


_identifier_word = st.sampled_from([
    "RemoteSigned", "remoting", "signed", "parseQueryString", "query", "strings", "HTTPAdapter", "adapters", "getChildItem",
    "children", "naïve", "Naive", "happyPath", "happiness", "x1Y2", "Über", "run", "Runs",
])
_one_string = st.one_of(
    _identifier_word.map(lambda w: f'"{w.lower()}"'),
    st.sampled_from(["remot", "sign", "pars", "adapt", "chil", "happi", "hap", "nai"]).map(lambda w: f'"{w}"*'),
    st.lists(st.sampled_from(["remote", "signed", "parse", "query", "string", "http", "adapter", "child", "item", "happy", "path"]),
             min_size=2, max_size=3).map(lambda ws: '"' + " ".join(ws) + '"'),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.tuples(st.lists(_identifier_word, max_size=3).map(" ".join), st.lists(_identifier_word, max_size=10).map(" ".join)), max_size=8),
    parts=st.lists(_one_string, min_size=1, max_size=4),
)
def test_texts_read_without_identifier_parts_first_match_as_read_whole(texts: list[tuple[str, str]], parts: list[str]) -> None:
    """matching_texts reads a text with the words inside its identifiers only when a part did not
    match it and it holds the part's piece: the same matches as reading every text whole."""
    conn = _temp_tables()
    given_texts = dict(enumerate(texts))
    assert index_queries.matching_texts(conn, given_texts, parts) == _old_matching_texts(conn, given_texts, parts)


def test_a_word_found_only_inside_an_identifier_is_found() -> None:
    conn = _temp_tables()
    texts = {0: ("Policies", "Set it to RemoteSigned first."), 1: ("Other", "nothing here"), 2: ("", "parseQueryString(url)")}
    assert index_queries.matching_texts(conn, texts, ['"remote"', '"signed"', '"query string"', '"pars"*']) == [
        ({0}, set()), ({0}, set()), ({2}, set()), ({2}, set()),
    ]


@pytest.mark.parametrize(
    ("texts", "reads", "matched"),
    [
        # Not ASCII (one em dash is enough), missed in the heading: all read once, as a single read would.
        ({n: (f"Section {n} — “notes”", f"the service restarts the runner — it’s done {n}") for n in range(5)}, [5], {0, 1, 2, 3, 4}),
        # Holding the piece ("servic") without matching, and without identifiers: read once.
        ({0: ("Intro", "a subservice runs"), 1: ("Other", "the service runs")}, [2], {1}),
        # With an identifier: read again with its parts, and found by them.
        ({0: ("Intro", "a subService runs"), 1: ("Other", "the service runs")}, [2, 1], {0, 1}),
    ],
)
def test_a_text_is_read_again_only_if_its_identifiers_can_add_a_match(
    monkeypatch: pytest.MonkeyPatch, texts: dict[int, tuple[str, str]], reads: list[int], matched: set[int]
) -> None:
    """Found by a hostile review: a text a part missed was read again with identifier parts it does
    not have (prose with typographic punctuation took twice the single read)."""
    conn = _temp_tables()
    counted: list[int] = []
    real = index_queries._matched
    monkeypatch.setattr(index_queries, "_matched", lambda conn, given, parts: counted.append(len(given)) or real(conn, given, parts))
    assert index_queries.matching_texts(conn, texts, ['"service"']) == [(matched, set())]
    assert counted == reads


def test_a_phrase_is_read_only_in_texts_holding_its_words_one_after_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _temp_tables()
    counted: list[int] = []
    real = index_queries._matched
    monkeypatch.setattr(index_queries, "_matched", lambda conn, given, parts: counted.append(len(given)) or real(conn, given, parts))
    texts = {
        0: ("Intro", "the service restarts"),  # read once: found
        1: ("Other", "restart the service; a getService call"),  # both words, never one after the other: not read
        2: ("Third", "callServiceRestart()"),  # one after the other only in its identifier's parts: read with them
    }
    assert index_queries.matching_texts(conn, texts, ['"service restart"']) == [({0, 2}, set())]
    assert counted == [1, 1]


_PADDING = {9: ("", "plain ascii text " * 10)}  # keeps the share of text other than ASCII under MAX_OTHER_SHARE


@pytest.mark.parametrize(
    ("texts", "part"),
    [
        # Porter cuts "ab🖖ing" to "ab" and the first 3 bytes of U+1F596 (its last two bytes are alike: a "double
        # consonant"): the piece is "ab\ufffd", which no text holds. FTS5 (Unicode 6.1) reads U+1F596 as a letter,
        # Python (So) as a symbol. Found by a hostile review.
        ({0: ("ab\U0001F596ing", "")}, '"ab\U0001F596ing"'),
        ({0: ("", "ab\U0001F596ed"), **_PADDING}, '"ab\U0001F596ing"'),
        ({0: ("", "see ab\U0001F596 now"), **_PADDING}, '"ab\U0001F596ing"*'),
        ({0: ("", "run\U0001F5D7ed"), **_PADDING}, '"run\U0001F5D7ed"'),
        ({0: ("", "shopp\u2b6d\u2b6ding"), **_PADDING}, '"shopp\u2b6d\u2b6ding"'),
    ],
)
def test_a_stem_cut_inside_a_character_is_matched_as_a_single_read_does(texts: dict[int, tuple[str, str]], part: str) -> None:
    conn = _temp_tables()
    assert index_queries.matching_texts(conn, texts, [part]) == _old_matching_texts(conn, texts, [part])


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("0" * 200_000, '"' + "0" * 200 + " " + "0" * 200 + '"'),
        ("0" * 200_000, '"0000 0000"'),
        ("ab " * 66_000 + "service", '"' + "i " * 11 + 'service"'),
        ("0 " * 100_000 + "255", '"0 0 255"'),
        ("the " * 50_000 + "service", '"the the service"'),
    ],
)
def test_runs_of_one_word_or_letter_are_matched_as_a_single_read_does(text: str, part: str) -> None:
    """The hostile review's slow cases (each piece retried at every character, or every word's start)."""
    conn = _temp_tables()
    texts = {0: ("", text), 1: ("", "a service here")}
    assert index_queries.matching_texts(conn, texts, [part]) == _old_matching_texts(conn, texts, [part])


def test_a_shape_is_looked_for_from_its_first_long_piece_to_its_next_empty_one_cut_short() -> None:
    assert index_queries._shape(["", "", "servic"]).lead == "servic"  # "i i service": not tried at every word's start
    assert index_queries._shape(["a", "servic", "restart"]).pattern.pattern.startswith("servic")
    assert index_queries._shape(["0" * 200, "0" * 200]).lead == "0" * index_queries.MAX_SHAPE_PIECE_CHARS
    # "service i restart": "i" is any word, each try would step through the words after it.
    shape = index_queries._shape(["servic", "", "restart"])
    assert shape.pattern.pattern.count("[a-z0-9]*") == 1 and shape.reach == 3


def test_long_words_after_a_phrases_lead_are_matched_as_a_single_read_does() -> None:
    """A hostile review's case: 1,000 leads each followed by ten 180-letter words and "i" in the phrase."""
    conn = _temp_tables()
    text = (("service " + "a" * 180 + " ") * 1000)[:199_000] + " restart fooBar"
    parts = ['"service ' + "i " * 10 + 'restart"', '"service e l restart"']
    assert index_queries.matching_texts(conn, {0: ("", text)}, parts) == _old_matching_texts(conn, {0: ("", text)}, parts)


@pytest.mark.parametrize(
    ("texts", "part"),
    [
        # "LYical" adds "L Yical" after the text: the phrase ends in them, its shape ("anteness restartically",
        # cut at the empty piece of "l") is two words before the text's end.
        ({12: ("LYical, anteness restartically::", "x")}, '"anteness restartically l"'),
        ({48: ("", "eedCallyyLieer fooBar-sseiest-53358189-")}, '"sseiest 53358189 eed"'),  # "eed": an empty piece
    ],
)
def test_a_phrase_running_past_its_shape_into_identifier_words_is_found(texts: dict[int, tuple[str, str]], part: str) -> None:
    """Found by fuzzing a fix of a hostile review's find: the text's words read again with the
    identifiers' must reach back from the shape's first word to the phrase's end."""
    conn = _temp_tables()
    assert index_queries.matching_texts(conn, texts, [part]) == _old_matching_texts(conn, texts, [part]) != [(set(), set())]


def test_a_text_holding_a_shape_in_its_own_words_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a hostile review: its first read tried every match in its own words; only one reaching
    into its identifiers' words can be added (it was read twice: 2-3x on prose with identifiers)."""
    conn = _temp_tables()
    counted: list[int] = []
    real = index_queries._matched
    monkeypatch.setattr(index_queries, "_matched", lambda conn, given, parts: counted.append(len(given)) or real(conn, given, parts))
    texts = {0: ("", "serviceable restartless fooBar"), 1: ("", "start the serviceRestart now")}
    assert index_queries.matching_texts(conn, texts, ['"service restart"']) == [({1}, set())]
    assert counted == [1, 1]  # 0 read once; 1 read again with "service Restart"


def test_the_last_words_of_a_text() -> None:
    assert index_queries._last_words("  foo, bar-baz!! ", 2) == ", bar-baz!! "
    assert index_queries._last_words("ab cd", 1) == " cd"
    assert index_queries._last_words("x", 3) == "x"
    assert index_queries._last_words("abc", 0) == ""


def test_a_text_holding_a_shapes_first_piece_very_often_is_read_without_looking_for_it() -> None:
    class Untried:
        def search(self, text: str) -> None:
            raise AssertionError("searched")

    shape = index_queries.Shape("000", Untried(), 1)  # type: ignore[arg-type]
    assert index_queries._holds_shape(shape, "0" * 3 * (index_queries.MAX_SHAPE_TRIES + 1))
    with pytest.raises(AssertionError, match="searched"):
        index_queries._holds_shape(shape, "000 then words")


def test_span_table_holds_nothing_from_an_earlier_or_failed_call_nor_inside_one_snapshot() -> None:
    conn = _temp_tables()
    with pytest.raises(sqlite3.OperationalError):
        index_queries.matching_texts(conn, {7: ("stale", "stale words")}, ['"stale"', "NEAR("])  # a syntax error halfway
    assert index_queries.matching_texts(conn, {1: ("fresh", "")}, ['"stale"', '"fresh"']) == [(set(), set()), ({1}, {1})]
    with database.snapshot(conn):  # nested calls join one transaction: the second must not see the first's rows
        assert index_queries.matching_texts(conn, {7: ("stale", "")}, ['"stale"']) == [({7}, {7})]
        assert index_queries.matching_texts(conn, {8: ("", "other")}, ['"stale"', '"other"']) == [(set(), set()), ({8}, set())]


def test_a_reader_connection_has_the_span_table_contentless_and_empty(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    write(source, "a.md", "# Alpha\n\nzqword here\n")
    indexer.scan()
    conn = database.reader(config.db_path)
    assert index_queries.matching_texts(conn, {3: ("Alpha", "zqword here")}, ['"zqword"']) == [({3}, set())]
    assert conn.execute("SELECT count(*) FROM temp.span_fts").fetchone()[0] == 0
    tables = {name for (name,) in conn.execute("SELECT name FROM temp.sqlite_master WHERE type = 'table'")}
    assert "span_fts_content" not in tables  # contentless: no copy of the text is kept


# ---- identifier parts: the word-by-word reading before the change, copied --------------------

_OLD_CLASSES = str.maketrans({
    **{chr(code): " " for code in range(128)},
    **{character: "a" for character in string.ascii_lowercase + string.digits},
    **{character: "A" for character in string.ascii_uppercase},
})
_OLD_CASE_CHANGES = (re.compile("aA"), re.compile("AAa"))
_OLD_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def _old_identifier_parts(text: str) -> str:
    classes = text.translate(_OLD_CLASSES)
    changes = sorted(found.start() + 1 for pattern in _OLD_CASE_CHANGES for found in pattern.finditer(classes))
    parts: list[str] = []
    position = 0
    for at in changes:
        if at < position:
            continue
        window = max(0, at - identifiers.MAX_IDENTIFIER_CHARS)
        start = classes.rfind(" ", window, at) + 1
        end = classes.find(" ", at)
        end = len(text) if end < 0 else end
        if (start or not window) and end - start <= identifiers.MAX_IDENTIFIER_CHARS:
            parts.extend(_OLD_PART.findall(text, start, end))
        position = end
    return " ".join(parts)


#: Words of every class the reading tells apart, and runs long enough to cross the identifier bound.
_piece = st.one_of(
    st.text(alphabet="aZbY09Q?é_ -.\n\u00a0\u2003ß\u4e2d\ud800", max_size=12),
    st.builds(lambda piece, times: piece * times, st.sampled_from(["a", "B", "aB", "AB", "1", "é", "?"]), st.integers(40, 120)),
    st.sampled_from(["parseQueryString", "HTTPAdapter", "getV2Config", "XMLHttpRequest", "PSObject", "HTTP2", "x2D", "éA", "AéB"]),
    st.text(max_size=8),
)


@settings(max_examples=600, deadline=None)
@given(pieces=st.lists(_piece, max_size=12))
def test_identifier_parts_are_the_same_as_before(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert identifiers.identifier_parts(text) == _old_identifier_parts(text)


def test_identifier_parts_of_real_texts_are_the_same_as_before() -> None:
    for path in sorted(Path(__file__).resolve().parent.parent.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert identifiers.identifier_parts(text) == _old_identifier_parts(text), path.name


# ---- a snippet's cuts: every space in its window looked at, before the change, copied ----------


def _old_bounded_snippet(text: str) -> str:
    if len(text) <= snippets.SNIPPET_MAX_CHARS:
        return text
    matches = [(found.start(), found.end()) for found in snippets._MATCH.finditer(text)]
    first, last = snippets._densest(matches, text)
    if last - first >= snippets.SNIPPET_MAX_CHARS:
        start, end = first, first + snippets.SNIPPET_MAX_CHARS
    else:
        room = snippets.SNIPPET_MAX_CHARS - (last - first)
        start = max(0, min(first - room // 3, len(text) - snippets.SNIPPET_MAX_CHARS))
        end = start + snippets.SNIPPET_MAX_CHARS
        starts = [begin for begin, _ in matches]
        spaces = (space.start() for space in re.compile(" ").finditer(text, max(start - 1, 0), end + 1))
        cuts = [at for at in spaces if not snippets._inside(matches, starts, at)]
        if start > 0:
            start = next((at + 1 for at in cuts if at < first), first)
        if end < len(text):
            end = next((at for at in reversed(cuts) if at >= last), end)
            if snippets._inside(matches, starts, end):
                end = starts[bisect.bisect_right(starts, end) - 1]
    cut = text[start:end].strip(" " + snippets.ELLIPSIS)
    if cut.count(snippets._MARK_OPEN) > cut.count(snippets._MARK_CLOSE):
        cut += snippets._MARK_CLOSE
    lead = snippets.ELLIPSIS if start > 0 or text.startswith(snippets.ELLIPSIS) else ""
    tail = snippets.ELLIPSIS if end < len(text) or text.endswith(snippets.ELLIPSIS) else ""
    return lead + cut + tail


_snippet_word = st.sampled_from(
    ["a", "bb", "word", "x" * 40, "y" * 200, "\ue000hit\ue001", "\ue000two words\ue001", "\ue000long " + "z" * 170 + "\ue001",
     "\ue000open", "…", "q", ""]
)


@settings(max_examples=600, deadline=None)
@given(words=st.lists(_snippet_word, min_size=1, max_size=60), joiner=st.sampled_from([" ", "  ", " , "]))
def test_a_snippet_is_cut_where_it_was_before(words: list[str], joiner: str) -> None:
    text = joiner.join(words)
    assert snippets.bounded_snippet(text) == _old_bounded_snippet(text)


# ---- loading: every file once, in order, and the read-ahead budget kept -----------------------


def _many(source: Path, count: int, size: int = 40) -> list[DiskFile]:
    files = []
    for n in range(count):
        path = write(source, f"d{n % 5}/f{n:04d}.md", f"# File {n}\n\n" + f"rqword{n} " * size + "\n")
        st_ = path.stat()
        files.append(DiskFile(path.relative_to(source).as_posix(), st_.st_mtime_ns, st_.st_size, st_.st_ino, st_.st_ctime_ns))
    return files


@pytest.mark.parametrize("count", [1, 5, loader.CHUNK_FILES + 1, loader.CHUNK_FILES * 3 + 7])
def test_loading_in_processes_yields_every_file_once_in_order(source: Path, count: int) -> None:
    files = _many(source, count)
    loaded = list(loader._load_in_processes(source, files, loader.Reading(1 << 20)))
    assert [item.path for item in loaded] == [disk.path for disk in files]
    assert all(item.sections[0][3].startswith(f"# File {int(item.path[-7:-3])}") for item in loaded)


def test_a_dead_loader_process_leaves_its_files_to_the_writer(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _many(source, loader.CHUNK_FILES * 4 + 3)
    monkeypatch.setattr(loader, "LOADER_COMMAND", [loader.LOADER_COMMAND[0], "-c", "import sys; sys.exit(3)"])
    loaded = list(loader._load_in_processes(source, files, loader.Reading(1 << 20)))
    assert [item.path for item in loaded] == [disk.path for disk in files]


def test_the_read_ahead_budget_is_balanced_after_a_load(source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk the writer consumes was first taken: after a load, nothing is held (used == 0).
    The writer's process loads the first chunk itself and never takes it, yet consumed() subtracts
    its bytes: the budget then lets loader processes run that much further ahead than READ_AHEAD_BYTES
    (by up to max_file_size when the first chunk is one large file)."""
    made: list[loader._ReadAhead] = []

    class Recorded(loader._ReadAhead):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(loader, "_ReadAhead", Recorded)
    files = _many(source, loader.CHUNK_FILES * 3 + 1)
    list(loader._load_in_processes(source, files, loader.Reading(1 << 20)))
    assert made and made[0].used == 0, f"{made[0].used} bytes of read-ahead budget left unbalanced"


# ---- tags replaced and removed ----------------------------------------------------------------


def _file_tags(config: ServerConfig) -> list[tuple[str, str]]:
    conn = sqlite3.connect(config.db_path)
    try:
        return sorted(conn.execute("SELECT files.path, tag FROM file_tags JOIN files ON files.id = file_id"))
    finally:
        conn.close()


def _orphan_tags(config: ServerConfig) -> int:
    conn = sqlite3.connect(config.db_path)
    try:
        return conn.execute("SELECT count(*) FROM file_tags WHERE file_id NOT IN (SELECT id FROM files)").fetchone()[0]
    finally:
        conn.close()


def test_tags_are_replaced_removed_and_never_inherited_by_a_new_file(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    write(source, "a.md", "---\ntags: [one, two]\n---\n# A\n\ntext\n")
    indexer.scan()
    assert _file_tags(config) == [("a.md", "one"), ("a.md", "two")]
    write(source, "a.md", "---\ntags: [Three]\n---\n# A\n\ntext changed\n")
    indexer.scan()
    assert _file_tags(config) == [("a.md", "three")]
    write(source, "a.md", "# A\n\nno front matter now\n")
    indexer.scan()
    assert _file_tags(config) == []
    write(source, "z.md", "---\ntags: [zed]\n---\n# Z\n\ntext\n")  # the largest id, then removed: its id is reused
    indexer.scan()
    (source / "z.md").unlink()
    indexer.scan()
    write(source, "y.md", "# Y\n\nuntagged\n")
    indexer.scan()
    assert _file_tags(config) == [] and _orphan_tags(config) == 0
    (source / "y.md").unlink()
    write(source, "x.md", "---\ntags: [ex]\n---\n# X\n")
    write(source, "w.md", "# W\n")  # removal and additions in one scan
    indexer.scan()
    assert _file_tags(config) == [("x.md", "ex")] and _orphan_tags(config) == 0


# ---- outlines as stored -----------------------------------------------------------------------


def test_outlines_are_stored_as_json_text_and_read_back(config: ServerConfig, indexer: TextIndexer, source: Path) -> None:
    write(source, "o.md", "# Top Ünïcode\n\nintro\n\n## Sub 子项\n\nzqbody words\n\n## Other\n\nmore\n")
    indexer.scan()
    conn = sqlite3.connect(config.db_path)
    try:
        outlines = [row[0] for row in conn.execute("SELECT outline FROM sections ORDER BY id")]
    finally:
        conn.close()
    assert outlines and all(isinstance(outline, str) for outline in outlines)
    reply = search(config.db_path, "zqbody", 5)
    assert [hit["heading"] for hit in reply["results"]] == ["Top Ünïcode > Sub 子项"]


@pytest.mark.parametrize("damage", ["'garbage'", "zeroblob(40)", "'[[1,1,\"x\"'"])
def test_a_damaged_outline_is_reported_as_damage_like_a_damaged_body(config: ServerConfig, indexer: TextIndexer, source: Path, damage: str) -> None:
    """Before the change a stored outline was zlib data: a damaged one failed decompress
    (SectionDamaged), so search raised IndexUnavailableError and the index was rebuilt. As JSON
    text, json.loads raises JSONDecodeError, which escapes search() as no known error and marks
    nothing for a rebuild (see test_query_bounds' damaged body)."""
    for n in range(3):
        write(source, f"n{n}.md", f"# Head {n}\n\nintro\n\n## Sub {n}\n\nzqsharedqz note {n}\n")
    indexer.scan()
    damaged = sqlite3.connect(config.db_path)
    damaged.execute(f"UPDATE sections SET outline = {damage}")
    damaged.commit()
    damaged.close()
    with pytest.raises(IndexUnavailableError, match="damaged"):
        search(config.db_path, "zqsharedqz", 10)


def test_only_a_file_of_one_section_without_headings_skips_the_answering_span(indexer: TextIndexer, config: ServerConfig) -> None:
    source = config.source_directory
    (source / "plain.txt").write_text("A plain note about the quokka.\n")
    (source / "headed.md").write_text("# Quokka\n\nThe quokka lives on an island.\n")
    (source / "long.md").write_text("Quokka first.\n\n" + "\n\n".join(f"Filler paragraph {n} of the page." for n in range(900)) + "\n\n# Later\n\nMore.\n")
    indexer.scan()
    conn = database.reader(config.db_path)
    with database.snapshot(conn):
        firsts = [rowid for (rowid,) in conn.execute("SELECT id FROM sections") if not rowid & ((1 << database.SECTION_BITS) - 1)]
        loaded = index_queries.load_sections(conn, firsts)
    headless = {str(section["path"]): section["headless"] for section in loaded.values()}
    assert headless == {"plain.txt": True, "headed.md": False, "long.md": False}
