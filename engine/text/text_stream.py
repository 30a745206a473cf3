"""Turns the growing list of output tokens into text: streamed deltas and stop strings."""

from __future__ import annotations

from typing import Sequence


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
