"""Post-processing of a raw completion before it is shown as ghost text.

Each filter is a small pure function (text in, text out) with its own table of tests;
``postprocess`` chains them:

0. cut before control characters and U+FFFD (garbage in an editor);
1. single-line mode keeps the rest of the current line only;
2. cut where the completion starts reproducing the rest of the current line;
3. multi-line mode: trim to the syntactic scope the completion started in
   (tree-sitter where there is a grammar, indentation otherwise), drop degenerate
   repetition, cut where it reproduces the lines below the cursor;
4. never answer whitespace only;
5. range correction: how many characters after the cursor the item replaces (closing
   brackets/quotes the completion retypes; the rest of a word the cursor sits in).

Every filter only cuts, so the answer is always a prefix of the raw completion, plus at
most the closing characters the range correction re-appends (they were already on the
line and the item's range replaces them).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from engine.syntax import (
    INDENT_LANGUAGES,
    NEAR_CHARS,
    current_line_parts,
    indent_width,
    line_opens_block,
    lines_below,
    only_closers,
    scope_end,
)

log = logging.getLogger(__name__)

MIN_REPEATS = 3  # a line (or block of lines) this many times in a row is degenerate
MAX_REPEAT_BLOCK = 4  # longest block of lines checked for repetition
MIN_OVERLAP_CHARS = 3  # shortest reproduction of the line's rest that counts
SUFFIX_LINES_COMPARED = 3

_WORD = re.compile(r"\w")
_WORD_AT_START = re.compile(r"\w+")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_QUOTES = "\"'`"


@dataclass
class PostprocessedCompletion:
    text: str
    replace_after: int = 0  # chars after the cursor, on the cursor's line, that text replaces


# -- stop strings for the decoder --------------------------------------------------------


def _lines_below(suffix: str) -> list[str]:
    """The non-blank lines after the cursor's line."""
    return [ln for ln in lines_below(suffix) if ln.strip()]


def stop_strings_for(suffix: str, multiline: bool) -> list[str]:
    """Strings at which the decoder may stop early (it cuts the text before them).

    Single line: the newline, and the rest of the current line when it is distinctive
    (the model reproducing it means the middle is done). Multi-line: the next non-blank
    line below the cursor, at its own indentation, on a line of its own.
    """
    _, line_after = current_line_parts("", suffix)
    stops: list[str] = []
    if not multiline:
        stops.append("\n")
        rest = line_after.rstrip()  # leading blanks kept: "a if c| else b" stops at " else b"
        if len(rest.strip()) >= 4 and not only_closers(rest):
            stops.append(rest)
        return stops
    below = lines_below(suffix)
    for i, line in enumerate(below):
        if line.strip():
            stop = "\n" + line.rstrip()
            if i + 1 < len(below) or len(suffix) > NEAR_CHARS:
                stop += "\n"  # whole line only, so "return x" does not stop "return xs"
            stops.append(stop)
            break
    return stops


# -- filters ---------------------------------------------------------------------------


def keep_first_line(text: str) -> str:
    """Single-line mode: the rest of the current line only."""
    return text.split("\n", 1)[0]


def cut_line_suffix_overlap(text: str, line_after: str) -> str:
    """Cut where the completion starts reproducing the rest of the current line.

    ``foo(|, b)`` + ``a, b)`` → ``a``. Closing-only rests (``)``, ``")``) are left to
    the range correction, which keeps what the completion adds after them.
    """
    rest = line_after.rstrip()
    if not rest.strip() or only_closers(rest):
        return text
    first = text.split("\n", 1)[0]
    need = min(len(rest.strip()), MIN_OVERLAP_CHARS)
    for j in range(len(first)):
        tail = first[j:].rstrip()
        if len(tail.strip()) < need:
            break
        if tail.startswith(rest) or rest.startswith(tail):
            return first[:j]
    return text


