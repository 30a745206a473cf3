"""The decoder's exactness guarantees, run again with the static KV cache behind it.

Same hypothesis properties and chi-square test as test_decoder_exact.py and
test_sampling_exact.py (their helpers are reused), with the verifier's and the draft
model's caches made by `StaticKVCache` in both of its CPU modes: `eager` (exactly the fed
tokens) and `bucketed` (passes padded to 1/2/4/8/16 over the whole buffer with a mask —
the computation CUDA graphs replay on a GPU).
"""

from __future__ import annotations

import functools
import threading
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import DrafterConfig, make_drafter
from engine.decoding.kv_static import StaticKVCache
from engine.decoding.verify import SamplingParams

from test_decoder_exact import AlwaysWrongDrafter, prompts, reference
from test_sampling_exact import LENGTH, SAMPLES, exact_distribution, goodness_of_fit, small_verifier  # noqa: F401 (fixture)
from support.tiny_models import noisy_copy

STATIC_CACHES = {mode: functools.partial(StaticKVCache, mode=mode) for mode in ("eager", "bucketed")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cache=st.sampled_from(sorted(STATIC_CACHES)),
    prompt=prompts,
    mode=st.sampled_from(["none", "lookup", "draft", "hybrid", "adversarial"]),
    draft_kind=st.sampled_from(["unrelated", "noisy", "identical"]),
    k=st.sampled_from([1, 2, 4, 8, 15]),
    max_new_tokens=st.integers(1, 24),
    eos=st.sampled_from([None, 7]),
)
def test_greedy_output_equals_verifier_generate_with_a_static_cache(
        verifier, draft_models, cache, prompt, mode, draft_kind, k, max_new_tokens, eos):
    factory = STATIC_CACHES[cache]
    if mode == "adversarial":
        drafter = AlwaysWrongDrafter(verifier)
    else:
        drafter = make_drafter(mode, draft_models[draft_kind], DrafterConfig(max_draft_tokens=k), kv_factory=factory)
    decoder = SpeculativeDecoder(verifier, drafter, kv_factory=factory)
    config = GenerationConfig(max_new_tokens=max_new_tokens, max_draft_tokens=k,
                              eos_token_ids=[eos] if eos is not None else [])
    result = decoder.generate(prompt, config)
    assert result.token_ids == reference(verifier, prompt, max_new_tokens, eos)
    assert result.stats.emitted == len(result.token_ids)


@pytest.mark.parametrize("cache", sorted(STATIC_CACHES))
def test_a_reused_decoder_stays_exact_across_requests(verifier, draft_models, cache):
    factory = STATIC_CACHES[cache]
    decoder = SpeculativeDecoder(verifier, make_drafter("hybrid", draft_models["noisy"], kv_factory=factory),
                                 kv_factory=factory)
    base = [3, 9, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]
    for prompt in (base, base + [1], base[:-3], base + [1, 2], [11] + base):
        result = decoder.generate(prompt, GenerationConfig(max_new_tokens=16))
        assert result.token_ids == reference(verifier, prompt, 16, None)
    result = decoder.generate([11] + base + [4], GenerationConfig(max_new_tokens=4))
    assert result.stats.reused_tokens == len(base) + 1  # only the typed token is fed again


@pytest.mark.parametrize("cache", sorted(STATIC_CACHES))
def test_a_cancelled_pass_leaves_a_static_cache_exact(verifier, draft_models, cache):
    factory = STATIC_CACHES[cache]
    decoder = SpeculativeDecoder(verifier, make_drafter("hybrid", draft_models["noisy"], kv_factory=factory),
                                 kv_factory=factory)
    decoder.generate([9, 8, 7, 6, 5], GenerationConfig(max_new_tokens=12))
    checks = []
    cancel = threading.Event()
    cancel.is_set = lambda: checks.append(1) or len(checks) > 3  # polled between chunks, passes and layers
    prompt = [9, 8, 7, 6, 5, 4, 3, 2]
    result = decoder.generate(prompt, GenerationConfig(max_new_tokens=12), cancel=cancel)
    assert result.stop_reason == "cancelled"
    assert decoder.kv.tokens == (prompt + result.token_ids)[: len(decoder.kv)]
    prompt = [9, 8, 7, 6, 5, 4, 1]
    again = decoder.generate(prompt, GenerationConfig(max_new_tokens=20))
    assert again.token_ids == reference(verifier, prompt, 20, None)


def test_speculative_samples_follow_the_verifier_with_a_bucketed_cache(small_verifier):
    torch.manual_seed(4321)
    params = SamplingParams(temperature=0.9, top_k=5, top_p=0.9)
    factory = STATIC_CACHES["bucketed"]
    draft = noisy_copy(small_verifier, seed=5, scale=0.5)
    prompt = [1, 2, 3, 4, 5, 6, 7, 0, 1, 2]
    drafter = make_drafter("draft", draft, DrafterConfig(max_draft_tokens=2), kv_factory=factory)
    decoder = SpeculativeDecoder(small_verifier, drafter, kv_factory=factory)
    counts: Counter = Counter()
    for seed in range(SAMPLES):
        result = decoder.generate(prompt, GenerationConfig(max_new_tokens=LENGTH, sampling=params, seed=seed,
                                                           max_draft_tokens=2))
        counts[tuple(result.token_ids)] += 1
    assert goodness_of_fit(counts, exact_distribution(small_verifier, prompt, params, LENGTH)) > 1e-3
