"""Medusa's sparse tree: which (head, rank) combinations to verify, tuned on held-out data.

A choice is a tuple of ranks, one per level: (0,) is head 0's best token, (1, 0) head 0's
second-best followed by head 1's best, and so on. With `accuracy[k][r]` the held-out rate
at which head k's rank-r token is the verifier's own, a choice is accepted with roughly the
product of its levels' rates, and a tree's expected accepted length is the sum over its
nodes. The best tree of N nodes is then simply the N most probable choices (a choice is
never more probable than its prefix, so every parent comes in before its children).
"""

from __future__ import annotations

import itertools
from typing import Sequence

import torch

from engine.decoding.tree import ROOT, TokenTree

Choice = tuple[int, ...]


def tune_choices(accuracy: Sequence[Sequence[float]], max_nodes: int, min_probability: float = 0.0) -> list[Choice]:
    """The `max_nodes` most probable choices (those above `min_probability`), most probable first
    (so parents come before their children)."""
    scored: list[tuple[float, Choice]] = []
    for depth in range(1, len(accuracy) + 1):
        for choice in itertools.product(*(range(len(accuracy[level])) for level in range(depth))):
            probability = 1.0
            for level, rank in enumerate(choice):
                probability *= float(accuracy[level][rank])
            if probability > min_probability:
                scored.append((probability, choice))
    scored.sort(key=lambda item: (-item[0], len(item[1]), item[1]))
    chosen = {choice for _, choice in scored[:max_nodes]}
    # Ties can leave a child without its parent: keep only complete paths.
    return [c for _, c in scored[:max_nodes] if all(c[:i] in chosen for i in range(1, len(c)))]


def by_probability(choices: Sequence[Choice], accuracy: Sequence[Sequence[float]] | None) -> list[Choice]:
    """`choices` most probable first (parents still before their children); as given without accuracy."""
    if not accuracy:
        return list(choices)

    def probability(choice: Choice) -> float:
        p = 1.0
        for level, rank in enumerate(choice):
            p *= float(accuracy[level][rank]) if level < len(accuracy) and rank < len(accuracy[level]) else 0.0
        return p

    return sorted(choices, key=lambda c: (-probability(c), len(c), c))


def expected_length(accuracy: Sequence[Sequence[float]], choices: Sequence[Choice]) -> float:
    """Tokens per pass the tree should give: 1 (the verifier's own) + the nodes' acceptance probabilities."""
    total = 1.0
    for choice in choices:
        probability = 1.0
        for level, rank in enumerate(choice):
            probability *= float(accuracy[level][rank])
        total += probability
    return total


def build_tree(candidates: torch.Tensor, choices: Sequence[Choice], max_depth: int) -> TokenTree:
    """Token tree from the heads' candidates ([K, k] token ids, best first) and the tuned choices."""
    tree = TokenTree()
    node_of: dict[Choice, int] = {(): ROOT}
    heads, ranks = candidates.shape
    rows = candidates.tolist()
    for choice in choices:  # parents before children
        depth = len(choice)
        if depth > min(max_depth, heads) or choice[-1] >= ranks or choice[:-1] not in node_of:
            continue
        node_of[choice] = tree.add(rows[depth - 1][choice[-1]], node_of[choice[:-1]])
    return tree


def default_choices(num_heads: int, max_nodes: int) -> list[Choice]:
    """Before any tuning: accuracy assumed to halve with each rank and fall with each head."""
    accuracy = [[0.6 * 0.8 ** level * 0.5 ** rank for rank in range(8)] for level in range(num_heads)]
    return tune_choices(accuracy, max_nodes)
