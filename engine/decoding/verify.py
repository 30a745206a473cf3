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

from engine.decoding import cuda_graphs


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
    return int(torch.multinomial(probs, 1, generator=on_device(generator, probs.device)).item())


def on_device(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """A generator for `device`: the given one, or (a CPU generator for CUDA tensors) one seeded
    from it, so a seeded request stays reproducible wherever its logits live."""
    if generator is None or generator.device.type == torch.device(device).type:
        return generator
    seed = int(torch.randint(0, 2**62, (), generator=generator))  # a CPU draw: no device sync
    return torch.Generator(device=device).manual_seed(seed)


def greedy_accept(draft_tokens: list[int], logits: torch.Tensor) -> tuple[int, int]:
    """Keep drafts while they equal the verifier's argmax; then the argmax itself."""
    return _to_host(greedy_decision(draft_tokens, logits))


def greedy_decision(draft_tokens: list[int], logits: torch.Tensor) -> torch.Tensor:
    """[n, token] on the logits' device: the first mismatch is where the cumulative product
    of matches drops to zero. Nothing here reads a value back to the host."""
    choices = logits.argmax(dim=-1)
    k = len(draft_tokens)
    if k == 0:
        return torch.stack([torch.zeros_like(choices[0]), choices[0]])
    matches = choices[:k] == cuda_graphs.upload(draft_tokens, choices.device)
    n = matches.long().cumprod(dim=0).sum()
    return torch.cat([n.view(1), choices.index_select(0, n.view(1))])  # (indexing by a 0-dim tensor syncs)


def speculative_decision(
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """[n, token] on the logits' device, every drafted position tested at once. Uniforms for
    positions after the first rejection are drawn and unused: the distribution is unchanged."""
    draft_probs, logits = on_common_vocabulary(draft_probs, logits)
    p = probs_from_logits(logits, params)
    k = len(draft_tokens)
    generator = on_device(generator, p.device)
    drafts = cuda_graphs.upload(draft_tokens, p.device)
    rows = torch.arange(k, device=p.device)
    if draft_probs is None:
        q_drafted = torch.ones(k, dtype=p.dtype, device=p.device)
    else:
        draft_probs = draft_probs.to(device=p.device, dtype=p.dtype)
        q_drafted = draft_probs[rows, drafts]
    u = torch.rand(k, generator=generator, device=p.device)
    accepted = (q_drafted > 0) & (u * q_drafted <= p[rows, drafts])
    n = accepted.long().cumprod(dim=0).sum().view(1)
    # Sample from max(0, p_n - q_n): the residual after rejecting d_n, or with q_k = 0 the
    # bonus distribution p_k when every draft was accepted. One row, chosen on the device.
    p_row = p.index_select(0, n)
    is_draft = (n < k).to(p.dtype).view(1, 1)  # 0 when n == k: no q for the bonus
    last = torch.clamp(n, max=max(k - 1, 0))
    if draft_probs is None:  # q_n is one-hot at d_n: the residual is p_n without d_n
        at = torch.cat([drafts, drafts.new_zeros(1)]).index_select(0, n).view(1, 1)
        residual = p_row.scatter(1, at, p_row.gather(1, at) * (1 - is_draft))
    elif k == 0:
        residual = p_row
    else:
        residual = (p_row - draft_probs.index_select(0, last) * is_draft).clamp_min(0.0)
    # p == q leaves no residual mass (and rejection then has probability 0): fall back to p.
    residual = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, p_row)
    token = torch.multinomial(residual, 1, generator=generator)[0]
    return torch.cat([n, token])


def _to_host(decision: torch.Tensor) -> tuple[int, int]:
    """The pass's one transfer back to the host."""
    n, token = decision.tolist()
    return n, token


def accept(
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """(drafts accepted, the verifier's next token): greedy keeps drafts while they equal the
    argmax; sampling is Leviathan et al. / Chen et al. rejection sampling — accept d_i with
    probability min(1, p(d_i) / q(d_i)), at the first rejection sample from
    normalize(max(0, p - q)), when all are accepted sample the bonus from p.
    `draft_probs` None means a deterministic proposal (prompt lookup): q is one-hot."""
    if params.greedy:
        return greedy_accept(draft_tokens, logits)
    return _to_host(speculative_decision(draft_tokens, draft_probs, logits, params, generator))


def emitted_logprobs(logits: torch.Tensor, rows: list[int], tokens: list[int]) -> list[float]:
    """The verifier's log-probability of each emitted token: `tokens[i]` under row `rows[i]` of
    the pass's logits (after any constraint, before temperature), for the confidence gate
    (engine/decoding/confidence.py). The logits exist already; this is one log_softmax over a few rows."""
    index = torch.tensor(rows, device=logits.device)
    chosen = torch.tensor(tokens, device=logits.device).view(-1, 1)
    return logits.index_select(0, index).float().log_softmax(dim=-1).gather(1, chosen).view(-1).tolist()


def on_common_vocabulary(draft_probs: torch.Tensor | None, logits: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
    """A pair that shares a tokenizer may pad its embeddings differently (a 152,064-row verifier
    with a 151,936-row draft): widen the narrower side with tokens it can never produce (q = 0,
    logit -inf) so that p and q line up. Exact: those tokens have probability 0 on that side, and
    a token only the draft has is drafted with p = 0, so it is always rejected."""
    if draft_probs is None or draft_probs.shape[-1] == logits.shape[-1]:
        return draft_probs, logits
    width = max(draft_probs.shape[-1], logits.shape[-1])
    return widen(draft_probs, width, 0.0), widen(logits, width, float("-inf"))


def widen(values: torch.Tensor, width: int, fill: float) -> torch.Tensor:
    """`values` padded on the vocabulary axis to `width` with `fill` (unchanged when wide enough)."""
    if values.shape[-1] >= width:
        return values
    return torch.nn.functional.pad(values, (0, width - values.shape[-1]), value=fill)
