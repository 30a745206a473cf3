"""`quickdraft bench engine`: decoding speed at equal output, side by side in one process.

For every FIM prompt (cut from real source files by `engine.bench.corpus`) each mode
decodes the same prompt token ids, greedily, up to `max_new_tokens` or EOS:

- ``hf-greedy``: transformers `generate` with the verifier alone (the baseline);
- ``hf-assisted``: `generate(assistant_model=draft)` (HF's draft-model speculation);
- ``hf-prompt-lookup``: `generate(prompt_lookup_num_tokens=N)`;
- ``quickdraft-lookup`` / ``-draft`` / ``-hybrid``: our `SpeculativeDecoder` with that drafter;
- ``quickdraft-none`` (optional): our decoder without drafts, to separate loop overhead
  from speculation;
- ``quickdraft-lookup-tree`` / ``-draft-tree`` / ``-hybrid-tree`` / ``-medusa`` (optional):
  token trees, and the verifier's trained Medusa heads (``quickdraft heads train``); without
  a draft model, ``quickdraft-hybrid`` runs the heads with lookup when there are heads.

Fairness: modes run interleaved (the order rotates per prompt) after one warm-up round,
and every run starts cold: a fresh `SpeculativeDecoder` and drafter (empty KV caches) per
prompt and mode, since HF `generate` cannot reuse a cache across calls either.

Speed figures time the whole call (prefill included, as `generate` does). HF's internal
figures (verifier passes, drafted tokens, forward time) come from forward hooks on the
models, so τ and acceptance mean the same thing for every mode.

Module map: runs.py times one mode on one prompt, figures.py compares the modes,
report.py prints the table and draws the plots; this file configures and orchestrates.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

from engine.bench.common import load_average, machine, round_or_none
from engine.bench.corpus import Hole
from engine.bench.figures import BASELINE, summarize, targets
from engine.bench.runs import HolePrompt, Run, run_hf, run_quickdraft
from engine.drafters.config import DrafterConfig
from engine.modes import needs_draft_model

log = logging.getLogger(__name__)

HF_MODES = ("hf-greedy", "hf-assisted", "hf-prompt-lookup")
QD_MODES = ("quickdraft-lookup", "quickdraft-draft", "quickdraft-hybrid")
DEFAULT_MODES = HF_MODES + QD_MODES
TREE_MODES = ("quickdraft-lookup-tree", "quickdraft-draft-tree", "quickdraft-hybrid-tree", "quickdraft-medusa",
              "quickdraft-feature")
ALL_MODES = DEFAULT_MODES + ("quickdraft-none",) + TREE_MODES
TUNED = "+tuned"  # "quickdraft-hybrid+tuned": the same drafter with EngineBenchConfig.tuned, side by side


def valid_mode(mode: str) -> bool:
    return mode in ALL_MODES or (mode.endswith(TUNED) and mode.removesuffix(TUNED) in QD_MODES + TREE_MODES)


def mode_needs_draft_model(mode: str) -> bool:
    base = mode.removesuffix(TUNED)
    if base.startswith("quickdraft-"):
        return needs_draft_model(base.removeprefix("quickdraft-"))
    return base == "hf-assisted"


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
    drafters: DrafterConfig = field(default_factory=DrafterConfig)
    tuned: DrafterConfig | None = None  # the drafters of the "+tuned" modes
    progress: bool = True


class EngineBench:
    def __init__(self, verifier, draft, config: EngineBenchConfig) -> None:
        """`verifier` and `draft` are `engine.models.loading.LoadedModel`s (draft may be None: draft modes are skipped)."""
        from engine.completion import CompletionEngine

        self.verifier = verifier
        self.draft = draft
        self.config = config
        self.tokenizer = verifier.tokenizer
        self._caches: dict[int, object] = {}  # per model: the device's KV cache, emptied before each run
        # Used only for its FIM template and stop tokens, so every mode stops on the same ids.
        helper = CompletionEngine(verifier, None, drafter="none")
        self.template = helper.template
        self.stop_ids = helper.stop_token_ids(self.template.stop_tokens)
        self.eos_ids = self.stop_ids if config.stop_at_eos else []
        from engine.medusa.store import find_heads

        self.heads = find_heads(verifier.name, verifier.model)  # the verifier's Medusa heads, if trained
        self.feature_head = find_heads(verifier.name, verifier.model, kind="feature")  # its feature head, if trained

        def runnable(mode: str) -> bool:
            base = mode.removesuffix(TUNED)
            if base == "quickdraft-medusa":
                return self.heads is not None
            if base == "quickdraft-feature":
                return self.feature_head is not None
            trained = self.heads is not None or self.feature_head is not None
            heads_stand_in = base == "quickdraft-hybrid" and trained  # heads + lookup
            return draft is not None or heads_stand_in or not mode_needs_draft_model(mode)

        self.modes = [m for m in config.modes if runnable(m)]
        if len(self.modes) < len(config.modes):
            log.warning("no draft model or no trained heads: skipping %s",
                        ", ".join(sorted(set(config.modes) - set(self.modes))))

    # -- prompts ----------------------------------------------------------------------
    def prompt(self, hole: Hole) -> HolePrompt:
        from engine.text.prompt import ContextBudget, build_prompt

        budget = ContextBudget(self.config.prefix_tokens, self.config.suffix_tokens, 0)
        parts = build_prompt(self.tokenizer, self.template, hole.prefix, hole.suffix, path=hole.path, budget=budget)
        return HolePrompt(hole, parts.token_ids, parts.token_streams)

    # -- one run ----------------------------------------------------------------------
    def run(self, mode: str, prompt: HolePrompt, max_new_tokens: int, index: int) -> Run:
        if mode.startswith("hf-"):
            return run_hf(self, mode, prompt, max_new_tokens, index)
        return run_quickdraft(self, mode, prompt, max_new_tokens, index)

    def cold_cache(self, model):
        """The KV cache the engine uses on this device (static + CUDA graphs on CUDA), emptied: one
        per model, so graphs are captured once, and every run still starts cold."""
        from engine.decoding.kv_static import cache_factory

        cache = self._caches.get(id(model))
        if cache is None:
            cache = self._caches[id(model)] = cache_factory(next(model.parameters()).device)(model)
        cache.crop(0)
        return cache

    def drafter_for(self, mode: str) -> tuple[str, DrafterConfig]:
        """(drafter mode, its config) of a quickdraft mode ("quickdraft-hybrid+tuned" → hybrid, tuned)."""
        name = mode.removesuffix(TUNED).removeprefix("quickdraft-")
        if not mode.endswith(TUNED):
            return name, self.config.drafters
        if self.config.tuned is None:
            raise ValueError(f"mode {mode} needs EngineBenchConfig.tuned")
        return name, self.config.tuned

    def drafter_configs(self) -> dict[str, dict]:
        """What each quickdraft mode ran with, for the result's config."""
        return {mode: asdict(self.drafter_for(mode)[1]) for mode in self.modes if mode.startswith("quickdraft-")}

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



