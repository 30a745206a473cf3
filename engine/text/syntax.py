"""Syntax: language detection, tree-sitter parsers, line helpers, block heuristics, a
completion's scope and the syntax errors in a text. (What holds at the cursor itself, the
single- or multi-line decision among it, is engine/text/cursor.py.)

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
import ast
import threading
import warnings
from dataclasses import dataclass

from engine.text.languages import (
    BLOCK_TYPES,
    EXTENSIONS,
    GRAMMARS,
    INDENT_LANGUAGES,
    LANGUAGE_IDS,
    LINE_COMMENT,
)

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


# -- syntactic scope (used by postprocess) ---------------------------------------------------


def scope_end(head: str, completion: str, tail: str, language: str | None) -> int | None:
    """Offset in ``completion`` where the block the completion started in ends.

    Parses ``head + completion + tail`` (the syntax window around the cursor with the
    completion put in: engine/text/cursor.py), finds the innermost block (``BLOCK_TYPES``)
    holding the completion's first non-blank character, and returns where that block ends if
    it ends inside the completion, ``len(completion)`` if it does not. None when there is no
    grammar, the completion starts at top level, or the block does not parse cleanly: the
    caller then falls back to indentation.
    """
    types = BLOCK_TYPES.get(language or "")
    if not types or get_parser(language) is None:
        return None
    stripped = completion.lstrip()
    if not stripped:
        return None
    text = head + completion + tail
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


# -- syntax errors (post-processing's check, `bench quality`'s parses) ------------------------


@dataclass(frozen=True)
class SyntaxErrors:
    count: int  # tree-sitter's ERROR and MISSING nodes
    first_row: int | None  # row (0-based) of the first error of any kind
    broken_rows: tuple[int, ...]  # rows of text tree-sitter could not parse (its ERROR nodes), sorted
    compiler_row: int | None = None  # Python: the row of the compiler's first error (None: it compiles)
    closer_rows: tuple[int, ...] = ()  # rows of the ERROR nodes that hold a closing bracket, sorted


def syntax_errors(language: str | None, text: str, tree=None) -> SyntaxErrors | None:
    """What the parser could not make sense of in ``text`` (None without a grammar); ``tree``:
    its tree when it was parsed already."""
    tree = tree if tree is not None else parse(language, text)
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
