"""The one small interface every drafter implements, and the adaptive draft length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from engine.tree import TokenTree
from engine.verify import SamplingParams


@dataclass
class Draft:
    tokens: list[int]
    # The drafter's distribution q for each token, shape [len(tokens), vocab], after the same
    # sampling transforms as the verifier's p. None: a deterministic proposal (one-hot q).
    probs: torch.Tensor | None = None
    source: str = ""
    # Several candidates at once: `tokens` are then the tree's nodes in order, and the
    # verifier scores them under the tree's attention mask (engine/tree.py).
    tree: TokenTree | None = None

    @staticmethod
    def empty(source: str = "") -> "Draft":
        return Draft([], None, source)


class Drafter(Protocol):
    name: str

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        """A new request begins; `context_streams` are extra token sequences worth copying from."""

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        """Propose up to `max_tokens` tokens to follow `tokens` (the whole sequence so far)."""

    def observe(self, draft: Draft, accepted: int) -> None:
        """The verifier kept the first `accepted` tokens of `draft`."""


class DraftLength:
    """Draft length that follows acceptance: +2 after a fully accepted draft, −1 otherwise.

    The same heuristic as transformers' assisted generation: long drafts when they pay,
    short ones when they don't.
    """

    def __init__(self, initial: int = 4, minimum: int = 1, maximum: int = 16) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.value = max(minimum, min(initial, maximum))

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        step = 2 if accepted == drafted else -1
        self.value = max(self.minimum, min(self.value + step, self.maximum))