def cut_suffix_lines_overlap(text: str, line_before: str, suffix: str) -> str:
    """Cut where the completion's lines repeat the lines right below the cursor.

    Compared whole lines, indentation included, so an inner ``  }`` does not match the
    outer ``}`` below. The first line counts only when the cursor's line is blank.
    """
    below = [ln.rstrip() for ln in _lines_below(suffix)[:SUFFIX_LINES_COMPARED]]
    if not below:
        return text
    lines = text.split("\n")
    full = [line_before + lines[0], *lines[1:]]
    start = 0 if not line_before.strip() else 1
    for i in range(start, len(lines)):
        if not full[i].strip():
            continue
        ahead = [ln.rstrip() for ln in full[i:] if ln.strip()]
        n = min(len(ahead), len(below))
        if ahead[:n] == below[:n]:
            return "\n".join(lines[:i])
    return text


def drop_repeated_lines(text: str, line_before: str = "", min_repeats: int = MIN_REPEATS) -> str:
    """Cut degenerate repetition: a line or block of lines ``min_repeats`` times in a row.

    The first occurrence is kept, the rest (and everything after) dropped. Lines with
    no word characters (``}``, ``)``) never count as repetition. The first line is
    compared as the whole cursor line (``line_before`` + its text).
    """
    lines = text.split("\n")
    lines[0] = line_before + lines[0]
    for i in range(len(lines)):
        for period in range(1, MAX_REPEAT_BLOCK + 1):
            block = lines[i : i + period]
            if len(block) < period or not any(_WORD.search(ln) for ln in block):
                continue
            count = 1
            while lines[i + count * period : i + (count + 1) * period] == block:
                count += 1
            if count >= min_repeats:
                return "\n".join(lines[: i + period])[len(line_before) :]
    return text


def _continues_block(line: str, language: str | None) -> bool:
    """``} else {``, ``else:``, ``elif x:``, ``except E:`` continue the same statement."""
    s = line.strip()
    if language in INDENT_LANGUAGES or language is None:
        if re.match(r"(elif\b.*|else|except\b.*|finally|case\b.*):$", s):
            return True
    return s[:1] in ")]}" and line_opens_block(s, language)


