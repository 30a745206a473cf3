"""The output's text as the decoder writes it: the stop strings that end it at a cursor, and the
growing list of output tokens turned into text, streamed in deltas and cut before a stop string."""

from __future__ import annotations

from typing import Sequence

from engine.text.cursor import Cursor
from engine.text.syntax import NEAR_CHARS, lines_below, only_closers


def stop_strings_for(cursor: Cursor, multiline: bool | None = None) -> list[str]:
    """Strings at which the decoder may stop early (it cuts the text before them).

    Single line: the newline, and the rest of the current line when it is distinctive
    (the model reproducing it means the middle is done). Multi-line: the next non-blank
    line below the cursor, at its own indentation, on a line of its own. (`multiline` None: the cursor's.)
    """
    suffix, line_after = cursor.suffix, cursor.line_after
    stops: list[str] = []
    if not (cursor.multiline if multiline is None else multiline):
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


class TextStream:
    def __init__(self, tokenizer, stop_strings: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop_strings = [s for s in stop_strings if s]
        self.text = ""
        self.sent = 0
        self.stopped = False

    def update(self, token_ids: list[int]) -> str:
        """Decode all output so far; return the newly safe text. Sets `stopped` on a stop string."""
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        cut = min((i for i in (text.find(s) for s in self.stop_strings) if i >= 0), default=-1)
        if cut >= 0:
            text, self.stopped = text[:cut], True
        self.text = text
        # A trailing U+FFFD is usually half of a multi-byte character: wait for the rest.
        safe = len(text) if self.stopped else self._held_back(text.rstrip("\ufffd"))
        return self._send_until(safe)

    def _held_back(self, text: str) -> int:
        """Where the text that could still become the start of a stop string begins: only that is
        held back from deltas. (A fixed hold-back of the longest stop's length delayed a multi-line
        answer's first line by up to a whole line, since its stop is the next line of the file.)"""
        partial = max((k for stop in self.stop_strings for k in range(1, min(len(stop), len(text) + 1))
                       if text.endswith(stop[:k])), default=0)
        return len(text) - partial

    def finish(self) -> str:
        return self._send_until(len(self.text))

    def _send_until(self, end: int) -> str:
        if end <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent:end], end
        return delta
