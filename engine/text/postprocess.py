"""Post-processing of a raw completion before it is shown as ghost text.

Every filter has one signature, ``(text, ctx: Context) -> str``, and one name in
``FILTERS``, the chain ``postprocess`` runs in order (``run_filters`` returns each
step's output):

- ``cut_at_unprintable``: cut before control characters and U+FFFD (garbage in an editor);
- ``keep_first_line``: single-line mode keeps the rest of the current line only;
- ``drop_unfinished_line``: multi-line output the token limit cut short ends at its last
  whole line;
- ``start_at_cursor_indentation``: at a typed indentation the completion starts with
  code, and a multi-line one keeps its shape from the cursor's indentation;
- ``cut_line_suffix_overlap``: cut where it starts reproducing the rest of the line;
- ``trim_to_scope``: multi-line, stop where it leaves the block it started in
  (tree-sitter where there is a grammar, indentation otherwise);
- ``drop_repeated_lines``: cut degenerate repetition;
- ``cut_suffix_lines_overlap``: cut where it repeats the lines below the cursor, at
  whatever indentation;
- ``trim_trailing_blanks``, ``drop_whitespace_only``: never blanks at the end of a
  line, never whitespace only.

Then ``correct_range`` decides how many characters after the cursor the item replaces
(closing brackets/quotes the completion retypes; the rest of a word the cursor sits in).

Filters only remove characters: the answer is the raw completion cut short, less blanks
at the start of its lines (``start_at_cursor_indentation``), plus at most the closing
characters the range correction re-appends (they were already on the line and the
item's range replaces them). The chain's golden files are tests/golden/postprocess/.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

from engine.text.cursor import Cursor
from engine.text.languages import BRACE_CONTINUATION, CONTINUATION
from engine.text.range_correction import PostprocessedCompletion, correct_range
from engine.text.syntax import INDENT_LANGUAGES, indent_width, line_opens_block, lines_below, only_closers
from engine.text.syntax_check import first_that_parses

log = logging.getLogger(__name__)

MIN_REPEATS = 3  # a line (or block of lines) this many times in a row is degenerate
MAX_REPEAT_BLOCK = 4  # longest block of lines checked for repetition
MIN_OVERLAP_CHARS = 3  # shortest reproduction of the line's rest that counts
SUFFIX_LINES_COMPARED = 3
MAX_SYNTAX_CUTS = 3  # shorter versions of a completion tried before showing nothing

_WORD = re.compile(r"\w")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def _lines_below(suffix: str) -> list[str]:
    """The non-blank lines after the cursor's line."""
    return [ln for ln in lines_below(suffix) if ln.strip()]


# -- filters: every one is (text, context) -> text, and only cuts -----------------------------


@dataclass(frozen=True)
class Context:
    """What every filter may look at: the cursor (engine/text/cursor.py) and the mode."""

    cursor: Cursor
    multiline: bool
    cut_short: bool = False  # the decoder stopped at its token limit: the last line may be unfinished

    @property
    def prefix(self) -> str:
        return self.cursor.prefix

    @property
    def suffix(self) -> str:
        return self.cursor.suffix

    @property
    def language(self) -> str | None:
        return self.cursor.language

    @property
    def line_before(self) -> str:
        return self.cursor.line_before

    @property
    def line_after(self) -> str:
        return self.cursor.line_after

    @property
    def at_indentation(self) -> bool:
        return self.cursor.at_indentation


Filter = Callable[[str, Context], str]


def cut_at_unprintable(text: str, ctx: Context) -> str:
    """Stop before a control character or U+FFFD: no source code wants them, and an editor
    shows them as garbage (U+FFFD is also what half of a multi-byte character decodes to)."""
    match = _UNPRINTABLE.search(text)
    return text if match is None else text[: match.start()]


def keep_first_line(text: str, ctx: Context) -> str:
    """Single-line mode: the rest of the current line only."""
    return text if ctx.multiline else text.split("\n", 1)[0]


def drop_unfinished_line(text: str, ctx: Context) -> str:
    """Multi-line output cut short by the token limit ends at its last whole line, and not at
    a line that opens a block whose body the limit cut off: neither would parse. (A single
    line is kept: it is all there is.)"""
    if not (ctx.multiline and ctx.cut_short) or "\n" not in text:
        return text
    lines = text.split("\n")[:-1]
    while len(lines) > 1 and line_opens_block(lines[-1], ctx.language):
        if lines.pop().strip() == "{" and len(lines) > 1 and not lines[-1].rstrip().endswith((";", "}", "{")):
            lines.pop()  # a brace on a line of its own: its header (`if (x)`, `void f()`) goes with it
    return "\n".join(lines)


