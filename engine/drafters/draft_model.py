"""Draft-model drafting: a small LM proposes tokens one at a time from its own KV cache."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from engine.decoding.draft import Draft
from engine.drafters.base import DraftLength
from engine.decoding.kv import KVCache
from engine.decoding.verify import SamplingParams, probs_from_logits, sample


class DraftModelDrafter:
    name = "draft"

    def __init__(
        self,
        model,
        *,
        max_tokens: int = 8,
        initial_length: int = 4,
        confidence_threshold: float = 0.4,
        generator: torch.Generator | None = None,
        kv_factory: Callable = KVCache,
    ) -> None:
        # The cache persists across requests: the next prompt usually shares a long prefix.
        self.kv = kv_factory(model)
        self.length = DraftLength(initial=initial_length, minimum=1, maximum=max_tokens)
        self.confidence_threshold = confidence_threshold
        self.generator = generator

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        return None

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        budget = min(max_tokens, self.length.value)
        if budget <= 0:
            return Draft.empty(self.name)
        # Rejected drafts from the last round fall out here: only the common prefix is kept.
        logits, _ = self.kv.prefill(list(tokens), chunk=None)
        drafted: list[int] = []
        q_rows: list[torch.Tensor] = []
        while True:
            if sampling.greedy:
                probs = logits.softmax(dim=-1)
                token = int(probs.argmax())
            else:
                probs = probs_from_logits(logits, sampling)
                token = sample(probs, self.generator)
                q_rows.append(probs)
            drafted.append(token)
            # Stop early when the draft model itself is unsure: such tokens are rarely accepted.
            if len(drafted) >= budget or float(probs[token]) < self.confidence_threshold:
                break
            logits = self.kv.forward([token])[-1]
        q = torch.stack(q_rows) if q_rows else None
        return Draft(drafted, q, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        self.length.update(len(draft.tokens), accepted)
