"""A feature-level draft head (EAGLE-style): the verifier's next hidden state, guessed from its
recent ones and the tokens they chose, step after step.

Medusa's head k guesses the token k+2 places ahead from one hidden state, blind to the tokens in
between. This head runs autoregressively on features, as EAGLE does (Li et al. 2024): from the
verifier's final hidden state f_t and the embedding of the token x_{t+1} the verifier emitted
from it, it predicts f_{t+1}, reads that through the verifier's frozen LM head (restricted to
the tokens code uses, as the Medusa heads are) for x_{t+2}, and goes on from (f̂_{t+1}, x_{t+2}).

One step is EAGLE's decoder layer: a fusing projection of [f, embedding(x)], attention over the
last CONTEXT verified (feature, token) pairs and the head's own earlier steps, and an MLP. The
attention needs no cache kept in step with the verifier's: the drafter remembers the keys and
values of the pairs the verifier accepted (a few matrix-vector products per pass) and forgets
the head's own steps after each draft. At initialisation the head repeats f_t, so its first
guess is the LM head's own runner-up structure rather than noise.
"""

from __future__ import annotations

import math

import torch
from torch import nn

KIND = "feature"
FORMAT = 2  # 1 had no attention (until 2026-12-05): heads of another format are trained again
CONTEXT = 64  # verified pairs a step attends to: the drafter's memory and the training chunk's length
HEAD_DIM = 64


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of [..., P, d] at `positions` [P]: attention sees relative distance."""
    half = x.shape[-1] // 2
    frequencies = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(x.device, torch.float32)[:, None] * frequencies
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:2 * half]
    return torch.cat([first * cos - second * sin, first * sin + second * cos, x[..., 2 * half:]], dim=-1)


class FeatureContext:
    """What one request's drafting remembers: keys and values of the last CONTEXT verified pairs
    (unrotated: positions are given when they are read), and the last pair's fused input."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None  # [heads, n, head_dim]
        self.values: torch.Tensor | None = None
        self.last: torch.Tensor | None = None  # [hidden]

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[1]