def start_at_cursor_indentation(text: str, ctx: Context) -> str:
    """At a typed indentation, the completion starts with code, not more blanks.

    Blanks there would begin a deeper line than the one the user is on (the model writing
    the *next* line). The block is shifted left by the extra blanks: following lines that
    carry them (after the cursor's indentation) lose them too, so it keeps its shape.
    """
    if not ctx.at_indentation:
        return text
    first = text.split("\n", 1)[0]
    extra = first[: len(first) - len(first.lstrip(" \t"))]
    if not extra:
        return text
    lines = text.split("\n")
    deeper = ctx.line_before + extra
    shifted = [ctx.line_before + ln[len(deeper):] if ln.startswith(deeper) else ln for ln in lines[1:]]
    return "\n".join([first[len(extra):], *shifted])


def cut_line_suffix_overlap(text: str, ctx: Context) -> str:
    """Cut where the completion starts reproducing the rest of the current line.

    ``foo(|, b)`` + ``a, b)`` → ``a``. Closing-only rests (``)``, ``")``) are left to
    the range correction, which keeps what the completion adds after them.
    """
    rest = ctx.line_after.rstrip()
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


def trim_to_scope(text: str, ctx: Context) -> str:
    """Multi-line: stop when the completion leaves its block (tree-sitter, else indentation)."""
    if not ctx.multiline or "\n" not in text:
        return text
    try:
        end = ctx.cursor.scope_end(text)
    except Exception:  # a parser hiccup must not lose the completion
        log.exception("scope trimming failed; using indentation")
        end = None
    if end is not None:
        return text[:end]
    return trim_to_scope_by_indentation(text, ctx)


def left_its_block(completion: str, cursor: Cursor) -> bool:
    """A multi-line completion in the making has a whole line past its block: decoding on is waste."""
    whole = completion[: completion.rfind("\n")].rstrip()  # its finished lines
    return "\n" in whole and len(trim_to_scope(whole, Context(cursor, True)).rstrip()) < len(whole)


def trim_to_scope_by_indentation(text: str, ctx: Context) -> str:
    """Stop when the completion leaves the block it started in, judged by indentation.

    The reference is the cursor's line completed with the first line of ``text`` (or,
    on a blank line, the first non-blank line). If that line opens a block, the body
    must be indented deeper: the first line back at its level ends the completion. If
    not, the first line indented less than it does. A closing bracket line that ends
    the block is kept (in brace languages), the rest dropped.
    """
    line_before, language = ctx.line_before, ctx.language
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
            after = next((ln for ln in lines[i + 1:] if ln.strip()), "")
            if opened and width == base == indent_width(after) and _continues_block(after, language):
                continue  # `}` then `else` on the next line: the statement goes on
            keep = i + 1  # the closer of the block we were in: keep it, stop after
        return "\n".join(lines[:keep])[len(line_before) :]
    return text


def drop_repeated_lines(text: str, ctx: Context) -> str:
    """Cut degenerate repetition: a line or block of lines ``MIN_REPEATS`` times in a row.

    The first occurrence is kept, the rest (and everything after) dropped. Lines with
    no word characters (``}``, ``)``) never count as repetition. The first line is
    compared as the whole cursor line.
    """
    lines = text.split("\n")
    lines[0] = ctx.line_before + lines[0]
    for i in range(len(lines)):
        for period in range(1, MAX_REPEAT_BLOCK + 1):
            block = lines[i : i + period]
            if len(block) < period or not any(_WORD.search(ln) for ln in block):
                continue
            count = 1
            while lines[i + count * period : i + (count + 1) * period] == block:
                count += 1
            if count >= MIN_REPEATS:
                return "\n".join(lines[: i + period])[len(ctx.line_before) :]
    return text


def _continues_block(line: str, language: str | None) -> bool:
    """``} else {``, ``else:``, ``elif x:``, ``except E:`` continue the same statement; in brace
    languages so do ``else``/``catch`` on a line of their own and ``case 1:`` at the switch's
    indentation (engine/text/languages.py)."""
    s = line.strip()
    pattern = CONTINUATION.get(language or "python", BRACE_CONTINUATION)
    if re.fullmatch(pattern, s):
        return True
    return s[:1] in ")]}" and line_opens_block(s, language)


def _same_line(ours: str, theirs: str) -> bool:
    """Lines equal up to indentation; bracket-only lines (``}``) must match indentation too,
    so an inner ``  }`` is not the outer ``}`` below."""
    if not _WORD.search(theirs):
        return ours.rstrip() == theirs.rstrip()
    return ours.strip() == theirs.strip()


