"""Train the feature-level head (engine/medusa/feature_head.py) by self-distillation on the same
corpus reading as the Medusa heads: the verifier's hidden state and next-token distribution at
every position, plus the corpus's own tokens.

A training example starts at position t and runs the head `depth` steps, each from its own
previous guess (as drafting does) and the token the text has there: step k predicts f_{t+k+1}
(smooth L1 against the verifier's) and, through the LM head, the verifier's distribution for the
token after it (cross-entropy). Held-out files measure each step's accuracy against the
verifier's greedy token, and the chain's expected length: how many draft tokens a pass accepts.
Resumable like the Medusa heads: the same checkpoint rules, the same batches after a restart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.medusa.data import Shard
from engine.medusa.feature_head import FeatureHead
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

    def starts(self) -> torch.Tensor:
        """Positions whose next position is in the same window (step 0 has a target)."""
        ids = self.shard.window_ids
        return torch.nonzero(ids[:-1] == ids[1:]).flatten()

    def step_targets(self, positions: torch.Tensor, k: int):
        """Step k from `positions`: (tokens fed, target features, target distributions, mask)."""
        n = len(self.token_ids)
        at = (positions + k + 1).clamp(max=n - 1)
        ok = (positions + k + 1 < n) & (self.shard.window_ids[at] == self.shard.window_ids[positions])
        ids, probs = self.local_ids[at], self.shard.top_probs[at]
        dist = torch.zeros(len(positions), self.size)
        dist.scatter_add_(1, ids.clamp(min=0), torch.where(ids >= 0, probs, 0.0) * ok[:, None])
        return self.token_ids[at], self.shard.hidden[at].float(), dist, ok


def _unrolled(head: FeatureHead, data: FeatureData, positions: torch.Tensor, depth: int):
    """Yield (step, logits, predicted feature, target feature, target distribution, mask) along the chain."""
    feature = data.shard.hidden[positions].float()
    alive = torch.ones(len(positions), dtype=torch.bool)
    for k in range(depth):
        tokens, goal_feature, goal_dist, ok = data.step_targets(positions, k)
        alive = alive & ok
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=feature.device.type == "cpu"):
            feature = head.step(feature, tokens)
            logits = head.logits(feature)
        feature = feature.float()
        yield k, logits.float(), feature, goal_feature, goal_dist, alive


def _loss(head: FeatureHead, data: FeatureData, positions: torch.Tensor, depth: int) -> torch.Tensor:
    """Per-step loss [depth]: cross-entropy against the teacher plus the weighted feature regression."""
    losses = []
    for _, logits, feature, goal_feature, goal_dist, alive in _unrolled(head, data, positions, depth):
        ce = -(goal_dist * logits.log_softmax(dim=-1)).sum(dim=-1)
        reg = torch.nn.functional.smooth_l1_loss(feature, goal_feature, reduction="none").mean(dim=-1)
        per = ce + FEATURE_LOSS_WEIGHT * reg
        losses.append((per * alive).sum() / alive.sum().clamp(min=1))
    return torch.stack(losses)


@torch.no_grad()
def evaluate_feature(head: FeatureHead, data: FeatureData, depth: int, batch: int = 512) -> Evaluation:
    """Per step: held-out loss and rank-r accuracy against the verifier's greedy token."""
    positions = data.starts()
    loss_sum, hits, count = torch.zeros(depth), torch.zeros(depth, RANKS), torch.zeros(depth)
    greedy = data.local_ids[:, 0]
    n = len(data.token_ids)
    for start in range(0, len(positions), batch):
        pos = positions[start:start + batch]
        loss_sum += _loss(head, data, pos, depth) * len(pos)
        for k, logits, _, _, _, alive in _unrolled(head, data, pos, depth):
            truth = greedy[(pos + k + 1).clamp(max=n - 1)]
            ranked = logits.topk(RANKS, dim=-1).indices
            hits[k] += ((ranked == truth[:, None]) & alive[:, None]).sum(dim=0).float()
            count[k] += alive.sum()
    total = max(len(positions), 1)
    return Evaluation((loss_sum / total).tolist(), (hits / count.clamp(min=1)[:, None]).tolist(), int(count[0]))


def chain_length(head: FeatureHead, data: FeatureData, depth: int, batch: int = 512) -> float:
    """Expected draft tokens a pass accepts from the greedy chain alone: the mean run of correct steps."""
    positions = data.starts()
    greedy = data.local_ids[:, 0]
    n = len(data.token_ids)
    run_total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(positions), batch):
            pos = positions[start:start + batch]
            run = torch.ones(len(pos), dtype=torch.bool)
            for k, logits, _, _, _, alive in _unrolled(head, data, pos, depth):
                truth = greedy[(pos + k + 1).clamp(max=n - 1)]
                run = run & alive & (logits.argmax(dim=-1) == truth)
                run_total += float(run.sum())
            count += len(pos)
    return run_total / max(count, 1)


def train_feature_head(head: FeatureHead, train: FeatureData, held: FeatureData, config: TrainConfig, *,
                       checkpoint: Path | None = None,
                       on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train `head` (attached to the verifier) for `config.steps` steps of `config.num_heads`-step chains."""
    started = time.monotonic()
    depth = config.num_heads
    state = run_training(head, train.starts(), lambda pos: _loss(head, train, pos, depth).mean(),
                         lambda: evaluate_feature(head, held, depth), config, checkpoint=checkpoint, on_step=on_step)
    after = evaluate_feature(head, held, depth)
    return TrainResult(head, Evaluation(**state["before"]), after, [], 1.0 + chain_length(head, held, depth),
                       state["step"], time.monotonic() - started, state["log"],
                       (state.get("best") or {}).get("step", state["step"]))
