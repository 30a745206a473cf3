"""Syntax around the cursor: language detection, tree-sitter parsers, single- vs multi-line.

Parsers come from the per-language grammar wheels (tree-sitter-python, -javascript,
-typescript, -go, -rust, -java, -c, -cpp, -c-sharp; engine/text/languages.py says which language
uses which), which work offline. Only a window of text around the cursor is
parsed, so a 5 MB document costs the same as a small one. Languages without a grammar
fall back to indentation and bracket heuristics.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from engine.text.languages import (
    BLOCK_TYPES,
    EXTENSIONS,
    GRAMMARS,
    INDENT_LANGUAGES,
    LANGUAGE_IDS,
    LINE_COMMENT,
    STRINGISH,
)
from engine.text.parse_window import WINDOW_PREFIX_CHARS, WINDOW_SUFFIX_CHARS, window_end, window_start  # noqa: F401

log = logging.getLogger(__name__)

_PY_HEADER = re.compile(
    r"^\s*(?:async\s+)?(?:def|class|if|elif|else|for|while|with|try|except|finally|match|case)\b.*:\s*$"
    r"|^\s*(?:else|try|finally)\s*:\s*$"
)
_CLOSERS = set(")]}\"'`;,:.")


def language_from(language_id: str | None, path: str | None) -> str | None:
    """Our language name from an LSP languageId (preferred) or the file extension."""
    if language_id:
        lid = language_id.strip().lower()
        return LANGUAGE_IDS.get(lid, lid or None)
    if path:
        return EXTENSIONS.get(os.path.splitext(path)[1].lower())
    return None


@functools.cache
def _language(language: str):
    import tree_sitter

    module, func = GRAMMARS[language]
    return tree_sitter.Language(getattr(importlib.import_module(module), func)())


@functools.cache
def get_parser(language: str | None):
    """A cached tree-sitter parser, or None when there is no grammar for ``language``."""
    if language not in GRAMMARS:
        return None
    try:
        import tree_sitter

        return tree_sitter.Parser(_language(language))
    except Exception as exc:  # a missing or broken grammar wheel must not break completion
        log.warning("no tree-sitter parser for %s (%s); using indentation heuristics", language, exc)
        return None


# Parser objects are not thread-safe; the LSP thread and the engine worker may both parse.
_parse_lock = threading.Lock()


def parse(language: str | None, text: str):
    """Parse ``text`` (a window, not a whole document) or return None without a grammar."""
    parser = get_parser(language)
    if parser is None:
        return None
    with _parse_lock:
        return parser.parse(text.encode("utf-8"))


# -- text helpers ---------------------------------------------------------------------


def indent_width(line: str) -> int:
    ws = line[: len(line) - len(line.lstrip(" \t"))]
    return len(ws.expandtabs(4))


def current_line_parts(prefix: str, suffix: str) -> tuple[str, str]:
    """(text before the cursor on its line, text after the cursor on its line)."""
    end = suffix.find("\n")
    return prefix[prefix.rfind("\n") + 1 :], suffix if end == -1 else suffix[:end]


# Line look-ups near the cursor read at most this many characters, whatever the size
# of the document.
NEAR_CHARS = 16_000


def lines_above(prefix: str, limit: int = 200) -> list[str]:
    """Up to ``limit`` whole lines above the cursor's line, nearest last."""
    window = prefix[-NEAR_CHARS:]
    lines = window.split("\n")[:-1]  # the last piece is the cursor's own line
    if len(prefix) > NEAR_CHARS and lines:
        lines = lines[1:]  # the first piece may be a partial line
    return lines[-limit:]


def lines_below(suffix: str, limit: int = 200) -> list[str]:
    """Up to ``limit`` whole lines below the cursor's line, nearest first.

    The last one lacks a final newline only when it is the end of the document.
    """
    window = suffix[:NEAR_CHARS]
    lines = window.split("\n")[1:]  # the first piece is the rest of the cursor's line
    if len(suffix) > NEAR_CHARS and lines:
        lines = lines[:-1]  # the last piece may be a partial line
    return lines[:limit]


def only_closers(text: str) -> bool:
    """True when ``text`` holds nothing but closing brackets/quotes/punctuation."""
    return all(c in _CLOSERS or c.isspace() for c in text)


def _strip_line_comment(line: str, language: str | None) -> str:
    # Naive (ignores strings); only used to see the last code token of a line.
    marker = LINE_COMMENT.get(language, "//")
    idx = line.find(marker)
    return line[:idx] if idx != -1 else line


