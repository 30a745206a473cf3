"""Drafters propose tokens; the verifier decides. See base.py for the interface."""

from __future__ import annotations

from engine.drafters.base import Draft, Drafter, DraftLength
from engine.drafters.draft_model import DraftModelDrafter
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.prompt_lookup import NgramIndex, PromptLookupDrafter
from engine.errors import ModelError
from engine.modes import check_drafter, needs_draft_model


def make_drafter(mode: str, draft_model=None, *, max_draft_tokens: int = 8, generator=None) -> Drafter | None:
    """The drafter for a mode name; None means plain decoding (one verifier pass per token)."""
    if check_drafter(mode) == "none":
        return None
    if mode == "draft" and draft_model is None:
        raise ModelError("drafter 'draft' needs a draft model; pass --draft or choose --drafter lookup")
    lookup = PromptLookupDrafter(max_tokens=max_draft_tokens)
    model_drafter = (
        DraftModelDrafter(draft_model, max_tokens=max_draft_tokens, generator=generator)
        if draft_model is not None and needs_draft_model(mode)
        else None
    )
    if mode == "lookup":
        return lookup
    if mode == "draft":
        return model_drafter
    return HybridDrafter(lookup, model_drafter)


__all__ = [
    "Draft", "DraftLength", "DraftModelDrafter", "Drafter", "HybridDrafter",
    "NgramIndex", "PromptLookupDrafter", "make_drafter",
]
