"""Which pair a GPU runs by default: the largest whose weights fit the card's memory, as llama.vim
picks its model by VRAM, less any verifier whose measured pass is too slow for the budget.

The rule (docs/models.md, "Which pair a GPU runs"). A pair fits a card of M bytes when

    verifier + draft weights in bf16 (presets.toml memory_bytes)  ≤  0.9 × M − 2 GB

- 2 GB for what does not grow with the card: the CUDA context and its kernels (~0.5 GB), the
  captured graphs' memory pools, a cold 2,300-token prompt's activations, and both models' static
  KV caches at their 4,096 preallocated positions (the 14B's is the largest: 0.8 GB).
- 10 % of the card for the rest: a desktop or another process on the same card, the allocator's
  fragmentation, a KV cache that grows past 4,096 positions.
Hence the smallest card for each pair (`smallest_card_bytes`): the 1.5B pair 7.6 GB, the 3B 10.5,
the 7B 20.6, the 14B 36.5 — an 8 GB card gets the 1.5B, 12 and 16 GB the 3B, 24 and 32 GB the 7B,
40 GB and up the 14B. (llama.vim's table is about half of these: its models are 8-bit, ours bf16.)

With measured pass costs (`pass_ms`: a verifier preset → ms of a captured 8-token pass on this
card, as `quickdraft bench passes` times them), a verifier whose pass takes more than an eighth of
the budget is ruled out: at least eight passes, about 24 tokens at the draft model's τ of 3, must
fit in a request. On the H200 of 2026-12-04 the 7B's took 11.5 ms, well inside 25.

Where no pair fits, the smallest (the server may run out of memory; `--device cpu` is the way out).
A `verifier` the user sets still wins: this is only the machine's default. Nothing here loads a
model; `card_memory` is the one function that asks CUDA.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.models import presets, store

CARD_SHARE = 0.9  # of the card's memory, the rest left to other processes and fragmentation
FIXED_HEADROOM_BYTES = 2_000_000_000  # CUDA context, graphs' pools, prompt activations, KV caches
PASS_SHARE_OF_BUDGET = 1 / 8  # a verifier pass may take this much of the budget
GB = 1e9


@dataclass(frozen=True)
class PairChoice:
    pair: str
    verifier: str
    draft: str
    reason: str
    larger: str | None = None  # a larger pair that fits this card but is not installed


def pair_weight_bytes(pair: str) -> int:
    """The bf16 weights of a pair's verifier and draft together."""
    members = presets.PAIRS[pair]
    return presets.PRESETS[members["verifier"]].memory_bytes + presets.PRESETS[members["draft"]].memory_bytes


def smallest_card_bytes(pair: str) -> int:
    """The least total memory a card needs for `pair` by the rule above (the README's thresholds)."""
    return int((pair_weight_bytes(pair) + FIXED_HEADROOM_BYTES) / CARD_SHARE)


def pairs_by_size() -> list[str]:
    return sorted(presets.PAIRS, key=pair_weight_bytes)


def gpu_pair_for(total_memory_bytes: int, pass_ms: Mapping[str, float] | None = None, *, budget_ms: float = 200.0,
                 installed: Collection[str] | None = None) -> PairChoice:
    """The pair a card of `total_memory_bytes` runs by default (the module's rule).

    pass_ms: measured ms of a verifier's 8-token pass on this card, by preset; a verifier missing
        from it is judged by memory alone.
    installed: the pairs whose models are installed; when given, the largest fitting pair among
        them wins (a larger one that fits is named in `larger`, to be pulled), and where none is
        installed the largest fitting one is chosen, for `quickdraft models pull` to fetch.
    """
    usable = CARD_SHARE * total_memory_bytes - FIXED_HEADROOM_BYTES
    slowest_ms = PASS_SHARE_OF_BUDGET * budget_ms
    fitting, verdicts = [], []
    for pair in pairs_by_size():
        verifier = presets.PAIRS[pair]["verifier"]
        weights = pair_weight_bytes(pair)
        if weights > usable:
            verdicts.append(f"{pair}: {weights / GB:.1f} GB of weights, over {usable / GB:.1f}")
        elif pass_ms is not None and verifier in pass_ms and pass_ms[verifier] > slowest_ms:
            verdicts.append(f"{pair}: a pass takes {pass_ms[verifier]:.1f} ms, over {slowest_ms:.0f} "
                            f"(an eighth of the {budget_ms:.0f} ms budget)")
        else:
            fitting.append(pair)
            verdicts.append(f"{pair}: fits ({weights / GB:.1f} GB)")
    card = (f"card of {total_memory_bytes / GB:.1f} GB ({usable / GB:.1f} GB for weights: "
            f"{CARD_SHARE:.0%} less {FIXED_HEADROOM_BYTES / GB:.0f} GB)")
    larger = None
    if not fitting:
        chosen, lead = pairs_by_size()[0], "none fits: the smallest, which may run out of memory (--device cpu)"
    elif installed is None or not set(fitting) & set(installed):
        chosen, lead = fitting[-1], "the largest that fits"
    else:
        chosen = [pair for pair in fitting if pair in installed][-1]
        lead = "the largest installed that fits"
        larger = fitting[-1] if fitting[-1] != chosen else None
    members = presets.PAIRS[chosen]
    reason = f"{lead} on a {card}; {'; '.join(verdicts)}"
    if larger:
        reason += f"; {larger} also fits but is not installed"
    return PairChoice(chosen, members["verifier"], members["draft"], reason, larger)


def installed_pairs(home: Path | None = None) -> set[str]:
    """The pairs whose verifier and draft are both in the store."""
    return {pair for pair, members in presets.PAIRS.items()
            if all(store.installed_path(member, home) is not None for member in members.values())}


def card_memory(device: int = 0) -> int | None:
    """Total memory of CUDA card `device` in bytes, or None where CUDA is not available."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(device).total_memory)
