"""Helpers for tests on tiny random models (importable; conftest.py only holds fixtures)."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.medusa.choices import default_choices
from engine.medusa.feature_head import FeatureHead
from engine.medusa.heads import MedusaHeads
from engine.medusa.store import LoadedHeads
from engine.models.tiny import build_model

TINY_VOCAB = 64


def noisy_copy(model, *, seed: int, scale: float):
    """The same weights plus noise: a draft model that agrees with the verifier often, not always."""
    copy = build_model(model.config.vocab_size, seed=seed, hidden_size=model.config.hidden_size,
                       layers=model.config.num_hidden_layers)
    copy.load_state_dict(model.state_dict())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in copy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * scale * parameter.std())
    return copy


def random_heads(verifier, seed: int, num_heads: int = 3) -> LoadedHeads:
    """Untrained Medusa heads with random weights for a tiny verifier (a drafter that is often wrong)."""
    heads = MedusaHeads(verifier.config.hidden_size, num_heads, torch.arange(verifier.config.vocab_size))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in heads.blocks:
            block.linear.weight.copy_(torch.randn(block.linear.weight.shape, generator=generator) * 0.1)
    heads.attach(verifier.lm_head.weight)
    return LoadedHeads(heads, {"choices": [list(c) for c in default_choices(num_heads, 12)]}, Path("."))


def random_feature_head(verifier, seed: int) -> LoadedHeads:
    """An untrained feature head with a random MLP for a tiny verifier (a drafter that is often wrong)."""
    generator = torch.Generator().manual_seed(seed)
    head = FeatureHead(verifier.config.hidden_size, torch.arange(verifier.config.vocab_size))
    with torch.no_grad():
        for layer in (head.up, head.down):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * 0.1)
    head.attach(verifier.lm_head.weight, verifier.get_input_embeddings().weight)
    return LoadedHeads(head, {"kind": "feature"}, Path("."))


def assert_logits_close(actual: torch.Tensor, expected: torch.Tensor, *, ulps: int = 1024) -> None:
    """Equal up to rounding: the same argmax, and values within a tolerance derived from the
    dtype and the logits' magnitude. Different CPUs (Intel/AMD, AVX-512 or not) run different
    kernels and block sizes, so a fixed absolute tolerance holds on one and fails on another;
    `ulps` machine epsilons per unit of magnitude leaves room for the reordered sums of a
    forward that is chunked differently."""
    assert actual.shape == expected.shape
    assert torch.equal(actual.argmax(dim=-1), expected.argmax(dim=-1))
    scale = max(1.0, float(expected.abs().max()))
    tolerance = ulps * torch.finfo(expected.dtype).eps * scale
    difference = float((actual - expected).abs().max())
    assert difference <= tolerance, f"logits differ by {difference:.3g} > {tolerance:.3g}"
