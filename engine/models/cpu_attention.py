"""Attention for CPU decoding passes: a few query rows against a long KV cache.

Why: PyTorch's CPU SDPA kernel is slow for the passes decoding makes. On two cores, one
query row of a 0.5B layer against 1,500 cached tokens takes 1.3 ms there and 0.18 ms as two
matmuls and a softmax (0.47 against 0.12 ms at 600 tokens); over 24 layers that is a third
of an int8 pass. From about 32 rows on (prompt chunks) SDPA is the faster one, so those
passes keep it.

Each key/value head is read once for the query heads that share it (grouped-query
attention without repeating the cache), and the mask is the boolean one transformers
builds for SDPA. The arithmetic is eager attention's: scores in the model's dtype, softmax
in float32.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

NAME = "quickdraft_cpu"
MAX_DECODE_ROWS = 16  # measured: at 32 query rows SDPA is twice as fast as the matmuls


def decode_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, is_causal=None, **kwargs):
    """transformers' attention-function signature; returns ([batch, rows, heads, head_dim], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, rows, head_dim = query.shape
    per_head_mask = attention_mask is not None and attention_mask.shape[1] != 1
    unusual = per_head_mask or dropout > 0 or kwargs.get("position_bias") is not None
    if query.device.type != "cpu" or rows > MAX_DECODE_ROWS or unusual:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    kv_heads, length = key.shape[1], key.shape[2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else head_dim ** -0.5
    grouped = query.reshape(batch, kv_heads, group * rows, head_dim)
    scores = (torch.matmul(grouped, key.transpose(2, 3)) * scale).view(batch, kv_heads, group, rows, length)
    if attention_mask is not None:
        mask = attention_mask[:, :, None]  # [batch, 1, 1, rows, length]: the same for every head
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    elif rows > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
        # No mask: transformers skipped building a plain causal one.
        causal = torch.ones(rows, length, dtype=torch.bool, device=query.device).tril(length - rows)
        scores = scores.masked_fill(~causal, float("-inf"))
    probs = scores.softmax(-1, dtype=torch.float32).to(value.dtype)
    output = torch.matmul(probs.view(batch, kv_heads, group * rows, length), value)
    return output.view(batch, heads, rows, head_dim).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make NAME an attention implementation transformers knows, with SDPA's masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, decode_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def use_decode_attention(model) -> bool:
    """Give a CPU model decode_attention; False, leaving it as it was, where the model's
    attention cannot be switched."""
    register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, AttributeError, NotImplementedError):
        return False
    return model.config._attn_implementation == NAME


@contextmanager
def attention_implementation(model, name: str) -> Iterator[None]:
    """Within: the model's attention is `name` (benchmarks compare them side by side)."""
    register()
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
