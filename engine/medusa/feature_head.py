"""A feature-level draft head (EAGLE-style): the verifier's next hidden state, guessed from its
last one and the token it chose, step after step.

Medusa's head k guesses the token k+2 places ahead from one hidden state, blind to the tokens in
between. This head runs autoregressively on features, as EAGLE does (Li et al. 2024): from the
verifier's final hidden state f_t and the embedding of the token x_{t+1} the verifier emitted
from it, it predicts f_{t+1}, reads that through the verifier's frozen LM head (restricted to
the tokens code uses, as the Medusa heads are) for x_{t+2}, and goes on from (f̂_{t+1}, x_{t+2}).

One step is a fusing projection and a residual MLP: EAGLE's decoder layer without its attention
over earlier features, which on a CPU would cost a KV cache kept in step with the verifier's at
every draft token. At initialisation the head repeats f_t, so its first guess is the LM head's
own runner-up structure rather than noise.
"""

from __future__ import annotations

import torch
from torch import nn

KIND = "feature"


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)


class FeatureHead(nn.Module):
    kind = KIND

    def __init__(self, hidden_size: int, vocab_ids: torch.Tensor, inner_size: int | None = None) -> None:
        super().__init__()
        inner = inner_size or 2 * hidden_size
        self.fuse = nn.Linear(2 * hidden_size, hidden_size)
        self.up = nn.Linear(hidden_size, inner)
        self.down = nn.Linear(inner, hidden_size)
        with torch.no_grad():  # start as "the next feature is this one"
            self.fuse.weight.zero_()
            self.fuse.weight[:, :hidden_size] = torch.eye(hidden_size)
            self.fuse.bias.zero_()
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

    def step(self, feature: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """[B, hidden] features and [B] verifier token ids (the token each feature chose) → next features."""
        token_embedding = _rms(self.embedding[tokens].to(feature.dtype))
        fused = self.fuse(torch.cat([feature, token_embedding], dim=-1))
        return fused + self.down(nn.functional.silu(self.up(_rms(fused))))

    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        """[B, hidden] → [B, restricted vocab]: what the verifier's LM head makes of a feature."""
        return feature @ self.output_weight.T

    @torch.inference_mode()
    def draft(self, hidden: torch.Tensor, token: int, depth: int, *, stop_below: float = 0.0,
              branch_below: float = 1.0) -> list[list[int]]:
        """Verifier token paths after `token`: the head's greedy chain, at most `depth` long and
        ending after a step whose top token has less than `stop_below` probability; wherever the
        top token has less than `branch_below`, its runner-up as a one-token branch. The chain first.

        On a CPU every drafted node costs verifier time, so the chain stops where the head is
        unsure rather than drafting tokens it expects to lose."""
        weight = self.output_weight
        feature = hidden.to(weight.dtype)[None]
        current = torch.tensor([token], device=weight.device)
        vocab_ids = self.vocab_ids.to(weight.device)
        chain: list[int] = []
        branches: list[list[int]] = []
        for _ in range(depth):
            feature = self.step(feature, current)
            probs, ranked = self.logits(feature)[0].float().softmax(dim=-1).topk(2)
            if float(probs[0]) < branch_below:
                branches.append(chain + [int(vocab_ids[ranked[1]])])
            chain = chain + [int(vocab_ids[ranked[0]])]
            current = vocab_ids[ranked[:1]]
            if float(probs[0]) < stop_below:
                break
        return [chain, *branches]
