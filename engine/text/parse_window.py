"""The window of text around the cursor that gets parsed: where it starts and where it ends.

Only a window is parsed, so a 5 MB document costs the same as a small one. It starts at a
top-level line above the cursor and ends at the first top-level line below, so the construct
the cursor is in is whole and what is wrong elsewhere is none of its business. "Top-level"
depends on the language (engine/text/languages.py): a C return type above its function's name, a
brace on a line of its own, a Rust `where` clause or an unindented C++ namespace body are
not where a construct starts.
"""

from __future__ import annotations

from engine.text.languages import SPLIT_DECLARATION_LANGUAGES

# How much text around the cursor gets parsed.
WINDOW_PREFIX_CHARS = 32_000
WINDOW_SUFFIX_CHARS = 8_000


def _clean_boundary(text: str, line_start: int, language: str | None) -> bool:
    """Does the line starting at ``line_start`` begin a top-level construct? It is unindented and
    no closer; in languages whose declarations span top-level lines, it is no lone ``{`` and the
    line above it ended what it was (``;``, a bracket, a directive or comment, or nothing)."""
    ch = text[line_start : line_start + 1]
    if not ch or ch.isspace() or ch in ")]}":
        return False
    if language not in SPLIT_DECLARATION_LANGUAGES:
        return True
    if ch == "{":
        return False
    if line_start == 0:
        return True
    above = text[text.rfind("\n", 0, line_start - 1) + 1 : line_start - 1].strip()
    return not above or above.endswith((";", "}", "{", "*/")) or above.startswith(("#", "//"))


def window_start(prefix: str, max_chars: int = WINDOW_PREFIX_CHARS, language: str | None = None) -> int:
    """Where to start parsing: a top-level (unindented) line not too far above the cursor.

    In languages whose blocks may leave their body unindented (a C++ ``namespace util {``),
    a top-level line inside such a block is no start: the window would end with its closing
    brace unmatched. The window starts at the outermost such block still open above."""
    lo = max(0, len(prefix) - max_chars)
    start = _clean_line_above(prefix, len(prefix), lo, language)
    if language in SPLIT_DECLARATION_LANGUAGES:
        opener = _unclosed_opener(prefix, lo, start)
        if opener is not None:
            start = _clean_line_above(prefix, opener, lo, language)
    return start


def _clean_line_above(prefix: str, end: int, lo: int, language: str | None) -> int:
    """The start of the nearest clean top-level line that starts at or before ``end`` (after ``lo``)."""
    pos = prefix.rfind("\n", lo, end)
    while pos > lo:
        # A top-level line (no indent, not a closer) is a clean place to start parsing.
        if _clean_boundary(prefix, pos + 1, language):
            return pos + 1
        pos = prefix.rfind("\n", lo, pos)
    if lo == 0:
        return 0
    nl = prefix.find("\n", lo)
    return nl + 1 if nl != -1 else lo


def _unclosed_opener(prefix: str, lo: int, start: int) -> int | None:
    """Where the outermost unindented line that opens a brace block between ``lo`` and ``start``
    begins, if no unindented closer below it closes it before ``start``; None when all are closed."""
    openers: list[int] = []
    pos = lo if lo == 0 else prefix.find("\n", lo, start) + 1 or start  # whole lines only
    while pos < start:
        end = prefix.find("\n", pos, start)
        end = start if end == -1 else end
        line = prefix[pos:end]
        if line[:1] == "}":
            if openers:
                openers.pop()
        elif line[:1] and not line[:1].isspace() and not line.startswith(("#", "//", "/*", "*")):
            if line.split("//", 1)[0].rstrip().endswith("{"):
                openers.append(pos)
        pos = end + 1
    return openers[0] if openers else None


def window_end(suffix: str, max_chars: int = WINDOW_SUFFIX_CHARS, language: str | None = None) -> tuple[int, bool]:
    """Where to stop parsing after the cursor, and whether that is a clean place: the first
    top-level line below the cursor's (the construct the cursor is in is whole before it, and
    what is wrong further down is none of its business), else the end of the text; without
    either in reach (a Java class is the whole file), a place that is not clean: after the last
    lone closing brace in reach at the least indentation (the end of a member, not the middle
    of a comment or a string), else after the last whole line in reach."""
    pos = suffix.find("\n", 0, max_chars)
    while pos != -1 and pos + 1 < max_chars:
        ch = suffix[pos + 1 : pos + 2]
        if ch and not ch.isspace() and ch not in ")]}" and not (ch == "{" and language in SPLIT_DECLARATION_LANGUAGES):
            return pos + 1, True
        pos = suffix.find("\n", pos + 1, max_chars)
    if len(suffix) <= max_chars:
        return len(suffix), True
    last = suffix.rfind("\n", 0, max_chars)
    best, best_indent, start = None, None, suffix.find("\n") + 1
    while 0 < start <= last:
        end = suffix.find("\n", start, last + 1)
        line = suffix[start:end]
        if line.strip() in ("}", "};") and (best_indent is None or len(line) - len(line.lstrip()) <= best_indent):
            best, best_indent = end + 1, len(line) - len(line.lstrip())
        start = end + 1
    if best is not None:
        return best, False
    return (last + 1 if last != -1 else max_chars), False
