"""When a decode stops: the reasons, and every rule the decoding loop asks about (no torch here).

The loop asks `Stops` twice: between layers and prefill chunks (`interrupts`: the cancel flag and
the deadline, so no forward runs an answer late), and once after each pass (`after_pass`: EOS, stop
strings, the caller's line check, max tokens, cancel, deadline). The output's text streams out
through it, since a stop string decides both where the text ends and what may be sent yet.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Any, Callable, Sequence

from engine.text.text_stream import TextStream


class StopReason(str, enum.Enum):
    EOS = "eos"
    STOP_STRING = "stop_string"
    MAX_NEW_TOKENS = "max_new_tokens"
    DEADLINE = "deadline"
    CANCELLED = "cancelled"


def stop_token_ids(model, tokenizer, extra_tokens: Sequence[str] = ()) -> list[int]:
    """The token ids that end an output: the model's and the tokenizer's end of text, and `extra_tokens`
    (by their text, such as a FIM template's separators) where the vocabulary has them."""
    ids = set()
    eos = model.generation_config.eos_token_id
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    for token in extra_tokens:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return sorted(ids)


class Deadline:
    """When the caller wants its answer. Without `answer`, reaching it ends the decode: what is
    verified is the answer. With it, `answer` is called once, then and there, and decoding goes on."""

    def __init__(self, config, answer: Callable[[], None] | None) -> None:
        self.config = config  # its `deadline` is read at each check: the caller may move it
        self.answer = answer
        self.answered = False

    def ends_decode(self, work_ends: float) -> bool:
        """Whether work that ends at `work_ends` (a time.monotonic() value) would end past the
        deadline and so must not be done; answers instead, the first time, where there is `answer`."""
        deadline = self.config.deadline
        if deadline is None or self.answered or work_ends < deadline:
            return False
        if self.answer is None:
            return True
        self.answered = True
        self.answer()
        return False


class Stops:
    """Every rule that ends one decode. `config` is its GenerationConfig (engine/decoding/decoder.py);
    `so_far()` makes the result so far, which `on_deadline` gets at the deadline and `on_line` (after
    that) each time the text gains a line break. `on_text` gets the text as it becomes safe to show."""

    def __init__(self, config, tokenizer, cancel: threading.Event | None, so_far: Callable[[], Any], *,
                 on_text: Callable[[str], None] | None = None,
                 on_deadline: Callable[[Any], None] | None = None,
                 on_line: Callable[[Any], None] | None = None) -> None:
        self.config = config
        self.cancel = cancel
        self.stream = TextStream(tokenizer, config.stop_strings) if tokenizer is not None else None
        self.so_far = so_far
        self.on_text = on_text
        self.on_line = on_line
        self.deadline = Deadline(config, (lambda: on_deadline(so_far())) if on_deadline is not None else None)

    @property
    def text(self) -> str:
        """The output's text so far, cut before a stop string ("" without a tokenizer)."""
        return self.stream.text if self.stream is not None else ""

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def interrupts(self) -> bool:
        """Asked between layers and prefill chunks: True ends the forward (kv.PassCancelled)."""
        return self.cancelled() or self.deadline.ends_decode(time.monotonic())

    def interrupted(self) -> StopReason:
        """Why a forward was ended by `interrupts`."""
        return StopReason.CANCELLED if self.cancelled() else StopReason.DEADLINE

    def through_eos(self, new: list[int]) -> list[int]:
        """A pass's new tokens up to and with the first end-of-text token: the output ends there."""
        for i, token in enumerate(new):
            if token in self.config.eos_token_ids:
                return new[: i + 1]
        return new

    def after_pass(self, output: list[int], pass_started: float) -> StopReason | None:
        """Asked once after each pass, with the output so far (cut by `through_eos`): why the decode
        ends there, or None to go on. Sends the text the pass made safe to show."""
        stop = StopReason.EOS if output[-1] in self.config.eos_token_ids else None
        if self.stream is not None:
            delta = self.stream.update(output)
            if self.stream.stopped or self._done_at_line(delta):
                stop = StopReason.STOP_STRING
            self._send(delta)
            if stop is None and "\n" in delta and self.deadline.answered and self.on_line is not None:
                self.on_line(self.so_far())  # decoding on after the answer: a finished line is worth showing at once
        if stop is not None:
            return stop
        if len(output) >= self.config.max_new_tokens:
            return StopReason.MAX_NEW_TOKENS
        if self.cancelled():
            return StopReason.CANCELLED
        # The next pass is expected to take as long as this one: answer now rather than late.
        now = time.monotonic()
        return StopReason.DEADLINE if self.deadline.ends_decode(now + (now - pass_started)) else None

    def finish(self) -> None:
        """The decode is over: send the text held back for a stop string that never came."""
        if self.stream is not None:
            self._send(self.stream.finish())

    def _done_at_line(self, delta: str) -> bool:
        done_at_line = self.config.done_at_line
        return done_at_line is not None and "\n" in delta and done_at_line(self.stream.text)

    def _send(self, delta: str) -> None:
        if delta and self.on_text is not None:
            self.on_text(delta)
