"""Greedy speculative decoding is token-for-token the verifier's own greedy decoding."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import Draft, DrafterConfig, make_drafter
from engine.decoding.verify import SamplingParams

from support.tiny_models import TINY_VOCAB, random_feature_head


def reference(verifier, prompt: list[int], max_new_tokens: int, eos: int | None) -> list[int]:
    ids = torch.tensor([prompt])
    out = verifier.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
        eos_token_id=eos, pad_token_id=eos if eos is not None else 0,
    )
    return out[0, len(prompt):].tolist()


class AlwaysWrongDrafter:
    """Asks the verifier what it would say and proposes something else: every draft is rejected."""

    name = "adversarial"

    def __init__(self, verifier) -> None:
        self.verifier = verifier

    def start(self, prompt_ids, context_streams=()) -> None:
        pass

    @torch.inference_mode()
    def propose(self, tokens, max_tokens, sampling):
        right = int(self.verifier(torch.tensor([list(tokens)])).logits[0, -1].argmax())
        wrong = (right + 1) % TINY_VOCAB
        return Draft([wrong] * max_tokens, None, self.name)

    def observe(self, draft, accepted) -> None:
        assert accepted == 0


# Prompts that repeat themselves, so prompt lookup actually has matches to propose.
prompts = st.lists(st.integers(0, TINY_VOCAB - 1), min_size=1, max_size=24).flatmap(
    lambda base: st.integers(0, len(base)).map(lambda cut: base + base[:cut])
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt=prompts,
    mode=st.sampled_from(["none", "lookup", "draft", "hybrid", "feature", "adversarial"]),
    draft_kind=st.sampled_from(["unrelated", "noisy", "identical"]),
    k=st.sampled_from([1, 2, 4, 8]),
    max_new_tokens=st.integers(1, 24),
    eos=st.sampled_from([None, 7]),
)
def test_greedy_output_equals_verifier_generate(verifier, draft_models, prompt, mode, draft_kind, k, max_new_tokens, eos):
    if mode == "adversarial":
        drafter = AlwaysWrongDrafter(verifier)
    else:  # the feature head: untrained, random, so often wrong (draft_kind picks its seed)
        drafter = make_drafter(mode, draft_models[draft_kind], DrafterConfig(max_draft_tokens=k), verifier=verifier,
                               feature_head=random_feature_head(verifier, seed=len(draft_kind)))
    decoder = SpeculativeDecoder(verifier, drafter)
    config = GenerationConfig(max_new_tokens=max_new_tokens, max_draft_tokens=k,
                              eos_token_ids=[eos] if eos is not None else [])
    result = decoder.generate(prompt, config)
    assert result.token_ids == reference(verifier, prompt, max_new_tokens, eos)
    stats = result.stats
    assert stats.accepted <= stats.drafted
    assert stats.emitted == stats.accepted + stats.corrections == len(result.token_ids)
    assert stats.corrections <= stats.verifier_passes


def test_reused_decoder_stays_exact_across_requests(verifier, draft_models):
    """The KV caches carry over between calls; prompts that share a prefix must not leak state."""
    decoder = SpeculativeDecoder(verifier, make_drafter("hybrid", draft_models["noisy"]))
    base = [3, 9, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]
    for prompt in (base, base + [1], base[:-3], base + [1, 2], [11] + base):
        result = decoder.generate(prompt, GenerationConfig(max_new_tokens=16))
        assert result.token_ids == reference(verifier, prompt, 16, None)
    # A grown prompt feeds only its new tail: here the one token typed since.
    result = decoder.generate([11] + base + [4], GenerationConfig(max_new_tokens=4))
    assert result.stats.prefill_tokens == 1 and result.stats.reused_tokens == len(base) + 1
    # The very same prompt again still feeds its last token: its logits give the first token.
    again = decoder.generate([11] + base + [4], GenerationConfig(max_new_tokens=4))
    assert again.stats.prefill_tokens == 1 and again.token_ids == result.token_ids


def test_identical_draft_is_always_accepted(verifier):
    decoder = SpeculativeDecoder(verifier, make_drafter("draft", verifier, DrafterConfig(max_draft_tokens=4)))
    result = decoder.generate([1, 2, 3, 4, 5], GenerationConfig(max_new_tokens=30, max_draft_tokens=4))
    stats = result.stats
    assert stats.accepted == stats.drafted > 0
    assert stats.tau > 2.0  # several tokens per verifier pass


def test_plain_decoding_makes_one_pass_per_token(verifier):
    result = SpeculativeDecoder(verifier, None).generate([1, 2, 3], GenerationConfig(max_new_tokens=12))
    assert result.stats.verifier_passes == 12 and result.stats.tau == 1.0 and result.stats.drafted == 0


def test_sampling_params_greedy_flag():
    assert SamplingParams().greedy and not SamplingParams(temperature=0.7).greedy
