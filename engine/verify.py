"""Acceptance rules: which drafted tokens the verifier keeps, and the token it adds.

Both rules take the verifier's logits for `[last, d1..dk]` (k+1 rows) and return
`(n, token)`: the first n drafts are kept and `token` follows them — the verifier's
correction at position n+1, or the bonus token when all k drafts were accepted.
Every emitted token therefore comes from this module, which is what makes the
output exactly the verifier's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Applied identically to the verifier's p and the drafter's q (required for exactness)."""

    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k filter
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def probs_from_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Rows of logits → rows of probabilities after temperature, top-k and top-p."""
    logits = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already cover top_p.
        drop_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())


def greedy_accept(draft_tokens: list[int], logits: torch.Tensor) -> tuple[int, int]:
    """Keep drafts while they equal the verifier's argmax; then the argmax itself."""
    choices = logits.argmax(dim=-1).tolist()
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == choices[n]:
        n += 1
    return n, choices[n]


def speculative_accept(
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """Leviathan et al. / Chen et al. rejection sampling.

    Accept d_i with probability min(1, p(d_i) / q(d_i)); at the first rejection sample
    from normalize(max(0, p - q)); when all are accepted, sample the bonus from p.
    `draft_probs` None means a deterministic proposal (prompt lookup): q is one-hot.
    """
    p = probs_from_logits(logits, params)
    for i, token in enumerate(draft_tokens):
        q_token = 1.0 if draft_probs is None else float(draft_probs[i, token])
        p_token = float(p[i, token])
        u = float(torch.rand((), generator=generator))
        if q_token > 0 and u * q_token <= p_token:
            continue
        if draft_probs is None:
            residual = p[i].clone()
            residual[token] = 0.0
        else:
            residual = (p[i] - draft_probs[i]).clamp_min(0.0)
        # p == q leaves no residual mass (and rejection then has probability 0):
        # fall back to p rather than dividing by zero.
        if float(residual.sum()) <= 0.0:
            residual = p[i]
        return i, sample(residual / residual.sum(), generator)
    return len(draft_tokens), sample(p[len(draft_tokens)], generator)


def accept(
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    if params.greedy:
        return greedy_accept(draft_tokens, logits)
    return speculative_accept(draft_tokens, draft_probs, logits, params, generator)
