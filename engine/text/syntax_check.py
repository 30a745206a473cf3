"""Does a completion leave the file parsing? Tree-sitter's error nodes (and, for Python, the
compiler's verdict) in a window around the cursor, with and without the completion spliced in.

Used by post-processing (`keep_the_file_parsing`) and by `bench quality` (`parses`).
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass
from typing import Sequence

from engine.text import syntax  # its parse, looked up at call time (tests watch what gets parsed)
from engine.text.languages import MACRO_LANGUAGES
from engine.text.syntax import INDENT_LANGUAGES, indent_width, line_opens_block, window_end, window_start


@dataclass(frozen=True)
class SyntaxErrors:
    count: int  # tree-sitter's ERROR and MISSING nodes
    first_row: int | None  # row (0-based) of the first error of any kind
    broken_rows: tuple[int, ...]  # rows of text tree-sitter could not parse (its ERROR nodes), sorted
    compiler_row: int | None = None  # Python: the row of the compiler's first error (None: it compiles)
    closer_rows: tuple[int, ...] = ()  # rows of the ERROR nodes that hold a closing bracket, sorted


def syntax_errors(language: str | None, text: str) -> SyntaxErrors | None:
    """What the parser could not make sense of in ``text`` (None without a grammar)."""
    tree = syntax.parse(language, text)
    if tree is None:
        return None
    count, missing, broken, closers = 0, [], [], []
    stack = [tree.root_node] if tree.root_node.has_error else []
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            count += 1
            (missing if node.is_missing else broken).append(node.start_point[0])
            if node.type == "ERROR" and any(c in (node.text or b"") for c in (b")", b"]", b"}")):
                closers.append(node.start_point[0])
        stack.extend(child for child in node.children if child.has_error or child.is_missing)
    compiler_row = first_python_error(text) if language == "python" else None
    rows = missing + broken + ([compiler_row] if compiler_row is not None else [])
    return SyntaxErrors(count, min(rows) if rows else None, tuple(sorted(broken)), compiler_row, tuple(sorted(closers)))


def first_python_error(text: str) -> int | None:
    """Row (0-based) of the first error Python's own compiler finds in ``text`` (None: it compiles).

    Tree-sitter accepts what CPython does not, such as a block header with nothing indented
    under it."""
    try:
        with warnings.catch_warnings():  # invalid escapes and the like warn; they still compile
            warnings.simplefilter("ignore")
            compile(text, "<window>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return max(0, (error.lineno or 1) - 1)
    except (ValueError, RecursionError, MemoryError):  # null bytes, absurd nesting
        return 0
    return None


CUT_ROWS = 5  # errors this close to where the window cuts the text may be the cut's own


def _body_to_come(before: str, after: str, language: str | None) -> str:
    """A stand-in body for a Python block header that ends the completion at the end of its
    block (nothing below at its indentation): the user types that body next, so its absence
    is no error. A header above a statement at its own indentation gets none: that statement
    would be its body, which is wrong code."""
    if language not in INDENT_LANGUAGES:
        return ""
    header = before[before.rfind("\n") + 1:]
    rest, _, below = after.partition("\n")
    if rest.strip() or not line_opens_block(header, language):
        return ""
    following = next((line for line in below.split("\n") if line.strip()), None)
    if following is not None and indent_width(following) >= indent_width(header):
        return ""
    return "\n" + header[: len(header) - len(header.lstrip())] + "    pass"


def first_that_parses(prefix: str, suffix: str, language: str | None,
                      splices: Sequence[tuple[str, int]]) -> int | None:
    """Index of the first splice ``(text, replace_after)`` that, put in at the cursor (replacing
    that many characters after it), adds no syntax error; None when every one does. Without a
    grammar every splice passes (0).

    A splice adds an error when, against the text without it, it leaves more error nodes or
    an error earlier than the first one there was. And when the cursor's line is whole but
    the code below it does not parse without the splice (the line that opens or continues its
    brackets is missing), the splice must repair that: its first error, if any, comes after.
    (In C and C++ only an error holding a closing bracket counts: one without, such as a macro
    tree-sitter cannot read, is no missing line's.)
    (Below a broken cursor line, errors may be that line's echo: a header the user is still
    typing leaves its body missing, which the next keystrokes fill.) Only a window around the
    cursor is parsed (`decide_multiline`'s), so a 5 MB file costs the same as a small one."""
    if syntax.get_parser(language) is None:
        return 0
    head = prefix[window_start(prefix, language=language):]
    end, clean = window_end(suffix, language=language)
    tail = suffix[:end]
    cursor_row = head.count("\n")
    before = syntax_errors(language, head + tail)
    if before is None:
        return 0
    # Code below an intact cursor line that does not parse without the splice needs it to
    # (tree-sitter's verdict: Python's compiler also objects to a `try:` still missing its
    # `except`, which the user may be about to type).
    first = before.first_row
    last_row = (head + tail).count("\n") - (-1 if clean else CUT_ROWS)
    rows = before.closer_rows if language in MACRO_LANGUAGES else before.broken_rows
    needs_repair = first is not None and cursor_row < first < last_row and first in rows
    for i, (text, replace_after) in enumerate(splices):
        text += _body_to_come(head + text, tail[replace_after:], language)
        after = syntax_errors(language, head + text + tail[replace_after:])
        if after is None or after.first_row is None:
            return i
        if first is None or after.count > before.count:
            continue
        moved = first + text.count("\n") if first > cursor_row else first  # where that row is now
        if after.first_row > moved or (after.first_row == moved and not needs_repair):
            return i
    return None
