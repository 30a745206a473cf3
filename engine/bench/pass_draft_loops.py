"""`quickdraft bench passes`: a draft token as the draft loop makes it (engine/decoding/draft_loop.py:
k tokens on the device, one transfer; on CUDA one captured graph) beside today's token by token,
through the real drafter on each fast path's own cache.

A propose after one new token costs k passes either way (the new token's, then k − 1 drafted ones),
so each figure is a propose's time over k. The confidence threshold is 0: every token of the k is
drafted by both. `same_drafts` says whether the two drafted the same tokens in every timed round
(on CUDA it is the captured loop's exactness check against the per-token path).
"""

from __future__ import annotations

import statistics
from functools import partial

import torch

from engine.bench.pass_ops import random_tokens
from engine.decoding.draft_loop import supports
from engine.decoding.verify import SamplingParams
from engine.drafters.draft_model import DraftModelDrafter


def measure_draft_loops(name: str, model, paths: dict[str, object], ks: tuple[int, ...], context: int, repeats: int,
                        timer, rng: torch.Generator) -> list[dict]:
    """A row per fast path with device steps and per k: per-token ms token by token and as the loop."""
    rows = []
    for mode, cache in paths.items():
        if not supports(cache):
            continue  # the dynamic cache ("eager"): token by token only, as in the draft-token table
        prompt = random_tokens(model, context, rng)
        cache.prefill(prompt, chunk=None)
        for k in ks:
            drafters = {loop: DraftModelDrafter(model, max_tokens=k, initial_length=k, confidence_threshold=0.0,
                                                kv_factory=partial(_same, cache), device_loop=loop)
                        for loop in (False, True)}
            times: dict[bool, list[float]] = {False: [], True: []}
            same = True
            for repeat in range(repeats + 2):  # two untimed: graphs captured, kernels compiled
                fed = prompt + random_tokens(model, 1, rng)
                drafts: dict[bool, list[int]] = {}
                for loop, drafter in drafters.items():
                    elapsed = timer(partial(_propose, drafts, loop, drafter, fed, k))
                    cache.crop(context)
                    if repeat >= 2:
                        times[loop].append(elapsed / k)
                same = same and drafts[False] == drafts[True]
            per_token, looped = statistics.median(times[False]), statistics.median(times[True])
            rows.append({"model": name, "context": context, "fast_mode": mode, "k": k, "per_token_ms": per_token,
                         "loop_ms": looped, "speedup": per_token / looped if looped > 0 else None,
                         "same_drafts": same})
    return rows


def _same(cache, model):
    """The kv_factory that hands both drafters the fast path's one cache."""
    return cache


def _propose(drafts: dict, key: bool, drafter: DraftModelDrafter, tokens: list[int], k: int) -> None:
    drafts[key] = drafter.propose(tokens, k, SamplingParams()).tokens
