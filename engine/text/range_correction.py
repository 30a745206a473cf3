"""Range correction: how many characters after the cursor a completion item replaces.

The last step of post-processing (engine.text.postprocess): an inline completion item may
replace text after the cursor on its line, which is how closing brackets the completion
retypes (``foo(|)`` + ``a, b)``) or the rest of a word the cursor sits in (``pri|nt`` +
``ntln``) do not end up twice in the editor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.text.syntax import only_closers

_WORD_AT_START = re.compile(r"\w+")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_QUOTES = "\"'`"


@dataclass
class PostprocessedCompletion:
    text: str
    replace_after: int = 0  # chars after the cursor, on the cursor's line, that text replaces


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
