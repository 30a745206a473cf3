"""One request's cursor context: everything about where the cursor is that prompt building,
decoding's stop checks and post-processing need, worked out once per request.

The language, the cursor line's text before and after it, the syntax window around it (parsed
at most once, and only when something asks) and the single- or multi-line decision. Modules
below take a `Cursor` instead of re-deriving any of these from the prefix and suffix.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from engine.text import syntax  # its parse, looked up at call time (tests watch what gets parsed)
from engine.text.languages import INDENT_LANGUAGES, STRINGISH
from engine.text.parse_window import window_end, window_start
from engine.text.syntax import (
    SyntaxErrors,
    current_line_parts,
    indent_width,
    line_opens_block,
    lines_above,
    lines_below,
    only_closers,
    syntax_errors,
)


class SyntaxWindow:
    """The text around the cursor that gets parsed: from a top-level line above the cursor to
    the first top-level line below it, so the construct the cursor is in is whole and a 5 MB
    document costs the same as a small one."""

    def __init__(self, prefix: str, suffix: str, language: str | None) -> None:
        self.language = language
        self.head = prefix[window_start(prefix, language=language):]  # the prefix's part: cursor at its end
        end, self.clean = window_end(suffix, language=language)  # clean: the window ends at a top-level line
        self.tail = suffix[:end]

    @property
    def text(self) -> str:
        return self.head + self.tail

    @functools.cached_property
    def tree(self):
        """Tree-sitter's tree of the window, or None without a grammar: the one parse."""
        return syntax.parse(self.language, self.text) if syntax.get_parser(self.language) is not None else None

    @functools.cached_property
    def errors(self) -> SyntaxErrors | None:
        """What the parser (and, for Python, the compiler) cannot make sense of in the window."""
        return syntax_errors(self.language, self.text, self.tree) if self.tree is not None else None

    def byte(self, char_offset: int) -> int:
        return len(self.text[:char_offset].encode("utf-8"))


@dataclass(frozen=True)
class Cursor:
    prefix: str  # document text before the cursor
    suffix: str  # document text after the cursor
    language: str | None
    line_before: str  # the cursor line's text before the cursor
    line_after: str  # the cursor line's text after the cursor
    window: SyntaxWindow
    requested_multiline: bool | None = None  # what the request asked for; None: decide from the syntax

    @classmethod
    def at(cls, prefix: str, suffix: str, language: str | None, multiline: bool | None = None) -> "Cursor":
        """The cursor between `prefix` and `suffix`; `multiline` None: decided from the syntax."""
        line_before, line_after = current_line_parts(prefix, suffix)
        return cls(prefix, suffix, language, line_before, line_after, SyntaxWindow(prefix, suffix, language), multiline)

    @functools.cached_property
    def multiline(self) -> bool:
        """Complete a block (True) or the rest of the line (False)."""
        if self.requested_multiline is not None:
            return self.requested_multiline
        return _decide_multiline(self.prefix, self.suffix, self.language, self.line_before, self.line_after, self.window)

    @property
    def at_indentation(self) -> bool:
        """The cursor ends the indentation the user typed (blanks only before it)."""
        return bool(self.line_before) and not self.line_before.strip()

    def scope_end(self, completion: str) -> int | None:
        """Where `completion`, put in at the cursor, leaves the block it started in (syntax.scope_end)."""
        return syntax.scope_end(self.window.head, completion, self.window.tail, self.language)


def decide_multiline(prefix: str, suffix: str, language: str | None) -> bool:
    """Should the completion be a multi-line block (True) or the rest of this line (False)?"""
    return Cursor.at(prefix, suffix, language).multiline


def _decide_multiline(prefix: str, suffix: str, language: str | None, line_before: str, line_after: str,
                      window: SyntaxWindow) -> bool:
    """- text (other than closing brackets/quotes) after the cursor → single line;
    - end of a line that opens a block (``def f():``, ``{``) → multi-line;
    - on a blank line inside an empty block / empty body (or an empty document) → multi-line;
    - otherwise single line.
    """
    if line_after.strip() and not only_closers(line_after):
        return False

    parsed = window.tree is not None
    if parsed:
        if _inside_string_or_comment(window):
            return False
    elif _quote_open(line_before):
        return False

    if line_before.strip():
        if parsed:
            verdict = _last_token_opens_block(window)
            if verdict is not None:
                return verdict
            # The tree has no opinion (an error around the cursor): a `{` inside a string the
            # user is typing (`$"{name} {`) opens no block. Apostrophes are left out: Rust's
            # lifetimes and English in comments are no strings.
            if _quote_open(line_before.replace("'", "")):
                return False
        return line_opens_block(line_before, language)

    # Blank line: multi-line only inside an empty block / body.
    prev = next((ln for ln in reversed(lines_above(prefix)) if ln.strip()), None)
    if prev is None:
        return not suffix.strip()  # an empty document is an empty body
    if not line_opens_block(prev, language):
        return False
    if line_after.strip():  # `{` above, cursor before `}` on this line
        return True
    nxt = next((ln for ln in lines_below(suffix) if ln.strip()), None)
    if nxt is None:
        return True
    if nxt.lstrip()[:1] in ")]}":
        return True  # the block closes right away: it is empty
    return indent_width(nxt) <= indent_width(prev)  # nothing indented under the header


def _quote_open(line_before: str) -> bool:
    # Fallback string check without a parser: an odd number of a quote char is open.
    for q in "\"'`":
        if line_before.count(q) - line_before.count("\\" + q) & 1:
            return True
    return False


def _inside_string_or_comment(window: SyntaxWindow) -> bool:
    cur = window.byte(len(window.head))
    if cur == 0:
        return False
    node = window.tree.root_node.descendant_for_byte_range(cur - 1, cur)
    while node is not None:
        t = node.type
        if any(s in t for s in STRINGISH):
            text = node.text.decode("utf-8", "replace") if node.text else ""
            line_comment = "comment" in t and text.startswith(("//", "#", "--"))
            if node.start_byte < cur < node.end_byte or (line_comment and node.start_byte < cur <= node.end_byte):
                return True
        node = node.parent
    return False


def _last_token_opens_block(window: SyntaxWindow) -> bool | None:
    """Tree verdict on the last code token before the cursor; None = no opinion."""
    language = window.language
    before = window.head.rstrip()
    if not before:
        return None
    b = window.byte(len(before))
    node = window.tree.root_node.descendant_for_byte_range(b - 1, b)
    if node is None:
        return None
    if node.type == "comment":  # "if x:  # why" → look at the token before the comment
        return line_opens_block(before[: len(before) - len(node.text.decode("utf-8", "replace"))], language)
    parent = node.parent
    if parent is None or parent.type == "ERROR" or node.type == "ERROR":
        return None
    if node.type == ":" and language in INDENT_LANGUAGES:
        # The colon of a compound statement, not of a dict, slice, annotation or lambda.
        return parent.type.endswith(("_statement", "_definition", "_clause"))
    if node.type == "{":
        return True
    return False
