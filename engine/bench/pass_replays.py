"""Replayed decodes for `quickdraft bench passes`: a completion decoded through the real drafters,
caches and acceptance code, with the number of drafts kept each pass fixed by τ (measured on the
CPU with the real pair), since random-weight models agree on nothing. On a fast path the draft model
drafts as the engine's does there: greedy drafts in one device loop (engine/decoding/draft_loop.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from engine.bench.pass_ops import random_tokens
from engine.decoding.verify import SamplingParams, greedy_accept
from engine.drafters.draft_model import DraftModelDrafter


@dataclass(frozen=True)
class Replay:
    """A 64-token completion replayed with a fixed acceptance pattern."""

    name: str
    tau: float  # tokens per verifier pass: accepted drafts + 1
    draft_tokens: int  # k per pass
    draft_model: bool  # drafts from the draft model (each costs a pass) or free (prompt lookup)


# τ measured on the CPU with the real pair, bf16 (docs/benchmarks.md): lookup 2.48, hybrid 3.00.
REPLAYS = (
    Replay("plain", 1.0, 0, False),
    Replay("lookup", 2.48, 8, False),
    Replay("draft", 3.0, 4, True),
)


def replay_decode(verifier, draft, replay: Replay, factory: Callable, context: int, new_tokens: int,
                  rng: torch.Generator, timer: Callable[[Callable], float]) -> dict:
    """Decode `new_tokens` like the decoder does — the prompt's forward gives the first token, then
    draft → verify `[last, d1..dk]` → accept → crop — except that the number of drafts kept
    follows the pattern of `replay.tau` instead of the random models' (dis)agreement."""
    vcache = factory(verifier)
    drafter = (DraftModelDrafter(draft, max_tokens=replay.draft_tokens, initial_length=replay.draft_tokens,
                                 confidence_threshold=0.0, kv_factory=factory) if replay.draft_model else None)
    prompt = random_tokens(verifier, context, rng)
    vcache.prefill(prompt[:-1], chunk=None)
    if drafter is not None:
        drafter.kv.prefill(prompt[:-1], chunk=None)  # both caches warm with the context, as after a keystroke
    greedy = SamplingParams()
    passes, emitted = 0, []

    def decode() -> None:
        nonlocal passes
        tokens = list(prompt)
        logits, _ = vcache.prefill(tokens, chunk=None)
        emitted.append(greedy_accept([], logits[None])[1])
        tokens.append(emitted[-1])
        while len(emitted) < new_tokens:
            k = min(replay.draft_tokens, new_tokens - len(emitted) - 1)
            if drafter is not None and k > 0:
                drafts = drafter.propose(tokens, k, greedy).tokens[:k]
            else:
                drafts = random_tokens(verifier, k, rng)  # prompt lookup: drafts cost nothing
            logits = vcache.forward([tokens[-1], *drafts])
            _, token = greedy_accept(drafts, logits)  # the real decision and its one transfer
            kept = min(k, _accepted(passes, replay.tau))
            vcache.crop(len(tokens) + kept)
            new = [*drafts[:kept], token]
            tokens += new
            emitted.extend(new)
            passes += 1

    elapsed = timer(decode)
    return {"name": replay.name, "tau": replay.tau, "draft_tokens": replay.draft_tokens, "passes": passes + 1,
            "new_tokens": len(emitted), "ms": elapsed}


def _accepted(index: int, tau: float) -> int:
    """Drafts kept in pass `index`: an even spread whose mean is τ − 1."""
    return int((index + 1) * (tau - 1)) - int(index * (tau - 1))
