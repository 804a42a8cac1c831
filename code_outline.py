"""A code file's outline: its definitions (classes, functions, methods) as nested headings, and its title.

Python is read by the standard library's ``ast`` (exact); a Python file that does not parse, and
every other language, by one reader of definition keywords and indentation: a line that defines
something (``class X``, ``func (r *T) Name(``, ``fn name``, ``function name``, ``x.y = function``,
``Type name(args) {``) is a heading, nested under the nearest definition above it that is less
indented. What it does not understand is text: a file it finds no definition in is one section.

The reader is one linear regex pass over the text between two added newlines (as markup.py reads
Markdown), each of its quantifiers bounded (a few hundred characters into a line), so a 10 MB
one-line file or 100,000 nested braces cost one pass. ``ast`` recurses: its RecursionError and MemoryError mean the
keyword reader is used instead, and only files under MAX_AST_CHARS go to it at all.

A file's title is its module docstring's or first comment's first sentence if it is prose
(shebang lines, coding lines, licence or copyright comments and code commented out skipped), else
its file name: never a line of code.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterator

from formats import MAX_TITLE_CHARS
from markup import MAX_HEADINGS, HeadingAt

#: Files read as code, by extension (lower case).
CODE_EXTENSIONS = frozenset({
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".mts", ".cts", ".go", ".rs", ".java",
    ".kt", ".kts", ".scala", ".swift", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".m",
    ".mm", ".cs", ".fs", ".rb", ".php", ".pl", ".pm", ".lua", ".sh", ".bash", ".zsh", ".ps1", ".psm1",
    ".dart", ".ex", ".exs", ".erl", ".hs", ".ml", ".r", ".jl", ".groovy", ".gradle", ".vue", ".svelte",
    ".zig", ".nim", ".v", ".sql",
})
#: A Python file longer than this is read by the keyword reader: ``ast`` holds the whole tree.
MAX_AST_CHARS = 4 << 20
#: A heading keeps this much of a definition's name.
MAX_NAME_CHARS = 120
#: Headings nest this deep at most (the outline's levels, as Markdown's).
MAX_LEVEL = 6
#: A title is looked for in the comments of this many leading characters.
TITLE_LOOKUP_CHARS = 8192
#: A comment of fewer words is a marker ("Module dependencies."), not what the file is.
MIN_TITLE_WORDS = 3
#: A definition's end is looked for this many lines back from the next definition at most.
MAX_TRAILING_LINES = 200

_MODIFIERS = (
    r"(?:(?:export|default|public|private|protected|internal|static|final|abstract|async|override|open|sealed"
    r"|unsafe|extern|inline|virtual|partial|readonly|suspend|data|inner|local|pub(?:\([\w:]{1,40}\))?"
    r"|const|declare|fileprivate|mutating|synchronized|native|transient|strictfp|friend|explicit)[ \t]+){0,6}"
)
# Each alternative starts after a line's indentation; the named groups give the heading.
_DEFINITION = re.compile(
    r"\n(?P<indent>[ \t]{0,200})(?:"
    # class X, fn x, def x, func X, interface X, impl<T> X for Y, module X ...
    rf"{_MODIFIERS}(?P<kw>class|struct|interface|trait|enum|union|record|fn|func|function|def|defp|defmodule"
    r"|module|namespace|object|protocol|extension|fun|sub|impl(?=[ \t<])|type|macro_rules!)(?:<[^>\n]{0,80}>)?"
    r"(?:[ \t]*\*)?[ \t]+(?P<recv>\([^)\n]{0,100}\)[ \t]*)?(?P<name>[A-Za-z_$][\w$.:<>, &']{0,119})"
    # x.y = function, const x = (a) =>, x: function
    r"|(?:(?:export[ \t]+)?(?:const|let|var)[ \t]+)?(?P<assigned>[A-Za-z_$][\w$.]{0,119})[ \t]*[:=][ \t]*"
    r"(?:async[ \t]+)?(?:function\b|\([^()\n]{0,200}\)[ \t]*=>|[A-Za-z_$][\w$]{0,40}[ \t]*=>)"
    # Type name(args) {   name(args) {   name() {  (with the brace here or on the next line)
    r"|(?P<typed>(?:[\w$<>\[\]*&:,.?]{1,80}[ \t]+){0,6}\**)(?P<called>~?[A-Za-z_$][\w$:]{0,119})[ \t]*"
    r"\((?P<params>[^;{}()\n]{0,300})\)[^;{}\n=]{0,100}(?:\{[ \t]*(?:\}[ \t]*)?|\n[ \t]*\{)(?=\n)"
    r")"
)
#: Words that open a block like a definition and are not one.
_NOT_DEFINED = frozenset({
    "if", "for", "while", "switch", "catch", "return", "else", "do", "try", "new", "throw", "with", "foreach",
    "elif", "using", "lock", "synchronized", "sizeof", "typeof", "await", "yield", "delete", "case", "when",
    "match", "loop", "unless", "until", "select", "defer", "go", "function", "fn", "func", "assert",
})
#: A line that only closes blocks (``end``, ``}``, ``});``): less indented than a definition, it closes what holds it.
_CLOSING = re.compile(r"[ \t]*(?:end\b|[}\])])[\s;,.})\]]*(?:end\b[\s;,.]*)*")
_GO_RECEIVER = re.compile(r"\(\s*(?:\w+\s+)?\*?\s*([\w.]+)")
_NAME_END = re.compile(r"[\s(<{:=]")

_LICENCE = re.compile(r"copyright|licen[cs]e|spdx|all rights reserved|permission is hereby|\(c\) \d{4}", re.I)
#: Marks of a line of code commented out (``# import foo``, ``// return x;``), never of a sentence:
#: a statement's end or braces, an assignment or comparison, a line that is a call, a leading keyword.
_CODE = re.compile(
    r";$|[{}]|^[\w.$]+\(.*\)$|[ \t]=[ \t]|[=!:]=|=>"
    r"|^(?:import|from|return|def|class|function|func|fn|var|let|const|package|use|require|print|echo|throw|raise"
    r"|if|elif|else|for|while|self\.|this\.)\b"
)
#: Leading lines passed over when looking for a title: shebang, coding, build tags, "use strict", <?php.
_CODING = re.compile(r"^#!|^#.*coding[:=]|^//\s*(?:go:build|\+build)|^['\"]use strict['\"]|^<\?php", re.I)
#: A C preprocessor line: code, not a comment.
_PREPROCESSOR = re.compile(r"^#\s*(?:include|define|if|ifdef|ifndef|pragma|import|region|endif|undef|error)\b")
_UNDERLINE = re.compile(r"^[ \t]*([=~^*+#`'\"-])\1{2,}[ \t]*$", re.M)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_COMMENT_START = re.compile(r"//|#|/\*|\*|--|;|%")
_COMMENT_MARK = re.compile(r"^\s*(?:///?!?|#+!?|/\*+!?|\*+/?|--+|;+|%+|\"\"\"|''')\s?")


def is_code(name: str) -> bool:
    """Whether a file of this name is read as code."""
    return posixpath.splitext(name.lower())[1] in CODE_EXTENSIONS


def outline(padded: str, name: str, most: int | None = None) -> tuple[list[HeadingAt], str]:
    """The definitions of a code file's text between two added newlines, as (boundary, level, name)
    headings in text order (the first ``most``, at most MAX_HEADINGS), and its title."""
    most = MAX_HEADINGS if most is None else min(most, MAX_HEADINGS)
    headings: list[HeadingAt] | None = None
    title = ""
    if name.lower().endswith((".py", ".pyi")) and len(padded) <= MAX_AST_CHARS:
        parsed = _python(padded, most)
        if parsed is not None:
            headings, title = parsed
            title = title if _prose(title) else ""
    if headings is None:
        headings = _keyword_headings(padded, most)
    title = title or _comment_title(padded) or posixpath.basename(name.replace("\\", "/"))
    return headings, title[:MAX_TITLE_CHARS]


def _python(padded: str, most: int) -> tuple[list[HeadingAt], str] | None:
    """Headings and docstring title of Python source, None if it does not parse."""
    try:
        tree = ast.parse(padded[1:-1])
        found = sorted(_python_definitions(tree))[:most]
        docstring = ast.get_docstring(tree) or ""
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    starts = _line_starts(padded, max((line for line, _, _ in found), default=0))
    return [(starts[line - 1], level, heading) for line, level, heading in found], _first_sentence(docstring)


def _python_definitions(tree: ast.Module) -> Iterator[tuple[int, int, str]]:
    """(line, level, name) of every class and function, walked with a stack (no recursion) through
    statement bodies only: a definition is a statement, and expressions are most of a tree."""
    stack: list[tuple[list[ast.stmt], int]] = [(tree.body, 0)]
    while stack:
        body, depth = stack.pop()
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                line = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                yield line, min(depth + 1, MAX_LEVEL), f"{_PYTHON_KEYWORDS[type(node)]} {node.name}"
                stack.append((node.body, depth + 1))
                continue
            for field in _STATEMENT_FIELDS.get(type(node), ()):
                stack.append((getattr(node, field), depth))
            if isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
                stack.extend((handler.body, depth) for handler in node.handlers)
            elif isinstance(node, ast.Match):
                stack.extend((case.body, depth) for case in node.cases)


_PYTHON_KEYWORDS = {ast.ClassDef: "class", ast.FunctionDef: "def", ast.AsyncFunctionDef: "async def"}
#: The statements that hold statements (a definition under ``if TYPE_CHECKING:`` or in a ``try:``).
_STATEMENT_FIELDS: dict[type, tuple[str, ...]] = {
    ast.If: ("body", "orelse"), ast.For: ("body", "orelse"), ast.AsyncFor: ("body", "orelse"),
    ast.While: ("body", "orelse"), ast.With: ("body",), ast.AsyncWith: ("body",),
    ast.Try: ("body", "orelse", "finalbody"), **({ast.TryStar: ("body", "orelse", "finalbody")} if hasattr(ast, "TryStar") else {}),
}


def _line_starts(padded: str, last: int) -> list[int]:
    """The boundary (offset of the newline before it) of lines 1..last of a padded text."""
    starts, at = [0], 0
    for _ in range(last - 1):
        at = padded.find("\n", at + 1)
        starts.append(at)
    return starts


def _keyword_headings(padded: str, most: int) -> list[HeadingAt]:
    """Definitions found by their keywords, nested by indentation."""
    headings: list[HeadingAt] = []
    open_indents: list[int] = []  # the indentation of each definition on the current path
    position = 0
    while len(headings) < most:
        match = _DEFINITION.search(padded, position)
        if match is None:
            break
        position = match.end("indent")  # the next definition may start on the next line
        heading = _heading(match)
        if heading is None:
            continue
        indent = len(match["indent"].expandtabs(4))
        while open_indents and open_indents[-1] >= indent:
            open_indents.pop()
        open_indents.append(indent)
        headings.append((match.start(), min(len(open_indents), MAX_LEVEL), heading))
    return headings


def _heading(match: re.Match[str]) -> str | None:
    """The heading of a definition's line: keyword and name (``class X``, ``func T.Name``), else None."""
    if match["kw"]:
        name = _NAME_END.split(match["name"].strip(), 1)[0] if match["kw"] != "impl" else match["name"].strip()
        if not name:
            return None
        receiver = _GO_RECEIVER.match(match["recv"] or "")
        if receiver:
            name = f"{receiver[1]}.{name}"
        return f"{match['kw']} {name}"[:MAX_NAME_CHARS]
    if match["assigned"]:
        return f"function {match['assigned']}"[:MAX_NAME_CHARS]
    called, typed = match["called"], (match["typed"] or "").strip()
    if called in _NOT_DEFINED or typed in _NOT_DEFINED or "return" in typed:
        return None
    accessor = f"{typed} " if typed in ("get", "set") else ""  # a getter and its setter: two definitions of one name
    return f"{accessor}{called}()"[:MAX_NAME_CHARS]


