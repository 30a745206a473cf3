"""`quickdraft bench engine`: decoding speed at equal output, side by side in one process.

For every FIM prompt (cut from real source files by `engine.bench.corpus`) each mode
decodes the same prompt token ids, greedily, up to `max_new_tokens` or EOS:

- ``hf-greedy``: transformers `generate` with the verifier alone (the baseline);
- ``hf-assisted``: `generate(assistant_model=draft)` (HF's draft-model speculation);
- ``hf-prompt-lookup``: `generate(prompt_lookup_num_tokens=N)`;
- ``quickdraft-lookup`` / ``-draft`` / ``-hybrid``: our `SpeculativeDecoder` with that drafter;
- ``quickdraft-none`` (optional): our decoder without drafts, to separate loop overhead
  from speculation.

Fairness: modes run interleaved (the order rotates per prompt) after one warm-up round,
and every run starts cold: a fresh `SpeculativeDecoder` and drafter (empty KV caches) per
prompt and mode, since HF `generate` cannot reuse a cache across calls either.

Speed figures time the whole call (prefill included, as `generate` does). HF's internal
figures (verifier passes, drafted tokens, forward time) come from forward hooks on the
models, so τ and acceptance mean the same thing for every mode.
"""

from __future__ import annotations

import copy
import logging
import os
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from engine.bench.corpus import Hole

log = logging.getLogger(__name__)

HF_MODES = ("hf-greedy", "hf-assisted", "hf-prompt-lookup")
QD_MODES = ("quickdraft-lookup", "quickdraft-draft", "quickdraft-hybrid")
DEFAULT_MODES = HF_MODES + QD_MODES
ALL_MODES = DEFAULT_MODES + ("quickdraft-none",)
TUNED = "+tuned"  # "quickdraft-hybrid+tuned": the same drafter with EngineBenchConfig.tuned knobs, side by side


def valid_mode(mode: str) -> bool:
    return mode in ALL_MODES or (mode.endswith(TUNED) and mode.removesuffix(TUNED) in QD_MODES)
BASELINE = "hf-greedy"
# Issue 5's targets for the hybrid drafter: tokens/s ratio against each baseline.
TARGETS = {"hf-greedy": 2.5, "hf-assisted": 1.5, "hf-prompt-lookup": 1.5}
TARGET_MODE = "quickdraft-hybrid"


@dataclass
class DrafterKnobs:
    """quickdraft's drafter settings; None keeps the shipped default (recorded after construction)."""

    max_draft_tokens: int = 8
    lookup_min_n: int | None = None
    lookup_max_n: int | None = None
    confidence_threshold: float | None = None  # draft model stops drafting below this probability
    hybrid_min_match: int | None = None  # n-gram length for lookup to preempt the draft model
    draft_initial_length: int | None = None


@dataclass
class EngineBenchConfig:
    holes: int = 6
    max_new_tokens: int = 64
    seed: int = 0
    modes: Sequence[str] = DEFAULT_MODES
    repeats: int = 1  # runs per (prompt, mode); the median time counts
    warmup: bool = True
    prefix_tokens: int = 1024  # the engine's default context budget
    suffix_tokens: int = 256
    hf_lookup_tokens: int = 10  # prompt_lookup_num_tokens (the PLD paper's and HF docs' value)
    # False: every mode decodes exactly max_new_tokens (EOS is a token like any other), so tokens/s
    # compares equal amounts of work even where bf16 flips make one mode stop early and another not.
    # True: stop at EOS / FIM stop tokens, as a completion does.
    stop_at_eos: bool = False
    knobs: DrafterKnobs = field(default_factory=DrafterKnobs)
    tuned: DrafterKnobs | None = None  # knobs of the "+tuned" modes
    progress: bool = True


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


# ----------------------------------------------------------------------------- comparisons


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def positions_matching(a: Sequence[int], b: Sequence[int]) -> tuple[int, int]:
    """(positions where both have the same token, positions in the longer one)."""
    return sum(x == y for x, y in zip(a, b)), max(len(a), len(b))


def _median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# ----------------------------------------------------------------------------- HF instrumentation


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


# ----------------------------------------------------------------------------- the benchmark


@dataclass
class Prompt:
    hole: Hole
    token_ids: list[int]
    streams: list[list[int]]


