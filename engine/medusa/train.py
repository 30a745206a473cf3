"""Train Medusa heads by self-distillation on what the verifier said about a corpus.

Head k at position t learns the verifier's distribution at position t+k+1 (the token k+2
places after t), from the hidden state at t alone. Training is resumable: the corpus
reading is kept in shards, the heads and optimiser in a checkpoint, and a run with the
same settings picks up where the last one stopped.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from engine.medusa.choices import expected_length, tune_choices
from engine.medusa.data import Shard
from engine.medusa.heads import MedusaHeads

log = logging.getLogger(__name__)

RANKS = 8  # candidates per head measured on held-out data (the tree's widest level)
EVAL_EVERY = 50  # steps between held-out evaluations (and checkpoints)


@dataclass
class TrainConfig:
    num_heads: int = 4
    vocab_size: int = 8192  # restricted output vocabulary: the tokens the verifier uses most on the corpus
    window: int = 256  # tokens per forward while reading the corpus
    max_tokens: int = 48_000  # corpus tokens read by the verifier, held-out files included
    steps: int = 600
    batch: int = 256
    learning_rate: float = 2e-3
    tree_nodes: int = 16  # the tuned tree's size (lookup may add its own branches)
    seed: int = 0

    def key(self) -> dict:
        return asdict(self)

    def resume_key(self) -> dict:
        """What must match to resume a checkpoint (asking for more or fewer steps still resumes)."""
        return {k: v for k, v in asdict(self).items() if k not in ("steps", "tree_nodes")}


@dataclass
class Evaluation:
    loss: list[float]  # per head, held-out cross-entropy against the verifier's distribution
    accuracy: list[list[float]]  # [head][rank]: the rank-r candidate is the verifier's top token
    positions: int

    def to_json(self) -> dict:
        return {"loss": [round(x, 4) for x in self.loss], "positions": self.positions,
                "top1": [round(a[0], 4) for a in self.accuracy],
                "accuracy": [[round(x, 4) for x in row] for row in self.accuracy]}


@dataclass
class TrainResult:
    heads: MedusaHeads
    before: Evaluation  # untrained heads (each repeats the LM head's prediction)
    after: Evaluation
    choices: list[tuple[int, ...]]
    expected_tau: float  # the tuned tree's expected tokens per pass on held-out data
    steps: int
    seconds: float
    log: list[dict] = field(default_factory=list)
    best_step: int = 0  # the step whose heads were kept (lowest held-out loss)


def choose_vocabulary(shard: Shard, size: int, vocab: int) -> torch.Tensor:
    """The `size` token ids carrying the most teacher probability on the training shard, sorted."""
    weight = torch.zeros(vocab, dtype=torch.float64)
    weight.index_add_(0, shard.top_ids.flatten(), shard.top_probs.flatten().double())
    size = min(size, int((weight > 0).sum()))
    return weight.topk(size).indices.sort().values


class Targets:
    """Head k's targets for a batch of positions: the verifier's distribution k+1 positions later,
    restricted to the heads' vocabulary; positions whose target falls outside their window are masked."""

    def __init__(self, shard: Shard, vocab_ids: torch.Tensor, vocab: int, num_heads: int) -> None:
        self.shard, self.num_heads = shard, num_heads
        index = torch.full((vocab,), -1, dtype=torch.long)
        index[vocab_ids] = torch.arange(len(vocab_ids))
        self.local_ids = index[shard.top_ids]  # [N, TOP] restricted ids, -1 outside
        self.size = len(vocab_ids)

    def valid_positions(self) -> torch.Tensor:
        """Positions where at least head 0 has a target."""
        ids = self.shard.window_ids
        return torch.nonzero(ids[:-1] == ids[1:]).flatten()

    def batch(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """([B, K, V'] target probabilities, [B, K] mask)."""
        n = len(self.shard.window_ids)
        targets = torch.zeros(len(positions), self.num_heads, self.size)
        mask = torch.zeros(len(positions), self.num_heads, dtype=torch.bool)
        for k in range(self.num_heads):
            later = (positions + k + 1).clamp(max=n - 1)
            ok = (positions + k + 1 < n) & (self.shard.window_ids[later] == self.shard.window_ids[positions])
            ids, probs = self.local_ids[later], self.shard.top_probs[later]
            probs = torch.where(ids >= 0, probs, 0.0) * ok[:, None]
            targets[:, k].scatter_add_(1, ids.clamp(min=0), probs)
            mask[:, k] = ok
        return targets, mask


def _loss(heads: MedusaHeads, hidden: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-head mean cross-entropy [K]."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=hidden.device.type == "cpu"):
        logits = heads(hidden)
    log_q = logits.float().log_softmax(dim=-1)
    per = -(targets * log_q).sum(dim=-1)  # [B, K]
    return (per * mask).sum(dim=0) / mask.sum(dim=0).clamp(min=1)


@torch.no_grad()
def evaluate(heads: MedusaHeads, shard: Shard, targets: Targets, batch: int = 512) -> Evaluation:
    positions = targets.valid_positions()
    k_heads = heads.num_heads
    loss_sum = torch.zeros(k_heads)
    hits = torch.zeros(k_heads, RANKS)
    count = torch.zeros(k_heads)
    teacher_top = targets.local_ids[:, 0]  # the verifier's argmax (restricted id, -1 if outside)
    n = len(shard.window_ids)
    for start in range(0, len(positions), batch):
        pos = positions[start:start + batch]
        goal, mask = targets.batch(pos)
        hidden = shard.hidden[pos].float()
        loss_sum += _loss(heads, hidden, goal, mask) * mask.sum(dim=0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ranked = heads(hidden).float().topk(RANKS, dim=-1).indices  # [B, K, RANKS]
        for k in range(k_heads):
            truth = teacher_top[(pos + k + 1).clamp(max=n - 1)]
            hit = (ranked[:, k] == truth[:, None]) & mask[:, k, None]
            hits[k] += hit.sum(dim=0).float()
            count[k] += mask[:, k].sum()
    denominator = count.clamp(min=1)
    return Evaluation((loss_sum / denominator).tolist(), (hits / denominator[:, None]).tolist(), int(count[0]))


def train_heads(heads: MedusaHeads, train: Shard, held: Shard, vocab: int, config: TrainConfig, *,
                checkpoint: Path | None = None, on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train `heads` (attached to the verifier's LM head) for `config.steps` steps, resuming from `checkpoint`."""
    started = time.monotonic()
    train_targets = Targets(train, heads.vocab_ids, vocab, heads.num_heads)
    held_targets = Targets(held, heads.vocab_ids, vocab, heads.num_heads)

    def batch_loss(pos: torch.Tensor) -> torch.Tensor:
        goal, mask = train_targets.batch(pos)
        return _loss(heads, train.hidden[pos].float(), goal, mask).mean()

    state = run_training(heads, train_targets.valid_positions(), batch_loss,
                         lambda: evaluate(heads, held, held_targets), config, checkpoint=checkpoint, on_step=on_step)
    after = evaluate(heads, held, held_targets)
    choices = tune_choices(after.accuracy, config.tree_nodes)
    return TrainResult(heads, Evaluation(**state["before"]), after, choices,
                       expected_length(after.accuracy, choices), state["step"],
                       time.monotonic() - started, state["log"], (state.get("best") or {}).get("step", state["step"]))


def run_training(model: torch.nn.Module, positions: torch.Tensor, batch_loss: Callable[[torch.Tensor], torch.Tensor],
                 held_out: Callable[[], Evaluation], config: TrainConfig, *, checkpoint: Path | None = None,
                 on_step: Callable[[int, float], None] | None = None) -> dict:
    """The loop both kinds of head share: AdamW with cosine decay on random batches of `positions`,
    held-out evaluation and a checkpoint every EVAL_EVERY steps, the best held-out model kept.
    Resumes from `checkpoint` when the settings match, with the same batches as an uninterrupted run.
    Returns the state: steps done, the evaluation before training, the log, the best step."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                  lr=config.learning_rate, weight_decay=0.01)
    state = {"step": 0, "before": None, "log": []}
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=True)  # tensors and plain data only: no pickled code
        if saved.get("config") == config.resume_key() and saved["state"]["step"] <= config.steps:
            model.load_state_dict(saved["heads"])
            optimizer.load_state_dict(saved["optimizer"])
            state = saved["state"]
            log.info("resuming head training at step %d of %d", state["step"], config.steps)
    if state["before"] is None:
        state["before"] = asdict(held_out())
    generator = torch.Generator().manual_seed(config.seed)
    for _ in range(state["step"]):  # the same batches as an uninterrupted run
        torch.randint(len(positions), (config.batch,), generator=generator)
    model.train()
    while state["step"] < config.steps:
        step = state["step"]
        for group in optimizer.param_groups:  # cosine decay
            group["lr"] = config.learning_rate * 0.5 * (1 + math.cos(math.pi * step / config.steps))
        loss = batch_loss(positions[torch.randint(len(positions), (config.batch,), generator=generator)])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state["step"] = step + 1
        if state["step"] % EVAL_EVERY == 0 or state["step"] == config.steps:
            _keep_if_best(state, model, held_out, float(loss.detach()))
            if checkpoint is not None:
                _save_checkpoint(checkpoint, model, optimizer, state, config)
        if on_step is not None:
            on_step(state["step"], float(loss.detach()))
    if state.get("best") is not None:  # a small corpus overfits: keep what did best on held-out files
        model.load_state_dict(state["best"]["heads"])
    model.eval()
    return state


def _keep_if_best(state: dict, model: torch.nn.Module, held_out: Callable[[], Evaluation], train_loss: float) -> None:
    losses = held_out().loss
    held_loss = sum(losses) / len(losses)
    model.train()
    state["log"].append({"step": state["step"], "loss": round(train_loss, 4), "held_out_loss": round(held_loss, 4)})
    best = state.get("best")
    if best is None or held_loss < best["loss"]:
        state["best"] = {"loss": held_loss, "step": state["step"],
                         "heads": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def _save_checkpoint(path: Path, model: torch.nn.Module, optimizer, state: dict, config: TrainConfig) -> None:
    tmp = path.with_suffix(".partial")
    torch.save({"heads": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
                "config": config.resume_key()}, tmp)
    tmp.replace(path)
