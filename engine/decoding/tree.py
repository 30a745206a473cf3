"""Token trees: several drafts verified in one pass, and the exact rules that accept from them.

A tree hangs under the *root*, the last verified token (fed with the tree, not yet in the
cache). Node i holds `tokens[i]` and its parent `parents[i]` (< i, or -1 for the root), so
nodes are in topological order and the verifier's forward is `[root, *tokens]`: row 0 gives
the verifier's distribution after the root, row i+1 its distribution after node i's path.

Acceptance walks from the root: greedy follows the child whose token is the verifier's
argmax (so the output is exactly its greedy decoding); sampling uses SpecInfer's recursive
rejection sampling over the children, which is exact for any mix of children drawn from a
q (independently) and children chosen deterministically (one-hot q).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from engine.decoding.verify import SamplingParams, probs_from_logits, sample, widen

ROOT = -1


@dataclass
class TokenTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    # q for each node: the distribution its token was drawn from (after the verifier's own
    # sampling transforms), or None where the drafter chose it deterministically.
    probs: list[torch.Tensor | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.tokens):
            raise ValueError("a token tree needs one parent per token")
        if not self.probs:
            self.probs = [None] * len(self.tokens)
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}: parent {parent} must be -1 (the root) or an earlier node")

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, tokens: Sequence[int], probs: torch.Tensor | None = None) -> "TokenTree":
        rows = [None] * len(tokens) if probs is None else list(probs)
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), rows)

    def add(self, token: int, parent: int = ROOT, q: torch.Tensor | None = None) -> int:
        """Append a node (or find the deterministic sibling with the same token); its index."""
        if q is None and (existing := self.child(parent, token)) is not None:
            return existing
        if not ROOT <= parent < len(self.tokens):
            raise ValueError(f"parent {parent} is not a node of this tree")
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.probs.append(q)
        return len(self.tokens) - 1

    def add_path(self, tokens: Sequence[int], parent: int = ROOT) -> list[int]:
        """Merge a chain of deterministic tokens below `parent` (shared prefixes become shared nodes)."""
        nodes = []
        for token in tokens:
            parent = self.add(token, parent)
            nodes.append(parent)
        return nodes

    def pruned(self, max_depth: int) -> "TokenTree":
        """The nodes at most `max_depth` deep (indices shift; a node's parent stays before it)."""
        keep = [i for i, depth in enumerate(self.depths()) if depth <= max_depth]
        if len(keep) == len(self.tokens):
            return self
        new_index = {ROOT: ROOT, **{old: new for new, old in enumerate(keep)}}
        return TokenTree([self.tokens[i] for i in keep], [new_index[self.parents[i]] for i in keep],
                         [self.probs[i] for i in keep])

    def children(self, node: int) -> list[int]:
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def child(self, node: int, token: int) -> int | None:
        """The deterministic child of `node` holding `token`, if any."""
        return next((c for c in self.children(node) if self.tokens[c] == token and self.probs[c] is None), None)

    def depths(self) -> list[int]:
        """1 for the root's children, 2 for theirs, …"""
        depth: list[int] = []
        for parent in self.parents:
            depth.append(1 if parent == ROOT else depth[parent] + 1)
        return depth

    def path_to(self, node: int) -> list[int]:
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def find_path(self, tokens: Sequence[int]) -> list[int] | None:
        """The nodes spelling `tokens` from the root, or None if the tree has no such path."""
        node, path = ROOT, []
        for token in tokens:
            node = next((c for c in self.children(node) if self.tokens[c] == token), None)
            if node is None:
                return None
            path.append(node)
        return path

    def ancestry(self) -> torch.Tensor:
        """[n+1, n+1] bool: row r may attend to column c (itself, its ancestors, the root) — row 0 is the root."""
        n = len(self.tokens)
        visible = torch.zeros(n + 1, n + 1, dtype=torch.bool)
        visible[:, 0] = True
        for i, parent in enumerate(self.parents):
            row = i + 1
            if parent != ROOT:
                visible[row] = visible[parent + 1]
            visible[row, row] = True
        return visible


# ----------------------------------------------------------------------------- acceptance


def greedy_tree_accept(tree: TokenTree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Follow the children that equal the verifier's argmax: (accepted nodes, the verifier's next token)."""
    choices = logits.argmax(dim=-1).tolist()
    node, path = ROOT, []
    while True:
        choice = choices[node + 1]
        child = next((c for c in tree.children(node) if tree.tokens[c] == choice), None)
        if child is None:
            return path, choice
        path.append(child)
        node = child


def sampled_tree_accept(
    tree: TokenTree, logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
) -> tuple[list[int], int]:
    """SpecInfer's multi-candidate speculative sampling, one level at a time.

    At a node the residual starts as the verifier's p; each child x (drawn from its q, or
    chosen: q one-hot) is accepted with probability min(1, r(x) / q(x)), else r becomes
    normalize(max(0, r - q)). When every child is rejected the token is sampled from r.
    Each step is a Leviathan/Chen rejection against the current residual, so the result
    is distributed exactly as p.
    """
    # A draft padded to another vocabulary size than the verifier: line p and q up (see
    # verify.on_common_vocabulary; q = 0 / logit -inf where a side lacks the token).
    width = max([logits.shape[-1]] + [q.shape[-1] for q in tree.probs if q is not None])
    logits = widen(logits, width, float("-inf"))
    node, path = ROOT, []
    while True:
        residual = probs_from_logits(logits[node + 1], params)
        p = residual
        accepted = None
        for child in tree.children(node):
            token, q = tree.tokens[child], tree.probs[child]
            q = None if q is None else widen(q, width, 0.0)
            q_token = 1.0 if q is None else float(q[token])
            u = float(torch.rand((), generator=generator))
            if q_token > 0 and u * q_token <= float(residual[token]):
                accepted = child
                break
            if q is None:
                residual = residual.clone()
                residual[token] = 0.0
            else:
                residual = (residual - q).clamp_min(0.0)
            total = float(residual.sum())
            # p == q leaves nothing (and then rejection had probability 0): fall back to p.
            residual = residual / total if total > 0 else p
        if accepted is None:
            return path, sample(residual, generator)
        path.append(accepted)
        node = accepted


def tree_accept(
    tree: TokenTree, logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
) -> tuple[list[int], int]:
    """`logits` are the verifier's rows for `[root, *tree.tokens]`."""
    if params.greedy:
        return greedy_tree_accept(tree, logits)
    return sampled_tree_accept(tree, logits, params, generator)
