"""The words inside identifiers written in camelCase or PascalCase, for the index to find them by.

FTS5's unicode61 tokenizer already splits ``parse_query_string``, ``parse-query-string`` and
``Parse.Query.String`` into their words, but reads ``parseQueryString`` as one word. The index is
given each such identifier's parts as well (``parse Query String``), after the text, so that the
query ``parse query string`` finds it, as a phrase too, while the identifier itself is still a word
of the text. Shown text and snippets never carry them.
"""

from __future__ import annotations

import re
import string

#: Each ASCII character as its class: "a" a lower-case letter or digit, "A" a capital, " " any
#: other (non-ASCII characters stay themselves: letters of a word). The text is classed once by
#: str.translate, and case changes are then found as plain substrings: in C, ~30 ms per MB of code.
_CLASSES = str.maketrans({
    **{chr(code): " " for code in range(128)},
    **{character: "a" for character in string.ascii_lowercase + string.digits},
    **{character: "A" for character in string.ascii_uppercase},
})
#: A capital after a lower-case letter or digit (``eQ``), and a capital that starts a word after
#: an acronym (the ``A`` of ``HTTPAdapter``): where each is found, the capital is one further on.
_CASE_CHANGES = (re.compile("aA"), re.compile("AAa"))
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
#: A longer run of letters and digits is no identifier (a hash, a base64 blob): its parts are not added.
MAX_IDENTIFIER_CHARS = 100


def identifier_parts(text: str) -> str:
    """The parts of each camelCase identifier in ``text``, space-separated, "" if none. Each word of
    the text is looked at once, whatever its length."""
    classes = text.translate(_CLASSES)
    changes = sorted(found.start() + 1 for pattern in _CASE_CHANGES for found in pattern.finditer(classes))
    parts: list[str] = []
    position = 0
    for at in changes:
        if at < position:
            continue  # in the word just read
        window = max(0, at - MAX_IDENTIFIER_CHARS)
        start = classes.rfind(" ", window, at) + 1
        end = classes.find(" ", at)
        end = len(text) if end < 0 else end
        if (start or not window) and end - start <= MAX_IDENTIFIER_CHARS:
            parts.extend(_PART.findall(text, start, end))
        position = end
    return " ".join(parts)
