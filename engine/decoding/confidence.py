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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

LOW_CONFIDENCE = "low_confidence"  # CompletionResult.withheld: the gate's reason
# The statistic the gate compares with the threshold ("mean" or "min"): docs/benchmarks.md.
GATE_STATISTIC = "mean"
# Measured per model (a threshold is a point on one model's calibration curve): the highest that
# kept >= 90 % of the accepted characters on half the files (docs/benchmarks.md, "Confidence
# gate"). Other models, the tiny test models among them, are not gated unless the user asks.
DEFAULT_MIN_CONFIDENCE = {"qwen2.5-coder-0.5b": 0.6}


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


def answer_confidence(tokenizer, result, shown: str, healed: str = "") -> Confidence | None:
    """The confidence of `shown`, post-processed from `result` (a GenerationResult whose text
    starts with the `healed` characters): None when nothing is shown or there are no log-probs."""
    if not shown or not result.logprobs:
        return None
    return token_confidence(tokenizer, result.token_ids, result.logprobs,
                            len(healed) + shown_chars(result.text[len(healed):], shown))


def token_confidence(tokenizer, token_ids: Sequence[int], logprobs: Sequence[float], covered: int) -> Confidence | None:
    """The confidence of the tokens whose text starts within the first `covered` characters of
    their decoded output (None when there are none)."""
    judged: list[float] = []
    for i, logprob in enumerate(logprobs[: len(token_ids)]):
        start = len(tokenizer.decode(token_ids[:i], skip_special_tokens=True)) if i else 0
        if start >= covered:
            break
        judged.append(logprob)
    if not judged:
        return None
    return Confidence(math.exp(sum(judged) / len(judged)), math.exp(min(judged)), len(judged))


def gate(completion, min_confidence: float, statistic: str = GATE_STATISTIC):
    """The completion, or — when its confidence is below `min_confidence` — the same result with
    nothing shown and `withheld` saying why. 0 turns the gate off; no confidence passes."""
    confidence = completion.confidence
    if min_confidence <= 0 or not completion.text or confidence is None:
        return completion
    if confidence.gated_value(statistic) >= min_confidence:
        return completion
    return replace(completion, text="", replace_after=0, withheld=LOW_CONFIDENCE)
