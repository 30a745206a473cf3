"""One mode decoding one prompt, timed: transformers `generate` baselines and quickdraft's decoder.

Every run starts cold (a fresh decoder and drafter, empty KV caches), since HF `generate`
cannot reuse a cache across calls either. HF's internal figures (verifier passes, drafted
tokens, forward time) come from forward hooks on the models, so τ and acceptance mean the
same thing for every mode.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from engine.bench.corpus import Hole


class RunSetup(Protocol):
    """What a run needs of the benchmark: its models and settings (engine/bench/decode.py's `EngineBench`)."""

    config: Any
    verifier: Any  # LoadedModel
    draft: Any  # LoadedModel or None
    tokenizer: Any
    heads: Any  # the verifier's Medusa heads, or None
    feature_head: Any  # the verifier's feature head, or None
    stop_ids: list[int]
    eos_ids: list[int]

    def drafter_for(self, mode: str) -> tuple[str, Any]: ...

    def cold_cache(self, model) -> Any: ...


@dataclass
class Run:
    """One mode on one prompt."""

    mode: str
    prompt: int
    seconds: float
    token_ids: list[int]
    passes: int  # verifier forward passes that emitted tokens (prefill-only passes excluded)
    drafted: int
    accepted: int
    prefill_ms: float | None = None
    draft_ms: float | None = None
    verify_ms: float | None = None
    per_drafter: dict = field(default_factory=dict)
    text: str = ""
    # The first forward of each model reads the whole prompt; on a slow CPU it can outweigh the
    # decoding itself, so decode-only figures leave it out (see `decode_seconds`).
    prompt_forward_s: float = 0.0

    @property
    def tokens(self) -> int:
        return len(self.token_ids)

    @property
    def decode_seconds(self) -> float:
        return max(self.seconds - self.prompt_forward_s, 1e-9)

    @property
    def decode_tokens_per_s(self) -> float:
        return self.tokens / self.decode_seconds if self.tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tau(self) -> float | None:
        return self.tokens / self.passes if self.passes else None


@dataclass
class HolePrompt:
    hole: Hole
    token_ids: list[int]
    streams: list[list[int]]


class ForwardProbe:
    """Counts and times a model's forward calls, and how many tokens each one fed."""

    def __init__(self, model) -> None:
        self.calls: list[tuple[int, float]] = []  # (tokens fed, seconds)
        self._t0 = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._before, with_kwargs=True),
            model.register_forward_hook(self._after, with_kwargs=True),
        ]

    def _before(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._fed = int(ids.shape[-1]) if ids is not None else 0
        self._t0 = time.perf_counter()

    def _after(self, module, args, kwargs, output):
        self.calls.append((self._fed, time.perf_counter() - self._t0))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    @property
    def first_s(self) -> float:
        return self.calls[0][1] if self.calls else 0.0


def sync(device) -> None:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)


def _hf_generation_kwargs(bench: RunSetup, max_new_tokens: int) -> dict:
    pad = bench.tokenizer.pad_token_id if bench.tokenizer.pad_token_id is not None else bench.stop_ids[0]
    # Explicit plain greedy: a model's own generation_config may ask for sampling or a repetition penalty.
    return {"max_new_tokens": max_new_tokens, "do_sample": False, "num_beams": 1, "repetition_penalty": 1.0,
            "eos_token_id": list(bench.eos_ids) or None, "pad_token_id": pad}