class EngineBench:
    def __init__(self, verifier, draft, config: EngineBenchConfig) -> None:
        """`verifier` and `draft` are `engine.models.loading.LoadedModel`s (draft may be None: draft modes are skipped)."""
        from engine.completion import CompletionEngine

        self.verifier = verifier
        self.draft = draft
        self.config = config
        self.tokenizer = verifier.tokenizer
        # Used only for its FIM template and stop tokens, so every mode stops on the same ids.
        helper = CompletionEngine(verifier, None, drafter="none")
        self.template = helper.template
        self.stop_ids = helper.stop_token_ids(self.template.stop_tokens)
        self.eos_ids = self.stop_ids if config.stop_at_eos else []
        needs_draft = ("hf-assisted", "quickdraft-draft", "quickdraft-hybrid")
        self.modes = [m for m in config.modes if draft is not None or m.removesuffix(TUNED) not in needs_draft]
        if len(self.modes) < len(config.modes):
            log.warning("no draft model: skipping %s", ", ".join(sorted(set(config.modes) - set(self.modes))))
        self.effective_knobs: dict = {}

    # -- prompts ----------------------------------------------------------------------
    def prompt(self, hole: Hole) -> Prompt:
        from engine.prompt import ContextBudget, build_prompt

        budget = ContextBudget(self.config.prefix_tokens, self.config.suffix_tokens, 0)
        parts = build_prompt(self.tokenizer, self.template, hole.prefix, hole.suffix, path=hole.path, budget=budget)
        return Prompt(hole, parts.token_ids, parts.token_streams)

    # -- one run ----------------------------------------------------------------------
    def run(self, mode: str, prompt: Prompt, max_new_tokens: int, index: int) -> Run:
        if mode.startswith("hf-"):
            return self._run_hf(mode, prompt, max_new_tokens, index)
        return self._run_quickdraft(mode, prompt, max_new_tokens, index)

    def _hf_generation_kwargs(self, max_new_tokens: int) -> dict:
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.stop_ids[0]
        # Explicit plain greedy: a model's own generation_config may ask for sampling or a repetition penalty.
        return {"max_new_tokens": max_new_tokens, "do_sample": False, "num_beams": 1, "repetition_penalty": 1.0,
                "eos_token_id": list(self.eos_ids) or None, "pad_token_id": pad}

    def _run_hf(self, mode: str, prompt: Prompt, max_new_tokens: int, index: int) -> Run:
        import torch

        model = self.verifier.model
        device = self.verifier.device
        input_ids = torch.tensor([prompt.token_ids], dtype=torch.long, device=device)
        kwargs: dict = {"attention_mask": torch.ones_like(input_ids)}
        saved_assistant_config = None
        saved_config = model.generation_config
        if not self.eos_ids:
            # No EOS anywhere, or generate falls back to the model's own and stops there.
            model.generation_config = copy.deepcopy(saved_config)
            model.generation_config.eos_token_id = None
        if mode == "hf-assisted":
            kwargs["assistant_model"] = self.draft.model
            # HF tunes the assistant's confidence threshold in place; every run starts from the defaults.
            saved_assistant_config = self.draft.model.generation_config
            self.draft.model.generation_config = copy.deepcopy(saved_assistant_config)
            if not self.eos_ids:
                self.draft.model.generation_config.eos_token_id = None
        elif mode == "hf-prompt-lookup":
            kwargs["prompt_lookup_num_tokens"] = self.config.hf_lookup_tokens
        probe = ForwardProbe(model)
        draft_probe = ForwardProbe(self.draft.model) if mode == "hf-assisted" else None
        try:
            _sync(device)
            started = time.perf_counter()
            with torch.inference_mode():
                output = model.generate(input_ids, **self._hf_generation_kwargs(max_new_tokens), **kwargs)
            _sync(device)
            seconds = time.perf_counter() - started
        finally:
            probe.close()
            if draft_probe is not None:
                draft_probe.close()
            model.generation_config = saved_config
            if saved_assistant_config is not None:
                self.draft.model.generation_config = saved_assistant_config
        new = output[0, len(prompt.token_ids):].tolist()
        # generate pads nothing at batch size 1, but be safe: cut after the first stop token.
        stops = [i for i, t in enumerate(new) if t in self.eos_ids]
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
            text=self.tokenizer.decode(new, skip_special_tokens=True),
            prompt_forward_s=probe.first_s + (draft_probe.first_s if draft_probe else 0.0),
        )

    def _knobs(self, mode: str) -> DrafterKnobs:
        if mode.endswith(TUNED):
            if self.config.tuned is None:
                raise ValueError(f"mode {mode} needs EngineBenchConfig.tuned knobs")
            return self.config.tuned
        return self.config.knobs

    def make_drafter(self, mode: str):
        """A fresh drafter (empty caches) for a quickdraft mode, with the knobs applied."""
        from engine.drafters import make_drafter

        knobs = self._knobs(mode)
        name = mode.removesuffix(TUNED).removeprefix("quickdraft-")
        effective = self.effective_knobs.setdefault(mode, {})
        draft_model = self.draft.model if self.draft is not None else None
        drafter = make_drafter(name, draft_model, max_draft_tokens=knobs.max_draft_tokens)
        if drafter is None:
            return None
        lookup = getattr(drafter, "lookup", drafter if name == "lookup" else None)
        model_drafter = getattr(drafter, "draft_model", drafter if name == "draft" else None)
        if lookup is not None:
            if knobs.lookup_min_n is not None:
                lookup.min_n = knobs.lookup_min_n
            if knobs.lookup_max_n is not None:
                lookup.max_n = knobs.lookup_max_n
            effective.update(lookup_min_n=lookup.min_n, lookup_max_n=lookup.max_n,
                             lookup_max_tokens=lookup.length.maximum)
        if model_drafter is not None:
            if knobs.confidence_threshold is not None:
                model_drafter.confidence_threshold = knobs.confidence_threshold
            if knobs.draft_initial_length is not None:
                model_drafter.length.value = knobs.draft_initial_length
            effective.update(confidence_threshold=model_drafter.confidence_threshold,
                             draft_max_tokens=model_drafter.length.maximum, draft_initial_length=model_drafter.length.value)
        if name == "hybrid":
            if knobs.hybrid_min_match is not None:
                drafter.min_match = knobs.hybrid_min_match
            effective["hybrid_min_match"] = drafter.min_match
        effective["max_draft_tokens"] = knobs.max_draft_tokens
        return drafter

    def _run_quickdraft(self, mode: str, prompt: Prompt, max_new_tokens: int, index: int) -> Run:
        import torch

        from engine.decoder import GenerationConfig, SpeculativeDecoder

        decoder = SpeculativeDecoder(self.verifier.model, self.make_drafter(mode), self.tokenizer)
        # The prompt in one forward, as HF's generate reads it: in bf16 a chunked prefill rounds
        # differently, and the first token would already differ for reasons unrelated to decoding.
        config = GenerationConfig(max_new_tokens=max_new_tokens, max_draft_tokens=self._knobs(mode).max_draft_tokens,
                                  eos_token_ids=self.eos_ids, prefill_chunk=None)
        # The draft model's first forward reads the prompt, as the assistant's does in HF assisted.
        draft_probe = ForwardProbe(self.draft.model) if self.draft is not None else None
        try:
            _sync(self.verifier.device)
            started = time.perf_counter()
            with torch.inference_mode():
                result = decoder.generate(prompt.token_ids, config, context_streams=prompt.streams)
            _sync(self.verifier.device)
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

    # -- the whole benchmark ------------------------------------------------------------
    def run_all(self, holes: Sequence[Hole], on_run: Callable[[Run], None] | None = None) -> list[Run]:
        from tqdm import tqdm

        cfg = self.config
        prompts = [self.prompt(h) for h in holes]
        if cfg.warmup and prompts:
            # One short pass per mode: first-call allocations and kernel selection stay out of the figures.
            for mode in tqdm(self.modes, desc="warm-up", disable=not cfg.progress, leave=False):
                self.run(mode, prompts[0], min(8, cfg.max_new_tokens), -1)
        runs: list[Run] = []
        total = len(prompts) * len(self.modes) * cfg.repeats
        with tqdm(total=total, desc="engine bench", disable=not cfg.progress, unit="run") as bar:
            for index, prompt in enumerate(prompts):
                # Rotate the order so no mode always runs first (or right after a slow one).
                shift = index % len(self.modes)
                order = self.modes[shift:] + self.modes[:shift]
                trials: dict[str, list[Run]] = {m: [] for m in order}
                for _ in range(cfg.repeats):
                    for mode in order:
                        bar.set_postfix_str(f"prompt {index + 1}/{len(prompts)} {mode}")
                        trials[mode].append(self.run(mode, prompt, cfg.max_new_tokens, index))
                        bar.update(1)
                for mode in self.modes:
                    done = sorted(trials[mode], key=lambda r: r.seconds)
                    run = done[len(done) // 2]  # the median run by time
                    runs.append(run)
                    if on_run is not None:
                        on_run(run)
        return runs


def _sync(device) -> None:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- figures


def summarize(runs: Sequence[Run], modes: Sequence[str], n_prompts: int) -> list[dict]:
    """Per-mode figures; ratios are per prompt against hf-greedy, then the median."""
    by_mode = {m: {r.prompt: r for r in runs if r.mode == m} for m in modes}
    base = by_mode.get(BASELINE, {})
    summary = []
    for mode in modes:
        mine = by_mode[mode]
        tokens = sum(r.tokens for r in mine.values())
        seconds = sum(r.seconds for r in mine.values())
        passes = sum(r.passes for r in mine.values())
        drafted = sum(r.drafted for r in mine.values())
        accepted = sum(r.accepted for r in mine.values())
        decode_seconds = sum(r.decode_seconds for r in mine.values())
        ratios, decode_ratios, matched, positions, identical, firsts = [], [], 0, 0, 0, []
        for index, run in sorted(mine.items()):
            ref = base.get(index)
            if ref is None:
                continue
            if ref.tokens_per_s > 0:
                ratios.append(run.tokens_per_s / ref.tokens_per_s)
            if ref.decode_tokens_per_s > 0:
                decode_ratios.append(run.decode_tokens_per_s / ref.decode_tokens_per_s)
            m, p = positions_matching(run.token_ids, ref.token_ids)
            matched, positions = matched + m, positions + p
            diff = first_difference(run.token_ids, ref.token_ids)
            if diff is None:
                identical += 1
            else:
                firsts.append(diff)
        compared = len([i for i in mine if i in base])
        timing = {key: _sum_or_none([getattr(r, key) for r in mine.values()])
                  for key in ("prefill_ms", "draft_ms", "verify_ms")}
        decode_ms = seconds * 1000
        known = sum(v for v in timing.values() if v is not None)
        per_drafter: dict[str, dict] = {}
        for run in mine.values():
            for name, figures in run.per_drafter.items():
                total = per_drafter.setdefault(name, {"proposals": 0, "drafted": 0, "accepted": 0})
                for key in total:
                    total[key] += figures.get(key, 0)
        for figures in per_drafter.values():
            figures["acceptance"] = _round(figures["accepted"] / figures["drafted"]) if figures["drafted"] else None
        summary.append({
            "name": mode,
            "prompts": len(mine),
            "tokens": tokens,
            "seconds": _round(seconds),
            "tokens_per_s": _round(tokens / seconds if seconds else 0.0),
            "speedup_vs_hf_greedy": _round(_median(ratios)) if ratios else None,
            "speedup_vs_hf_greedy_pooled": None,  # filled below, once hf-greedy's rate is known
            "speedups_per_prompt": [_round(r) for r in ratios],
            "decode_tokens_per_s": _round(tokens / decode_seconds if decode_seconds else 0.0),
            "decode_speedup_vs_hf_greedy": _round(_median(decode_ratios)) if decode_ratios else None,
            "decode_speedups_per_prompt": [_round(r) for r in decode_ratios],
            "prompt_forward_s": _round(sum(r.prompt_forward_s for r in mine.values())),
            "tau": _round(tokens / passes) if passes else None,
            "tau_per_prompt": [_round(r.tau) if r.tau is not None else None for _, r in sorted(mine.items())],
            "verifier_passes": passes,
            "drafted": drafted,
            "accepted": accepted,
            "draft_acceptance": _round(accepted / drafted) if drafted else None,
            "match_vs_hf_greedy": _round(matched / positions) if positions else None,
            "matched_positions": matched,
            "compared_positions": positions,
            "identical_completions": _round(identical / compared) if compared else None,
            "first_difference_median": _median(firsts),
            "first_differences": firsts,
            "timing_ms": {**{k: _round(v) for k, v in timing.items()},
                          "overhead": _round(decode_ms - known), "total": _round(decode_ms)},
            "per_drafter": per_drafter,
        })
    base_rate = next((m["tokens_per_s"] for m in summary if m["name"] == BASELINE), None)
    for mode in summary:
        if base_rate:
            mode["speedup_vs_hf_greedy_pooled"] = _round(mode["tokens_per_s"] / base_rate)
    return summary


def pairwise_speedup(runs: Sequence[Run], mode: str, other: str, *, decode_only: bool = False
                     ) -> tuple[float | None, float | None]:
    """(median per-prompt tokens/s ratio, pooled ratio) of `mode` over `other`."""
    a = {r.prompt: r for r in runs if r.mode == mode}
    b = {r.prompt: r for r in runs if r.mode == other}

    def rate(r: Run) -> float:
        return r.decode_tokens_per_s if decode_only else r.tokens_per_s

    def secs(r: Run) -> float:
        return r.decode_seconds if decode_only else r.seconds

    ratios = [rate(a[i]) / rate(b[i]) for i in a if i in b and rate(b[i]) > 0]
    sa = sum(secs(r) for r in a.values())
    sb = sum(secs(r) for r in b.values())
    ta = sum(r.tokens for r in a.values())
    tb = sum(r.tokens for r in b.values())
    pooled = (ta / sa) / (tb / sb) if sa and sb and tb else None
    return (_median(ratios) if ratios else None), pooled


def targets(runs: Sequence[Run], modes: Sequence[str]) -> list[dict]:
    rows = []
    for other, goal in TARGETS.items():
        if TARGET_MODE not in modes or other not in modes:
            continue
        median, pooled = pairwise_speedup(runs, TARGET_MODE, other)
        decode_median, decode_pooled = pairwise_speedup(runs, TARGET_MODE, other, decode_only=True)
        rows.append({"mode": TARGET_MODE, "versus": other, "target": goal, "median_ratio": _round(median),
                     "pooled_ratio": _round(pooled), "met": bool(median is not None and median >= goal),
                     "decode_median_ratio": _round(decode_median), "decode_pooled_ratio": _round(decode_pooled),
                     "decode_met": bool(decode_median is not None and decode_median >= goal)})
    return rows


def _sum_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


# ----------------------------------------------------------------------------- environment


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _model_info(loaded) -> dict | None:
    if loaded is None:
        return None
    params = sum(p.numel() for p in loaded.model.parameters())
    return {"name": loaded.name, "path": str(loaded.path) if loaded.path else None, "parameters": params,
            "layers": getattr(loaded.model.config, "num_hidden_layers", None), "dtype": str(loaded.dtype)}


def environment(verifier=None, draft=None) -> dict:
    """Hardware and software of this run: figures are only comparable on the same machine."""
    import torch
    import transformers

    from engine.models.loading import _cpu_flags

    flags = _cpu_flags()
    env = {
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_features": sorted(f for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "git_commit": _git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if verifier is not None:
        env.update(device=str(verifier.device), dtype=str(verifier.dtype).removeprefix("torch."),
                   verifier=_model_info(verifier), draft=_model_info(draft))
    return env


# ----------------------------------------------------------------------------- output


def format_table(result: dict) -> str:
    """The terminal table: one row per mode."""
    header = ("mode", "tok/s", "× greedy", "decode tok/s", "× greedy", "τ", "accept", "tok match", "identical",
              "1st diff")
    rows = [header]
    for m in result["modes"]:
        rows.append((
            m["name"], _fmt(m["tokens_per_s"], 2), _fmt(m["speedup_vs_hf_greedy"], 2, "×"),
            _fmt(m["decode_tokens_per_s"], 2), _fmt(m["decode_speedup_vs_hf_greedy"], 2, "×"), _fmt(m["tau"], 2),
            _fmt(m["draft_acceptance"], 0, "%", 100), _fmt(m["match_vs_hf_greedy"], 0, "%", 100),
            _fmt(m["identical_completions"], 0, "%", 100), _fmt(m["first_difference_median"], 0),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for t in result.get("targets", []):
        lines.append(f"target {t['mode']} ≥ {t['target']}× {t['versus']}: median {_fmt(t['median_ratio'], 2, '×')} "
                     f"(pooled {_fmt(t['pooled_ratio'], 2, '×')}) → {'met' if t['met'] else 'MISSED'}; "
                     f"decode only {_fmt(t['decode_median_ratio'], 2, '×')} → {'met' if t['decode_met'] else 'MISSED'}")
    env = result["environment"]
    lines.append(f"{env.get('cpu')} ({env.get('cpu_cores')} cores{', ' + env['gpu'] if env.get('gpu') else ''}), "
                 f"torch {env.get('torch')}, {env.get('dtype')}, load average at start "
                 f"{_fmt((env.get('load_average') or [None])[0], 2)}")
    return "\n".join(lines)


def _fmt(value, digits: int, unit: str = "", scale: float = 1.0) -> str:
    if value is None:
        return "–"
    return f"{value * scale:.{digits}f}{unit}"


def write_plots(result: dict, out: Path) -> list[Path]:
    """speedup per prompt (bars per mode) and τ per prompt (lines per mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in result["modes"] if m["name"] != BASELINE]
    prompts = result["prompts"]
    labels = [f"{i + 1}:{p['kind']}" for i, p in enumerate(prompts)]
    env = result["environment"]
    caption = f"{env.get('cpu')}, {env.get('dtype')}; {result['config']['max_new_tokens']} new tokens"
    paths = []

    # End to end (prefill included) and decode only: on a slow CPU the cold prefill dominates the first.
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 1.2 * len(labels) + 2), 7), sharex=True)
    width = 0.8 / max(1, len(modes))
    for ax, key, what in ((axes[0], "speedups_per_prompt", "end to end"),
                          (axes[1], "decode_speedups_per_prompt", "decode only (prompt forwards excluded)")):
        for j, mode in enumerate(modes):
            values = mode[key]
            ax.bar([i + j * width for i in range(len(values))], values, width, label=mode["name"])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("tokens/s ÷ hf-greedy")
        ax.set_title(f"Speedup per prompt over HF greedy, {what}", fontsize=9)
    axes[1].set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, rotation=30, ha="right")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(caption, fontsize=9)
    fig.tight_layout()
    paths.append(out / "engine-speedup.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels) + 2), 4))
    for mode in result["modes"]:
        taus = mode["tau_per_prompt"]
        ax.plot(range(len(taus)), [t if t is not None else float("nan") for t in taus], marker="o", label=mode["name"])
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel("τ (tokens per verifier pass)")
    ax.set_title(f"τ per request\n{caption}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "engine-tau.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def run_engine_bench(verifier, draft, holes: Sequence[Hole], config: EngineBenchConfig) -> dict:
    """Run every mode on every hole; return the JSON-ready result (see `summarize`)."""
    env = environment(verifier, draft)
    bench = EngineBench(verifier, draft, config)
    runs = bench.run_all(holes)
    env["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    prompts = [bench.prompt(h) for h in holes]
    config_dict = asdict(config)
    config_dict.pop("progress", None)
    config_dict["modes"] = list(bench.modes)
    config_dict["knobs_effective"] = bench.effective_knobs
    config_dict["hf_assisted"] = "transformers defaults (num_assistant_tokens 20, constant schedule, " \
                                 "assistant_confidence_threshold 0.4 re-fit online)"
    config_dict["cache"] = "cold for every run: a fresh decoder and drafter per prompt and mode"
    modes = summarize(runs, bench.modes, len(holes))
    exact_modes = [m for m in modes if m["name"].startswith("quickdraft-")]
    config_dict["tuned"] = asdict(config.tuned) if config.tuned is not None else None
    return {
        "benchmark": "engine",
        "environment": env,
        "config": config_dict,
        "prompts": [{**p.hole.describe(), "prompt_tokens": len(p.token_ids)} for p in prompts],
        "modes": modes,
        "targets": targets(runs, bench.modes),
        # In float32 every quickdraft mode must equal hf-greedy token for token.
        "quickdraft_identical_to_hf_greedy": (all(m["identical_completions"] == 1.0 for m in exact_modes)
                                              if exact_modes and BASELINE in bench.modes else None),
        "runs": [{**asdict(r), "tokens_per_s": _round(r.tokens_per_s), "decode_tokens_per_s": _round(r.decode_tokens_per_s),
                  "tau": _round(r.tau)} for r in runs],
    }
