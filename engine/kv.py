"""A model's KV cache together with the tokens it holds.

Knowing the tokens is what makes reuse simple: a new request keeps the longest common
prefix with what is cached and feeds only the rest, and a rejected draft is undone by
cropping back to the accepted length.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import DynamicCache

PREFILL_CHUNK = 128  # tokens per prefill forward: the grain at which a cold prefill can be cancelled


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVCache:
    def __init__(self, model) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def crop(self, length: int) -> None:
        """Forget everything after the first `length` tokens."""
        if length < len(self.tokens):
            if length == 0:
                self.cache = DynamicCache(config=self.model.config)
            else:
                self.cache.crop(length - len(self.tokens))  # transformers 5: a negative count to drop
            del self.tokens[length:]

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], *, logits_for: int | None = None) -> torch.Tensor:
        """Append `new_tokens`; return logits (float32) for the last `logits_for` of them (default all)."""
        keep = len(new_tokens) if logits_for is None else logits_for
        input_ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)
        output = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=keep)
        self.tokens.extend(new_tokens)
        return output.logits[0].float()

    def prefill(self, tokens: list[int], should_stop: Callable[[], bool] | None = None,
                chunk: int | None = PREFILL_CHUNK) -> tuple[torch.Tensor | None, int]:
        """Feed what the cache lacks of `tokens`: (next-token logits after them, tokens fed).

        At least the last token is fed, since its logits are the answer. Fed in chunks of
        `chunk` tokens (None: one forward) so a cancel lands within one chunk; a cancelled
        prefill returns no logits and keeps the prefix it got through, which the next
        request then reuses.
        """
        self.crop(min(common_prefix_length(self.tokens, tokens), len(tokens) - 1))
        start, step = len(self.tokens), chunk or len(tokens)
        logits = None
        while len(self.tokens) < len(tokens):
            if should_stop is not None and should_stop():
                return None, len(self.tokens) - start
            logits = self.forward(tokens[len(self.tokens):len(self.tokens) + step], logits_for=1)[-1]
        return logits, len(self.tokens) - start
