"""Train the feature-level head (engine/medusa/feature_head.py) by self-distillation on the same
corpus reading as the Medusa heads: the verifier's hidden state and next-token distribution at
every position, plus the corpus's own tokens.

A training example is a chunk of CONTEXT consecutive positions. From each position t the head
runs `depth` steps, each from its own previous guess (as drafting does) and the token the text has
there, attending to the verified pairs up to t and its own earlier steps: step k predicts
f_{t+k+1} (smooth L1 against the verifier's) and, through the LM head, the verifier's
distribution for the token after it (cross-entropy). Held-out files measure each step's accuracy
against the verifier's greedy token, and the chain's expected length: how many draft tokens a
pass accepts.
Resumable like the Medusa heads: the same checkpoint rules, the same batches after a restart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from engine.medusa.data import Shard
from engine.medusa.feature_head import CONTEXT, FeatureHead, rotate
from engine.medusa.train import RANKS, Evaluation, TrainConfig, TrainResult, run_training

FEATURE_LOSS_WEIGHT = 1.0  # EAGLE weighs the feature regression over the token loss: it is what the next step reads


@dataclass
class FeatureData:
    """A shard and its tokens, with each position's teacher distribution in the head's vocabulary."""

    shard: Shard
    token_ids: torch.Tensor  # [N] the corpus token at each position
    local_ids: torch.Tensor  # [N, TOP] the teacher's top tokens in the head's vocabulary, -1 outside
    size: int

    @classmethod
    def of(cls, shard: Shard, token_ids: torch.Tensor, vocab_ids: torch.Tensor, vocab: int) -> "FeatureData":
        index = torch.full((vocab,), -1, dtype=torch.long)
        index[vocab_ids] = torch.arange(len(vocab_ids))
        return cls(shard, token_ids, index[shard.top_ids], len(vocab_ids))

    def step_targets(self, positions: torch.Tensor, k: int):
        """Step k from `positions`: (tokens fed, target features, target distributions, mask)."""
        n = len(self.token_ids)
        at = (positions + k + 1).clamp(max=n - 1)
        ok = (positions + k + 1 < n) & (self.shard.window_ids[at] == self.shard.window_ids[positions])
        ids, probs = self.local_ids[at], self.shard.top_probs[at]
        dist = torch.zeros(len(positions), self.size)
        dist.scatter_add_(1, ids.clamp(min=0), torch.where(ids >= 0, probs, 0.0) * ok[:, None])
        return self.token_ids[at], self.shard.hidden[at].float(), dist, ok


def _unrolled(head: FeatureHead, data: FeatureData, starts: torch.Tensor, depth: int, *, low_precision: bool = True):
    """Run the head `depth` steps from every position of the CONTEXT-long chunks at `starts`, as
    drafting does: each position's first step attends to the verified pairs up to it (in its
    window), each later step also to the head's own earlier steps from that position (EAGLE-3's
    training-time test). Yield (step, logits, predicted feature, target feature, target
    distribution, mask), each flattened over the chunks' positions."""
    n = len(data.token_ids)
    index = starts[:, None] + torch.arange(CONTEXT)  # [B, L]
    inside = index < n
    index = index.clamp(max=n - 1)
    window = data.shard.window_ids[index]
    causal = torch.ones(CONTEXT, CONTEXT, dtype=torch.bool).tril()
    # A position always sees itself, so no row of the softmax is empty (positions past the end are masked out of the loss).
    mask = causal & (window[:, :, None] == window[:, None, :]) & inside[:, None, :] | torch.eye(CONTEXT, dtype=torch.bool)
    positions = torch.arange(CONTEXT)
    flat = index.flatten()
    alive = inside.flatten()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=low_precision and data.shard.hidden.device.type == "cpu")
    with autocast:
        fused = head.fused(data.shard.hidden[index].float(), data.token_ids[(index + 1).clamp(max=n - 1)])
        keys, values = head.keys_values(fused)
        keys = rotate(keys, positions)
    own_keys, own_values = [], []
    for k in range(depth):
        tokens, goal_feature, goal_dist, ok = data.step_targets(flat, k)
        alive = alive & ok
        with autocast:
            if k:
                key, value = head.keys_values(fused)
                own_keys.append(rotate(key, positions + k))
                own_values.append(value)
            own = [torch.stack(parts, dim=-2) if parts else keys.new_zeros(*keys.shape[:-1], 0, keys.shape[-1])
                   for parts in (own_keys, own_values)]
            feature = head.finish(fused, head.queries(fused, positions + k), keys, values, mask, *own)
            logits = head.logits(feature)
        yield k, logits.flatten(0, 1).float(), feature.flatten(0, 1).float(), goal_feature, goal_dist, alive
        if k + 1 < depth:
            with autocast:
                next_tokens, _, _, _ = data.step_targets(flat, k + 1)
                fused = head.fused(feature, next_tokens.view_as(index))


