"""How sure the verifier was of the answer shown, and the gate that withholds unsure answers.

Every emitted token is the verifier's decision (greedy: its argmax), and the decoder records
the verifier's log-probability of each (`GenerationResult.logprobs`). An answer's confidence
is taken over the tokens that made the text actually shown, after post-processing: a line
cut from a rambling continuation is judged by the line, not by what was cut away. Those are
the tokens that start before the shown text's last non-blank character in the raw output
(post-processing only cuts and drops blanks at line starts, engine/text/postprocess.py), the
tokens that retyped the healed end of the prefix included.

`Confidence.mean` is the geometric mean of those tokens' probabilities (exp of the mean
log-prob), `Confidence.min` the least likely one's. The gate compares one of them, chosen by
measurement (docs/benchmarks.md, "Confidence gate"), with the user's `minConfidence`: below
it the answer is withheld — empty, with the reason in the result — and never changed.

A withheld answer is kept with how much of it the user must type first (`show_after`): the
gate then judges only the tokens still to be accepted. The first token of an answer is
usually its least sure (which statement starts here?); once the user has typed it, the rest
may well pass, and is shown as the user types through it (lsp_server/answering/typethrough.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

LOW_CONFIDENCE = "low_confidence"  # CompletionResult.withheld: the gate's reason
# The statistic the gate compares with the threshold ("mean" or "min"): docs/benchmarks.md.
GATE_STATISTIC = "mean"
# Measured per model (a threshold is a point on one model's calibration curve): the highest that
# keeps >= 90 % of the keys the ungated ghost text had right in the typing session (0.6 kept 84 %;
# on one-shot answers it kept 95 % of the accepted characters: docs/benchmarks.md, "Confidence
# gate"). Measured again for the 0.5B in 4 bits: 0.6 then passes that rule on the tuning files, but
# on held-out files it showed no more exact answers and delayed the first ghost text after a jump,
# so 0.5 stays. Other models, the tiny test models among them, are not gated unless the user asks.
DEFAULT_MIN_CONFIDENCE = {"qwen2.5-coder-0.5b": 0.5}


def default_min_confidence(model_name: str) -> float:
    return DEFAULT_MIN_CONFIDENCE.get(model_name, 0.0)


@dataclass(frozen=True)
class Confidence:
    mean: float  # geometric mean of the tokens' probabilities, 0..1
    min: float  # the least likely token's probability, 0..1
    tokens: int  # tokens judged

    def gated_value(self, statistic: str = GATE_STATISTIC) -> float:
        return self.mean if statistic == "mean" else self.min

    def to_dict(self) -> dict:
        return {"mean": round(self.mean, 5), "min": round(self.min, 5), "tokens": self.tokens}


def shown_chars(raw: str, shown: str) -> int:
    """Characters of `raw` the shown text comes from: up to its last non-blank character
    (blanks can differ at line starts; closers re-appended past the raw text count to its end)."""
    wanted = sum(not c.isspace() for c in shown)
    if wanted == 0:
        return 0
    for i, c in enumerate(raw):
        if not c.isspace():
            wanted -= 1
            if wanted == 0:
                return i + 1
    return len(raw)


@dataclass(frozen=True)
class Held:
    """A withheld answer that may show once the user has typed its first `show_after` characters."""

    text: str
    replace_after: int
    show_after: int


@dataclass(frozen=True)
class Judged:
    """The tokens behind a shown text, for the gate: where each starts in the text that follows
    the cursor (negative: it retypes the healed end of the prefix) and its log-probability."""

    starts: tuple[int, ...]
    logprobs: tuple[float, ...]
    typed_alike: int  # leading characters the raw output and the shown text have in common

    def confidence(self, typed: int | None = None) -> Confidence | None:
        """Of the tokens starting at or after `typed` characters (None: all of them)."""
        rest = [lp for start, lp in zip(self.starts, self.logprobs) if typed is None or start >= typed]
        if not rest:
            return None
        return Confidence(math.exp(sum(rest) / len(rest)), math.exp(min(rest)), len(rest))

    def show_after(self, min_confidence: float, shown_length: int, statistic: str = GATE_STATISTIC) -> int | None:
        """The fewest characters the user must type, at a token's start, before the tokens still
        to come pass the gate and leave something to show; None when no such point exists."""
        for start in self.starts:
            if 0 < start < min(shown_length, self.typed_alike + 1):
                rest = self.confidence(start)
                if rest is not None and rest.gated_value(statistic) >= min_confidence:
                    return start
        return None


def judge(tokenizer, result, shown: str, healed: str = "") -> Judged | None:
    """The tokens of `result` (a GenerationResult whose text starts with the `healed`
    characters) that made `shown`, post-processed from it: None when nothing is shown or there
    are no log-probs."""
    if not shown or not result.logprobs:
        return None
    raw = result.text[len(healed):]
    covered = len(healed) + shown_chars(raw, shown)
    starts, logprobs = [], []
    for i, logprob in enumerate(result.logprobs[: len(result.token_ids)]):
        start = len(tokenizer.decode(result.token_ids[:i], skip_special_tokens=True)) if i else 0
        if start >= covered:
            break
        starts.append(start - len(healed))
        logprobs.append(logprob)
    if not starts:
        return None
    alike = next((i for i, (a, b) in enumerate(zip(raw, shown)) if a != b), min(len(raw), len(shown)))
    return Judged(tuple(starts), tuple(logprobs), alike)


def gate(completion, min_confidence: float, judged: Judged | None = None, statistic: str = GATE_STATISTIC):
    """The completion, or — when its confidence is below `min_confidence` — the same result with
    nothing shown, `withheld` saying why, and the text kept with the characters to type before
    the rest may show (`judged`: its tokens). 0 turns the gate off; no confidence passes."""
    confidence = completion.confidence
    if min_confidence <= 0 or not completion.text or confidence is None:
        return completion
    if confidence.gated_value(statistic) >= min_confidence:
        return completion
    show_after = judged.show_after(min_confidence, len(completion.text), statistic) if judged is not None else None
    held = Held(completion.text, completion.replace_after, show_after) if show_after is not None else None
    return replace(completion, text="", replace_after=0, withheld=LOW_CONFIDENCE, held=held)

