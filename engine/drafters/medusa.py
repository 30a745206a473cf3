"""Single-model drafters, on the verifier's own hidden state, with prompt lookup's matches merged in:

- `medusa`: a token tree from the Medusa heads' top-k (engine/medusa/heads.py);
- `feature`: the feature-level head's greedy chain and its runners-up (engine/medusa/feature_head.py).

Both read the verifier's final hidden state at the position that produced the last token,
which the verifier computes anyway: a forward hook on its final norm keeps the latest
forward's output, and the drafter picks the row of the last accepted token (the draft is
always fed last, so rows are counted from the end). Drafting then costs the heads' few
matrix-vector products and no extra model pass. A request's first pass has no such state
yet (it feeds the prompt's tail), so it goes without a draft.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import torch

from engine.decoding.draft import Draft
from engine.decoding.tree import TokenTree
from engine.decoding.verify import SamplingParams
from engine.drafters.trees import TreeLookupDrafter, add_paths, tree_draft
from engine.medusa.choices import Choice, build_tree
from engine.medusa.feature_head import FeatureHead
from engine.medusa.heads import MedusaHeads


class HiddenTap:
    """The verifier's final-norm output (the LM head's input) from its latest forward; one per model."""

    def __init__(self, model) -> None:
        self.last: torch.Tensor | None = None  # [rows, hidden]
        self.handle = model.get_decoder().norm.register_forward_hook(self._keep)

    def _keep(self, module, args, output) -> None:
        self.last = output[0].detach()

    @classmethod
    def of(cls, model) -> "HiddenTap":
        tap = getattr(model, "_quickdraft_hidden_tap", None)
        if tap is None:
            tap = cls(model)
            model._quickdraft_hidden_tap = tap
        return tap


class HiddenStateDrafter(ABC):
    """What both drafters share: the hidden state of the last accepted token, lookup beside."""

    name = ""

    def __init__(self, verifier, lookup: TreeLookupDrafter | None) -> None:
        self.tap = HiddenTap.of(verifier)
        self.lookup = lookup
        self.pending: Draft | None = None  # the last draft proposed, until the next proposal
        self.accepted = 0

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        self.pending, self.accepted = None, 0
        if self.lookup is not None:
            self.lookup.start(prompt_ids, context_streams)

    def hidden_state(self, tokens: Sequence[int]) -> torch.Tensor | None:
        """The hidden state whose LM-head output was `tokens[-1]`, from the verifier's latest forward."""
        rows, draft = self.tap.last, self.pending
        if rows is None or draft is None:  # a request's first pass feeds the prompt's tail itself
            return None
        if not draft.tokens:  # the last pass had no draft: its last row
            return rows[-1]
        root_row = len(rows) - len(draft.tokens) - 1
        accepted = list(tokens[len(tokens) - 1 - self.accepted:len(tokens) - 1]) if self.accepted else []
        if draft.tree is not None:
            path = draft.tree.find_path(accepted)
            if path is None or root_row < 0:
                return None
            return rows[root_row + (path[-1] + 1 if path else 0)]
        return rows[root_row + len(accepted)] if root_row >= 0 else None

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        hidden = self.hidden_state(tokens)
        self.accepted = 0
        if hidden is None:
            self.pending = Draft.empty(self.name)
            return self.pending
        found = self.lookup.candidates(tokens, min(max_tokens, self.lookup.length.value)) if self.lookup else []
        tree = self.tree(hidden, tokens[-1], max_tokens, beside_lookup=bool(found))
        add_paths(tree, found, len(tree) + (self.lookup.max_nodes if self.lookup else 0))
        self.pending = tree_draft(tree, self.name)
        return self.pending

    @abstractmethod
    def tree(self, hidden: torch.Tensor, last_token: int, max_tokens: int, beside_lookup: bool) -> TokenTree:
        """The draft tree from `hidden`, the state that chose `last_token`; smaller beside lookup's candidates."""

    def observe(self, draft: Draft, accepted: int) -> None:
        self.accepted = accepted


class MedusaDrafter(HiddenStateDrafter):
    name = "medusa"

    def __init__(self, verifier, heads: MedusaHeads, choices: Sequence[Choice], *,
                 lookup: TreeLookupDrafter | None = None, nodes_beside_lookup: int = 6) -> None:
        """`choices` most probable first; beside lookup's candidates only the first
        `nodes_beside_lookup` of them are drafted (on a CPU every node costs a little)."""
        super().__init__(verifier, lookup)
        weight = verifier.get_output_embeddings().weight
        self.heads = heads.to(device=weight.device, dtype=weight.dtype).attach(weight).eval()
        self.choices = list(choices)
        self.top_k = max((rank + 1 for choice in self.choices for rank in choice), default=1)
        self.nodes_beside_lookup = nodes_beside_lookup

    def tree(self, hidden: torch.Tensor, last_token: int, max_tokens: int, beside_lookup: bool) -> TokenTree:
        candidates, _ = self.heads.top_k(hidden, self.top_k)
        return build_tree(candidates, self.choices[:self.nodes_beside_lookup] if beside_lookup else self.choices,
                          max_tokens)


class FeatureDrafter(HiddenStateDrafter):
    name = "feature"

    def __init__(self, verifier, head: FeatureHead, *, lookup: TreeLookupDrafter | None = None, depth: int = 6,
                 stop_below: float = 0.3, branch_below: float = 0.5, nodes_beside_lookup: int = 4) -> None:
        """The head's greedy chain, up to `depth` deep and ending after a step it is less than
        `stop_below` sure of, with the runner-up beside every step it is less than `branch_below`
        sure of; beside lookup's candidates at most `nodes_beside_lookup` nodes of it."""
        super().__init__(verifier, lookup)
        self.head = head.eval()
        self.depth, self.stop_below, self.branch_below = depth, stop_below, branch_below
        self.nodes_beside_lookup = nodes_beside_lookup

    def tree(self, hidden: torch.Tensor, last_token: int, max_tokens: int, beside_lookup: bool) -> TokenTree:
        depth = min(self.depth, max_tokens)
        tree = TokenTree()
        paths = self.head.draft(hidden, last_token, depth, stop_below=self.stop_below, branch_below=self.branch_below)
        add_paths(tree, paths, self.nodes_beside_lookup if beside_lookup else 2 * depth)
        return tree
