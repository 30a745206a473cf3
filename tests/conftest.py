"""Shared fixtures: tiny random models (float32, fixed seeds) built once per session."""

from __future__ import annotations

import pytest
import torch

from engine.models.tiny import build_model, write_tiny_model
from support.tiny_models import TINY_VOCAB, noisy_copy

# One thread: tiny models gain nothing from a second, and on a shared, loaded machine every
# OpenMP barrier waits for the other thread's time slice (measured 14 ms vs 440 ms a forward
# at load 20 on 2 cores).
torch.set_num_threads(1)


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
def wide_tiny_model_dir(tmp_path_factory):
    """A tiny model whose layers are all 128 wide or more: every one takes 4-bit weights."""
    return write_tiny_model(tmp_path_factory.mktemp("wide-tiny") / "verifier", seed=0, hidden_size=128)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "draft", seed=1)