class FeatureHead(nn.Module):
    kind = KIND
    format = FORMAT

    def __init__(self, hidden_size: int, vocab_ids: torch.Tensor, inner_size: int | None = None) -> None:
        super().__init__()
        inner = inner_size or 2 * hidden_size
        self.attention_heads = max(1, hidden_size // HEAD_DIM)
        self.fuse = nn.Linear(2 * hidden_size, hidden_size)
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, hidden_size, bias=False)
        self.out = nn.Linear(hidden_size, hidden_size, bias=False)
        self.up = nn.Linear(hidden_size, inner)
        self.down = nn.Linear(inner, hidden_size)
        with torch.no_grad():  # start as "the next feature is this one"
            self.fuse.weight.zero_()
            self.fuse.weight[:, :hidden_size] = torch.eye(hidden_size)
            self.fuse.bias.zero_()
            self.out.weight.zero_()
            self.down.weight.zero_()
            self.down.bias.zero_()
        self.register_buffer("vocab_ids", vocab_ids.to(torch.long).clone())
        # Frozen, taken from the verifier at attach time and never saved (the fingerprint checks the model).
        self.register_buffer("output_weight", torch.zeros(0, hidden_size), persistent=False)
        self.embedding: torch.Tensor | None = None  # the verifier's input embeddings, [vocab, hidden]

    @property
    def hidden_size(self) -> int:
        return self.fuse.out_features

    @property
    def num_heads(self) -> int:  # one head, run step after step (the store records it)
        return 1

    def attach(self, lm_head_weight: torch.Tensor, embedding_weight: torch.Tensor) -> "FeatureHead":
        self.output_weight = lm_head_weight.detach().index_select(0, self.vocab_ids.to(lm_head_weight.device))
        self.embedding = embedding_weight.detach()
        return self

    # -------------------------------------------------------------- one step, in pieces

    def fused(self, features: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """[..., hidden] features and [...] the token each chose → [..., hidden] the step's input."""
        token_embedding = _rms(self.embedding[tokens].to(features.dtype))
        return self.fuse(torch.cat([features, token_embedding], dim=-1))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """[..., P, hidden] → [..., heads, P, head_dim]."""
        return x.unflatten(-1, (self.attention_heads, -1)).transpose(-3, -2)

    def keys_values(self, fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[..., P, hidden] → keys and values [..., heads, P, head_dim], keys not yet rotated."""
        normed = _rms(fused)
        return self._split(self.key(normed)), self._split(self.value(normed))

    def queries(self, fused: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return rotate(self._split(self.query(_rms(fused))), positions)

    def finish(self, fused: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: torch.Tensor, own_keys: torch.Tensor, own_values: torch.Tensor) -> torch.Tensor:
        """The step's output feature from its input, its queries [B, h, Q, d], the verified pairs'
        keys and values [B, h, C, d] (rotated) where `mask` [B, Q, C] allows, and the head's own
        earlier steps at each query [B, h, Q, S, d] (S may be 0)."""
        scale = 1.0 / math.sqrt(queries.shape[-1])
        verified = (queries @ keys.transpose(-1, -2)) * scale
        verified = verified.masked_fill(~mask[:, None], float("-inf"))
        own = (queries[..., None, :] * own_keys).sum(-1) * scale
        weights = torch.cat([verified, own], dim=-1).float().softmax(dim=-1).to(queries.dtype)
        attended = weights[..., :keys.shape[-2]] @ values
        attended = attended + (weights[..., keys.shape[-2]:, None] * own_values).sum(-2)
        hidden = fused + self.out(attended.transpose(-3, -2).flatten(-2))
        return hidden + self.down(nn.functional.silu(self.up(_rms(hidden))))

    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        """[..., hidden] → [..., restricted vocab]: what the verifier's LM head makes of a feature."""
        return feature @ self.output_weight.T

    # -------------------------------------------------------------- drafting

    @torch.inference_mode()
    def remember(self, context: FeatureContext, features: torch.Tensor, tokens: torch.Tensor) -> None:
        """Add verified pairs to `context`: [m, hidden] features and [m] the tokens they chose, oldest first."""
        weight = self.output_weight
        fused = self.fused(features.to(weight.dtype), tokens.to(weight.device))
        keys, values = self.keys_values(fused)
        if context.keys is not None:
            keys, values = torch.cat([context.keys, keys], dim=1), torch.cat([context.values, values], dim=1)
        context.keys, context.values, context.last = keys[:, -CONTEXT:], values[:, -CONTEXT:], fused[-1]

    @torch.inference_mode()
    def draft(self, context: FeatureContext, depth: int, *, stop_below: float = 0.0,
              branch_below: float = 1.0) -> list[list[int]]:
        """Verifier token paths after the last pair remembered: the head's greedy chain, at most
        `depth` long and ending after a step whose top token has less than `stop_below`
        probability; wherever the top token has less than `branch_below`, its runner-up as a
        one-token branch. The chain first.

        On a CPU every drafted node costs verifier time, so the chain stops where the head is
        unsure rather than drafting tokens it expects to lose."""
        n = len(context)
        if n == 0:
            return [[]]
        keys = rotate(context.keys, torch.arange(n))[None]
        values = context.values[None]
        mask = torch.ones(1, 1, n, dtype=torch.bool, device=keys.device)
        fused = context.last[None, None]  # [B=1, Q=1, hidden]
        own_keys, own_values = [], []
        vocab_ids = self.vocab_ids.to(keys.device)
        chain: list[int] = []
        branches: list[list[int]] = []
        for k in range(depth):
            position = torch.tensor([n - 1 + k])
            if k:  # the head's own earlier step is attended to like a verified pair
                key, value = self.keys_values(fused)
                own_keys.append(rotate(key, position))
                own_values.append(value)
            stacked = [torch.stack(own, dim=-2) if own else keys.new_zeros(1, keys.shape[1], 1, 0, keys.shape[-1])
                       for own in (own_keys, own_values)]
            feature = self.finish(fused, self.queries(fused, position), keys, values, mask, *stacked)
            probs, ranked = self.logits(feature)[0, 0].float().softmax(dim=-1).topk(2)
            if float(probs[0]) < branch_below:
                branches.append(chain + [int(vocab_ids[ranked[1]])])
            chain = chain + [int(vocab_ids[ranked[0]])]
            if float(probs[0]) < stop_below:
                break
            fused = self.fused(feature, vocab_ids[ranked[:1]][None])
        return [chain, *branches]
