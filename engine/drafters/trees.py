"""Tree drafters: several candidates per verifier pass instead of one chain.

- lookup: up to `max_branches` distinct continuations of the text's n-gram matches
  (longest match first, then most recent), merged into one tree.
- draft model: its greedy chain, plus the runner-up token as a sibling wherever the
  model is unsure (greedy only: a sampled draft stays one chain, which is exact as it is).
- hybrid: the draft model's tree with the lookup continuations merged in.

Trees stay within `max_nodes` nodes: on a CPU every fed token costs a little, on a GPU
nearly nothing.
"""

from __future__ import annotations

from typing import Sequence

import torch

from engine.decoding.draft import Draft
from engine.drafters.draft_model import DraftModelDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.decoding.tree import ROOT, TokenTree
from engine.decoding.verify import SamplingParams


def tree_draft(tree: TokenTree, source: str) -> Draft:
    return Draft(list(tree.tokens), None, source, tree=tree)


def add_paths(tree: TokenTree, paths: Sequence[Sequence[int]], max_nodes: int) -> None:
    """Merge deterministic paths into `tree`, each cut where the node budget runs out."""
    for path in paths:
        node = ROOT
        for token in path:
            existing = tree.child(node, token)
            if existing is None and len(tree) >= max_nodes:
                break
            node = existing if existing is not None else tree.add(token, node)


def deepest(tree: TokenTree) -> int:
    return max(tree.depths(), default=0)


class TreeLookupDrafter(PromptLookupDrafter):
    name = "lookup-tree"

    def __init__(self, *, max_branches: int = 4, max_nodes: int = 16, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_branches, self.max_nodes = max_branches, max_nodes

    def candidates(self, tokens: Sequence[int], max_tokens: int) -> list[list[int]]:
        """Distinct continuations over the sequence itself and the context streams, longest match first."""
        self.sequence.extend(tokens[len(self.sequence.tokens):])
        found: list[tuple[int, list[int]]] = []
        for index in [self.sequence, *self.streams]:
            found += index.continuations(tokens, max_tokens, self.max_branches)
        found.sort(key=lambda match: -match[0])  # stable: the sequence's own matches first among equals
        return [continuation for _, continuation in found[:self.max_branches]]

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        tree = TokenTree()
        add_paths(tree, self.candidates(tokens, min(max_tokens, self.length.value)), self.max_nodes)
        return tree_draft(tree, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        self.length.update(deepest(draft.tree) if draft.tree is not None else len(draft.tokens), accepted)


class TreeDraftModelDrafter(DraftModelDrafter):
    """Greedy: the draft model's chain, with its second choice as a leaf where its first is unsure."""

    name = "draft-tree"

    def __init__(self, model, *, branch_below: float = 0.8, max_nodes: int = 16, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.branch_below, self.max_nodes = branch_below, max_nodes

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        if not sampling.greedy:
            return super().propose(tokens, max_tokens, sampling)
        return tree_draft(self.grow(tokens, min(max_tokens, self.length.value)), self.name)

    def grow(self, tokens: Sequence[int], depth: int) -> TokenTree:
        tree = TokenTree()
        if depth <= 0:
            return tree
        logits, _ = self.kv.prefill(list(tokens), chunk=None)
        node = ROOT
        while True:
            probs = logits.softmax(dim=-1)
            top = torch.topk(probs, 2)
            first, second = (int(t) for t in top.indices)
            if float(top.values[0]) < self.branch_below and len(tree) + 2 <= self.max_nodes:
                tree.add(second, node)  # the runner-up as a leaf: no extra draft-model pass
            node = tree.add(first, node)
            # Stop early when the draft model itself is unsure: such tokens are rarely accepted.
            if (tree.depths()[node] >= depth or len(tree) >= self.max_nodes
                    or float(top.values[0]) < self.confidence_threshold):
                return tree
            logits = self.kv.forward([first])[-1]

    def observe(self, draft: Draft, accepted: int) -> None:
        self.length.update(deepest(draft.tree) if draft.tree is not None else len(draft.tokens), accepted)


class TreeHybridDrafter:
    """The draft model's tree (when there is a draft model) with lookup's continuations merged in."""

    name = "hybrid-tree"

    def __init__(self, lookup: TreeLookupDrafter, draft_model: TreeDraftModelDrafter | None) -> None:
        self.lookup, self.draft_model = lookup, draft_model

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        self.lookup.start(prompt_ids, context_streams)
        if self.draft_model is not None:
            self.draft_model.start(prompt_ids, context_streams)

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        if self.draft_model is None:
            return self.lookup.propose(tokens, max_tokens, sampling)
        if not sampling.greedy:  # one exact chain: lookup's when it has one, else the draft model's
            found = self.lookup.candidates(tokens, max_tokens)
            if found:
                return Draft(found[0], None, self.lookup.name)
            return self.draft_model.propose(tokens, max_tokens, sampling)
        tree = self.draft_model.grow(tokens, min(max_tokens, self.draft_model.length.value))
        add_paths(tree, self.lookup.candidates(tokens, min(max_tokens, self.lookup.length.value)),
                  self.lookup.max_nodes + self.draft_model.max_nodes)
        return tree_draft(tree, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        if draft.source == self.lookup.name:
            self.lookup.observe(draft, accepted)
        elif self.draft_model is not None:
            self.draft_model.observe(draft, accepted)
