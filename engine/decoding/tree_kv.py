"""The verifier's pass over a token tree, and the KV cache compacted to the accepted path.

One forward feeds what the cache lacks (`pending`, whose last token is the tree's root)
followed by the tree's nodes. Pending rows attend causally; each node attends to the cache,
all pending tokens and its own ancestors (a 4D attention mask, which transformers passes
through untouched), at position `root's position + depth`. Afterwards the cache holds every
node; keeping the accepted path moves its rows up behind the root and drops the rest, so
the cache is the one that feeding the accepted path alone would have built.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from engine.decoding.tree import TokenTree, tree_accept
from engine.decoding.verify import SamplingParams, emitted_logprobs


def tree_attention_mask(tree: TokenTree, cached: int, dtype: torch.dtype, device, pending: int = 1) -> torch.Tensor:
    """Additive [1, 1, rows, cached + rows] mask for `pending` chain tokens then the tree's nodes:
    0 where a row may look, the dtype's minimum elsewhere (additive rather than boolean, so
    eager and SDPA attention both read it)."""
    rows = pending + len(tree)
    visible = torch.ones(rows, cached + rows, dtype=torch.bool)
    block = visible[:, cached:]
    block[:pending, :pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    block[:pending, pending:] = False
    block[pending - 1:, pending - 1:] = tree.ancestry()  # the root is the last pending token
    mask = torch.zeros(rows, cached + rows, dtype=dtype)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def tree_position_ids(tree: TokenTree, cached: int, device, pending: int = 1) -> torch.Tensor:
    root = cached + pending - 1
    positions = [*range(cached, cached + pending), *(root + d for d in tree.depths())]
    return torch.tensor([positions], dtype=torch.long, device=device)


def forward_tree(kv, pending: Sequence[int], tree: TokenTree, should_stop=None) -> torch.Tensor:
    """Feed `[*pending, *tree.tokens]`; float32 logits for the root and every node ([len(tree)+1, vocab]).

    Until `keep_path` runs, `kv.tokens` ends with the tree's nodes as if they were one sequence.
    """
    cached = len(kv)
    dtype = next(kv.model.parameters()).dtype
    return kv.forward(
        [*pending, *tree.tokens], logits_for=len(tree) + 1, should_stop=should_stop,
        attention_mask=tree_attention_mask(tree, cached, dtype, kv.device, len(pending)),
        position_ids=tree_position_ids(tree, cached, kv.device, len(pending)),
    )


def keep_path(kv, tree: TokenTree, path: Sequence[int]) -> None:
    """After `forward_tree`: keep the nodes of `path`, in order, and drop the tree's other nodes."""
    start = len(kv) - len(tree)  # the first node's row in the cache
    kept = [tree.tokens[node] for node in path]
    kv.keep_rows(start, [start + node for node in path])
    kv.tokens[start:] = kept


def verify_tree(kv, pending: Sequence[int], tree: TokenTree, params: SamplingParams,
                generator: torch.Generator | None, should_stop=None,
                mask: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[list[int], int, list[float]]:
    """One verifier pass over a tree: (the accepted tokens, the verifier's token after them, the
    verifier's log-probability of each of those tokens).

    Afterwards `kv` holds the pending tokens and the accepted ones, exactly as if only they
    had been fed. A cancelled pass (PassCancelled) leaves `kv` as it was. `mask` narrows the
    logits (root's row, then each node's) before acceptance: a token constraint.
    """
    logits = forward_tree(kv, pending, tree, should_stop)
    if mask is not None:
        logits = mask(logits)
    path, token = tree_accept(tree, logits, params, generator)
    keep_path(kv, tree, path)
    accepted = [tree.tokens[node] for node in path]
    # The root's row predicts the first node; node i's row (i + 1) predicts what follows it.
    return accepted, token, emitted_logprobs(logits, [0, *(node + 1 for node in path)], [*accepted, token])