def trim_to_scope_by_indentation(text: str, line_before: str, language: str | None) -> str:
    """Stop when the completion leaves the block it started in, judged by indentation.

    The reference is the cursor's line completed with the first line of ``text`` (or,
    on a blank line, the first non-blank line). If that line opens a block, the body
    must be indented deeper: the first line back at its level ends the completion. If
    not, the first line indented less than it does. A closing bracket line that ends
    the block is kept (in brace languages), the rest dropped.
    """
    lines = (line_before + text).split("\n")
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        return text
    base = indent_width(lines[first])
    opened = first == 0 and line_opens_block(lines[0], language)
    for i in range(first + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        width = indent_width(line)
        if (width > base) if opened else (width >= base):
            continue
        if opened and width == base and _continues_block(line, language):
            continue
        keep = i
        if language not in INDENT_LANGUAGES and line.lstrip()[:1] in ")]}":
            keep = i + 1  # the closer of the block we were in: keep it, stop after
        return "\n".join(lines[:keep])[len(line_before) :]
    return text


def trim_to_scope(text: str, prefix: str, suffix: str, language: str | None) -> str:
    """Stop when the completion leaves its block: tree-sitter, else indentation."""
    if "\n" not in text:
        return text
    end = scope_end(prefix, text, suffix, language)
    if end is not None:
        return text[:end]
    line_before, _ = current_line_parts(prefix, suffix)
    return trim_to_scope_by_indentation(text, line_before, language)


_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def cut_at_unprintable(text: str) -> str:
    """Stop before a control character or U+FFFD: no source code wants them, and an editor
    shows them as garbage (U+FFFD is also what half of a multi-byte character decodes to)."""
    match = _UNPRINTABLE.search(text)
    return text if match is None else text[: match.start()]


def drop_whitespace_only(text: str) -> str:
    return text if text.strip() else ""


# -- range correction --------------------------------------------------------------------


def _match_closers(text: str, closers: str) -> tuple[int, int]:
    """How many leading non-space chars of ``closers`` the completion types itself.

    Scans ``text`` tracking the brackets and strings it opens; a closing bracket or
    quote at depth zero is the completion retyping the next char of ``closers``.
    Returns (matched count, index in ``closers`` just after the last match).
    """
    expected = [(i, c) for i, c in enumerate(closers) if not c.isspace()]
    k = 0
    pos = 0
    stack: list[str] = []
    in_str: str | None = None
    # Cursor inside a string (`print("|")`): the first matching quote closes it.
    if expected and expected[0][1] in _QUOTES:
        in_str = expected[0][1]
    prev = ""
    for ch in text:
        if k == len(expected):
            break
        want = expected[k][1]
        if in_str is not None:
            if ch == in_str and prev != "\\":
                if not stack and k == 0 and want == ch:
                    k, pos = 1, expected[0][0] + 1
                in_str = None
        elif ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif ch in ")]}":
            if stack and stack[-1] == ch:
                stack.pop()
            elif not stack and ch == want:
                k, pos = k + 1, expected[k][0] + 1
        elif ch in _QUOTES:
            if not stack and ch == want:
                k, pos = k + 1, expected[k][0] + 1
            else:
                in_str = ch
        elif not stack and ch == want:  # ; , : .
            k, pos = k + 1, expected[k][0] + 1
        prev = ch if prev != "\\" else ""
    return k, pos


def correct_range(text: str, line_after: str) -> PostprocessedCompletion:
    """Decide how many chars after the cursor the item replaces.

    - cursor before closing brackets/quotes (``foo(|)``): when the completion types
      them itself, replace them, re-appending any it left out;
    - cursor inside a word (``pri|nt``): when the completion starts by retyping the
      rest of the word, replace that rest.
    """
    if not text or not line_after:
        return PostprocessedCompletion(text, 0)
    word = _WORD_AT_START.match(line_after)
    if word:
        if text.startswith(word.group()):
            return PostprocessedCompletion(text, len(word.group()))
        return PostprocessedCompletion(text, 0)
    closers = line_after.rstrip()
    if not closers or not only_closers(closers):
        return PostprocessedCompletion(text, 0)
    matched, pos = _match_closers(text, closers)
    if matched == 0:
        return PostprocessedCompletion(text, 0)
    return PostprocessedCompletion(text + closers[pos:], len(closers))


# -- entry point ---------------------------------------------------------------------------


def postprocess(
    completion: str, *, prefix: str, suffix: str, language: str | None, multiline: bool
) -> PostprocessedCompletion:
    """Turn a raw completion into what the editor shows (see the module docstring)."""
    empty = PostprocessedCompletion("", 0)
    if not completion.strip():
        return empty
    line_before, line_after = current_line_parts(prefix, suffix)
    text = cut_at_unprintable(completion)
    if not multiline:
        text = keep_first_line(text)
    text = cut_line_suffix_overlap(text, line_after)
    if multiline and "\n" in text:
        try:
            text = trim_to_scope(text, prefix, suffix, language)
        except Exception:  # a parser hiccup must not lose the completion
            log.exception("scope trimming failed; using indentation")
            text = trim_to_scope_by_indentation(text, line_before, language)
        text = drop_repeated_lines(text, line_before)
        text = cut_suffix_lines_overlap(text, line_before, suffix)
    if not line_after.strip():
        text = text.rstrip()
    elif multiline:
        # The rest of the line moves below the completion: keep a final newline and the
        # indentation the model chose for it; trailing blank lines go (cut after the
        # first newline, so the answer stays a prefix of the completion).
        body = text.rstrip(" \t\n")
        tail = text[len(body) :]
        if tail.count("\n") > 1:
            text = body + tail[: tail.index("\n") + 1]
    text = drop_whitespace_only(text)
    if not text:
        return empty
    result = correct_range(text, line_after)
    if result.text == line_after[: result.replace_after] or not result.text.strip():
        return empty  # the item would change nothing
    return result
