"""Hybrid drafting (the default): prompt lookup when it has a match, else the draft model.

Lookup costs nothing, so it goes first; the draft model only runs when the text so far
offers nothing to copy. Each keeps its own adaptive draft length.
"""

from __future__ import annotations

from typing import Sequence

from engine.drafters.base import Draft, Drafter
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.verify import SamplingParams


class HybridDrafter:
    name = "hybrid"

    def __init__(self, lookup: PromptLookupDrafter, draft_model: Drafter | None, *, min_match: int = 2) -> None:
        self.lookup = lookup
        self.draft_model = draft_model
        # A 1-token match is too weak to preempt a real draft model.
        self.min_match = min_match if draft_model is not None else 1

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        self.lookup.start(prompt_ids, context_streams)
        if self.draft_model is not None:
            self.draft_model.start(prompt_ids, context_streams)

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        n, continuation = self.lookup.match(tokens, min(max_tokens, self.lookup.length.value))
        if n >= self.min_match and continuation:
            return Draft(continuation, None, self.lookup.name)
        if self.draft_model is not None:
            return self.draft_model.propose(tokens, max_tokens, sampling)
        return Draft.empty(self.lookup.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        if draft.source == self.lookup.name:
            self.lookup.observe(draft, accepted)
        elif self.draft_model is not None:
            self.draft_model.observe(draft, accepted)
