"""The words inside identifiers written in camelCase or PascalCase, for the index to find them by.

FTS5's unicode61 tokenizer already splits ``parse_query_string``, ``parse-query-string`` and
``Parse.Query.String`` into their words, but reads ``parseQueryString`` as one word. The index is
given each such identifier's parts as well (``parse Query String``), after the text, so that the
query ``parse query string`` finds it, as a phrase too, while the identifier itself is still a word
of the text. Shown text and snippets never carry them.
"""

from __future__ import annotations

import re

#: A capital that follows a lower-case letter or digit (``eQ``, ``2C``), or that starts a word
#: after an acronym (the ``A`` of ``HTTPAdapter``). Starting with a character class, the scan
#: skips through the text fast: ~12 ms per MB of prose.
_CASE_CHANGE = re.compile(r"[A-Z](?:(?<=[a-z0-9].)|(?=[A-Z][a-z]))")
_WORD_BEFORE = re.compile(r"[A-Za-z0-9]*\Z")
_WORD_FROM = re.compile(r"[A-Za-z0-9]*")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
#: A longer run of letters and digits is no identifier (a hash, a base64 blob): its parts are not added.
MAX_IDENTIFIER_CHARS = 100


def identifier_parts(text: str) -> str:
    """The parts of each camelCase identifier in ``text``, space-separated, "" if none. Each word of
    the text is looked at once, whatever its length."""
    parts: list[str] = []
    position = 0
    while found := _CASE_CHANGE.search(text, position):
        at = found.start()
        window = max(0, at - MAX_IDENTIFIER_CHARS)
        start = at - len(_WORD_BEFORE.search(text, window, at)[0])
        end = _WORD_FROM.match(text, at).end()
        if end - start <= MAX_IDENTIFIER_CHARS and (start == 0 or text[start - 1] not in _ALNUM):
            parts.extend(_PART.findall(text, start, end))
        position = end
    return " ".join(parts)
