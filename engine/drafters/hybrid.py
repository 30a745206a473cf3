"""Hybrid drafting (the default): prompt lookup when it has a match, else the draft model.

Lookup costs nothing, so it goes first; the draft model only runs when the text so far
offers nothing to copy (how long a match must be is the lookup drafter's `min_match`).
Each part keeps its own adaptive draft length: the verifier's verdict goes back to the
part that made the proposal.
"""

from __future__ import annotations

from typing import Sequence

from engine.decoding.draft import Draft, Drafter
from engine.decoding.verify import SamplingParams


class HybridDrafter:
    name = "hybrid"

    def __init__(self, lookup: Drafter, draft_model: Drafter | None) -> None:
        self.parts = [part for part in (lookup, draft_model) if part is not None]
        self.proposer: Drafter = lookup  # the part whose proposal `observe` judges

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        for part in self.parts:
            part.start(prompt_ids, context_streams)

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        """The first part's non-empty proposal (lookup's, then the draft model's)."""
        for part in self.parts:
            self.proposer = part
            draft = part.propose(tokens, max_tokens, sampling)
            if draft.tokens:
                return draft
        return draft

    def observe(self, draft: Draft, accepted: int) -> None:
        self.proposer.observe(draft, accepted)
