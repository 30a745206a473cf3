"""Drafters propose tokens; the verifier decides.

base.py           the interface every drafter implements (start, propose, observe), DraftLength
prompt_lookup.py  n-gram copies from the prompt and the open documents (no model)
draft_model.py    a small language model drafting from its own KV cache
hybrid.py         lookup when it has a match, else the draft model
config.py         DrafterConfig: the tuning every drafter is made with

`make_drafter` builds the drafter of a mode (engine/modes.py names them).
"""

from __future__ import annotations

from engine.drafters.base import Draft, Drafter, DraftLength
from engine.drafters.config import DrafterConfig
from engine.drafters.draft_model import DraftModelDrafter
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.prompt_lookup import NgramIndex, PromptLookupDrafter
from engine.errors import ModelError
from engine.modes import check_drafter, needs_draft_model


def make_drafter(mode: str, draft_model=None, config: DrafterConfig | None = None, *,
                 generator=None) -> Drafter | None:
    """The drafter for a mode name; None means plain decoding (one verifier pass per token).

    'hybrid' without a draft model is prompt lookup alone (any match counts).
    """
    config = config or DrafterConfig()
    if check_drafter(mode) == "none":
        return None
    if mode == "draft" and draft_model is None:
        raise ModelError("drafter 'draft' needs a draft model; pass --draft or choose --drafter lookup")
    model_drafter = None
    if needs_draft_model(mode) and draft_model is not None:
        model_drafter = DraftModelDrafter(
            draft_model, max_tokens=config.max_draft_tokens, initial_length=config.draft_initial_length,
            confidence_threshold=config.confidence_threshold, generator=generator)
    if mode == "draft":
        return model_drafter
    # A short match is too weak to preempt a real draft model; alone, lookup takes any match.
    min_match = config.hybrid_min_match if model_drafter is not None else 1
    lookup = PromptLookupDrafter(min_n=config.lookup_min_n, max_n=config.lookup_max_n,
                                 max_tokens=config.max_draft_tokens, min_match=min_match)
    if mode == "lookup":
        return lookup
    return HybridDrafter(lookup, model_drafter)


__all__ = [
    "Draft", "DraftLength", "DraftModelDrafter", "Drafter", "DrafterConfig", "HybridDrafter",
    "NgramIndex", "PromptLookupDrafter", "make_drafter",
]
