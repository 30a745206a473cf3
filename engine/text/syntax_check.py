"""Does a completion leave the file parsing? Tree-sitter's error nodes (and, for Python, the
compiler's verdict) in the syntax window around the cursor, with and without the completion
spliced in. Used by post-processing (`keep_the_file_parsing`).
"""

from __future__ import annotations

from typing import Sequence

from engine.text.cursor import Cursor
from engine.text.languages import MACRO_LANGUAGES
from engine.text.syntax import INDENT_LANGUAGES, indent_width, line_opens_block, syntax_errors


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


def first_that_parses(cursor: Cursor, splices: Sequence[tuple[str, int]]) -> int | None:
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
    cursor is parsed, the cursor's own (`cursor.window`), so a 5 MB file costs the same as a small one."""
    language, head, tail, clean = cursor.language, cursor.window.head, cursor.window.tail, cursor.window.clean
    before = cursor.window.errors
    if before is None:
        return 0
    cursor_row = head.count("\n")
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