def cut_suffix_lines_overlap(text: str, ctx: Context) -> str:
    """Cut where the completion's lines repeat the lines right below the cursor.

    Compared with indentation normalised: a model that writes the suffix's next line
    one level off (``for`` at 8 spaces, the suffix's ``if`` re-indented) is repeating it.
    The first line counts only when the cursor's line is blank before the cursor.
    """
    below = [ln for ln in _lines_below(ctx.suffix)[:SUFFIX_LINES_COMPARED]]
    if not below:
        return text
    lines = text.split("\n")
    full = [ctx.line_before + lines[0], *lines[1:]]
    start = 0 if not ctx.line_before.strip() else 1
    for i in range(start, len(lines)):
        if not full[i].strip():
            continue
        ahead = [ln for ln in full[i:] if ln.strip()]
        n = min(len(ahead), len(below))
        if all(_same_line(a, b) for a, b in zip(ahead[:n], below[:n])):
            return "\n".join(lines[:i])
    return text


def trim_trailing_blanks(text: str, ctx: Context) -> str:
    """At the end of a line, no trailing blanks. Before text that stays on the line (it
    moves below a multi-line completion), keep one final newline and the indentation the
    model chose for it; further blank lines go."""
    if not ctx.line_after.strip():
        return text.rstrip()
    if not ctx.multiline:
        return text
    body = text.rstrip(" \t\n")
    tail = text[len(body) :]
    if tail.count("\n") > 1:
        return body + tail[: tail.index("\n") + 1]  # cut after the first newline: still a prefix
    return text


def drop_whitespace_only(text: str, ctx: Context) -> str:
    return text if text.strip() else ""


# The chain, in order; each step is named for traces and tests.
FILTERS: tuple[tuple[str, Filter], ...] = (
    ("cut_at_unprintable", cut_at_unprintable),
    ("keep_first_line", keep_first_line),
    ("drop_unfinished_line", drop_unfinished_line),
    ("start_at_cursor_indentation", start_at_cursor_indentation),
    ("cut_line_suffix_overlap", cut_line_suffix_overlap),
    ("trim_to_scope", trim_to_scope),
    ("drop_repeated_lines", drop_repeated_lines),
    ("cut_suffix_lines_overlap", cut_suffix_lines_overlap),
    ("trim_trailing_blanks", trim_trailing_blanks),
    ("drop_whitespace_only", drop_whitespace_only),
)


# -- entry point ---------------------------------------------------------------------------


def run_filters(text: str, ctx: Context) -> list[tuple[str, str]]:
    """Every step's output in order, as (step name, text): a trace of the chain."""
    trace = []
    for name, step in FILTERS:
        text = step(text, ctx)
        trace.append((name, text))
    return trace


def keep_the_file_parsing(result: PostprocessedCompletion, ctx: Context) -> PostprocessedCompletion:
    """A completion the model ended itself is finished code. If splicing it in leaves more
    parse errors than the file has without it (a block opener where a statement belongs, a
    call closed where the file goes on), it is cut back to the longest run of its whole lines
    that does not, or nothing is shown: no ghost text beats wrong ghost text."""
    lines = result.text.split("\n")
    shorter = ["\n".join(lines[:n]).rstrip() for n in range(len(lines) - 1, 0, -1)][:MAX_SYNTAX_CUTS]
    candidates = [result, *(correct_range(text, ctx.line_after) for text in shorter if text.strip())]
    try:
        keep = first_that_parses(ctx.cursor, [(c.text, c.replace_after) for c in candidates])
    except Exception:  # a parser hiccup must not lose the completion
        log.exception("syntax check failed; keeping the completion")
        return result
    return candidates[keep] if keep is not None else PostprocessedCompletion("", 0)


def postprocess(
    completion: str, cursor: Cursor, *, multiline: bool | None = None, cut_short: bool = False, ended: bool = False,
) -> PostprocessedCompletion:
    """Turn a raw completion into what the editor shows (see the module docstring).

    ``multiline``: post-process as a block (True) or a line (False); None: as the cursor decided.
    ``cut_short``: the decoder stopped at its token limit rather than at a stop.
    ``ended``: the model ended the completion itself (end of text or a stop string), so it
    must leave the file parsing (`keep_the_file_parsing`); an answer the budget or the token
    limit cut short is the start of one and is not judged."""
    ctx = Context(cursor, cursor.multiline if multiline is None else multiline, cut_short)
    text = run_filters(completion, ctx)[-1][1] if completion.strip() else ""
    if not text:
        return PostprocessedCompletion("", 0)
    result = correct_range(text, ctx.line_after)
    if ended:
        result = keep_the_file_parsing(result, ctx)
    if result.text == ctx.line_after[: result.replace_after] or not result.text.strip():
        return PostprocessedCompletion("", 0)  # the item would change nothing
    return result
