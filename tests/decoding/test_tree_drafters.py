"""Tree drafters through the decoder: output is the verifier's greedy decoding, and trees
find more than chains."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import DrafterConfig, make_drafter
from engine.drafters.prompt_lookup import NgramIndex
from engine.drafters.trees import TreeLookupDrafter
from engine.errors import ModelError
from engine.decoding.verify import SamplingParams

from test_decoder_exact import prompts, reference
from support.tiny_models import TINY_VOCAB, random_feature_head, random_heads


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt=prompts,
    mode=st.sampled_from(["lookup-tree", "draft-tree", "hybrid-tree", "medusa", "hybrid"]),
    draft_kind=st.sampled_from(["unrelated", "noisy", "identical"]),
    k=st.sampled_from([1, 3, 8]),
    max_new_tokens=st.integers(1, 20),
    eos=st.sampled_from([None, 7]),
)
def test_tree_drafters_keep_greedy_output_exact(verifier, draft_models, prompt, mode, draft_kind, k, max_new_tokens, eos):
    heads = random_heads(verifier, seed=len(prompt)) if mode in ("medusa", "hybrid") else None
    draft_model = None if mode in ("medusa", "hybrid") else draft_models[draft_kind]
    drafter = make_drafter(mode, draft_model, DrafterConfig(max_draft_tokens=k), verifier=verifier, heads=heads)
    config = GenerationConfig(max_new_tokens=max_new_tokens, max_draft_tokens=k,
                              eos_token_ids=[eos] if eos is not None else [])
    result = SpeculativeDecoder(verifier, drafter).generate(prompt, config)
    assert result.token_ids == reference(verifier, prompt, max_new_tokens, eos)
    stats = result.stats
    assert stats.emitted == len(result.token_ids) and stats.accepted <= stats.drafted


def test_lookup_tree_offers_every_recent_continuation():
    index = NgramIndex(1, 3)
    index.extend([5, 1, 2, 9, 5, 1, 3, 9, 5, 1, 2, 4, 7, 5, 1])
    found = index.continuations([7, 5, 1], 2, limit=4)
    # Longest match first ([7, 5, 1] has none, [5, 1] three), most recent first, duplicates dropped.
    assert [c for _, c in found] == [[2, 4], [3, 9], [2, 9]]
    drafter = TreeLookupDrafter(max_branches=4, max_nodes=16, max_tokens=4)
    drafter.start([])
    draft = drafter.propose([5, 1, 2, 9, 5, 1, 3, 9, 5, 1], 3, SamplingParams())
    assert draft.tree is not None and sorted(draft.tree.children(-1)) == [0, 3]  # 2 and 3 both follow "5 1"


def test_identical_draft_tree_accepts_its_main_chain(verifier):
    decoder = SpeculativeDecoder(verifier, make_drafter("draft-tree", verifier, DrafterConfig(max_draft_tokens=4)))
    result = decoder.generate([1, 2, 3, 4, 5], GenerationConfig(max_new_tokens=30, max_draft_tokens=4))
    assert result.token_ids == reference(verifier, [1, 2, 3, 4, 5], 30, None)
    assert result.stats.tau > 2.0


def test_sampling_with_tree_drafters_stays_valid(verifier, draft_models):
    """Sampled decoding through every tree drafter (exactness is the chi-square test in test_tree.py)."""
    heads = random_heads(verifier, seed=0)
    for mode in ("lookup-tree", "draft-tree", "hybrid-tree", "medusa", "hybrid"):
        draft_model = None if mode in ("medusa", "hybrid") else draft_models["noisy"]
        drafter = make_drafter(mode, draft_model, DrafterConfig(max_draft_tokens=4), verifier=verifier, heads=heads)
        config = GenerationConfig(max_new_tokens=16, sampling=SamplingParams(temperature=0.8), seed=3)
        result = SpeculativeDecoder(verifier, drafter).generate([1, 2, 3, 1, 2, 3, 1, 2], config)
        assert len(result.token_ids) == 16 and all(0 <= t < TINY_VOCAB for t in result.token_ids)


def test_medusa_needs_heads(verifier):
    with pytest.raises(ModelError, match="heads train"):
        make_drafter("medusa", None, verifier=verifier)
    assert type(make_drafter("hybrid", None)).__name__ == "HybridDrafter"  # no heads: lookup's chain


def test_hybrid_takes_how_many_head_nodes_go_beside_lookup_from_its_config(verifier):
    heads, feature = random_heads(verifier, seed=0), random_feature_head(verifier, seed=0)
    shipped = make_drafter("hybrid", None, verifier=verifier, heads=heads, feature_head=feature)
    tuned = make_drafter("hybrid", None, DrafterConfig(head_nodes_beside_lookup=0), verifier=verifier,
                         heads=heads, feature_head=feature)
    assert shipped.nodes_beside_lookup == 4 and tuned.nodes_beside_lookup == 0
    medusa = make_drafter("hybrid", None, DrafterConfig(head_nodes_beside_lookup=2), verifier=verifier, heads=heads)
    assert medusa.nodes_beside_lookup == 2
    assert make_drafter("hybrid", None, verifier=verifier, heads=heads).nodes_beside_lookup == 6


def test_prompt_lookup_keeps_the_index_of_a_stream_it_had_before():
    from engine.drafters.prompt_lookup import PromptLookupDrafter
    from engine.decoding.verify import SamplingParams

    document = tuple(range(100, 160)) * 3  # another document's tokens, the same object at every request
    drafter = PromptLookupDrafter()
    drafter.start([1, 2, 3], [document])
    first = drafter.streams[0]
    drafter.start([1, 2, 3, 4], [document, [7, 8, 9]])
    assert drafter.streams[0] is first  # not indexed again
    proposed = drafter.propose([5, 100, 101, 102], 4, SamplingParams()).tokens
    drafter.start([1, 2, 3, 4], [list(document)])  # an equal copy: indexed anew
    assert drafter.streams[0] is not first
    assert drafter.propose([5, 100, 101, 102], 4, SamplingParams()).tokens == proposed == [103, 104, 105, 106]
