"""Drafters propose tokens; the verifier decides.

base.py           DraftLength (the interface every drafter implements is engine/decoding/draft.py)
prompt_lookup.py  n-gram copies from the prompt and the open documents (no model)
draft_model.py    a small language model drafting from its own KV cache
hybrid.py         lookup when it has a match, else the draft model
trees.py          the same as token trees: several candidates per verifier pass
medusa.py         from the verifier's own hidden state: Medusa heads' tree, the feature head's chain (engine/medusa/)
config.py         DrafterConfig: the tuning every drafter is made with

`make_drafter` builds the drafter of a mode (engine/modes.py names them).
"""

from __future__ import annotations

from engine.decoding.draft import Draft, Drafter
from engine.drafters.base import DraftLength
from engine.drafters.config import DrafterConfig
from engine.drafters.draft_model import DraftModelDrafter
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.medusa import FeatureDrafter, MedusaDrafter
from engine.drafters.prompt_lookup import NgramIndex, PromptLookupDrafter
from engine.drafters.trees import TreeDraftModelDrafter, TreeHybridDrafter, TreeLookupDrafter
from engine.errors import ModelError
from engine.decoding.kv import KVCache
from engine.modes import check_drafter, needs_draft_model


def make_drafter(mode: str, draft_model=None, config: DrafterConfig | None = None, *,
                 generator=None, verifier=None, heads=None, feature_head=None, kv_factory=KVCache) -> Drafter | None:
    """The drafter for a mode name; None means plain decoding (one verifier pass per token).

    'hybrid' without a draft model is prompt lookup alone (any match counts) — or, given
    trained heads for `verifier` (engine.medusa.store: `feature_head` first, else the Medusa
    `heads`), the heads' tree and lookup together. 'medusa' and 'feature' are those heads
    alone. `kv_factory` makes the draft model's KV cache (engine.decoding.kv_static.cache_factory
    picks one per device).
    """
    config = config or DrafterConfig()
    if check_drafter(mode) == "none":
        return None
    if mode.endswith("-tree"):
        return _tree_drafter(mode, draft_model, config, generator, kv_factory)
    if mode == "hybrid" and draft_model is None and (feature_head or heads) is not None:
        mode, lookup = ("feature" if feature_head is not None else "medusa"), _tree_lookup(config)
    else:
        lookup = None
    if mode in ("medusa", "feature"):
        trained = feature_head if mode == "feature" else heads
        if trained is None or verifier is None:
            raise ModelError(f"drafter {mode!r} needs trained heads for the verifier; run quickdraft heads train "
                             f"--model VERIFIER{' --kind feature' if mode == 'feature' else ''}, "
                             f"or choose --drafter lookup")
        beside = {}  # each kind's own default unless the config says
        if config.head_nodes_beside_lookup is not None:
            beside["nodes_beside_lookup"] = config.head_nodes_beside_lookup
        if mode == "feature":
            return FeatureDrafter(verifier, trained.heads, lookup=lookup, **beside)
        return MedusaDrafter(verifier, trained.heads, trained.choices, lookup=lookup, **beside)
    if mode == "draft" and draft_model is None:
        raise ModelError("drafter 'draft' needs a draft model; pass --draft or choose --drafter lookup")
    model_drafter = None
    if needs_draft_model(mode) and draft_model is not None:
        model_drafter = DraftModelDrafter(
            draft_model, max_tokens=config.max_draft_tokens, initial_length=config.draft_initial_length,
            confidence_threshold=config.confidence_threshold, generator=generator, kv_factory=kv_factory)
    if mode == "draft":
        return model_drafter
    # A short match is too weak to preempt a real draft model; alone, lookup takes any match.
    min_match = config.hybrid_min_match if model_drafter is not None else 1
    lookup = PromptLookupDrafter(min_n=config.lookup_min_n, max_n=config.lookup_max_n,
                                 max_tokens=config.max_draft_tokens, min_match=min_match)
    if mode == "lookup":
        return lookup
    return HybridDrafter(lookup, model_drafter)



def _tree_lookup(config: DrafterConfig) -> TreeLookupDrafter:
    return TreeLookupDrafter(min_n=config.lookup_min_n, max_n=config.lookup_max_n, max_tokens=config.max_draft_tokens)


def _tree_drafter(mode: str, draft_model, config: DrafterConfig, generator, kv_factory) -> Drafter:
    if mode == "draft-tree" and draft_model is None:
        raise ModelError("drafter 'draft-tree' needs a draft model; pass --draft or choose --drafter lookup-tree")
    lookup = _tree_lookup(config)
    if mode == "lookup-tree":
        return lookup
    model_drafter = None
    if draft_model is not None:
        model_drafter = TreeDraftModelDrafter(
            draft_model, max_tokens=config.max_draft_tokens, initial_length=config.draft_initial_length,
            confidence_threshold=config.confidence_threshold, generator=generator, kv_factory=kv_factory)
    if mode == "draft-tree":
        return model_drafter
    return TreeHybridDrafter(lookup, model_drafter)


__all__ = [
    "Draft", "DraftLength", "DraftModelDrafter", "Drafter", "DrafterConfig", "FeatureDrafter", "HybridDrafter",
    "MedusaDrafter", "NgramIndex", "PromptLookupDrafter", "TreeDraftModelDrafter", "TreeHybridDrafter",
    "TreeLookupDrafter", "make_drafter",
]
