"""The speculative loop: draft → verify → accept → crop → stop checks.

The verifier's cache always holds a prefix of the tokens so far. Each pass feeds what the
cache lacks — the prompt's uncached tail on the first pass, the last token afterwards —
together with a draft of what follows, `[pending..., d1..dk]`, in one forward; it keeps
the accepted drafts, crops the rest, and the verifier's own next token becomes the new
pending one. So even a request's first pass (one keystroke) yields 1 + accepted tokens.
With no drafter this is plain decoding — the baseline every benchmark compares against.
The stop rules (EOS, stop strings, max tokens, cancel, deadline) are in stops.py: the loop asks
them once per pass, and its forwards between layers.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import torch

from engine.decoding.draft import Draft, Drafter
from engine.errors import PromptError
from engine.decoding.kv import PREFILL_CHUNK, KVCache, PassCancelled
from engine.decoding.stops import StopReason, Stops
from engine.stats import DecodeStats
from engine.decoding.tree import TokenTree
from engine.decoding.tree_kv import verify_tree
from engine.decoding.verify import SamplingParams, accept, emitted_logprobs

log = logging.getLogger(__name__)


class TokenConstraint(Protocol):
    def allowed(self, emitted: Sequence[int]) -> torch.Tensor | None:
        """Bool mask over the vocabulary for the token after `emitted` (this call's output so
        far), or None when that token is unconstrained."""


@dataclass
class GenerationConfig:
    max_new_tokens: int = 64
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    max_draft_tokens: int = 8
    eos_token_ids: Sequence[int] = ()
    stop_strings: Sequence[str] = ()
    deadline: float | None = None  # time.monotonic() value; the verified text so far is returned then
    # Tokens per prefill forward (engine/decoding/kv.py, `chunk_end`): the grain of the work a
    # cancelled prefill keeps. None: one forward, as Hugging Face's generate does (in bf16
    # chunks round slightly differently).
    prefill_chunk: int | None = PREFILL_CHUNK
    # The most prompt tokens the first pass feeds with its draft; a longer rest is prefilled
    # first but its last token (None: no limit). int8 weights make long passes dear.
    pass_prompt_tokens: int | None = None
    constraint: TokenConstraint | None = None  # applied to the verifier's logits (token healing)
    # Asked with the text each time it gains a line: True ends the output there, as a stop string
    # would (a multi-line completion that left its block: what follows would be cut anyway).
    done_at_line: Callable[[str], bool] | None = None


@dataclass
class GenerationResult:
    token_ids: list[int]  # as the verifier emitted them, EOS included when it ended the output
    text: str  # decoded, special tokens dropped, cut before a stop string
    stop_reason: StopReason
    stats: DecodeStats
    logprobs: list[float] = field(default_factory=list)  # the verifier's, one per token id


# Called once when the deadline passes, with the result so far; decoding then goes on
# (until a stop, max_new_tokens or the cancel flag) so the final result is longer. `on_line`
# gets the result so far, after that, each time the text gains a line break.
OnDeadline = Callable[[GenerationResult], None]


class SpeculativeDecoder:
    def __init__(self, verifier, drafter: Drafter | None, tokenizer=None, *, kv_factory=KVCache) -> None:
        self.verifier = verifier
        self.drafter = drafter
        self.tokenizer = tokenizer
        # Kept across calls: the next prompt reuses the longest common prefix.
        self.kv = kv_factory(verifier)
        self.context_length = int(getattr(verifier.config, "max_position_embeddings", 0) or 1 << 30)

    def generate(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig,
        *,
        context_streams: Sequence[Sequence[int]] = (),
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
        on_deadline: OnDeadline | None = None,
        on_line: OnDeadline | None = None,
    ) -> GenerationResult:
        """The verifier's continuation of `prompt_ids`, a pass at a time, until a stop rule (stops.py) ends it."""
        started = time.monotonic()
        stats = DecodeStats()
        tokens = self._fit_prompt(list(prompt_ids), config, stats)
        generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
        output: list[int] = []
        logprobs: list[float] = []

        def so_far() -> GenerationResult:  # handed over at the deadline, and at each line after it
            return self._result(output, logprobs, stops.text, StopReason.DEADLINE, copy.deepcopy(stats), started)

        stops = Stops(config, self.tokenizer, cancel, so_far, on_text=on_text, on_deadline=on_deadline, on_line=on_line)
        if self.drafter is not None:
            self.drafter.start(tokens, context_streams)
        stop = None if self._prefill(tokens, config, stops.interrupts, stats) else stops.interrupted()
        while stop is None:
            pass_started = time.monotonic()
            try:
                kept, token, draft, scores = self.speculative_step(tokens, output, config, generator, stops.interrupts, stats)
            except PassCancelled:
                stop = stops.interrupted()
                break
            new = stops.through_eos([*kept, token])
            logprobs += scores[: len(new)]
            if self.drafter is not None and draft.tokens:
                self.drafter.observe(draft, len(kept))
            stats.record_pass(draft.source, len(draft.tokens), len(kept), len(new))
            if stats.verifier_passes == 1:
                stats.prefill_ms = (time.monotonic() - started) * 1000  # the first token's latency
            tokens += new
            output += new
            stop = stops.after_pass(output, pass_started)
        stops.finish()
        return self._result(output, logprobs, stops.text, stop, stats, started)

    def speculative_step(self, tokens: list[int], output: list[int], config: GenerationConfig,
                         generator: torch.Generator | None, should_stop,
                         stats: DecodeStats) -> tuple[list[int], int, Draft, list[float]]:
        """One verifier pass over what the cache lacks of `tokens` plus a draft: (accepted drafts,
        next token, draft, the verifier's log-probability of each accepted draft and the next token)."""
        t0 = time.monotonic()
        remaining = config.max_new_tokens - len(output)
        draft = Draft.empty()
        if self.drafter is not None and remaining > 1:
            limit = min(config.max_draft_tokens, remaining - 1)
            draft = self.drafter.propose(tokens, limit, config.sampling)
            draft.tokens = draft.tokens[:limit]
            if draft.tree is not None:  # several candidates, limited in depth rather than count
                draft.tree = draft.tree.pruned(limit)
                draft.tokens = list(draft.tree.tokens)
        t1 = time.monotonic()
        pending = tokens[len(self.kv):]
        if draft.tree is not None:  # one pass under the tree's mask; the cache keeps the accepted path
            tree, constraint = draft.tree, config.constraint
            mask = (lambda logits: constrain_tree(logits, constraint, output, tree)) if constraint is not None else None
            kept, token, logprobs = verify_tree(self.kv, pending, tree, config.sampling, generator, should_stop, mask)
        else:
            logits = self.kv.forward([*pending, *draft.tokens], logits_for=len(draft.tokens) + 1,
                                     should_stop=should_stop)
            if config.constraint is not None:
                logits = constrain(logits, config.constraint, output, draft.tokens)
            n, token = accept(draft.tokens, draft.probs, logits, config.sampling, generator)
            self.kv.crop(len(tokens) + n)
            kept = draft.tokens[:n]
            logprobs = emitted_logprobs(logits, list(range(n + 1)), [*kept, token])
        stats.draft_ms += (t1 - t0) * 1000
        stats.verify_ms += (time.monotonic() - t1) * 1000
        return kept, token, draft, logprobs

    def _prefill(self, tokens: list[int], config: GenerationConfig, should_stop, stats: DecodeStats) -> bool:
        """Feed, in cancellable chunks, all the prompt the cache lacks but its last chunk (or its
        last token, past `pass_prompt_tokens`), which the first pass feeds together with a draft.
        False when `should_stop` ended it first (the chunks fed so far stay cached)."""
        cached = self.kv.common_prefix(tokens)
        tail = min(len(tokens) - cached, config.prefill_chunk or len(tokens))
        if config.pass_prompt_tokens is not None and tail > config.pass_prompt_tokens:
            tail = 1
        done, fed = self.kv.feed_until(tokens, len(tokens) - max(tail, 1), should_stop, config.prefill_chunk)
        stats.prefill_tokens = fed + (len(tokens) - len(self.kv) if done else 0)  # the first pass feeds the rest
        stats.reused_tokens = len(self.kv) - fed
        return done

    def _result(self, output: list[int], logprobs: list[float], text: str, stop: StopReason,
                stats: DecodeStats, started: float) -> GenerationResult:
        stats.decode_ms = (time.monotonic() - started) * 1000
        return GenerationResult(list(output), text, stop, stats, list(logprobs))

    def _fit_prompt(self, tokens: list[int], config: GenerationConfig, stats: DecodeStats) -> list[int]:
        if not tokens:
            raise PromptError("the prompt is empty: give at least one token of text to continue")
        if config.max_new_tokens < 1:
            raise PromptError(f"max_new_tokens must be at least 1, not {config.max_new_tokens}")
        stats.prompt_tokens = len(tokens)
        room = self.context_length - config.max_new_tokens - config.max_draft_tokens
        if room <= 0:
            raise PromptError(
                f"max_new_tokens {config.max_new_tokens} leaves no room for a prompt in the "
                f"model's {self.context_length}-token context"
            )
        if len(tokens) > room:
            # Left-truncate: for completion the text nearest the cursor matters most.
            log.warning("prompt of %d tokens cut to its last %d to fit the context", len(tokens), room)
            stats.prompt_truncated = True
            tokens = tokens[-room:]
        return tokens


