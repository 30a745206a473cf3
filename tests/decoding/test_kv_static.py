"""The static KV cache against the dynamic one: same logits, crop and reuse semantics,
growth, cancellation, and passes that read nothing back to the host (run on the meta device).

CUDA graph capture itself needs a GPU (`quickdraft bench passes --device cuda` checks it);
everything around it — bucket padding, the full-buffer mask, positions — runs here in the
"bucketed" mode, which is the captured computation without the capture.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from engine.decoding.kv import KVCache, chunk_end
from engine.decoding.kv_static import BUCKETS, PassCancelled, StaticKVCache, cache_factory
from engine.decoding.verify import SamplingParams, greedy_decision, speculative_decision

from support.tiny_models import TINY_VOCAB, assert_logits_close

MODES = ("eager", "bucketed")


def tokens(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, TINY_VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference_logits(model, sequence: list[int], last: int) -> torch.Tensor:
    """Logits for the last `last` tokens of `sequence`, from one forward with no cache at all."""
    with torch.inference_mode():
        return model(torch.tensor([sequence])).logits[0, -last:].float()


@pytest.mark.parametrize("mode", MODES)
def test_passes_match_a_fresh_forward_through_crops_and_growth(verifier, mode):
    cache = StaticKVCache(verifier, mode=mode, capacity=32)  # small: the 40-token pass must grow it
    sequence = tokens(60)
    fed: list[int] = []
    # Pass sizes a decoder makes: a prompt chunk, verifier passes of k+1 (bucketed: padded), one-token steps.
    for size, crop_to in ((10, None), (1, None), (3, 12), (8, 14), (16, None), (40, 30), (5, None)):
        chunk = sequence[len(fed):len(fed) + size] if len(fed) + size <= 60 else tokens(size, seed=len(fed))
        logits = cache.forward(chunk)
        fed += chunk
        assert cache.tokens == fed
        assert_logits_close(logits, reference_logits(verifier, fed, len(chunk)))
        if crop_to is not None:
            cache.crop(crop_to)
            fed = fed[:crop_to]
            assert len(cache) == crop_to and cache.tokens == fed
    assert cache.capacity >= len(fed) + BUCKETS[-1]


def test_eager_mode_is_the_dynamic_cache_computation(verifier):
    static, dynamic = StaticKVCache(verifier, mode="eager"), KVCache(verifier)
    for chunk in (tokens(12), tokens(1, 1), tokens(5, 2)):
        assert_logits_close(static.forward(chunk), dynamic.forward(chunk), ulps=8)
    static.crop(9), dynamic.crop(9)
    assert_logits_close(static.forward(tokens(4, 3), logits_for=2), dynamic.forward(tokens(4, 3), logits_for=2), ulps=8)


@pytest.mark.parametrize("mode", MODES)
def test_prefill_reuses_the_longest_common_prefix(verifier, mode):
    cache = StaticKVCache(verifier, mode=mode)
    prompt = tokens(30)
    logits, fed = cache.prefill(prompt, chunk=8)
    assert fed == 30 and cache.tokens == prompt
    assert_logits_close(logits[None], reference_logits(verifier, prompt, 1))
    # An edit near the end: only what follows the common prefix is fed again.
    edited = prompt[:25] + tokens(3, 1)
    logits, fed = cache.prefill(edited, chunk=8)
    assert fed == 3 and cache.tokens == edited
    assert_logits_close(logits[None], reference_logits(verifier, edited, 1))
    # The same prompt again still feeds its last token (its logits are the answer).
    _, fed = cache.prefill(edited)
    assert fed == 1 and cache.tokens == edited
    # A shorter prompt that is a prefix: crop, feed the last token.
    _, fed = cache.prefill(edited[:10])
    assert fed == 1 and cache.tokens == edited[:10]


def test_crop_is_a_length(verifier):
    cache = StaticKVCache(verifier, mode="bucketed")
    cache.forward(tokens(6))
    keys = cache._layers[0].keys
    cache.crop(10)  # longer than held: nothing happens
    assert len(cache) == 6
    cache.crop(2)
    assert len(cache) == 2 and cache._layers[0].keys is keys  # no copy, no reallocation
    cache.crop(0)
    assert cache.tokens == []
    assert_logits_close(cache.forward(tokens(3, 5)), reference_logits(verifier, tokens(3, 5), 3))


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_pass_leaves_the_cache_as_it_was(verifier, mode):
    cache = StaticKVCache(verifier, mode=mode)
    prompt = tokens(20)
    cache.forward(prompt[:12])
    layers_seen = []

    def stop_in_the_second_layer() -> bool:
        layers_seen.append(1)
        return len(layers_seen) >= 2

    size = 20 if mode == "eager" else 4  # bucketed passes check once, before the replay
    with pytest.raises(PassCancelled):
        cache.forward(tokens(size, 7), should_stop=stop_in_the_second_layer)
    assert cache.tokens == prompt[:12]
    assert_logits_close(cache.forward(prompt[12:]), reference_logits(verifier, prompt, 8))


@pytest.mark.parametrize("length, sizes", [(20, [8, 12]), (21, [8, 8, 5]), (12, [12]), (13, [8, 5])])
def test_a_short_last_chunk_is_fed_with_the_one_before(verifier, length, sizes):
    """A chunk of 8 tokens, or the rest when fewer than 4 would be left after it: a forward
    reads every weight, so a tail of a few tokens costs nearly a whole chunk."""
    assert [chunk_end(start, 20, 8) for start in (0, 8)] == [8, 20]
    cache = KVCache(verifier)
    fed = []
    hook = verifier.model.register_forward_pre_hook(
        lambda module, args, kwargs: fed.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        prompt = tokens(length)
        logits, count = cache.prefill(prompt, chunk=8)
    finally:
        hook.remove()
    assert fed == sizes and count == length
    assert_logits_close(logits[None], reference_logits(verifier, prompt, 1))


def test_a_cancelled_prefill_keeps_what_it_fed(verifier):
    cache = StaticKVCache(verifier, mode="eager")
    prompt = tokens(40)
    calls = []

    def stop_after_two_chunks() -> bool:
        calls.append(1)
        return len(calls) > 2 * (1 + verifier.config.num_hidden_layers)  # checked per chunk and per layer

    logits, fed = cache.prefill(prompt, stop_after_two_chunks, chunk=8)
    assert logits is None and fed == 16 and cache.tokens == prompt[:16]
    logits, fed = cache.prefill(prompt, chunk=8)
    assert fed == 24
    assert_logits_close(logits[None], reference_logits(verifier, prompt, 1))


def test_bad_passes_are_refused_clearly(verifier):
    cache = StaticKVCache(verifier, mode="bucketed")
    with pytest.raises(ValueError, match="needs tokens"):
        cache.forward([])
    with pytest.raises(ValueError, match="logits_for"):
        cache.forward([1, 2], logits_for=3)
    with pytest.raises(ValueError, match="CUDA"):
        StaticKVCache(verifier, mode="graphs")
    with pytest.raises(ValueError, match="unknown static cache mode"):
        StaticKVCache(verifier, mode="fast")
    assert cache.tokens == []


def test_the_cpu_keeps_the_dynamic_cache():
    assert cache_factory("cpu") is KVCache


def test_a_bucketed_pass_and_acceptance_read_nothing_back_to_the_host():
    """On the meta device a tensor has no values: `.item()`, `.tolist()`, indexing by a 0-dim
    tensor or any data-dependent shape raises. What runs there cannot synchronise a GPU."""
    config = Qwen2Config(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config).eval()
    cache = StaticKVCache(model, mode="bucketed", capacity=64)
    for size in (1, 3, 16):
        logits = cache.forward(tokens(size))
        assert logits.device.type == "meta" and logits.shape == (size, TINY_VOCAB)
    assert greedy_decision([1, 2, 3], logits[:4]).shape == (2,)
    params = SamplingParams(temperature=0.8, top_k=8, top_p=0.9)
    assert speculative_decision([1, 2, 3], None, logits[:4], params, None).shape == (2,)
    q = torch.rand(3, TINY_VOCAB, device="meta")
    assert speculative_decision([1, 2, 3], q, logits[:4], params, None).shape == (2,)
    with pytest.raises(RuntimeError, match="meta"):  # the check can fail: a host read does raise here
        logits[0, 0].item()
