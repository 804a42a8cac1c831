"""Tags read from YAML front matter (markup.front_matter_tags): every form peers write, the bounds,
and malformed or hostile front matter, which yields what can be read and never raises."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markup import MAX_TAG_CHARS, MAX_TAGS, front_matter_tags
from sections import file_content


def tags(text: str) -> tuple[str, ...]:
    """The tags of a file's text, padded as front_matter_tags takes it."""
    return front_matter_tags(f"\n{text}\n")


def fields(body: str) -> str:
    """A file whose front matter holds ``body``."""
    return f"---\n{body}\n---\n\n# Heading\n\nbody text\n"


FORMS = {
    "flow list, quoted or not": ('tags: [a, b, "c d"]', ("a", "b", "c d")),
    "flow list, single quotes": ("tags: ['a', b]", ("a", "b")),
    "flow list over several lines": ("tags: [a,\n  b,\n  # a comment\n  c]", ("a", "b", "c")),
    "flow list on the next line": ("tags:\n  [a, b]", ("a", "b")),
    "empty flow list": ("tags: []", ()),
    "block list": ('tags:\n- a\n- "b"', ("a", "b")),
    "block list, deeper indent": ("tags:\n    - a\n    - 'b'\ntitle: T", ("a", "b")),
    "block list with blank and comment lines": ("tags:\n  - a\n\n  # not a tag\n  - b # nor this", ("a", "b")),
    "comma-separated string": ("tags: a, b c, d", ("a", "b c", "d")),
    "a single word is one tag": ("tags: solo", ("solo",)),
    "a string on the next line": ("tags:\n  a, b", ("a", "b")),
    "a quoted string is cut at commas": ('tags: "a, b"', ("a", "b")),
    "quoted pieces are whole": ('tags: "a, b", c', ("a, b", "c")),
    "commas inside quotes in a flow list": ("tags: [\"a, b\", 'c, d', e]", ("a, b", "c, d", "e")),
    "a block item keeps its commas": ("tags:\n  - a, b", ("a, b",)),
    "hash words are one tag each": ('tags: "#a #b"', ("a", "b")),
    "hash words and plain words are one tag": ("tags: ['#b c', '#d']", ("b c", "d")),
    "an unquoted hash starts a comment": ("tags: #a #b", ()),
    "comments after values": ("tags: [a, b] # c\nkeywords: d, e # f", ("a", "b", "d", "e")),
    "one leading hash stripped": ("tags: ['#a', '##b', '#']", ("a", "#b")),
    "keywords merged with tags, in order": ("keywords: [k1, Shared]\ntitle: x\ntags:\n  - shared\n  - t1", ("k1", "Shared", "t1")),
    "tag, as Obsidian": ("tag: one", ("one",)),
    "keys in any case": ("Tags: [a]\nKEYWORDS: b", ("a", "b")),
    "no other keys": ("categories: [a]\nkeyword: b\ntagged: c\nmytags: d", ()),
    "duplicates: the first spelling wins": ("tags: [Go, go, '#GO', rust, Rust]", ("Go", "rust")),
    "nested tags with slashes": ("tags: [project/x, area/y/z]", ("project/x", "area/y/z")),
    "whitespace stripped, inner runs one space": ("tags: [  a   b  , ' c  ']", ("a b", "c")),
    "escapes in quotes": ("tags: [\"say \\\"hi\\\"\", 'it''s']", ('say "hi"', "it's")),
    "nulls are no tags": ("tags: [~, null, a]\nkeywords: NULL", ("a",)),
    "a top-level key only": ("meta:\n  tags: [no]\n  keywords: nor\ntags: [yes]", ("yes",)),
    "a front matter indented as a whole": ("  title: x\n  tags: [a]", ("a",)),
    "a key needs a space after its colon": ("tags:[a]", ()),
}


@pytest.mark.parametrize("body, expected", FORMS.values(), ids=FORMS.keys())
def test_every_form(body: str, expected: tuple[str, ...]) -> None:
    assert tags(fields(body)) == expected


MALFORMED = {
    "tab indentation": ("tags:\n\t- a\n\t- b", ()),
    "a tab ends a value, later keys count": ("tags: [a,\n\tb]\nkeywords: c", ("a", "c")),
    "flow list never closed": ("tags: [a, b", ("a",)),
    "flow list never closed, next key": ("tags: [a, b\nkeywords: c", ("a", "c")),
    "quote never closed": ('tags: [a, "b, c]', ("a",)),
    "quote never closed in a string": ("tags: x, 'y", ("x",)),
    "quote never closed in an item": ("tags:\n  - a\n  - 'b\n  - c", ("a", "c")),
    "a mapping under tags": ("tags:\n  a: 1\n  b: 2", ()),
    "a flow mapping": ("tags: {a: 1, b: 2}", ()),
    "a mapping as a string": ("tags: a: b", ()),
    "a mapping piece is left out": ("tags: a: b, c", ("c",)),
    "collections and mappings in a list": ("tags: [[x, y], {k: v}, k: v, a]\nkeywords:\n  - [z]\n  - k: v\n  - - w\n  - b", ("a", "b")),
    "a block scalar": ("tags: |\n  a\n  b", ()),
    "an anchor and an alias": ("tags: &x [a]\nkeywords: *x", ()),
    "stray closing bracket": ("tags: ]a, b[", ()),
    "junk with control characters": ("tags: [a\x00b, \x7f, c, \ufffd\x01]", ("c",)),
    "a lone surrogate": ("tags: [a\ud800, b]", ("b",)),
    "binary junk": ("tags: " + bytes(range(256)).decode("latin-1"), ()),
    "items after a value": ("tags: a\n- b", ("a",)),
}


