"""Token trees: greedy tree verification is the verifier's greedy decoding, the compacted
cache is the cache of the accepted path alone, and sampled tree verification draws from
exactly the verifier's distribution."""

from __future__ import annotations

import functools
import random
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decoding.kv import KVCache
from engine.decoding.kv_static import StaticKVCache
from engine.models.tiny import build_model
from engine.decoding.tree import TokenTree, greedy_tree_accept
from engine.decoding.tree_kv import tree_attention_mask, tree_position_ids, verify_tree
from engine.decoding.verify import SamplingParams, probs_from_logits, sample

from test_decoder_exact import reference
from test_sampling_exact import ALPHA, SAMPLES, VOCAB, exact_distribution, goodness_of_fit
from support.tiny_models import TINY_VOCAB, noisy_copy


def random_tree(rng: random.Random, truth: list[int], kind: str, vocab: int) -> TokenTree:
    """Random shape and tokens; `truth` (the verifier's next tokens) is woven in or avoided."""
    tree = TokenTree()
    for _ in range(rng.randint(0, 12)):
        tree.add(rng.randrange(vocab), rng.randrange(-1, len(tree)))
    if kind == "with_truth" and truth:
        # Part of the true continuation below a random existing path prefix of it.
        depth = rng.randint(1, len(truth))
        tree.add_path(truth[:depth])
    if kind == "all_wrong":
        # Every branch starts with a token the verifier would not choose: nothing is accepted.
        tree.tokens = [(t + 1) % vocab if p == -1 and t == truth[0] else t
                       for t, p in zip(tree.tokens, tree.parents)]
    return tree


CACHES = {"dynamic": KVCache, "static": lambda model: StaticKVCache(model, mode="eager", capacity=64)}


GREEDY = SamplingParams()


def tree_decode(verifier, prompt: list[int], max_new: int, make_tree, params=GREEDY, generator=None,
                uncached: int = 1, cache: str = "dynamic"):
    """The speculative loop with a tree per pass (the decoder's tree path, spelled out): the first
    pass feeds the prompt's last `uncached` tokens with the tree, later ones the last token."""
    kv = CACHES[cache](verifier)
    tokens = list(prompt)
    kv.feed_until(tokens, max(0, len(tokens) - uncached))
    while len(tokens) - len(prompt) < max_new:
        accepted, token, _ = verify_tree(kv, tokens[len(kv):], make_tree(tokens), params, generator)
        tokens += [*accepted, token]
        assert kv.tokens == tokens[:-1]
    return tokens[len(prompt):len(prompt) + max_new], kv


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt=st.lists(st.integers(0, TINY_VOCAB - 1), min_size=1, max_size=20),
    kind=st.sampled_from(["random", "with_truth", "all_wrong"]),
    seed=st.integers(0, 1 << 16),
    max_new=st.integers(1, 20),
    uncached=st.integers(1, 6),
    cache=st.sampled_from(sorted(CACHES)),
)
def test_greedy_tree_verification_equals_greedy_decoding(verifier, prompt, kind, seed, max_new, uncached, cache):
    expected = reference(verifier, prompt, max_new + 12, None)
    rng = random.Random(seed)

    def make_tree(tokens):
        done = len(tokens) - len(prompt)
        return random_tree(rng, expected[done:done + 6], kind, TINY_VOCAB)

    output, _ = tree_decode(verifier, prompt, max_new, make_tree, uncached=uncached, cache=cache)
    assert output == expected[:max_new]


def test_all_wrong_trees_accept_nothing(verifier):
    prompt = [5, 9, 2, 7]
    expected = reference(verifier, prompt, 8, None)
    kv = KVCache(verifier)
    kv.feed_until(prompt, len(prompt) - 2)
    tree = TokenTree()
    for t in range(TINY_VOCAB):
        if t != expected[1]:
            tree.add_path([t, expected[2]])
    accepted, token, _ = verify_tree(kv, [*prompt[-2:], expected[0]], tree, SamplingParams(), None)
    assert accepted == [] and token == expected[1] and kv.tokens == [*prompt, expected[0]]


