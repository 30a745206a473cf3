"""The verifier's pass over a token tree, and the KV cache compacted to the accepted path.

One forward feeds `[root, *tree.tokens]` after the cached tokens: each row sees the whole
cache plus its own ancestors (a 4D attention mask, which transformers passes through
untouched), at position `cached + depth`. Afterwards the cache holds every node; keeping
the accepted path moves its rows next to the root and drops the rest, so the cache is
the one that feeding the accepted path alone would have built.
"""

from __future__ import annotations

from typing import Sequence

import torch

from engine.tree import TokenTree, tree_accept
from engine.verify import SamplingParams


def tree_attention_mask(tree: TokenTree, cached: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive [1, 1, n+1, cached+n+1] mask: 0 where a row may look, the dtype's minimum elsewhere
    (additive rather than boolean so eager and SDPA attention both read it)."""
    rows = len(tree) + 1
    visible = torch.ones(rows, cached + rows, dtype=torch.bool)
    visible[:, cached:] = tree.ancestry()
    mask = torch.zeros(rows, cached + rows, dtype=dtype)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def tree_position_ids(tree: TokenTree, cached: int, device) -> torch.Tensor:
    return torch.tensor([[cached, *(cached + d for d in tree.depths())]], dtype=torch.long, device=device)


@torch.inference_mode()
def forward_tree(kv, root: int, tree: TokenTree) -> torch.Tensor:
    """Feed `[root, *tree.tokens]` under the tree mask; float32 logits, one row per fed token.

    `kv` is a `KVCache` (its model, cache and tokens); until `keep_path` runs, its cache holds
    the tree's rows after the cached tokens while `kv.tokens` still lists the cached tokens only.
    """
    cached = len(kv.tokens)
    dtype = next(kv.model.parameters()).dtype
    output = kv.model(
        input_ids=torch.tensor([[root, *tree.tokens]], dtype=torch.long, device=kv.device),
        attention_mask=tree_attention_mask(tree, cached, dtype, kv.device),
        position_ids=tree_position_ids(tree, cached, kv.device),
        cache=kv.cache,
        use_cache=True,
    )
    return output.logits[0].float()


@torch.inference_mode()
def keep_path(kv, root: int, tree: TokenTree, path: Sequence[int]) -> None:
    """After `forward_tree`: keep the root and the nodes of `path`, in order, and drop the other nodes."""
    cached = len(kv.tokens)
    rows = len(tree) + 1
    source = torch.tensor([cached + 1 + node for node in path], dtype=torch.long, device=kv.device)
    for layer in kv.cache.layers:
        for name in ("keys", "values"):
            states = getattr(layer, name)
            if len(path):
                # The gather copies before the write, so overlapping rows are safe.
                states[:, :, cached + 1:cached + 1 + len(path)] = states.index_select(2, source)
    drop = rows - 1 - len(path)
    if drop:
        kv.cache.crop(-drop)
    kv.tokens.extend([root, *(tree.tokens[node] for node in path)])


def verify_tree(
    kv, root: int, tree: TokenTree, params: SamplingParams, generator: torch.Generator | None,
) -> tuple[list[int], int]:
    """One verifier pass over a tree: (the accepted tokens, the verifier's token after them).

    Afterwards `kv` holds the root and the accepted tokens, exactly as if only they had been fed.
    """
    logits = forward_tree(kv, root, tree)
    path, token = tree_accept(tree, logits, params, generator)
    keep_path(kv, root, tree, path)
    return [tree.tokens[node] for node in path], token
