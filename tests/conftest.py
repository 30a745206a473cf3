"""Shared fixtures: tiny random models (float32, fixed seeds) built once per session."""

from __future__ import annotations

import warnings

import pytest
import torch

from engine.tiny import build_model, write_tiny_model

torch.set_num_threads(2)

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


@pytest.fixture(scope="session")
def verifier():
    return build_model(TINY_VOCAB, seed=1)


@pytest.fixture(scope="session")
def draft_models(verifier):
    """Draft models from useless to perfect: unrelated, a noisy copy, the verifier itself."""
    return {
        "unrelated": build_model(TINY_VOCAB, seed=2),
        "noisy": noisy_copy(verifier, seed=3, scale=0.3),
        "identical": verifier,
    }


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny model + tokenizer on disk, loadable like any HF model directory."""
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "verifier", seed=0)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "draft", seed=1)
