"""Draft-model drafting: a small LM proposes tokens from its own KV cache.

Greedy drafts from a static or compiled-step cache (the GPU's) run as one device loop
(engine/decoding/draft_loop.py): k tokens, one transfer. Otherwise, and when sampling, token by token.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from engine.decoding.draft import Draft
from engine.decoding.draft_loop import DraftLoop, supports
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
        device_loop: bool | None = None,
    ) -> None:
        # The cache persists across requests: the next prompt usually shares a long prefix.
        self.kv = kv_factory(model)
        # None: the device loop wherever the cache runs device steps (never the CPU's dynamic cache).
        if device_loop and not supports(self.kv):
            raise ValueError(f"device_loop needs a static or compiled-step KV cache, not {type(self.kv).__name__}")
        self.loop = DraftLoop(self.kv) if device_loop is not False and supports(self.kv) else None
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
        if sampling.greedy and self.loop is not None:
            return self._propose_on_device(logits, budget)
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

    def _propose_on_device(self, logits: torch.Tensor, budget: int) -> Draft:
        """The loop above, greedy, as one device loop of `budget` tokens; the same early stop, applied after."""
        fed = len(self.kv.tokens)
        drafted, confidences = self.loop.draft(logits, budget)
        kept = next((i + 1 for i, p in enumerate(confidences) if p < self.confidence_threshold), budget)
        self.kv.crop(fed + kept - 1)  # as if the loop had stopped there: the last kept token is not fed
        return Draft(drafted[:kept], None, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        self.length.update(len(draft.tokens), accepted)
