"""A model's KV cache together with the tokens it holds.

Knowing the tokens is what makes reuse simple: a new request keeps the longest common
prefix with what is cached and feeds only the rest, and a rejected draft is undone by
cropping back to the accepted length.

A pass can be cancelled between decoder layers (`should_stop`): a newer keystroke need
not wait for a whole forward. What the cancelled pass half-wrote is cropped away, so
the cache holds exactly what it held before the call.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import DynamicCache

from engine.models.quantize import float_weights

PREFILL_CHUNK = 128  # tokens per prefill forward (a last one takes up to half as many more): the grain
# of the work a cancelled prefill keeps

ShouldStop = Callable[[], bool]


class PassCancelled(Exception):
    """A forward was stopped between layers; the cache is as it was before the pass."""


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def chunk_end(start: int, end: int, step: int) -> int:
    """Where the prefill chunk from `start` ends: `step` tokens on, or at `end` when what would
    be left is a short tail. Every forward reads all the weights once, so a tail costs nearly a
    chunk's time for a few tokens (a cold 140-token window: 454 ms as 128 + 12, 362 ms as one)."""
    return end if end - start <= step + step // 2 else start + step


class LayerCheckpoints:
    """Calls the current pass's `should_stop` before every decoder layer and raises
    PassCancelled when it says so. Hooks are installed once; a pass with no check costs
    one attribute test per layer."""

    def __init__(self, model) -> None:
        self.should_stop: ShouldStop | None = None
        layers = getattr(getattr(model, "model", None), "layers", None) or []
        for layer in layers:
            layer.register_forward_pre_hook(self._check)

    def _check(self, module, args) -> None:
        if self.should_stop is not None and self.should_stop():
            raise PassCancelled()


class KVCache:
    def __init__(self, model) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []
        self.checkpoints = LayerCheckpoints(model)

    def __len__(self) -> int:
        return len(self.tokens)

    def common_prefix(self, tokens: list[int]) -> int:
        return common_prefix_length(self.tokens, tokens)

    def crop(self, length: int) -> None:
        """Forget everything after the first `length` tokens."""
        if length < len(self.tokens):
            self._crop_layers(length)
            del self.tokens[length:]

    @torch.inference_mode()
    def keep_rows(self, start: int, rows: list[int]) -> None:
        """Move the cached `rows` (in order) to `start`, then forget what follows them: a token
        tree's accepted path takes its place behind the root (engine/decoding/tree_kv.py)."""
        if rows:
            source = torch.tensor(rows, dtype=torch.long, device=self.device)
            for states in self._layer_states():
                # The gather copies before the write, so overlapping rows are safe.
                states[:, :, start:start + len(rows)] = states.index_select(2, source)
        self.crop(start + len(rows))

    def _layer_states(self) -> list[torch.Tensor]:
        return [states for layer in self.cache.layers for states in (layer.keys, layer.values)]

    def _crop_layers(self, length: int) -> None:
        if length == 0:
            self.cache = DynamicCache(config=self.model.config)
            return
        # Layer by layer: after a cancelled pass the first layers hold more than the rest.
        for layer in self.cache.layers:
            extra = layer.get_seq_length() - length if layer.is_initialized else 0
            if extra > 0:
                layer.crop(-extra)

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], *, logits_for: int | None = None,
                should_stop: ShouldStop | None = None, **tree_inputs: torch.Tensor) -> torch.Tensor:
        """Append `new_tokens`; return logits (float32) for the last `logits_for` of them (default all).

        Raises PassCancelled, with the cache unchanged, when `should_stop` turns true between layers.
        `tree_inputs` (attention_mask, position_ids) feed a token tree: see engine/decoding/tree_kv.py.
        """
        keep = len(new_tokens) if logits_for is None else logits_for
        input_ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)
        self.checkpoints.should_stop = should_stop
        try:
            output = self.model(input_ids=input_ids, cache=self.cache, use_cache=True,
                                logits_to_keep=keep, **tree_inputs)
        except PassCancelled:
            self._crop_layers(len(self.tokens))
            raise
        finally:
            self.checkpoints.should_stop = None
        self.tokens.extend(new_tokens)
        return output.logits[0].float()

    def prefill(self, tokens: list[int], should_stop: ShouldStop | None = None,
                chunk: int | None = PREFILL_CHUNK) -> tuple[torch.Tensor | None, int]:
        """Feed what the cache lacks of `tokens`: (next-token logits after them, tokens fed).

        At least the last token is fed, since its logits are the answer. Fed in chunks of
        `chunk` tokens (None: one forward) so a cancel lands within one chunk (within one
        layer, in fact); a cancelled prefill returns no logits and keeps the chunks it got
        through, which the next request then reuses.
        """
        self.crop(min(common_prefix_length(self.tokens, tokens), len(tokens) - 1))
        return self._feed(tokens, len(tokens), should_stop, chunk)

    def feed_until(self, tokens: list[int], end: int, should_stop: ShouldStop | None = None,
                   chunk: int | None = PREFILL_CHUNK) -> tuple[bool, int]:
        """Make the cache hold `tokens[:end]`, reusing the common prefix: (completed, tokens fed).

        For a pass that will feed `tokens[end:]` itself, together with a draft.
        """
        self.crop(min(common_prefix_length(self.tokens, tokens), end))
        if len(self.tokens) >= end:
            return True, 0
        logits, fed = self._feed(tokens, end, should_stop, chunk)
        return logits is not None, fed

    def _feed(self, tokens: list[int], end: int, should_stop: ShouldStop | None,
              chunk: int | None) -> tuple[torch.Tensor | None, int]:
        start, step = len(self.tokens), chunk or end
        logits = None
        with float_weights(self.model):  # a prompt chunk is many rows: int8 layers read their float weights
            while len(self.tokens) < end:
                if should_stop is not None and should_stop():
                    return None, len(self.tokens) - start
                try:
                    logits = self.forward(tokens[len(self.tokens):chunk_end(len(self.tokens), end, step)],
                                          logits_for=1, should_stop=should_stop)[-1]
                except PassCancelled:
                    return None, len(self.tokens) - start
        return logits, len(self.tokens) - start
