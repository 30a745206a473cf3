"""Decode attention (engine/models/cpu_attention.py) computes what SDPA computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import DrafterConfig, make_drafter
from engine.models import cpu_attention
from engine.models.cpu_attention import MAX_DECODE_ROWS, decode_attention
from engine.models.loading import load_model


class Layer(torch.nn.Module):
    num_key_value_groups = 3
    is_causal = True


def qkv(rows: int, length: int, dtype: torch.dtype, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    shapes = ((1, 6, rows, 16), (1, 2, length, 16), (1, 2, length, 16))
    return [torch.randn(shape, generator=generator).to(dtype) for shape in shapes]


def sdpa(query, key, value, mask):
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    is_causal = mask is None and query.shape[2] > 1
    return F.scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=mask,
                                          is_causal=is_causal).transpose(1, 2)


def causal_mask(rows: int, length: int) -> torch.Tensor:
    return torch.ones(rows, length, dtype=torch.bool).tril(length - rows)[None, None]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    # Outputs are averages of unit-normal values: a few rounding steps of the dtype, at most
    # the softmax computed from scores rounded to it.
    tolerance = 64 * torch.finfo(dtype).eps
    torch.testing.assert_close(actual.float(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, MAX_DECODE_ROWS])
def test_rows_against_a_cache_with_the_causal_mask_transformers_builds(dtype, rows):
    query, key, value = qkv(rows, 300, dtype)
    mask = causal_mask(rows, 300) if rows > 1 else None  # transformers builds none for one row
    output, weights = decode_attention(Layer(), query, key, value, mask, scaling=16 ** -0.5)
    assert weights is None and output.shape == (1, rows, 6, 16)
    assert_close(output, sdpa(query, key, value, mask), dtype)


def test_without_a_mask_several_rows_attend_causally():
    query, key, value = qkv(5, 5, torch.float32)
    output, _ = decode_attention(Layer(), query, key, value, None, scaling=16 ** -0.5)
    assert_close(output, sdpa(query, key, value, None), torch.float32)
    # and the first row sees only the first key: changing the last value leaves it alone
    value[:, :, -1] += 10
    changed, _ = decode_attention(Layer(), query, key, value, None, scaling=16 ** -0.5)
    assert torch.equal(changed[:, 0], output[:, 0]) and not torch.equal(changed[:, -1], output[:, -1])


def test_an_additive_mask_like_a_token_trees():
    query, key, value = qkv(4, 40, torch.float32)
    allowed = causal_mask(4, 40).clone()
    allowed[..., 2, 37] = False  # a sibling branch: row 2 must not see node 1
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    output, _ = decode_attention(Layer(), query, key, value, additive, scaling=16 ** -0.5)
    assert_close(output, sdpa(query, key, value, allowed), torch.float32)


def test_prompt_chunks_and_per_head_masks_go_to_sdpa():
    rows = MAX_DECODE_ROWS + 1
    query, key, value = qkv(rows, 64, torch.float32)
    output, _ = decode_attention(Layer(), query, key, value, causal_mask(rows, 64), scaling=16 ** -0.5)
    assert_close(output, sdpa(query, key, value, causal_mask(rows, 64)), torch.float32)
    per_head = causal_mask(4, 64).expand(1, 6, 4, 64)
    query, key, value = qkv(4, 64, torch.float32)
    output, _ = decode_attention(Layer(), query, key, value, per_head, scaling=16 ** -0.5)
    assert_close(output, sdpa(query, key, value, per_head), torch.float32)


def test_a_model_loaded_for_the_cpu_decodes_with_it_and_stays_exact(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    assert loaded.model.config._attn_implementation == cpu_attention.NAME
    calls = []
    original = cpu_attention.decode_attention

    def counting(module, query, *args, **kwargs):
        calls.append(query.shape[2])
        return original(module, query, *args, **kwargs)

    from transformers import AttentionInterface
    AttentionInterface.register(cpu_attention.NAME, counting)
    try:
        prompt = loaded.tokenizer("def add(a, b):\n    return a + b\n" * 3, add_special_tokens=False)["input_ids"]
        config = GenerationConfig(max_new_tokens=30, max_draft_tokens=4)
        with torch.inference_mode():
            plain = SpeculativeDecoder(loaded.model, None).generate(prompt, config)
            drafter = make_drafter("draft", loaded.model, DrafterConfig(max_draft_tokens=4), verifier=loaded.model)
            speculative = SpeculativeDecoder(loaded.model, drafter).generate(prompt, config)
    finally:
        AttentionInterface.register(cpu_attention.NAME, original)
    assert speculative.token_ids == plain.token_ids
    assert 1 in calls and any(1 < rows <= MAX_DECODE_ROWS for rows in calls)  # plain steps and verify passes

    loaded.model.set_attn_implementation("sdpa")
    with torch.inference_mode():
        assert SpeculativeDecoder(loaded.model, None).generate(prompt, config).token_ids == plain.token_ids


def test_a_model_whose_attention_cannot_be_switched_keeps_its_own():
    """Transformers refuses some models another attention (ValueError, NotImplementedError):
    loading goes on with theirs rather than failing."""

    class Fixed(torch.nn.Module):
        def __init__(self, error: Exception) -> None:
            super().__init__()
            self.error = error
            self.config = type("Config", (), {"_attn_implementation": "eager"})()

        def set_attn_implementation(self, name: str) -> None:
            raise self.error

    for error in (ValueError("not supported"), NotImplementedError(), AttributeError("no attention")):
        model = Fixed(error)
        assert cpu_attention.use_decode_attention(model) is False
        assert model.config._attn_implementation == "eager"
