"""The engine's front door: a completion request in, a post-processed completion out.

`CompletionEngine` owns the loaded models and one speculative decoder whose KV caches
live across requests, so consecutive requests on the same document reuse their common
prefix. It is not thread-safe: callers (the LSP scheduler) run it on a single worker.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from engine.answers import Answers, CompletionResult
from engine.decoding.compile_in_background import CompilePlan, compile_in_background, serves_drafter
from engine.decoding.confidence import default_min_confidence
from engine.decoding.decoder import GenerationConfig, GenerationResult, OnDeadline, SpeculativeDecoder
from engine.decoding.kv import PREFILL_CHUNK
from engine.decoding.kv_static import cache_factory
from engine.decoding.stops import StopReason, stop_token_ids
from engine.decoding.verify import SamplingParams
from engine.drafters import DrafterConfig, make_drafter
from engine.errors import ModelError, PromptError
from engine.medusa.store import find_heads
from engine.models.loading import LoadedModel, check_pair, cpu_weights, load_model, parse_device
from engine.models.quantize import ROWS_PER_READ, pass_prompt_tokens
from engine.modes import check_drafter, needs_draft_model
from engine.text.cursor import Cursor
from engine.text.document_prompts import DocumentPrompts, Prompt
from engine.text.fim import FimTemplate
from engine.text.healing import after_healed, healing_constraint, skip_chars, stops_outside, vocabulary as healing_vocabulary
from engine.text.postprocess import left_its_block
from engine.text.prompt import ContextBudget
from engine.text.syntax import language_from
from engine.text.text_stream import stop_strings_for

log = logging.getLogger(__name__)

LOOKAHEAD_TOKENS = 24  # decoded past a finished one-line completion, as the next line's draft
# Post-processing and the reply take a few ms after the last pass: the passes stop this much
# before the budget ends, so the editor has its answer within the budget.
ANSWER_MARGIN_S = 0.010
# A CPU prefills roughly 100 tokens a second with a 0.5B model (no AMX): keep prompts short
# there, and lean on KV reuse. The suffix is the part every keystroke feeds again (Qwen's
# FIM prompt puts it after the prefix, and the model was not trained suffix-first), so it
# gets the least: 16 tokens re-fed cost ~240 ms here, 48 cost ~420 ms. A GPU takes the full context.
CPU_CONTEXT_BUDGET = ContextBudget(prefix_tokens=384, suffix_tokens=16, other_documents_tokens=0,
                                   cold_prefix_tokens=128)


@dataclass
class CompletionRequest:
    prefix: str  # document text before the cursor
    suffix: str = ""  # document text after the cursor
    path: str | None = None
    language: str | None = None  # LSP languageId, or None to guess from the path
    other_documents: Sequence[tuple[str, str]] = ()  # (path, text) of other open documents
    max_new_tokens: int = 64
    multiline: bool | None = None  # None: decided from the syntax at the cursor
    budget_ms: float | None = None  # answer with the verified text so far after this long
    # time.monotonic() when the editor's request arrived: the budget counts from there, time
    # spent waiting for the worker included (None: from when complete() starts).
    received_at: float | None = None
    temperature: float = 0.0
    seed: int | None = None
    # Withhold answers the verifier is less sure of (engine/decoding/confidence.py); 0: off, None: the model's default.
    min_confidence: float | None = None


class CompletionEngine:
    def __init__(
        self,
        verifier: LoadedModel,
        draft: LoadedModel | None = None,
        *,
        drafter: str = "hybrid",
        max_draft_tokens: int = 8,
        context_budget: ContextBudget | None = None,
        compiled_step: bool | CompilePlan = False,
    ) -> None:
        self.verifier, self.draft, self.tokenizer = verifier, draft, verifier.tokenizer
        # With quantized weights longer passes cost more (int8: a weight read per ROWS_PER_READ
        # tokens; 4-bit: work per row): a longer draft rarely pays for it.
        self.max_draft_tokens = min(max_draft_tokens, ROWS_PER_READ - 1) if verifier.weights else max_draft_tokens
        self.prompts = DocumentPrompts(self.tokenizer, context_budget)  # per document: anchors, windows
        # Made before today's caches capture graphs over the weights it lays out anew (the module says why).
        self.compiled = compile_in_background(compiled_step, verifier, draft, self.max_draft_tokens, self.prompts.budget)
        self._compiled_kv = None  # the verifier's compiled-step cache, once taken up (_take_up_compiled)
        # Static KV cache + CUDA graphs on CUDA (captured here, at load), the dynamic cache on a CPU.
        self._new_cache = cache_factory(verifier.device)
        self._draft_cache = None  # kept across drafter switches: recapturing graphs costs seconds
        # On a GPU a whole prompt is one cheap forward (and a pass is cancellable between layers).
        self.prefill_chunk = PREFILL_CHUNK if verifier.device.type == "cpu" else None
        self.pass_prompt_tokens = pass_prompt_tokens(verifier.model)
        self.decoder = SpeculativeDecoder(verifier.model, None, self.tokenizer, kv_factory=self._new_cache)
        self._usual_kv = self.decoder.kv  # today's: serves until the compiled step is taken up, and tree drafters after
        self.heads = find_heads(verifier.name, verifier.model)  # trained Medusa heads, if any
        self.feature_head = find_heads(verifier.name, verifier.model, kind="feature")  # and the feature head
        healing_vocabulary(self.tokenizer)  # built at load (~0.5 s for Qwen's), not in the first request
        self.drafter_mode = ""
        self.set_drafter(drafter)
        if self.compiled is not None:
            self.compiled.start()  # today's caches are made (and captured): compile beside them

    @classmethod
    def load(
        cls,
        verifier: str | None = None,
        draft: str | None = None,
        *,
        drafter: str = "hybrid",
        dtype: str | None = None,
        device: str | None = None,
        max_draft_tokens: int = 8,
        compiled_step: bool = False,
    ) -> "CompletionEngine":
        """Load models by spec (preset name, directory, .gguf; None → the default pair).

        `draft="none"` (or drafter "lookup"/"none") loads no draft model. On a CPU the default
        dtype is 4-bit weights, or int8 (engine/models/quantize.py): passes of a few tokens, what typing
        costs, are two to five times as fast, with the same completion quality (docs/models.md, "4-bit weights").
        `compiled_step`: take up the compiled decode step once compiled in the background (off until a GPU run measures it).
        """
        if drafter == "draft" and draft == "none":
            raise ModelError("drafter 'draft' needs a draft model: pass --draft, or use --drafter lookup")
        if dtype in (None, "auto") and parse_device(device).type == "cpu":
            dtype = cpu_weights()
        loaded_verifier = load_model(verifier, dtype=dtype, device=device, role="verifier")
        loaded_draft = None
        if draft != "none" and needs_draft_model(drafter):
            loaded_draft = load_model(draft, dtype=dtype, device=device, role="draft")
            check_pair(loaded_verifier, loaded_draft)
        budget = CPU_CONTEXT_BUDGET if loaded_verifier.device.type == "cpu" else ContextBudget()
        return cls(loaded_verifier, loaded_draft, drafter=drafter, max_draft_tokens=max_draft_tokens,
                   context_budget=budget, compiled_step=compiled_step)

    def set_drafter(self, mode: str) -> None:
        """Switch drafting mode. Without a draft model 'draft' falls back to 'lookup' and 'hybrid'
        to the heads with lookup (or lookup alone); 'medusa' or 'feature' without its heads falls back to 'lookup'."""
        tree = "-tree" if check_drafter(mode).endswith("-tree") else ""
        trained = self.heads is not None or self.feature_head is not None
        if needs_draft_model(mode) and self.draft is None and not (mode == "hybrid" and trained):
            mode = "lookup" + tree
        if (mode == "medusa" and self.heads is None) or (mode == "feature" and self.feature_head is None):
            log.warning("no trained %s heads for %s (run quickdraft heads train --model %s%s): using lookup",
                        mode, self.verifier.name, self.verifier.name, " --kind feature" if mode == "feature" else "")
            mode = "lookup"
        if mode != self.drafter_mode:
            draft_model = self.draft.model if self.draft is not None else None
            config = DrafterConfig(max_draft_tokens=self.max_draft_tokens)
            self.decoder.drafter = make_drafter(mode, draft_model, config, verifier=self.verifier.model,
                                                heads=self.heads, feature_head=self.feature_head,
                                                kv_factory=self._draft_kv)
            self.drafter_mode = mode
        usable = self._compiled_kv is not None and serves_drafter(self.decoder.drafter)
        self.decoder.kv = self._compiled_kv if usable else self._usual_kv  # trees and heads need today's cache

    def _take_up_compiled(self) -> None:
        """At the start of a request or warm-up, never inside one: the compiled step's caches, once compiled in
        the background (engine/decoding/compile_in_background.py). They start empty: the request prefills."""
        caches = self.compiled.take() if self.compiled is not None else None
        if caches:
            self._usual_kv.crop(0)  # its KV dropped; kept for tree drafters and the heads
            self._compiled_kv, self._draft_cache = caches["verifier"], caches.get("draft", self._draft_cache)
            mode, self.drafter_mode = self.drafter_mode, ""  # the drafter made again, over the draft model's new cache
            self.set_drafter(mode)

    def _draft_kv(self, model):
        if self._draft_cache is None:
            self._draft_cache = self._new_cache(model)
        return self._draft_cache

    # Prompt settings live with the prompts (engine/text/document_prompts.py); a change forgets
    # the anchors and windows cut under the old ones.
    @property
    def default_budget(self) -> ContextBudget:
        return self.prompts.default_budget

    @property
    def context_budget(self) -> ContextBudget:
        return self.prompts.budget

    @context_budget.setter
    def context_budget(self, budget: ContextBudget) -> None:
        self.prompts.budget = budget

    @property
    def heal(self) -> bool:
        return self.prompts.heal

    @heal.setter
    def heal(self, on: bool) -> None:
        self.prompts.heal = on

    @property
    def crossfile(self):
        return self.prompts.crossfile

    @property
    def template(self) -> FimTemplate:
        return self.prompts.template

    def stop_token_ids(self, extra: Sequence[str] = ()) -> list[int]:
        return stop_token_ids(self.verifier.model, self.tokenizer, extra)

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 64,
        sampling: SamplingParams | None = None,
        seed: int | None = None,
        stop_strings: Sequence[str] = (),
        deadline: float | None = None,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> GenerationResult:
        """Continue a plain text prompt (no fill-in-the-middle)."""
        if not prompt:
            raise PromptError("the prompt is empty: give some text to continue")
        self._take_up_compiled()
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, sampling=sampling or SamplingParams(), seed=seed,
            max_draft_tokens=self.max_draft_tokens, eos_token_ids=self.stop_token_ids(),
            stop_strings=stop_strings, deadline=deadline, prefill_chunk=self.prefill_chunk,
            pass_prompt_tokens=self.pass_prompt_tokens,
        )
        return self._run(prompt_ids, config, (), cancel, on_text)

    def complete(
        self,
        request: CompletionRequest,
        *,
        cancel: threading.Event | None = None,
        on_text: Callable[[str], None] | None = None,
        on_answer: Callable[[CompletionResult], None] | None = None,
    ) -> CompletionResult:
        """Fill in the middle at the cursor, post-processed for display.

        With `on_answer`, the budget does not end the decode: the completion so far is
        handed to `on_answer` when the budget is spent, and decoding goes on (until it ends
        or `cancel` is set) so the returned result is longer — the next keystrokes' ghost text.
        A multi-line answer is handed to `on_answer` again each time it gains a line, a
        single-line one when its line is done (before the next line is decoded as a draft).
        """
        budget_start = request.received_at if request.received_at is not None else time.monotonic()
        self._take_up_compiled()
        deadline = budget_start + request.budget_ms / 1000 - ANSWER_MARGIN_S if request.budget_ms else None
        cursor = self.cursor(request)
        prompt = self.prompt_for(request, cursor)
        config = self._generation_config(request, cursor, prompt, deadline)
        min_confidence = default_min_confidence(self.verifier.name) if request.min_confidence is None else request.min_confidence
        answers = Answers(self.tokenizer, cursor, prompt, min_confidence, on_answer)
        answer_so_far = answers.answer_so_far if on_answer is not None else None
        # A multi-line answer grows by whole lines after the budget's answer.
        result = self._run(prompt.token_ids, config, prompt.token_streams, cancel, skip_chars(on_text, len(prompt.healed)),
                           answer_so_far, answer_so_far if cursor.multiline else None)
        completion, ahead = answers.shown(result), []
        if on_answer is not None and not cursor.multiline and result.stop_reason == StopReason.STOP_STRING:
            completion, ahead = self._and_next_line(answers, result, config, cancel)
        self.prompts.last_output[request.path or ""] = list(result.token_ids) + ahead
        return completion

    def _generation_config(self, request: CompletionRequest, cursor: Cursor, prompt: Prompt,
                           deadline: float | None) -> GenerationConfig:
        return GenerationConfig(
            max_new_tokens=request.max_new_tokens,
            sampling=SamplingParams(temperature=request.temperature),
            seed=request.seed,
            max_draft_tokens=self.max_draft_tokens,
            eos_token_ids=self.stop_token_ids(self.template.stop_tokens),
            stop_strings=stops_outside(stop_strings_for(cursor), prompt.healed),
            deadline=deadline, prefill_chunk=self.prefill_chunk,
            pass_prompt_tokens=self.pass_prompt_tokens,
            # Token healing: the output first retypes the end of the text the prompt left out.
            constraint=healing_constraint(self.tokenizer, prompt.healed, self.verifier.model.config.vocab_size,
                                          cursor.line_before) if self.heal else None,
            done_at_line=(lambda text: left_its_block(after_healed(text, prompt.healed), cursor)) if cursor.multiline else None,
        )

    def _and_next_line(self, answers: Answers, line: GenerationResult, config: GenerationConfig,
                       cancel) -> tuple[CompletionResult, list[int]]:
        """A finished one-line completion, and the next line's tokens: the first pass's draft after Enter,
        and shown as well where the cursor ends its line and the budget has time left."""
        one_line = answers.shown(line)
        ids, streams = answers.prompt.token_ids + line.token_ids, answers.prompt.token_streams
        if answers.answered or not self._time_for_next_line(answers.cursor, line, config.deadline):
            answers.answer(one_line)  # the finished line is worth showing now, not after the look-ahead
            return one_line, self._look_ahead(ids, config, streams, cancel).token_ids
        look = self._look_ahead(ids, config, streams, cancel,
                                lambda partial: answers.answer(answers.with_next_line(line, one_line, partial)))
        completion = answers.with_next_line(line, one_line, look)
        if look.stop_reason == StopReason.CANCELLED:
            completion = replace(completion, stop_reason=StopReason.CANCELLED)  # superseded unanswered
        elif not answers.answered:
            answers.answer(completion)
        return completion, look.token_ids

    def _look_ahead(self, token_ids: list[int], config: GenerationConfig, streams, cancel,
                    on_deadline: OnDeadline | None = None) -> GenerationResult:
        """The verifier's next line after a finished one-line completion, decoded while the user
        finishes typing it: after Enter it is the first pass's draft, so a new line costs one pass
        instead of one per token. With `on_deadline` the request's budget still runs (its answer
        shows the next line so far); without, it is a draft only, never shown."""
        config = replace(config, max_new_tokens=LOOKAHEAD_TOKENS, stop_strings=["\n"], constraint=None,
                         deadline=config.deadline if on_deadline is not None else None)
        return self._run(token_ids, config, streams, cancel, None, on_deadline)

    @staticmethod
    def _time_for_next_line(cursor: Cursor, line: GenerationResult, deadline: float | None) -> bool:
        """The cursor ends its line (a next line would not push text aside), and one more pass,
        as long as this request's passes took, still ends within the budget."""
        if deadline is None or cursor.line_after.strip():
            return False
        per_pass = line.stats.verify_ms / 1000 / max(line.stats.verifier_passes, 1)
        return time.monotonic() + per_pass < deadline

    def warm(self, request: CompletionRequest, cancel: threading.Event | None = None) -> int:
        """Prefill the prompt for `request` ahead of time (cancellable between layers): tokens fed.

        The request's own first pass then feeds only what changed since, with its draft.
        """
        self._take_up_compiled()
        prompt = self.prompt_for(request)
        ids = prompt.token_ids
        with torch.inference_mode():
            _, fed = self.decoder.kv.feed_until(ids, len(ids) - 1, cancel.is_set if cancel is not None else None)
        return fed

    @staticmethod
    def cursor(request: CompletionRequest) -> Cursor:
        """The request's cursor context, worked out once: language, line parts, syntax window, single or multi-line."""
        return Cursor.at(request.prefix, request.suffix, language_from(request.language, request.path), request.multiline)

    def prompt_for(self, request: CompletionRequest, cursor: Cursor | None = None) -> Prompt:
        """The request's prompt: anchored while the user types at the anchor, else fresh."""
        return self.prompts.prompt(cursor or self.cursor(request), request.path, request.other_documents,
                                   cached=self.decoder.kv.tokens)

    @torch.inference_mode()
    def _run(self, prompt_ids, config, streams, cancel, on_text, on_deadline=None, on_line=None) -> GenerationResult:
        return self.decoder.generate(prompt_ids, config, context_streams=streams, cancel=cancel, on_text=on_text,
                                     on_deadline=on_deadline, on_line=on_line)