@pytest.mark.parametrize("body, expected", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_front_matter_yields_what_can_be_read(body: str, expected: tuple[str, ...]) -> None:
    assert tags(fields(body)) == expected


@pytest.mark.parametrize("text", [
    "# Title\n\ntags: [a]\n",  # no front matter
    "intro\n---\ntags: [a]\n---\n",  # not the file's start
    "---\ntags: [a]\n\n# Heading\n\nbody\n",  # never closed
    "---\ntags: [a]\n" + "line\n" * 300 + "---\n",  # closed past 200 lines: not front matter
    "",
    "---",
])
def test_no_front_matter_no_tags(text: str) -> None:
    assert tags(text) == ()


def test_closed_by_dots_crlf_and_bom() -> None:
    assert tags("---\ntags: [a]\n...\nbody") == ("a",)
    assert tags("---\r\ntags:\r\n  - a\r\n  - b\r\nkeywords: c, d\r\n---\r\nbody\r\n") == ("a", "b", "c", "d")
    assert tags("\ufeff---\ntags: [a, b]\n---\n") == ("a", "b")


def test_a_file_read_as_the_indexer_reads_it(tmp_path: Path) -> None:
    """padded as sections.file_content makes it: the BOM decoded away, CR LF made LF."""
    path = tmp_path / "note.md"
    path.write_bytes(b"\xef\xbb\xbf---\r\ntitle: Note\r\ntags: [alpha, beta/gamma]\r\n---\r\n# Note\r\n")
    content = file_content("note.md", path.read_bytes())
    assert front_matter_tags(content.padded) == ("alpha", "beta/gamma")


def test_bounds() -> None:
    many = [f"t{number}" for number in range(MAX_TAGS + 50)]
    assert tags(fields(f"tags: [{', '.join(many)}]")) == tuple(many[:MAX_TAGS])
    longest, longer = "x" * MAX_TAG_CHARS, "y" * (MAX_TAG_CHARS + 1)
    assert tags(fields(f"tags: [{longer}, {longest}, '#{longest}', ok]")) == (longest, "ok")
    # each key's tags count toward the one bound
    assert len(tags(fields(f"tags: [{', '.join(many[:60])}]\nkeywords: [{', '.join(many[60:])}]"))) == MAX_TAGS


FIVE_MB = 5 * 1024 * 1024


@pytest.mark.parametrize("body, expected", [
    ("tags: " + "[" * FIVE_MB, ()),
    ("tags:\n" + "- " * (FIVE_MB // 2), ()),
    ("tags:\n" + ("  - " + "- " * (FIVE_MB // 400) + "\n") * 190 + "keywords: [a]", ("a",)),  # junk items are left unread
    ("tags: [" + "a, " * (FIVE_MB // 3) + "b]", ("a",)),  # b is past the tokens read
    ('tags: "' + "a," * (FIVE_MB // 2) + '"', ("a",)),
    ('tags: "' + "#a " * (FIVE_MB // 3) + '"', ("a",)),
    ('tags: [' + '"\\' * (FIVE_MB // 2), ()),
    ("tags: [x, " + " " * FIVE_MB + "y]", ("x", "y")),
    ("tags: [x]\ntitle: " + "z" * FIVE_MB + "\nkeywords: y", ("x", "y")),
], ids=["brackets", "dashes", "dash lines", "duplicates", "quoted commas", "hash words", "unclosed quotes", "spaces", "long field"])
def test_a_hostile_five_megabyte_front_matter(body: str, expected: tuple[str, ...]) -> None:
    assert tags(fields(body)) == expected


def check_tags(found: object) -> None:
    assert isinstance(found, tuple) and len(found) <= MAX_TAGS
    for tag in found:
        assert isinstance(tag, str) and tag and tag == tag.strip() and len(tag) <= MAX_TAG_CHARS
    assert len({tag.casefold() for tag in found}) == len(found)


YAMLISH = st.text(alphabet=st.sampled_from(list("-[]{},\"'#:~|>&*!\\ \t\r\nabAB/\x00\ufeff")), max_size=200)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=300), YAMLISH.map(lambda body: f"---\ntags:{body}\n---\n"), YAMLISH.map(fields)))
def test_any_text_gives_bounded_stripped_tags_and_never_raises(text: str) -> None:
    check_tags(tags(text))
    check_tags(front_matter_tags(text))  # unpadded too