def line_opens_block(line: str, language: str | None) -> bool:
    """Text heuristic: does this line end by opening a block?"""
    code = _strip_line_comment(line, language).rstrip()
    if code.endswith("{"):
        return True
    if language in INDENT_LANGUAGES or language is None:
        # `def f(x:` is an annotation inside open brackets, not a header.
        balanced = all(code.count(o) == code.count(c) for o, c in ("()", "[]", "{}"))
        return balanced and bool(_PY_HEADER.match(code))
    return False


def _quote_open(line_before: str) -> bool:
    # Fallback string check without a parser: an odd number of a quote char is open.
    for q in "\"'`":
        if line_before.count(q) - line_before.count("\\" + q) & 1:
            return True
    return False


# -- tree-sitter helpers ----------------------------------------------------------------

@dataclass
class _Window:
    text: str
    cursor: int  # char offset of the cursor in text
    tree: object

    def byte(self, char_offset: int) -> int:
        return len(self.text[:char_offset].encode("utf-8"))


def _parse_window(prefix: str, suffix: str, language: str | None) -> _Window | None:
    if get_parser(language) is None:
        return None
    start = window_start(prefix, language=language)
    text = prefix[start:] + suffix[:WINDOW_SUFFIX_CHARS]
    tree = parse(language, text)
    return _Window(text, len(prefix) - start, tree) if tree is not None else None


def _inside_string_or_comment(win: _Window) -> bool:
    cur = win.byte(win.cursor)
    if cur == 0:
        return False
    node = win.tree.root_node.descendant_for_byte_range(cur - 1, cur)
    while node is not None:
        t = node.type
        if any(s in t for s in STRINGISH):
            text = node.text.decode("utf-8", "replace") if node.text else ""
            line_comment = "comment" in t and text.startswith(("//", "#", "--"))
            if node.start_byte < cur < node.end_byte or (line_comment and node.start_byte < cur <= node.end_byte):
                return True
        node = node.parent
    return False


def _last_token_opens_block(win: _Window, language: str) -> bool | None:
    """Tree verdict on the last code token before the cursor; None = no opinion."""
    before = win.text[: win.cursor].rstrip()
    if not before:
        return None
    b = win.byte(len(before))
    node = win.tree.root_node.descendant_for_byte_range(b - 1, b)
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


# -- single- vs multi-line ------------------------------------------------------------------


def decide_multiline(prefix: str, suffix: str, language: str | None) -> bool:
    """Should the completion be a multi-line block (True) or the rest of this line (False)?

    - text (other than closing brackets/quotes) after the cursor → single line;
    - end of a line that opens a block (``def f():``, ``{``) → multi-line;
    - on a blank line inside an empty block / empty body (or an empty document) → multi-line;
    - otherwise single line.
    """
    line_before, line_after = current_line_parts(prefix, suffix)
    if line_after.strip() and not only_closers(line_after):
        return False

    win = _parse_window(prefix, suffix, language)
    if win is not None:
        if _inside_string_or_comment(win):
            return False
    elif _quote_open(line_before):
        return False

    if line_before.strip():
        if win is not None:
            verdict = _last_token_opens_block(win, language)
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


# -- syntactic scope (used by postprocess) ---------------------------------------------------


def scope_end(prefix: str, completion: str, suffix: str, language: str | None) -> int | None:
    """Offset in ``completion`` where the block the completion started in ends.

    Parses prefix-window + completion + suffix-window, finds the innermost block
    (``BLOCK_TYPES``) holding the completion's first non-blank character, and returns
    where that block ends if it ends inside the completion, ``len(completion)`` if it
    does not. None when there is no grammar, the completion starts at top level, or the
    block does not parse cleanly: the caller then falls back to indentation.
    """
    types = BLOCK_TYPES.get(language or "")
    if not types or get_parser(language) is None:
        return None
    stripped = completion.lstrip()
    if not stripped:
        return None
    start = window_start(prefix, language=language)
    head = prefix[start:]
    text = head + completion + suffix[:WINDOW_SUFFIX_CHARS]
    tree = parse(language, text)
    if tree is None:
        return None
    first = len(head) + len(completion) - len(stripped)
    first_b = len(text[:first].encode("utf-8"))
    comp_end_b = len((head + completion).encode("utf-8"))
    node = tree.root_node.descendant_for_byte_range(first_b, first_b + 1)
    while node is not None and node.type not in types:
        node = node.parent
    if node is None:
        return None  # top level: no block to leave; indentation may still see one close
    if node.has_error:
        return None
    if node.end_byte >= comp_end_b:
        return len(completion)
    end_chars = len(text.encode("utf-8")[: node.end_byte].decode("utf-8", "ignore"))
    return max(0, end_chars - len(head))