def run_hf(bench: RunSetup, mode: str, prompt: HolePrompt, max_new_tokens: int, index: int) -> Run:
    """transformers `generate`: plain greedy, assisted by the draft model, or with prompt lookup."""
    import torch

    model = bench.verifier.model
    device = bench.verifier.device
    input_ids = torch.tensor([prompt.token_ids], dtype=torch.long, device=device)
    kwargs: dict = {"attention_mask": torch.ones_like(input_ids)}
    saved_assistant_config = None
    saved_config = model.generation_config
    if not bench.eos_ids:
        # No EOS anywhere, or generate falls back to the model's own and stops there.
        model.generation_config = copy.deepcopy(saved_config)
        model.generation_config.eos_token_id = None
    if mode == "hf-assisted":
        kwargs["assistant_model"] = bench.draft.model
        # HF tunes the assistant's confidence threshold in place; every run starts from the defaults.
        saved_assistant_config = bench.draft.model.generation_config
        bench.draft.model.generation_config = copy.deepcopy(saved_assistant_config)
        if not bench.eos_ids:
            bench.draft.model.generation_config.eos_token_id = None
    elif mode == "hf-prompt-lookup":
        kwargs["prompt_lookup_num_tokens"] = bench.config.hf_lookup_tokens
    probe = ForwardProbe(model)
    draft_probe = ForwardProbe(bench.draft.model) if mode == "hf-assisted" else None
    try:
        sync(device)
        started = time.perf_counter()
        with torch.inference_mode():
            output = model.generate(input_ids, **_hf_generation_kwargs(bench, max_new_tokens), **kwargs)
        sync(device)
        seconds = time.perf_counter() - started
    finally:
        probe.close()
        if draft_probe is not None:
            draft_probe.close()
        model.generation_config = saved_config
        if saved_assistant_config is not None:
            bench.draft.model.generation_config = saved_assistant_config
    new = output[0, len(prompt.token_ids):].tolist()
    # generate pads nothing at batch size 1, but be safe: cut after the first stop token.
    stops = [i for i, t in enumerate(new) if t in bench.eos_ids]
    if stops:
        new = new[: stops[0] + 1]
    new = new[:max_new_tokens]
    passes = len(probe.calls)
    # Every pass feeds the last emitted token plus its drafts; the first also feeds the prompt.
    fed = sum(n for n, _ in probe.calls)
    drafted = max(0, fed - passes - (len(prompt.token_ids) - 1))
    accepted = max(0, len(new) - passes)
    verify_s = sum(s for _, s in probe.calls)
    return Run(
        mode=mode, prompt=index, seconds=seconds, token_ids=new, passes=passes, drafted=drafted,
        accepted=min(accepted, drafted), prefill_ms=probe.calls[0][1] * 1000 if probe.calls else None,
        draft_ms=sum(s for _, s in draft_probe.calls) * 1000 if draft_probe else 0.0,
        verify_ms=(verify_s - probe.first_s) * 1000,
        text=bench.tokenizer.decode(new, skip_special_tokens=True),
        prompt_forward_s=probe.first_s + (draft_probe.first_s if draft_probe else 0.0),
    )


def run_quickdraft(bench: RunSetup, mode: str, prompt: HolePrompt, max_new_tokens: int, index: int) -> Run:
    """quickdraft's SpeculativeDecoder with a fresh drafter (emptied caches) for the mode."""
    import torch

    from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
    from engine.drafters import make_drafter
    from engine.models.quantize import pass_prompt_tokens

    name, drafter_config = bench.drafter_for(mode)
    draft_model = bench.draft.model if bench.draft is not None else None
    drafter = make_drafter(name, draft_model, drafter_config, verifier=bench.verifier.model, heads=bench.heads,
                           feature_head=bench.feature_head, kv_factory=bench.cold_cache)
    decoder = SpeculativeDecoder(bench.verifier.model, drafter, bench.tokenizer, kv_factory=bench.cold_cache)
    # The prompt in one forward, as HF's generate reads it: in bf16 a chunked prefill rounds
    # differently, and the first token would already differ for reasons unrelated to decoding.
    config = GenerationConfig(max_new_tokens=max_new_tokens, max_draft_tokens=drafter_config.max_draft_tokens,
                              eos_token_ids=bench.eos_ids, prefill_chunk=None,
                              pass_prompt_tokens=pass_prompt_tokens(bench.verifier.model))
    # The draft model's first forward reads the prompt, as the assistant's does in HF assisted.
    draft_probe = ForwardProbe(bench.draft.model) if bench.draft is not None else None
    try:
        sync(bench.verifier.device)
        started = time.perf_counter()
        with torch.inference_mode():
            result = decoder.generate(prompt.token_ids, config, context_streams=prompt.streams)
        sync(bench.verifier.device)
        seconds = time.perf_counter() - started
    finally:
        if draft_probe is not None:
            draft_probe.close()
    stats = result.stats
    return Run(
        mode=mode, prompt=index, seconds=seconds, token_ids=list(result.token_ids), passes=stats.verifier_passes,
        drafted=stats.drafted, accepted=stats.accepted, prefill_ms=stats.prefill_ms, draft_ms=stats.draft_ms,
        verify_ms=stats.verify_ms, per_drafter={k: asdict(v) for k, v in stats.drafters.items()},
        # The verifier's prefill may be fed in chunks: take the decoder's own prefill time.
        text=result.text, prompt_forward_s=stats.prefill_ms / 1000 + (draft_probe.first_s if draft_probe else 0.0),
    )
