"""The speculative loop: draft → verify → accept → crop → stop checks.

The prompt's forward gives the first token. From then on the verifier's cache holds
every token but the last; each pass feeds `[last, d1..dk]`, keeps the accepted drafts,
crops the rest, and the verifier's own next token becomes the new `last`. With no
drafter this is plain decoding — the baseline every benchmark compares against.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from engine.drafters.base import Draft, Drafter
from engine.errors import PromptError
from engine.kv import PREFILL_CHUNK, KVCache
from engine.stats import DecodeStats
from engine.text_stream import TextStream
from engine.verify import SamplingParams, accept

log = logging.getLogger(__name__)


@dataclass
class GenerationConfig:
    max_new_tokens: int = 64
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    max_draft_tokens: int = 8
    eos_token_ids: Sequence[int] = ()
    stop_strings: Sequence[str] = ()
    deadline: float | None = None  # time.monotonic() value; the verified text so far is returned then
    # Tokens per prefill forward, the grain at which a cold prefill can be cancelled. None:
    # one forward, as Hugging Face's generate does (in bf16 chunks round slightly differently).
    prefill_chunk: int | None = PREFILL_CHUNK


@dataclass
class GenerationResult:
    token_ids: list[int]  # as the verifier emitted them, EOS included when it ended the output
    text: str  # decoded, special tokens dropped, cut before a stop string
    stop_reason: str  # eos | stop_string | max_new_tokens | deadline | cancelled
    stats: DecodeStats


class SpeculativeDecoder:
    def __init__(self, verifier, drafter: Drafter | None, tokenizer=None) -> None:
        self.verifier = verifier
        self.drafter = drafter
        self.tokenizer = tokenizer
        # Kept across calls: the next prompt reuses the longest common prefix.
        self.kv = KVCache(verifier)
        self.context_length = int(getattr(verifier.config, "max_position_embeddings", 0) or 1 << 30)

    def generate(
        self,
        prompt_ids: Sequence[int],
        config: GenerationConfig,
        *,
        context_streams: Sequence[Sequence[int]] = (),
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> GenerationResult:
        started = time.monotonic()
        stats = DecodeStats()
        tokens = self._fit_prompt(list(prompt_ids), config, stats)
        generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
        stream = TextStream(self.tokenizer, config.stop_strings) if self.tokenizer is not None else None
        eos = set(config.eos_token_ids)
        if self.drafter is not None:
            self.drafter.start(tokens, context_streams)

        # The prompt's own forward gives the first token, as in plain decoding (no draft).
        first, stats.prefill_tokens = self.kv.prefill(
            tokens, cancel.is_set if cancel is not None else None, config.prefill_chunk)
        stats.reused_tokens = len(tokens) - stats.prefill_tokens
        stats.prefill_ms = (time.monotonic() - started) * 1000

        output: list[int] = []
        logits = None if first is None else first[None]
        stop_reason = "cancelled" if first is None else ""
        while not stop_reason:
            t0 = time.monotonic()
            draft = Draft.empty()
            if logits is None:  # every pass after the prompt's verifies a draft
                remaining = config.max_new_tokens - len(output)
                if self.drafter is not None and remaining > 1:
                    limit = min(config.max_draft_tokens, remaining - 1)
                    draft = self.drafter.propose(tokens, limit, config.sampling)
                    draft.tokens = draft.tokens[:limit]
                t1 = time.monotonic()
                logits = self.kv.forward([tokens[-1], *draft.tokens])
                stats.draft_ms += (t1 - t0) * 1000
                stats.verify_ms += (time.monotonic() - t1) * 1000
            n, token = accept(draft.tokens, draft.probs, logits, config.sampling, generator)
            self.kv.crop(len(tokens) + n)
            logits = None

            new = [*draft.tokens[:n], token]
            ends = [i for i, t in enumerate(new) if t in eos]
            if ends:
                new, stop_reason = new[: ends[0] + 1], "eos"
            if self.drafter is not None and draft.tokens:
                self.drafter.observe(draft, n)
            stats.record_pass(draft.source, len(draft.tokens), n, len(new))
            tokens += new
            output += new

            if stream is not None:
                delta = stream.update(output)
                if stream.stopped:
                    stop_reason = "stop_string"
                if delta and on_text is not None:
                    on_text(delta)
            remaining = config.max_new_tokens - len(output)
            last_pass_s = time.monotonic() - t0  # a pass expected to end past the deadline is not started
            stop_reason = stop_reason or self._interruption(cancel, config.deadline, remaining, last_pass_s)

        text = ""
        if stream is not None:
            tail = stream.finish()
            if tail and on_text is not None:
                on_text(tail)
            text = stream.text
        stats.decode_ms = (time.monotonic() - started) * 1000
        return GenerationResult(output, text, stop_reason, stats)

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

    @staticmethod
    def _interruption(cancel: threading.Event | None, deadline: float | None, remaining: int,
                      next_pass_s: float) -> str:
        if cancel is not None and cancel.is_set():
            return "cancelled"
        # The next pass is expected to take as long as the last one: answer now rather than late.
        if deadline is not None and time.monotonic() + next_pass_s >= deadline:
            return "deadline"
        if remaining <= 0:
            return "max_new_tokens"
        return ""
