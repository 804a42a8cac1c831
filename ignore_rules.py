"""The .gitignore engine: git's ignore rules as pure logic, from a rule file's bytes to a folder's matcher.

Git's syntax and meaning (``man gitignore``, and git's dir.c and wildmatch.c, which this follows
where the manual is silent), for .gitignore, .ignore, .git/info/exclude and exclude_patterns.
Matching is on bytes, as git's is: a name is matched in its UTF-8 form, spelt one character per
byte (Latin-1), and so are the patterns; ``?`` is one byte. Nothing here touches the file system:
file_utils reads the rule files and walks the folders, asking each folder's Matcher.

Each rule becomes a regular expression that cannot backtrack exponentially: consecutive ``**/``
collapse into one, the text between two ``**`` is matched at its first place (an atomic group),
and so is each run of fixed-width tokens between two ``*`` of one name.

The walk is the hot path of every rescan, so the rules are arranged once per folder, not per
entry: a rule with a slash is split into its folder part, matched against the folder (and only
in folders its plain start and depth allow), and its last name; a folder's matcher then holds
name rules only (cached, shared by the folders with the same rules). An entry is first put to a
prefilter of the excluding rules' cheapest necessary tests (an exact name, an ending, a start);
only what passes is decided, by the rules its name can match, in precedence order. A tree with
no rule file costs a lookup of two names in each folder's sorted listing.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import itertools
import logging
import re
import sys
from collections.abc import Callable
from typing import NamedTuple

logger = logging.getLogger(__name__)

#: A rule file's rules past this many are left out (logged).
MAX_RULES_PER_FILE = 10_000
#: Bounds on exclude_patterns (config.py enforces them).
MAX_EXCLUDE_PATTERNS = 1000
MAX_PATTERN_CHARS = 1000
#: At most this many parsed rule files and folder matchers are kept between scans.
_CACHE_LIMIT = 4096


class PatternError(ValueError):
    """A pattern that can never match: a trailing backslash, an unclosed ``[``, an unknown
    ``[:class:]``, nothing left after the ``!`` and ``/``."""

    def __init__(self, pattern: str, problem: str) -> None:
        super().__init__(f"{pattern!r}: {problem}")
        self.pattern = pattern
        self.problem = problem


def bytewise(text: str) -> str:
    """``text`` as git sees it: its UTF-8 bytes, one character each."""
    return text if text.isascii() else text.encode("utf-8", "surrogateescape").decode("latin-1")


class _Rule(NamedTuple):
    """One compiled pattern line."""

    text: str  # as written, for messages
    negated: bool  # "!": a match re-includes
    dir_only: bool  # a trailing "/": matches folders only
    #: "name": ``regex`` matches the name of an entry in any folder below the base (a rule without
    #: a slash, or "**/name"); "folder": the same, but only in the folders whose path below the base
    #: matches ``folder`` ("doc/frotz": folder "doc", name "frotz"); "path": ``regex`` matches the
    #: whole path below the base (dir.c's reading of "foo**/bar", which no folder split can express).
    kind: str
    regex: str  # ends with \Z
    folder: str | None
    #: What the path of a folder ``folder`` matches ends with (then "/"), to skip its regex: "" unknown.
    folder_tail: str
    #: A cheap test every name ``regex`` matches must pass: ("name", n) equal to n, ("suffix", s),
    #: ("prefix", p), ("contains", c), ("any", "") every name, ("regex", "") none cheaper than the regex.
    need: tuple[str, str]
    lead: str  # the plain text every path it matches starts with, below the base
    min_depth: int  # how many names deep (below the base) a path it matches is, at least
    max_depth: int | None  # ... and at most (None: any)


# Character classes of wildmatch.c (ASCII only, as git's ctype).
_GRAPH = frozenset(range(0x21, 0x7F))
_ALNUM = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_CLASSES = {
    "alnum": _ALNUM,
    "alpha": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
    "blank": frozenset(b" \t"),
    "cntrl": frozenset([*range(0x20), 0x7F]),
    "digit": frozenset(b"0123456789"),
    "graph": _GRAPH,
    "lower": frozenset(b"abcdefghijklmnopqrstuvwxyz"),
    "print": frozenset(range(0x20, 0x7F)),
    "punct": _GRAPH - _ALNUM,
    "space": frozenset(b" \t\n\r"),
    "upper": frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    "xdigit": frozenset(b"0123456789ABCDEFabcdef"),
}
_SLASH = ord("/")


def _bracket(p: str, i: int, line: str) -> tuple[str, int]:
    """The regex for the ``[...]`` starting at ``p[i]``, and the index after it (wildmatch.c's
    reading: a ``]`` right after ``[`` or ``[!`` is a member, ``!`` or ``^`` negates, ranges,
    ``[:class:]``, backslash escapes). It never matches a slash."""
    n = len(p)
    members: set[int] = set()
    i += 1
    negated = i < n and p[i] in "!^"
    if negated:
        i += 1
    prev = ""
    while True:
        if i >= n:
            raise PatternError(line, "a '[' is not closed")
        c = p[i]
        if c == "\\":
            i, c = _class_member(p, i, line)
            members.add(ord(c))
        elif c == "-" and prev and i + 1 < n and p[i + 1] != "]":
            i, c = _class_member(p, i + 1, line)
            members.update(range(ord(prev), ord(c) + 1))
            c = ""
        elif c == "[" and i + 1 < n and p[i + 1] == ":":
            end = p.find("]", i + 2)
            if end < 0:
                raise PatternError(line, "a '[' is not closed")
            if end - (i + 2) < 1 or p[end - 1] != ":":
                members.add(ord("["))  # no ":]": an ordinary '['
            else:
                name = p[i + 2:end - 1]
                if name not in _CLASSES:
                    raise PatternError(line, f"[:{name}:] is not a character class")
                members.update(_CLASSES[name])
                i, c = end, ""
        else:
            members.add(ord(c))
        prev = c
        i += 1
        if i < n and p[i] == "]":
            break
    if negated:
        members = set(range(256)) - members
    members.discard(_SLASH)
    if not members:
        return "(?!)", i + 1
    ranges, codes = [], sorted(members)
    start = last = codes[0]
    for code in codes[1:] + [None]:  # type: ignore[operator]
        if code == last + 1:
            last = code
            continue
        ranges.append(f"\\x{start:02x}" if start == last else f"\\x{start:02x}-\\x{last:02x}")
        if code is not None:
            start = last = code
    return "[" + "".join(ranges) + "]", i + 1


def _class_member(p: str, i: int, line: str) -> tuple[int, str]:
    """The member of a ``[...]`` at ``p[i]``, read past a backslash escape: (its index, it)."""
    if p[i] == "\\":
        i += 1
        if i >= len(p):
            raise PatternError(line, "a '[' is not closed")
    return i, p[i]


# Tokens: ("l", char) a literal, ("*", count) a run of stars, ("?",), ("c", regex) a class,
# ("/", escaped) a separator.
def _tokens(p: str, line: str) -> list[tuple]:
    tokens: list[tuple] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == "\\":
            if i + 1 >= n:
                raise PatternError(line, "it ends with an unescaped backslash")
            c = p[i + 1]
            tokens.append(("/", True) if c == "/" else ("l", c))
            i += 2
        elif c == "*":
            j = i
            while j < n and p[j] == "*":
                j += 1
            tokens.append(("*", j - i))
            i = j
        elif c == "?":
            tokens.append(("?",))
            i += 1
        elif c == "[":
            cls, i = _bracket(p, i, line)
            tokens.append(("c", cls))
        elif c == "/":
            tokens.append(("/", False))
            i += 1
        else:
            tokens.append(("l", c))
            i += 1
    return tokens


def _fixed(token: tuple) -> str:
    kind = token[0]
    if kind == "l":
        return re.escape(token[1])
    return "[^/]" if kind == "?" else token[1]


if sys.version_info >= (3, 11):
    def _atomic(body: str) -> str:
        return "(?>" + body + ")"
else:
    _atomic_names = itertools.count()

    def _atomic(body: str) -> str:
        """3.10 has no atomic groups: a lookahead does not backtrack either, and the backreference
        takes what it matched. Named, never twice, as rules' regexes are joined into one."""
        name = f"_a{next(_atomic_names)}"
        return f"(?=(?P<{name}>{body}))(?P={name})"


def _name_regex(tokens: list[tuple]) -> str:
    """One name's worth of tokens (no separator, no globstar): every star but the last matches up to
    the first place the fixed text after it does (atomically), so the cost stays linear per star."""
    chunks: list[list[str]] = [[]]
    for token in tokens:
        if token[0] == "*":
            chunks.append([])
        else:
            chunks[-1].append(_fixed(token))
    if len(chunks) == 1:
        return "".join(chunks[0])
    middle = "".join(_atomic("[^/]*?" + "".join(chunk)) for chunk in chunks[1:-1] if chunk)
    return "".join(chunks[0]) + middle + "[^/]*" + "".join(chunks[-1])


_GLOBSTAR = {"raw": "(?:[^/]*/)*", "esc": "(?:[^/]*/)+"}


def _items(tokens: list[tuple]) -> list[tuple]:
    """The names of a pattern with slashes: ("S", tokens) one name, ("G", kind) a "**" that is a
    whole name, followed by "/" (raw), "\\/" (esc) or nothing (end). "**/**/" is "**/"."""
    segments: list[list[tuple]] = [[]]
    escaped_seps: list[bool] = []
    for token in tokens:
        if token[0] == "/":
            segments.append([])
            escaped_seps.append(token[1])
        else:
            segments[-1].append(token)
    items: list[tuple] = []
    for index, segment in enumerate(segments):
        if len(segment) == 1 and segment[0][0] == "*" and segment[0][1] >= 2:
            kind = "end" if index == len(segments) - 1 else ("esc" if escaped_seps[index] else "raw")
            if items and items[-1] == ("G", "raw"):
                items[-1] = ("G", kind)
            else:
                items.append(("G", kind))
        else:
            items.append(("S", segment))
    return items


def _items_regex(items: list[tuple]) -> str:
    """The regex for a path, read from a folder boundary. The text between two "**" is found at its
    first place (an atomic group): no backtracking over where each "**" ends."""
    regex, opened_by, block = "", None, []
    for item in items:
        if item[0] == "S":
            block.append(_name_regex(item[1]))
            continue
        body = "/".join(block)
        if opened_by is None:
            regex += body + "/" if block else ""
        elif block:
            regex += _atomic(_GLOBSTAR[opened_by] + "?" + body + "/")
        else:
            regex += _GLOBSTAR[opened_by]
        opened_by, block = item[1], []
    if opened_by == "end":
        return regex + r".*\Z"
    return regex + (_GLOBSTAR[opened_by] if opened_by else "") + "/".join(block) + r"\Z"


def _depths(items: list[tuple]) -> tuple[int, int | None]:
    names = sum(1 for item in items if item[0] == "S")
    least = names + sum(1 for item in items if item in (("G", "esc"), ("G", "end")))
    return least, (names if all(item[0] == "S" for item in items) else None)


def _need(tokens: list[tuple]) -> tuple[str, str]:
    """The cheapest necessary test for a name the tokens of one name match: its plain end or start."""
    if all(token[0] == "l" for token in tokens):
        return ("name", "".join(token[1] for token in tokens))
    head = []
    for token in tokens:
        if token[0] != "l":
            break
        head.append(token[1])
    tail = []
    for token in reversed(tokens):
        if token[0] != "l":
            break
        tail.append(token[1])
    if tail and len(tail) >= len(head):
        return ("suffix", "".join(reversed(tail)))
    if head:
        return ("prefix", "".join(head))
    if all(token[0] == "*" for token in tokens):
        return ("any", "")
    runs, run = [], []
    for token in tokens + [("*", 1)]:
        if token[0] == "l":
            run.append(token[1])
        elif run:
            runs.append("".join(run))
            run = []
    return ("contains", max(runs, key=len)) if runs else ("regex", "")


def _lead(tokens: list[tuple]) -> str:
    lead = []
    for token in tokens:
        if token[0] == "l":
            lead.append(token[1])
        elif token[0] == "/":
            lead.append("/")
        else:
            break
    return "".join(lead)


def _trim_trailing_spaces(line: str) -> str:
    """Git's trim_trailing_spaces: trailing spaces go, unless escaped with a backslash."""
    if not line.endswith(" "):
        return line
    last_space, i, n = -1, 0, len(line)
    while i < n:
        c = line[i]
        if c == " ":
            if last_space < 0:
                last_space = i
        elif c == "\\":
            i += 1
            if i >= n:
                return line
            last_space = -1
        else:
            last_space = -1
        i += 1
    return line[:last_space] if last_space >= 0 else line


def compile_rule(line: str) -> _Rule | None:
    """Compile one line of a .gitignore (bytewise text, without its line end); None for a blank line
    or a comment. PatternError for a pattern that can never match."""
    if not line or line[0] == "#":
        return None
    shown = line.encode("latin-1").decode("utf-8", "replace")
    line = _trim_trailing_spaces(line)
    negated = line.startswith("!")
    p = line[1:] if negated else line
    dir_only = p.endswith("/")
    if dir_only:
        p = p[:-1]
    if not p:
        raise PatternError(shown, "nothing is left to match")
    if "/" not in p:
        tokens = _tokens(p, shown)
        return _Rule(shown, negated, dir_only, "name", _name_regex(tokens) + r"\Z", None, "", _need(tokens), "", 1, 1)
    if p.startswith("/"):
        p = p[1:]
    # dir.c compares the pattern's plain start (up to the first of *?[\) as text, then hands the
    # rest to wildmatch: a "**" right there counts as the start of a name ("foo**/bar" matches
    # "foo/x/bar" and "foobar").
    plain = len(p)
    for special in "*?[\\":
        found = p.find(special)
        if 0 <= found < plain:
            plain = found
    if 0 < plain and p[plain - 1] != "/" and p.startswith("**", plain):
        rest = p[plain:].lstrip("*")
        head, depth = re.escape(p[:plain]), p[:plain].count("/") + 1
        regex = None
        if not rest:
            regex = head + r".*\Z"
        elif rest.startswith("/") or rest.startswith("\\/"):
            after = rest[1:] if rest[0] == "/" else rest[2:]
            tail = _items_regex(_items(_tokens(after, shown))) if after else r"\Z"
            regex = head + ("(?:.*/)?" if rest[0] == "/" else ".*/") + tail
        if regex is not None:
            return _Rule(shown, negated, dir_only, "path", regex, None, "", ("regex", ""), p[:plain], depth, None)
    tokens = _tokens(p, shown)
    items = _items(tokens)
    least, most = _depths(items)
    lead = _lead(tokens)
    # Split into the folder part, matched once per folder, and the last name, matched per entry.
    folder_tail = ""
    if len(items) >= 2 and items[-2][0] == "S" and items[-1][0] == "S":
        kind, value = _need(items[-2][1])
        folder_tail = value + "/" if kind in ("name", "suffix") else ""
    if items[-1][0] == "S":
        name_tokens, before = items[-1][1], items[:-1]
        if not before:
            folder: str | None = r"\Z"  # "/name": the base folder itself
        elif before[-1][0] == "G":  # ".../**/name": the folder, or any below it
            if len(before) == 1:
                folder = None if before[0][1] == "raw" else r".+\Z"
            else:
                below = _items_regex(before[:-1] + [("G", "end")])
                folder = below if before[-1][1] == "esc" else "(?:" + _items_regex(before[:-1]) + "|" + below + ")"
        else:
            folder = _items_regex(before)
        name_regex, need = _name_regex(name_tokens) + r"\Z", _need(name_tokens)
    else:  # ".../**": every name in the folder, or in any below it
        before = items[:-1]
        folder = None if not before else "(?:" + _items_regex(before) + "|" + _items_regex(before + [("G", "end")]) + ")"
        name_regex, need = r"[^/]*\Z", ("any", "")
    kind = "name" if folder is None else "folder"
    return _Rule(shown, negated, dir_only, kind, name_regex, folder, folder_tail, need, lead, least, most)


class RuleSet:
    """The rules of one file (or of exclude_patterns), for the folder ``base`` ("" or "a/b/",
    bytewise) and everything below it. Compared by identity: parsed sets are cached by content."""

    __slots__ = ("base", "reason", "rules", "path_refs", "_folders", "__weakref__")

    def __init__(self, base: str, reason: str, rules: list[_Rule]) -> None:
        self.base = base
        self.reason = reason
        self.rules = tuple(rules)
        depth = base.count("/")
        self.path_refs = tuple(
            _PathRef(self, index, base + rule.lead, depth + rule.min_depth, None if rule.max_depth is None else depth + rule.max_depth)
            for index, rule in enumerate(self.rules) if rule.kind != "name"
        )
        self._folders: dict[int, Callable[[str], re.Match[str] | None]] = {}

    def applies_in(self, index: int, here: str) -> bool:
        """Whether the rule ``index`` can match an entry of the folder ``here`` (bytewise, "" or
        "a/b/", below the source)."""
        rule = self.rules[index]
        if rule.folder is None:
            return True
        if rule.folder_tail and not here.endswith(rule.folder_tail):
            return False
        match = self._folders.get(index)
        if match is None:
            match = self._folders[index] = re.compile(rule.folder, re.S).match
        below = here[len(self.base):]
        return match(below[:-1] if below else "") is not None


class _PathRef(NamedTuple):
    """A rule with a slash, placed: the plain start of the paths it matches, from the source, and
    their least and greatest depth from the source."""

    rules: RuleSet
    index: int
    lead: str
    min_depth: int
    max_depth: int | None


#: Parsed rule files by (digest of their bytes, base, reason): a rescan reads them again, and parses
#: only the ones that changed.
_parsed: dict[tuple[bytes, str, str], RuleSet] = {}


def parse_rules(data: bytes, base: str, reason: str = "ignored", origin: str = "") -> RuleSet:
    """The RuleSet of a .gitignore's bytes: a UTF-8 BOM, CRLF line ends, blank lines, comments and
    trailing spaces as git reads them. A pattern that can never match is left out (as git does)."""
    key = (hashlib.blake2b(data, digest_size=16).digest(), base, reason)
    cached = _parsed.get(key)
    if cached is not None:
        return cached
    text = data[len(codecs.BOM_UTF8):].decode("latin-1") if data.startswith(codecs.BOM_UTF8) else data.decode("latin-1")
    rules: list[_Rule] = []
    for line in text.split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        try:
            rule = compile_rule(line)
        except PatternError:
            continue
        if rule is not None:
            if len(rules) >= MAX_RULES_PER_FILE:
                warn_once(origin, f"more than {MAX_RULES_PER_FILE} rules; the rest are not applied")
                break
            rules.append(rule)
    result = RuleSet(base, reason, rules)
    if len(_parsed) >= _CACHE_LIMIT:
        _parsed.clear()
    _parsed[key] = result
    return result


def compile_exclude_patterns(patterns: tuple[str, ...]) -> RuleSet | None:
    """exclude_patterns as the rules of a .gitignore at the source root; PatternError names the first
    pattern that is not one (a comment, an empty one, one that can never match)."""
    if not patterns:
        return None
    rules = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern or "\x00" in pattern or "\n" in pattern or "\r" in pattern:
            raise PatternError(str(pattern), "a pattern is one non-empty line without NUL bytes")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise PatternError(pattern[:60] + "...", f"longer than {MAX_PATTERN_CHARS} characters")
        if pattern.startswith("#"):
            raise PatternError(pattern, r"a line starting with '#' is a comment in .gitignore syntax; write \# for a '#'")
        if any(part in (".", "..") for part in pattern.lstrip("!").split("/")):
            raise PatternError(pattern, "'.' and '..' never match: give the path below the source directory")
        rule = compile_rule(bytewise(pattern))
        if rule is None:
            raise PatternError(pattern, "nothing to match")
        try:
            re.compile(rule.regex, re.S)
            re.compile(rule.folder or "", re.S)
        except re.error as exc:  # not expected: every regex is built from escaped pieces
            raise PatternError(pattern, str(exc)) from None
        rules.append(rule._replace(text=pattern))
    return RuleSet("", "excluded_pattern", rules)


_warned: set[tuple[str, str]] = set()


def warn_once(origin: str, problem: str) -> None:
    """Log a problem with the rules of ``origin`` (a rule file's key) once: every rescan meets it again."""
    if (origin, problem) in _warned or len(_warned) > _CACHE_LIMIT:
        return
    _warned.add((origin, problem))
    logger.warning("rules in %s: %s", origin or "?", problem)


class _Prefilter:
    """A cheap test that is true for every entry some excluding rule of a folder could match (the
    rules that re-include need not be asked when none excludes): an exact name (a set lookup), an
    ending or a start (the ones for the name's last or first character, a dict lookup each), a
    plain text inside, and only then a regex.

    The walk asks these itself for an ASCII name (see file_utils.walk_source): the name in
    ``names``, its end in ``ends[name[-1]]``, its start in ``starts[name[0]]``, ``contains``, then
    ``slow`` (None when there is nothing else to ask).
    """

    __slots__ = ("names", "ends", "starts", "contains", "every", "others", "paths", "slow")

    def __init__(self, rules: list[tuple[_Rule, str]]) -> None:
        names, ends, starts, contains, others, paths = set(), {}, {}, set(), [], []
        self.every = False
        for rule, base in rules:
            need, value = rule.need
            if rule.kind == "path":
                paths.append(re.escape(base) + rule.regex)
            elif need == "name":
                names.add(value)
            elif need == "suffix":
                ends.setdefault(value[-1], set()).add(value)
            elif need == "prefix":
                starts.setdefault(value[0], set()).add(value)
            elif need == "contains":
                contains.add(value)
            elif need == "any":
                self.every = True
            else:
                others.append(rule.regex)
        self.names = frozenset(names)
        self.ends = {char: tuple(sorted(values)) for char, values in ends.items()}
        self.starts = {char: tuple(sorted(values)) for char, values in starts.items()}
        self.contains = _compiled("|".join(map(re.escape, sorted(contains)))).search if contains else None
        self.others = _compiled("|".join(sorted(set(others)))).match if others else None
        # Each once: alike rule files are one RuleSet, in force twice, and a group name (3.10's
        # atomic groups) may not repeat in a regex.
        self.paths = _compiled("|".join(dict.fromkeys(paths))).match if paths else None
        self.slow = self._slow if self.every or self.others is not None or self.paths is not None else None

    def _slow(self, name: str, rel: str) -> bool:
        if self.every or (self.others is not None and self.others(name)):
            return True
        return self.paths is not None and self.paths(bytewise(rel)) is not None

    def maybe(self, name: str, rel: str) -> bool:
        if not name.isascii():
            name = bytewise(name)
        if name in self.names:
            return True
        ends, starts = self.ends.get(name[-1]), self.starts.get(name[0])
        if (ends is not None and name.endswith(ends)) or (starts is not None and name.startswith(starts)):
            return True
        if self.contains is not None and self.contains(name):
            return True
        return self._slow(name, rel)


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> re.Pattern[str]:
    """Folders whose matchers differ only in a rule with a slash share the rest's compiled regexes."""
    return re.compile(source, re.S)


class _Decision:
    """The rules of a folder for files, or for folders, indexed by their cheap tests: the rules a
    name can match are looked up, then tried in precedence order; the first that matches wins.
    A rule whose test is its whole meaning ("*.log", a plain name) needs no regex."""

    __slots__ = ("by_name", "ends", "starts", "contains", "always", "exact", "regexes", "ordered")

    def __init__(self, ordered: list[tuple[_Rule, str, str]], is_dir: bool) -> None:
        self.ordered = ordered
        self.by_name: dict[str, list[int]] = {}
        self.ends: dict[str, list[tuple[str, int]]] = {}
        self.starts: dict[str, list[tuple[str, int]]] = {}
        self.contains: list[tuple[str, int]] = []
        self.always: list[int] = []
        self.exact: set[int] = set()
        self.regexes: dict[int, Callable[[str], re.Match[str] | None]] = {}
        for order, (rule, _, _) in enumerate(ordered):
            if rule.dir_only and not is_dir:
                continue
            need, value = rule.need
            if rule.kind == "path" or need in ("any", "regex"):
                self.always.append(order)
            elif need == "name":
                self.by_name.setdefault(value, []).append(order)
                self.exact.add(order)
            elif need == "suffix":
                self.ends.setdefault(value[-1], []).append((value, order))
                if rule.regex == "[^/]*" + re.escape(value) + r"\Z":
                    self.exact.add(order)
            elif need == "prefix":
                self.starts.setdefault(value[0], []).append((value, order))
            else:
                self.contains.append((value, order))

    def winner(self, name: str, rel: str) -> int | None:
        """The order of the rule of highest precedence that matches (names bytewise)."""
        candidates = list(self.by_name.get(name, ()))
        candidates += [order for end, order in self.ends.get(name[-1], ()) if name.endswith(end)]
        candidates += [order for start, order in self.starts.get(name[0], ()) if name.startswith(start)]
        if self.contains:
            candidates += [order for inside, order in self.contains if inside in name]
        candidates += self.always
        for order in sorted(candidates):
            if order in self.exact:
                return order
            match = self.regexes.get(order)
            if match is None:
                rule, base, _ = self.ordered[order]
                source = re.escape(base) + rule.regex if rule.kind == "path" else rule.regex
                match = self.regexes[order] = re.compile(source, re.S).match
            if match(rel if self.ordered[order][0].kind == "path" else name):
                return order
        return None


class Matcher:
    """The rules that apply to the entries of one folder, highest precedence first: ``ordered``,
    (rule, base, reason) each.

    ``files`` and ``folders``: the _Prefilter of the excluding rules for files and for folders, None
    when there are none. ``decide(name, rel, is_dir)``: the skip reason of the rule that wins, or
    None; its index is built when first needed.
    """

    __slots__ = ("ordered", "files", "folders", "_decisions")

    def __init__(self, ordered: list[tuple[_Rule, str, str]]) -> None:
        self.ordered = ordered
        excluding = [(rule, base) for rule, base, _ in ordered if not rule.negated]
        for_files = [(rule, base) for rule, base in excluding if not rule.dir_only]
        self.files = _Prefilter(for_files) if for_files else None
        self.folders = _Prefilter(excluding) if excluding else None
        self._decisions: list[_Decision | None] = [None, None]

    def decide(self, name: str, rel: str, is_dir: bool) -> str | None:
        prefilter = self.folders if is_dir else self.files
        if prefilter is None or not prefilter.maybe(name, rel):
            return None
        decision = self._decisions[is_dir]
        if decision is None:
            decision = self._decisions[is_dir] = _Decision(self.ordered, is_dir)
        best = decision.winner(bytewise(name), bytewise(rel))
        if best is None:
            return None
        rule, _, reason = self.ordered[best]
        return None if rule.negated else reason


_matchers: dict[tuple, Matcher | None] = {}


class Rules(NamedTuple):
    """The rules in force in a folder: exclude_patterns (highest precedence), the rule files of
    this folder and those above it (deepest first, .git/info/exclude last), and the rules with a
    slash that may still match something here or below."""

    top: RuleSet | None
    sets: tuple[RuleSet, ...]
    live: tuple[_PathRef, ...]

    def entered(self, prefix: str, own: list[RuleSet]) -> Rules:
        """These rules in the folder ``prefix`` ("" or "a/b/"), whose own rule files are ``own``."""
        sets, live = self.sets, self.live
        if own:
            sets = tuple(reversed(own)) + sets
            live = live + tuple(ref for rules in own for ref in rules.path_refs)
        if live:
            here, depth = bytewise(prefix), prefix.count("/")
            live = tuple(
                ref for ref in live
                if (ref.max_depth is None or ref.max_depth > depth) and (ref.lead.startswith(here) or here.startswith(ref.lead))
            )
        return Rules(self.top, sets, live)

    def matcher(self, prefix: str) -> Matcher | None:
        """The matcher for the entries of the folder ``prefix`` (None: no rule applies there). A
        rule with a slash is in it only if its folder part matches this folder."""
        depth = prefix.count("/") + 1
        active: tuple[tuple[RuleSet, int], ...] = ()
        if self.live:
            here = bytewise(prefix)
            active = tuple(
                (ref.rules, ref.index) for ref in self.live if ref.min_depth <= depth and ref.rules.applies_in(ref.index, here)
            )
        key = (self.top, self.sets, active)
        try:
            return _matchers[key]
        except KeyError:
            pass
        ordered: list[tuple[_Rule, str, str]] = []
        chosen = set(active)
        for rules in ((self.top,) if self.top is not None else ()) + self.sets:
            for index in range(len(rules.rules) - 1, -1, -1):
                rule = rules.rules[index]
                if rule.kind == "name" or (rules, index) in chosen:
                    ordered.append((rule, rules.base, rules.reason))
        matcher = Matcher(ordered) if ordered else None
        if len(_matchers) >= _CACHE_LIMIT:
            _matchers.clear()
        _matchers[key] = matcher
        return matcher
