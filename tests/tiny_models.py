"""Helpers for tests on tiny random models (importable; conftest.py only holds fixtures)."""

from __future__ import annotations

import torch

from engine.tiny import build_model

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