# ----------------------------------------------------------------------------- the result


def _model_info(loaded) -> dict | None:
    if loaded is None:
        return None
    params = sum(p.numel() for p in loaded.model.parameters())
    return {"name": loaded.name, "path": str(loaded.path) if loaded.path else None, "parameters": params,
            "layers": getattr(loaded.model.config, "num_hidden_layers", None), "dtype": str(loaded.dtype)}


def environment(verifier=None, draft=None) -> dict:
    """The machine, plus what decides decoding speed on it: CPU features, GPU, torch, the models."""
    import torch
    import transformers

    from engine.models.loading import _cpu_flags

    flags = _cpu_flags()
    env = machine() | {
        "cpu_features": sorted(f for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if verifier is not None:
        env.update(device=str(verifier.device), dtype=str(verifier.dtype).removeprefix("torch."),
                   verifier=_model_info(verifier), draft=_model_info(draft))
    return env


def run_engine_bench(verifier, draft, holes: Sequence[Hole], config: EngineBenchConfig) -> dict:
    """Run every mode on every hole; return the JSON-ready result (see `figures.summarize`)."""
    env = environment(verifier, draft)
    bench = EngineBench(verifier, draft, config)
    runs = bench.run_all(holes)
    env["load_average_end"] = load_average()
    prompts = [bench.prompt(h) for h in holes]
    config_dict = asdict(replace(config, modes=list(bench.modes)))
    config_dict.pop("progress", None)
    config_dict["drafters_per_mode"] = bench.drafter_configs()
    config_dict["hf_assisted"] = "transformers defaults (num_assistant_tokens 20, constant schedule, " \
                                 "assistant_confidence_threshold 0.4 re-fit online)"
    config_dict["cache"] = "cold for every run: a fresh decoder and drafter per prompt and mode"
    modes = summarize(runs, bench.modes, len(holes))
    exact_modes = [m for m in modes if m["name"].startswith("quickdraft-")]
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
        "runs": [{**asdict(r), "tokens_per_s": round_or_none(r.tokens_per_s),
                  "decode_tokens_per_s": round_or_none(r.decode_tokens_per_s), "tau": round_or_none(r.tau)}
                 for r in runs],
    }