def assert_states_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.shape == expected.shape
    scale = max(1.0, float(expected.abs().max()))
    assert float((actual - expected).abs().max()) <= 1024 * torch.finfo(expected.dtype).eps * scale


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_compacted_cache_equals_the_cache_of_the_accepted_path(verifier, cache):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    expected = reference(verifier, prompt, 30, None)
    rng = random.Random(7)

    def make_tree(tokens):
        done = len(tokens) - len(prompt)
        return random_tree(rng, expected[done:done + 5], "with_truth", TINY_VOCAB)

    output, kv = tree_decode(verifier, prompt, 24, make_tree, uncached=3, cache=cache)
    fresh = KVCache(verifier)
    fresh.forward(kv.tokens)
    live = len(kv.tokens)
    assert live == fresh.cache.get_seq_length()
    for compacted, direct in zip(kv._layer_states(), fresh._layer_states()):
        assert_states_close(compacted[:, :, :live], direct)  # a static cache's rows past `live` are stale


def test_mask_and_positions_follow_the_tree():
    #   root ─ a(0) ─ b(1)
    #        └ c(2) ─ d(3)
    #               └ e(4)
    tree = TokenTree([10, 11, 12, 13, 14], [-1, 0, -1, 2, 2])
    assert tree.depths() == [1, 2, 1, 2, 2]
    assert tree_position_ids(tree, 5, "cpu").tolist() == [[5, 6, 7, 6, 7, 7]]
    assert tree_position_ids(tree, 5, "cpu", pending=3).tolist() == [[5, 6, 7, 8, 9, 8, 9, 9]]
    with_pending = tree_attention_mask(tree, 2, torch.float32, "cpu", pending=2)[0, 0] == 0
    assert with_pending[0, 2:].tolist() == [True] + [False] * 6  # pending rows are causal
    assert with_pending[6, 2:].tolist() == [True, True, False, False, True, False, True]  # e: pending, c, itself
    mask = tree_attention_mask(tree, 2, torch.float32, "cpu")[0, 0] == 0
    assert mask.shape == (6, 8)
    assert mask[:, :2].all()  # every row sees the cache
    assert mask[5, 2:].tolist() == [True, False, False, True, False, True]  # e sees root, c, itself
    assert mask[2, 2:].tolist() == [True, True, True, False, False, False]  # b sees root, a, itself
    assert tree.find_path([12, 14]) == [2, 4] and tree.find_path([12, 11]) is None
    assert greedy_tree_accept(tree, torch.nn.functional.one_hot(torch.tensor([12, 0, 0, 14, 0, 9]), 20).float()) == ([2, 4], 9)


def test_trees_reject_bad_shapes():
    with pytest.raises(ValueError):
        TokenTree([1, 2], [-1, 1])  # a node cannot be its own parent
    with pytest.raises(ValueError):
        TokenTree([1], [-1, 0])
    tree = TokenTree()
    assert tree.add_path([4, 5]) == [0, 1] and tree.add_path([4, 6]) == [0, 2]  # shared prefix merged


# ----------------------------------------------------------------------------- sampling


@pytest.fixture(scope="module")
def small_verifier():
    return build_model(VOCAB, seed=11, initializer_range=0.05)


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.3), SamplingParams(temperature=0.9, top_k=5, top_p=0.9)])
def test_sampled_tree_verification_follows_the_verifier(small_verifier, params):
    """Trees mixing children sampled from a draft model's q (two per node, i.i.d., as SpecInfer
    draws them) and deterministic children (one-hot q); 3-token outcomes against the exact law."""
    draft = noisy_copy(small_verifier, seed=5, scale=0.5)
    prompt = [1, 2, 3, 4, 5, 6, 7, 0, 1, 2]
    generator = torch.Generator().manual_seed(99)

    @functools.cache
    @torch.inference_mode()
    def draft_q(context: tuple[int, ...]) -> torch.Tensor:
        return probs_from_logits(draft(torch.tensor([context])).logits[0, -1:], params)[0]

    def make_tree(tokens):
        q = draft_q(tuple(tokens))
        tree = TokenTree()
        for _ in range(2):
            child = tree.add(sample(q, generator), q=q)
            q2 = draft_q((*tokens, tree.tokens[child]))
            tree.add(sample(q2, generator), child, q=q2)
        tree.add_path([tokens[-3], tokens[-2]])  # a deterministic guess (lookup-like)
        return tree

    counts: Counter = Counter()
    for _ in range(SAMPLES):
        output, _ = tree_decode(small_verifier, prompt, 3, make_tree, params, generator)
        counts[tuple(output)] += 1
    assert goodness_of_fit(counts, exact_distribution(small_verifier, prompt, params, 3)) > ALPHA
