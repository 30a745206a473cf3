"""The compiled decode step computes what Hugging Face's eager forward computes.

A tiny random Qwen2 (the shape of `bench passes --quick`'s draft model, so the bench test reuses
these compiled graphs) runs a script of passes over a cache that grows, is cropped after a
rejected draft, and is fed again: each pass's float32 logits must equal the eager forward over the
same tokens within a tolerance derived from dtype and magnitude, with the same argmax. Uncompiled
(cheap: every pass, a capacity that grows, the decoder's greedy exactness) and compiled (inductor
on this machine: two pass sizes, so two compiles; a failed compile fails the test).
"""

from __future__ import annotations

import functools

import pytest
import torch
from support.tiny_models import assert_logits_close
from test_decoder_exact import reference
from torch.profiler import ProfilerActivity, profile
from transformers import Qwen2Config, Qwen2ForCausalLM

from engine.bench.model_configs import config_for
from engine.bench.pass_ops import GENERATED_KERNEL
from engine.decoding.compiled_step import CompiledKVCache, attended_length
from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.decoding.kv import PassCancelled
from engine.drafters import DrafterConfig, make_drafter
from engine.models.qwen2_static import StaticQwen2

# (tokens fed, tokens kept afterwards): a prompt chunk, drafts rejected and accepted, single tokens.
SCRIPT = ((20, 22), (5, 24), (8, 32), (1, 33), (6, 35), (1, 36), (8, 38), (5, 43))


def quick_draft_shape(seed: int) -> Qwen2ForCausalLM:
    # A wide init gives peaked logits, so argmax ties are rare and the argmax check means something.
    torch.manual_seed(seed)
    config = Qwen2Config(**dict(config_for("quick-draft"), initializer_range=0.5))
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model():
    return quick_draft_shape(seed=5)


@torch.inference_mode()
def run_script(model, cache, script=SCRIPT, seed: int = 0) -> None:
    """Feed the script's passes; compare each with the eager forward over the kept tokens + the fed ones."""
    generator = torch.Generator().manual_seed(seed)
    kept: list[int] = []
    for fed_count, keep in script:
        fed = torch.randint(0, model.config.vocab_size, (fed_count,), generator=generator).tolist()
        logits = cache.forward(fed)
        expected = model(input_ids=torch.tensor([kept + fed])).logits[0, -fed_count:].float()
        assert_logits_close(logits, expected)
        kept = (kept + fed)[:keep]
        cache.crop(keep)
        assert cache.tokens == kept


def test_the_fused_projections_share_the_models_weights(model):
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        step = StaticQwen2(model, capacity=64)
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)  # the same values, read through views
    attn, layer = model.model.layers[0].self_attn, step.layers[0]
    assert attn.q_proj.weight.data_ptr() == layer.qkv_weight.data_ptr()
    assert attn.v_proj.bias.data_ptr() == layer.qkv_bias[-attn.v_proj.bias.numel():].data_ptr()
    again = StaticQwen2(model, capacity=64)  # laid out already: the same storage, nothing copied
    assert again.layers[0].gate_up_weight.data_ptr() == layer.gate_up_weight.data_ptr()


def test_attended_lengths_are_powers_of_two_within_the_buffers():
    assert [attended_length(n, 4096) for n in (1, 256, 257, 600, 4000)] == [256, 256, 512, 1024, 4096]
    assert attended_length(300, 272) == 272


def test_the_uncompiled_step_equals_eager_while_the_cache_grows_and_is_cropped(model):
    cache = CompiledKVCache(model, compiled=False, capacity=48)  # too small for the script: it grows
    run_script(model, cache)
    assert cache.capacity > 48


def test_fewer_buckets_pad_further_and_run_longer_passes_unpadded(model):
    """Buckets (1, 8): a 5-token pass pads to 8, a 9..16-token pass runs the plain step; both exact."""
    cache = CompiledKVCache(model, compiled=False, buckets=(8, 1))
    assert cache.buckets == (1, 8)
    run_script(model, cache, script=((20, 22), (5, 24), (12, 30), (1, 31), (16, 40)))
    with pytest.raises(ValueError, match="within 1..16"):
        CompiledKVCache(model, compiled=False, buckets=(1, 32))


def test_a_cancelled_pass_leaves_the_cache_as_it_was(model):
    cache = CompiledKVCache(model, compiled=False)
    cache.forward([1, 2, 3])
    with pytest.raises(PassCancelled):
        cache.forward([4, 5], should_stop=lambda: True)
    assert cache.tokens == [1, 2, 3]
    with pytest.raises(ValueError, match="token trees"):
        cache.forward([4], attention_mask=torch.ones(1, 1, 1, 4))


@pytest.mark.parametrize("mode", ["draft", "lookup"])
def test_greedy_decoding_with_the_step_equals_generate(model, mode):
    draft = quick_draft_shape(seed=6)
    factory = functools.partial(CompiledKVCache, compiled=False)
    prompt = [7, 3, 9, 7, 3, 9, 7, 3, 1, 2]
    for k in (1, 4, 15):
        drafter = make_drafter(mode, draft, DrafterConfig(max_draft_tokens=k), kv_factory=factory)
        decoder = SpeculativeDecoder(model, drafter, kv_factory=factory)
        result = decoder.generate(prompt, GenerationConfig(max_new_tokens=20, max_draft_tokens=k))
        assert result.token_ids == reference(model, prompt, 20, None)


def test_the_compiled_step_equals_eager_and_runs_generated_kernels(model):
    """Passes pad to 1 or 8 tokens here: two graphs. A failing inductor raises (fullgraph=True)."""
    cache = CompiledKVCache(model)
    run_script(model, cache)
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as recorded:
        cache.forward([1, 2, 3, 4, 5, 6, 7, 8])
    kernels = [event.name for event in recorded.events() if GENERATED_KERNEL.match(event.name)]
    assert kernels, "no inductor kernel ran: the pass was not compiled"