def constrain(logits: torch.Tensor, constraint: TokenConstraint, output: list[int], drafted: list[int]) -> torch.Tensor:
    """Mask each verified row with what the constraint allows after the output (and drafts) before it."""
    for i in range(logits.shape[0]):
        if not _mask_row(logits, i, constraint.allowed([*output, *drafted[:i]])):
            break  # constraints only narrow the first tokens of an output
    return logits


def constrain_tree(logits: torch.Tensor, constraint: TokenConstraint, output: list[int], tree: TokenTree) -> torch.Tensor:
    """The same for a tree's rows: the root's row (0) after the output, node i's row (i + 1)
    after the output and node i's path, so tree acceptance follows the constrained verifier."""
    if _mask_row(logits, 0, constraint.allowed(output)):
        for node in range(len(tree)):
            _mask_row(logits, node + 1, constraint.allowed([*output, *(tree.tokens[n] for n in tree.path_to(node))]))
    return logits


def _mask_row(logits: torch.Tensor, row: int, mask: torch.Tensor | None) -> bool:
    """Set the row's disallowed tokens to -inf; False (and nothing done) when the mask is None."""
    if mask is None:
        return False
    allowed = torch.zeros(logits.shape[1], dtype=torch.bool)
    width = min(len(mask), logits.shape[1])  # vocabularies padded to different lengths
    allowed[:width] = mask[:width]
    logits[row] = logits[row].masked_fill(~allowed.to(logits.device), float("-inf"))
    return True