def _per_position(logits, feature, goal_feature, goal_dist) -> torch.Tensor:
    """Cross-entropy against the teacher plus the weighted feature regression, per position."""
    ce = -(goal_dist * logits.log_softmax(dim=-1)).sum(dim=-1)
    reg = torch.nn.functional.smooth_l1_loss(feature, goal_feature, reduction="none").mean(dim=-1)
    return ce + FEATURE_LOSS_WEIGHT * reg


def _loss(head: FeatureHead, data: FeatureData, starts: torch.Tensor, depth: int) -> torch.Tensor:
    """Per-step mean loss [depth] over the chunks at `starts`."""
    losses = []
    for _, logits, feature, goal_feature, goal_dist, alive in _unrolled(head, data, starts, depth):
        per = _per_position(logits, feature, goal_feature, goal_dist)
        losses.append((per * alive).sum() / alive.sum().clamp(min=1))
    return torch.stack(losses)


@torch.no_grad()
def held_out_figures(head: FeatureHead, data: FeatureData, depth: int, chunks: int = 8) -> tuple[Evaluation, float]:
    """Over every position of `data`: per step, the loss and rank-r accuracy against the
    verifier's greedy token; and the greedy chain's expected accepted length (mean run of correct steps)."""
    n = len(data.token_ids)
    starts = torch.arange(0, n, CONTEXT)
    greedy = data.local_ids[:, 0]
    loss_sum, hits, count = torch.zeros(depth), torch.zeros(depth, RANKS), torch.zeros(depth)
    run_total = 0.0
    for first in range(0, len(starts), chunks):
        batch = starts[first:first + chunks]
        flat = (batch[:, None] + torch.arange(CONTEXT)).flatten().clamp(max=n - 1)
        run = None
        for k, logits, feature, goal_feature, goal_dist, alive in _unrolled(head, data, batch, depth):
            truth = greedy[(flat + k + 1).clamp(max=n - 1)]
            loss_sum[k] += float((_per_position(logits, feature, goal_feature, goal_dist) * alive).sum())
            ranked = logits.topk(RANKS, dim=-1).indices
            hits[k] += ((ranked == truth[:, None]) & alive[:, None]).sum(dim=0).float()
            count[k] += alive.sum()
            run = (alive if run is None else run & alive) & (ranked[:, 0] == truth)
            run_total += float(run.sum())
    evaluation = Evaluation((loss_sum / count.clamp(min=1)).tolist(), (hits / count.clamp(min=1)[:, None]).tolist(),
                            int(count[0]))
    return evaluation, run_total / max(float(count[0]), 1.0)


def train_feature_head(head: FeatureHead, train: FeatureData, held: FeatureData, config: TrainConfig, *,
                       checkpoint: Path | None = None,
                       on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train `head` (attached to the verifier) for `config.steps` steps of `config.num_heads`-step
    chains, `config.batch` positions a step (in chunks of CONTEXT)."""
    started = time.monotonic()
    depth = config.num_heads
    chunked = replace(config, batch=max(1, config.batch // CONTEXT))
    starts = torch.arange(max(1, len(train.token_ids) - CONTEXT + 1))
    state = run_training(head, starts, lambda batch: _loss(head, train, batch, depth).mean(),
                         lambda: held_out_figures(head, held, depth)[0], chunked, checkpoint=checkpoint,
                         on_step=on_step)
    after, chain = held_out_figures(head, held, depth)
    return TrainResult(head, Evaluation(**state["before"]), after, [], 1.0 + chain,
                       state["step"], time.monotonic() - started, state["log"],
                       (state.get("best") or {}).get("step", state["step"]))
