"""What the speculative loop asks of a drafter: a `Draft` of proposed tokens (a chain or a
token tree), and the three calls of the `Drafter` interface. Drafters live in engine/drafters/;
the loop knows them only by this interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from engine.decoding.tree import TokenTree
from engine.decoding.verify import SamplingParams


@dataclass
class Draft:
    tokens: list[int]
    # The drafter's distribution q for each token, shape [len(tokens), vocab], after the same
    # sampling transforms as the verifier's p. None: a deterministic proposal (one-hot q).
    probs: torch.Tensor | None = None
    source: str = ""
    # Several candidates at once: `tokens` are then the tree's nodes in order, and the
    # verifier scores them under the tree's attention mask (engine/decoding/tree.py).
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
