"""Speculative sampling draws from exactly the verifier's distribution.

On an 8-token vocabulary we compute the verifier's exact distribution over all 512
three-token continuations (the first comes from the prompt's pass, the other two from a
pass that verifies a draft), sample N continuations through the speculative loop, and run
a chi-square goodness-of-fit test at significance 1e-3: a correct implementation fails
one run in a thousand (the seeds are fixed, so a given run is reproducible).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import DrafterConfig, make_drafter
from engine.models.tiny import build_model
from engine.decoding.verify import SamplingParams, accept, probs_from_logits

from support.tiny_models import noisy_copy, random_feature_head

VOCAB = 8
SAMPLES = 3000
LENGTH = 3
ALPHA = 1e-3


@pytest.fixture(scope="module")
def small_verifier():
    # A narrow init keeps the distribution spread out, so the test has many outcomes to compare.
    return build_model(VOCAB, seed=11, initializer_range=0.05)


@torch.inference_mode()
def exact_distribution(model, prompt: list[int], params: SamplingParams, length: int) -> dict[tuple, float]:
    if length == 0:
        return {(): 1.0}
    first = probs_from_logits(model(torch.tensor([prompt])).logits[0, -1], params)
    table = {}
    for a in range(VOCAB):
        for rest, p in exact_distribution(model, prompt + [a], params, length - 1).items():
            table[(a, *rest)] = float(first[a]) * p
    return table


def goodness_of_fit(counts: Counter, expected: dict) -> float:
    # Outcomes expected fewer than 5 times are pooled, as the chi-square approximation needs.
    observed, predicted, rare_obs, rare_exp = [], [], 0, 0.0
    for outcome, p in expected.items():
        if p * SAMPLES >= 5:
            observed.append(counts[outcome])
            predicted.append(p * SAMPLES)
        else:
            rare_obs += counts[outcome]
            rare_exp += p * SAMPLES
    if rare_exp == 0:
        assert rare_obs == 0, "sampled an outcome the verifier gives probability 0"
    else:
        observed.append(rare_obs)
        predicted.append(rare_exp)
    scale = sum(observed) / sum(predicted)
    return chisquare(observed, [p * scale for p in predicted]).pvalue


@pytest.mark.parametrize(
    "drafter_mode, params",
    [
        ("draft", SamplingParams(temperature=1.3)),
        ("draft", SamplingParams(temperature=0.9, top_k=5, top_p=0.9)),
        ("lookup", SamplingParams(temperature=1.3)),
        ("feature", SamplingParams(temperature=1.3)),
    ],
)
def test_speculative_samples_follow_the_verifier(small_verifier, drafter_mode, params):
    torch.manual_seed(1234)
    draft = noisy_copy(small_verifier, seed=5, scale=0.5)
    prompt = [1, 2, 3, 4, 5, 6, 7, 0, 1, 2]  # every token recurs, so prompt lookup always has a proposal
    drafter = make_drafter(drafter_mode, draft, DrafterConfig(max_draft_tokens=2), verifier=small_verifier,
                           feature_head=random_feature_head(small_verifier, seed=5))
    decoder = SpeculativeDecoder(small_verifier, drafter)
    counts: Counter = Counter()
    drafted = 0
    for seed in range(SAMPLES):
        result = decoder.generate(prompt, GenerationConfig(max_new_tokens=LENGTH, sampling=params, seed=seed, max_draft_tokens=2))
        counts[tuple(result.token_ids)] += 1
        drafted += result.stats.drafted
    if drafter_mode != "none":
        assert drafted > SAMPLES / 2  # the drafts were really exercised
    assert goodness_of_fit(counts, exact_distribution(small_verifier, prompt, params, LENGTH)) > ALPHA


def test_residual_is_safe_when_p_equals_q():
    logits = torch.tensor([[0.5, 1.0, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    params = SamplingParams(temperature=1.0)
    q = probs_from_logits(logits[:1], params)
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        n, token = accept([1], q, logits, params, generator)
        assert 0 <= token < 4 and n in (0, 1)


def test_rejection_never_resamples_the_rejected_lookup_token():
    # p puts almost no mass on the drafted token 0: a rejection must pick from the rest.
    logits = torch.tensor([[-30.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    params = SamplingParams(temperature=1.0)
    generator = torch.Generator().manual_seed(0)
    outcomes = {accept([0], None, logits, params, generator) for _ in range(100)}
    assert all(n == 0 and token != 0 for n, token in outcomes)


def test_top_k_and_top_p_filter_the_same_on_both_sides():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    probs = probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=3))
    assert torch.count_nonzero(probs) == 3
    probs = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert torch.count_nonzero(probs) == 1  # the top token alone holds > 50 %
    assert torch.allclose(probs.sum(), torch.tensor(1.0))
