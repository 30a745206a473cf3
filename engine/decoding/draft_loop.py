"""The draft model's k greedy tokens in one device loop: no host synchronisation between them.

Drafting token by token reads each token back to the host (`int(probs.argmax())`) before the next
pass can start: on a GPU every draft token then pays a round trip and the launches of a pass
(docs/benchmarks.md: 4.26 ms for a 0.5B token on an H200). Here the token each pass picks (argmax
on the device) is fed to the next pass as a device tensor, at positions laid out before the loop,
and the k tokens and their probabilities come back in one transfer at the end. On CUDA the whole
loop is captured as one graph per (k, attended lengths), so k tokens are one replay; elsewhere the
same loop runs as plain calls.

The passes are the cache's own one-token passes (`device_step`: the static cache's bucketed pass,
or the compiled step), so the tokens are exactly those the per-token loop picks from the same cache.
Only the confidence cut moves: every token of the k is drafted and the caller cuts after the first
one the draft model is unsure of (engine/drafters/draft_model.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from engine.decoding import cuda_graphs

log = logging.getLogger(__name__)


def supports(cache) -> bool:
    """Whether `cache` runs one-token passes over tokens on the device as its `forward` would (the static
    cache's bucketed modes, the compiled step with a bucket of 1); not the dynamic cache."""
    return bool(getattr(cache, "runs_device_steps", False))


@dataclass
class _Captured:
    """One k's loop captured over fixed buffers: its input logits and positions, and the output it overwrites."""

    logits: torch.Tensor
    positions: torch.Tensor
    graph: object
    output: torch.Tensor


class DraftLoop:
    """A draft model's cache drafting k greedy tokens at a time; on CUDA one graph per k (and attended lengths)."""

    def __init__(self, cache, *, capture: bool | None = None) -> None:
        if not supports(cache):
            raise ValueError(f"the draft loop needs a cache with device steps (a bucketed static cache or the "
                             f"compiled step with a bucket of 1), not {type(cache).__name__}")
        self.cache = cache
        self.capture = cache.device.type == "cuda" if capture is None else capture
        if self.capture and cache.device.type != "cuda":
            raise ValueError(f"capturing the draft loop needs a CUDA device; the cache is on {cache.device}")
        self._graphs: dict[tuple, _Captured] = {}
        self._capacity = cache.capacity  # the graphs read the cache's buffers: a grown cache drops them
        self._pool = None

    @torch.inference_mode()
    def draft(self, logits: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
        """k greedy tokens after the cache's tokens, whose next-token `logits` (vocab,) are given, and each
        one's probability: one transfer to the host. The cache holds the first k − 1 (fed by the loop)."""
        cache = self.cache
        if k < 1:
            raise ValueError(f"a draft loop drafts at least one token, not k={k}")
        start = len(cache.tokens)
        cache._ensure_capacity(start + k - 1)  # as the k - 1 passes would: grows, or says the context is too long
        if cache.capacity != self._capacity:
            self._graphs, self._capacity = {}, cache.capacity
        ends = tuple(start + i + 1 for i in range(k - 1))  # each pass's host-known end (its attended length)
        if self.capture:
            try:
                out = self._replay(logits, start, ends)
            except RuntimeError as error:  # a failed capture leaves a working loop: uncaptured, still sync-free
                log.warning("capturing the draft loop failed, it runs uncaptured: %s", " ".join(str(error).split())[:300])
                self.capture, self._graphs = False, {}
        if not self.capture:
            out = self.run(logits, torch.arange(start, start + k - 1, device=cache.device), ends)
        tokens, probs = out.tolist()  # the one host transfer (and on CUDA the one wait)
        drafted = [int(token) for token in tokens]
        cache.tokens.extend(drafted[:-1])
        return drafted, probs

    def run(self, logits: torch.Tensor, positions: torch.Tensor, ends: tuple[int, ...]) -> torch.Tensor:
        """The loop itself, on the device: (2, k) float64, the tokens then their probabilities (token ids
        are exact in float64). Nothing is read back, so it can be captured."""
        tokens, probs = [], []
        for i in range(len(positions) + 1):
            if i:
                logits = self.cache.device_step(tokens[-1], positions[i - 1:i], ends[i - 1])[-1]
            p = logits.softmax(dim=-1)
            token = p.argmax(dim=-1, keepdim=True)  # the first of tied maxima, as int(p.argmax()) is
            tokens.append(token)
            probs.append(p.gather(-1, token))
        return torch.stack((torch.cat(tokens).double(), torch.cat(probs).double()))

    def _replay(self, logits: torch.Tensor, start: int, ends: tuple[int, ...]) -> torch.Tensor:
        # A graph bakes in k and each pass's attended length (the compiled step's grows with the context).
        key = (len(ends), *(self.cache.attended_length(end) for end in ends))
        captured = self._graphs.get(key)
        if captured is None:
            captured = self._graphs[key] = self._capture(logits, start, ends)
        captured.logits.copy_(logits)
        torch.arange(start, start + len(ends), out=captured.positions)
        captured.graph.replay()
        return captured.output

    def _capture(self, logits: torch.Tensor, start: int, ends: tuple[int, ...]) -> _Captured:
        """Capture the loop over fixed buffers. The warm-up and capture runs write keys at this call's own
        positions, which the replay that follows overwrites."""
        if self._pool is None:
            self._pool = cuda_graphs.new_pool()
        inputs = logits.clone()
        positions = torch.arange(start, start + len(ends), device=self.cache.device)
        graph, output = cuda_graphs.capture(lambda: self.run(inputs, positions, ends), self._pool)
        log.debug("captured a %d-token draft loop", len(ends) + 1)
        return _Captured(inputs, positions, graph, output)