def definition_end(lines: list[str], first: int, last: int) -> int:
    """The last line of the definition at line ``first`` (1-based) that runs to line ``last`` at
    most (the next definition not inside it): blank lines after it and the closing lines of the
    block holding it (``end``, ``}`` less indented than it) are not its."""
    indent = _indent(lines[first - 1])
    end = last
    while end > first and last - end < MAX_TRAILING_LINES:
        line = lines[end - 1]
        if line.strip() and not (_CLOSING.fullmatch(line) and _indent(line) < indent):
            break
        end -= 1
    return end


def _indent(line: str) -> int:
    """A line's indentation in columns, as the keyword reader measures it (a tab is 4)."""
    return len(line[:len(line) - len(line.lstrip(" \t"))].expandtabs(4))


def _comment_title(padded: str) -> str:
    """The first sentence of the file's first comment that says what it is, among its leading lines:
    licence blocks and comments of a word or two ("Module dependencies.") are passed over."""
    block: list[str] = []
    for line in padded[1:TITLE_LOOKUP_CHARS].split("\n"):
        stripped = line.strip()
        closes = stripped.endswith("*/")
        if not block and _CODING.match(stripped):
            continue
        if _COMMENT_START.match(stripped) and not _PREPROCESSOR.match(stripped):
            block.append(_COMMENT_MARK.sub("", stripped).strip("*/ \t"))
            if not closes:
                continue
        if block:
            said = _first_sentence("\n".join(block))
            if len(said.split()) >= MIN_TITLE_WORDS and _prose(said) and not _LICENCE.search(" ".join(block)):
                return said
            block = []
        elif stripped:
            return ""  # code before any comment that says what the file is
    return ""


def _prose(said: str) -> bool:
    """Whether a title found in a comment or docstring is a sentence of prose: no licence, no code."""
    return not _LICENCE.search(said) and not _CODE.search(said)


def _first_sentence(text: str) -> str:
    """The first sentence of a docstring or comment, on one line; a first paragraph that only names
    the module (``requests.adapters`` over a reST underline) is passed over."""
    text = _UNDERLINE.sub("", text)
    paragraphs = [" ".join(p.split()) for p in _PARAGRAPH_BREAK.split(text.strip())]
    paragraphs = [p for p in paragraphs if p]
    if len(paragraphs) > 1 and " " not in paragraphs[0]:
        paragraphs.pop(0)
    return _SENTENCE_END.split(paragraphs[0], maxsplit=1)[0][:MAX_TITLE_CHARS] if paragraphs else ""
