"""Medusa heads: K small residual blocks on the verifier's last hidden state.

Head k (0-based) predicts the token k+2 places after the hidden state's position — the
verifier's own LM head already gives the next one. Each head is `h + SiLU(W h + b)` read
through the verifier's frozen LM head, restricted to a vocabulary of the tokens code
actually uses (a few thousand rows instead of 151,936): that is what keeps both training
on a CPU and the heads' cost per pass small. With W = 0 (the initial state) a head simply
repeats the LM head's prediction, as in Cai et al. 2024.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn


class ResidualBlock(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + nn.functional.silu(self.linear(hidden))


class MedusaHeads(nn.Module):
    kind = "medusa"

    def __init__(self, hidden_size: int, num_heads: int, vocab_ids: torch.Tensor) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ResidualBlock(hidden_size) for _ in range(num_heads))
        # Which verifier tokens the heads can propose; saved with the heads.
        self.register_buffer("vocab_ids", vocab_ids.to(torch.long).clone())
        # The verifier's LM head rows for those tokens: frozen, taken from the verifier at
        # attach time and never saved (the manifest's fingerprint checks it is the same model).
        self.register_buffer("output_weight", torch.zeros(0, hidden_size), persistent=False)

    @property
    def num_heads(self) -> int:
        return len(self.blocks)

    @property
    def hidden_size(self) -> int:
        return self.blocks[0].linear.in_features

    def attach(self, lm_head_weight: torch.Tensor) -> "MedusaHeads":
        """Read through `lm_head_weight` (the verifier's [vocab, hidden] output matrix)."""
        self.output_weight = lm_head_weight.detach().index_select(0, self.vocab_ids.to(lm_head_weight.device))
        return self

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., hidden] → [..., K, restricted vocab] logits."""
        outputs = [block(hidden) for block in self.blocks]
        return torch.stack(outputs, dim=-2) @ self.output_weight.T

    @torch.inference_mode()
    def top_k(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For one hidden state: ([K, k] verifier token ids, [K, k] probabilities) per head, best first."""
        probs = self(hidden.to(self.output_weight.dtype)).float().softmax(dim=-1)
        values, indices = probs.topk(min(k, probs.shape[-1]), dim=-1)
        return self.vocab_ids.to(indices.device)[indices], values


def fingerprint(lm_head_weight: torch.Tensor) -> str:
    """A short hash of the LM head: its shape and a strided sample of its values, rounded to
    bfloat16 so that the same model loaded in bf16 or fp32 has one fingerprint."""
    weight = lm_head_weight.detach().to(torch.bfloat16).float().cpu()
    sample = weight.flatten()[:: max(1, weight.numel() // 65536)]
    digest = hashlib.sha256(str(tuple(weight.shape)).encode())
    digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:16]
