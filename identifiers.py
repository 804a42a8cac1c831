"""The words inside identifiers written in camelCase or PascalCase, for the index to find them by.

FTS5's unicode61 tokenizer already splits ``parse_query_string``, ``parse-query-string`` and
``Parse.Query.String`` into their words, but reads ``parseQueryString`` as one word. The index is
given each such identifier's parts as well (``parse Query String``), after the text, so that the
query ``parse query string`` finds it, as a phrase too, while the identifier itself is still a word
of the text. Shown text and snippets never carry them: a snippet of a text that matches only by
such parts is made from the text with a separator between them (parts_apart), taken out after.
"""

from __future__ import annotations

import operator
import re
import string
from functools import lru_cache
from itertools import compress, starmap

#: Each character of the text encoded as ASCII (a non-ASCII character is one "?", a "?" of the text
#: a space first) as its class: "a" a lower-case letter or digit, "A" a capital, "x" a non-ASCII
#: character (a letter of a word), " " any other. Classing and searching bytes is C at memory speed.
_CLASSES = bytes(
    ord("a") if chr(code) in string.ascii_lowercase + string.digits
    else ord("A") if chr(code) in string.ascii_uppercase
    else ord("x") if chr(code) == "?"
    else ord(" ")
    for code in range(256)
)
#: A word's first case change, a capital after a lower-case letter or digit (``eQ``) or a capital
#: that starts a word after an acronym (the ``A`` of ``HTTPAdapter``), and the rest of the word:
#: each match ends where its word ends. Capitals are rare enough for each to be looked at.
_FIRST_CHANGE = re.compile(rb"A(?:(?<=aA)|(?<=AA)(?=a))[^ ]*")
#: The same in the classes reversed (its last case change first): each match ends where its word starts.
_LAST_CHANGE = re.compile(rb"A(?:(?=a)|(?<=aA)(?=A))[^ ]*")
_END = re.Match.end
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
#: A longer run of letters and digits is no identifier (a hash, a base64 blob): its parts are not added.
MAX_IDENTIFIER_CHARS = 100


def identifier_parts(text: str) -> str:
    """The parts of each camelCase identifier in ``text``, space-separated, "" if none. Each word of
    the text is looked at once, whatever its length."""
    # map and starmap keep the work per identifier in C: a page of reference docs holds thousands.
    return " ".join(map(_word_parts, map(text.__getitem__, starmap(slice, _identifiers(text)))))


def parts_apart(text: str, separator: str) -> str:
    """``text`` with ``separator`` between the parts of each camelCase identifier (``parse|Query|String``)."""
    pieces: list[str] = []
    last = 0
    for start, end in _identifiers(text):
        for part in _PART.finditer(text, start, end):
            if part.start() > start:
                pieces += [text[last:part.start()], separator]
                last = part.start()
    pieces.append(text[last:])
    return "".join(pieces)


def _identifiers(text: str) -> list[tuple[int, int]]:
    """(start, end) of each camelCase identifier of ``text`` (a word of at most MAX_IDENTIFIER_CHARS)."""
    classes = text.replace("?", " ").encode("ascii", "replace").translate(_CLASSES)
    ends = list(map(_END, _FIRST_CHANGE.finditer(classes)))
    if not ends:
        return []
    starts = list(map(len(text).__sub__, map(_END, _LAST_CHANGE.finditer(classes[::-1]))))
    starts.reverse()
    return list(compress(zip(starts, ends), map(MAX_IDENTIFIER_CHARS.__ge__, map(operator.sub, ends, starts))))


@lru_cache(maxsize=1 << 14)
def _word_parts(word: str) -> str:
    """One identifier's parts; the same identifiers come back page after page, hence the cache."""
    return " ".join(_PART.findall(word))
