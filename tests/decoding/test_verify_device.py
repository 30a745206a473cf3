"""Acceptance computed for all drafted positions at once (engine/decoding/verify.py), checked against
the rule position by position: greedy on hand-made logits, sampling on its edge cases."""

from __future__ import annotations

import pytest
import torch

from engine.decoding.verify import SamplingParams, accept, greedy_accept, on_device


def logits_choosing(tokens: list[int], vocab: int = 6) -> torch.Tensor:
    rows = torch.full((len(tokens), vocab), -5.0)
    rows[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return rows


@pytest.mark.parametrize("drafts, verifier, expected", [
    ([], [3], (0, 3)),  # no draft: the verifier's own token
    ([1, 2, 3], [1, 2, 3, 4], (3, 4)),  # all accepted, then the bonus token
    ([1, 2, 3], [0, 2, 3, 4], (0, 0)),  # first rejected: later matches do not count
    ([1, 2, 3], [1, 5, 3, 4], (1, 5)),  # the correction at the first mismatch
    ([1, 2, 3], [1, 2, 0, 4], (2, 0)),
])
def test_greedy_keeps_the_agreed_prefix_and_adds_the_verifiers_token(drafts, verifier, expected):
    assert greedy_accept(drafts, logits_choosing(verifier)) == expected


def test_sampling_with_a_certain_verifier_behaves_like_greedy():
    # p puts (all but) all mass on one token per row: accept exactly the matching prefix.
    logits = logits_choosing([1, 2, 0, 4]) * 10
    generator = torch.Generator().manual_seed(0)
    for q in (None, torch.softmax(logits_choosing([1, 2, 3]), dim=-1)):
        for _ in range(20):
            assert accept([1, 2, 3], q, logits, SamplingParams(temperature=1.0), generator) == (2, 0)


def test_sampling_lines_up_vocabularies_padded_differently():
    """A 7-token verifier with a 6-token draft (embeddings padded differently): q is 0 beyond it."""
    logits = torch.zeros(3, 7)
    q = torch.softmax(torch.zeros(2, 6), dim=-1)
    generator = torch.Generator().manual_seed(1)
    outcomes = {accept([1, 2], q, logits, SamplingParams(temperature=1.0), generator) for _ in range(200)}
    assert all(0 <= n <= 2 and 0 <= token < 7 for n, token in outcomes)
    assert any(token == 6 for _, token in outcomes)  # the verifier-only token is reachable in the residual


def test_a_generator_already_on_the_device_is_used_as_is():
    cpu = torch.Generator().manual_seed(5)
    assert on_device(cpu, torch.device("cpu")) is cpu
    assert on_device(None, torch.device("cuda")) is None  # the device's default generator
