"""`quickdraft bench passes`: what one pass costs, today's eager path against the fast one.

Models are built with random weights and the exact Qwen2.5-Coder shapes
(engine/bench/model_configs.py), so the run needs no download and a pass costs what the real
model's does. In one process, for each model:

- per pass of k+1 ∈ {1, 2, 4, 8, 16} tokens at 512 and 2,048 tokens of context: `eager`
  (the dynamic cache, Hugging Face's forward as the CPU runs it) against `fast` (the static
  cache; on CUDA its passes replay captured graphs; elsewhere the same bucketed computation);
  on the CPU also `decode`: the eager path with the attention CPU models are loaded with
  (engine/models/cpu_attention.py; eager and fast run SDPA);
- a draft token as the draft model makes it (one-token pass, softmax, argmax to the host), and
  with `draft_loop_ks`, as the draft loop makes it (k tokens on the device, one transfer; on CUDA
  one captured graph), beside token by token through the real drafter (engine/bench/pass_draft_loops.py);
- prefill tokens/s (a whole context in one forward, and in the decoder's 128-token chunks);
- 64-token decodes replayed with a fixed acceptance pattern (τ as measured on the CPU with the
  real pair), through the real draft-model drafter and the real acceptance code.

`fast` may also be the compiled step ("compiled", engine/decoding/compiled_step.py), or several
fast paths side by side (`fast_modes`): every figure is then one row per fast path, each beside
the same eager figure. With `measure` holding "profile", one pass of each path is profiled
(kernels on CUDA, ops elsewhere; the five that took longest); with "ops", ops per pass are counted,
eager against the compiled step (engine/bench/pass_ops.py; on the CPU); without "times" nothing
is timed. The device run (engine/bench/device_run.py) is a preset of all of this.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import torch

from engine.decoding import cuda_graphs
from engine.bench.model_configs import DRAFT, VERIFIERS, config_for
from engine.bench.pass_draft_loops import measure_draft_loops
from engine.bench.pass_ops import measure_ops, profile_paths, random_tokens
from engine.bench.pass_replays import REPLAYS, Replay, replay_decode
from engine.bench.pass_targets import targets
from engine.decoding.compiled_step import CompiledKVCache
from engine.decoding.kv import PREFILL_CHUNK, KVCache
from engine.decoding.kv_static import BUCKETS, StaticKVCache
from engine.models.cpu_attention import NAME as DECODE_ATTENTION, attention_implementation
from engine.models.loading import describe_precision
from engine.models.quantize import quantize_weights

log = logging.getLogger(__name__)


@dataclass
class PassesBenchConfig:
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    weights: str | None = None  # "int8" or "int4" weights (engine/models/quantize.py), activations in dtype
    quick: bool = False
    verifiers: tuple[str, ...] | None = None  # None: VERIFIERS["quick" or "full"]; (): the draft model alone
    contexts: tuple[int, ...] = (512, 2048)
    sizes: tuple[int, ...] = BUCKETS
    repeats: int = 20
    new_tokens: int = 64
    # StaticKVCache modes (graphs on CUDA, bucketed elsewhere) and/or "compiled"; (): the captured path
    fast_modes: tuple[str, ...] = ()
    measure: tuple[str, ...] = ("times",)  # "times": timings, replays; "profile": one pass profiled; "ops"
    ops_sizes: tuple[int, ...] = (1, 8)  # pass sizes profiled or whose ops are counted, at the shortest context
    prefill_contexts: tuple[int, ...] | None = None  # cold prompts read (None: the contexts)
    prefill_repeats: int = 1  # timed reads of each, the median counts (more than one: after an untimed one)
    compiled_buckets: tuple[int, ...] = BUCKETS  # pass sizes the compiled step compiles (longer: uncompiled)
    draft_loop_ks: tuple[int, ...] = ()  # the draft model's k-token loops timed, at the shortest context
    decode_attention: bool = True  # on the CPU, also the eager path with the CPU's decode attention
    keep_going: bool = False  # a model or path that fails is an entry in "errors", and the run goes on
    preset: str | None = None
    seed: int = 0
    replays: tuple[Replay, ...] = field(default=REPLAYS)

    def resolved_fast_modes(self) -> tuple[str, ...]:
        """The fast paths by name: the static cache's eager mode is "static-eager" ("eager" is the dynamic cache)."""
        modes = self.fast_modes or ("graphs" if torch.device(self.device).type == "cuda" else "bucketed",)
        return tuple("static-eager" if mode == "eager" else mode for mode in modes)


def build_model(name: str, device: str, dtype: torch.dtype, seed: int = 0, weights: str | None = None):
    """A Qwen2 causal LM with `name`'s exact shape and random weights, built on `device`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters are created in dtype: no float32 copy of a 7B model
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(Qwen2Config(**config_for(name))).eval()
    finally:
        torch.set_default_dtype(previous)
    if weights:
        quantize_weights(model, weights)
    return model


class Timer:
    """Wall time of a call on `device`, the queue drained before and after (per-pass latency)."""

    def __init__(self, device) -> None:
        self.device = torch.device(device)

    def __call__(self, run: Callable[[], object]) -> float:
        cuda_graphs.synchronize(self.device)
        started = time.perf_counter()
        run()
        cuda_graphs.synchronize(self.device)
        return (time.perf_counter() - started) * 1000


def open_fast_path(model, mode: str, config: PassesBenchConfig) -> tuple[object, float]:
    """The cache measured as fast path `mode`, warmed (graphs captured, or compiled for the pass sizes
    after the contexts measured): the cache and the seconds warming took."""
    if mode == "compiled":
        cache = CompiledKVCache(model, buckets=config.compiled_buckets)
        return cache, cache.warm(contexts=config.contexts)
    # The engine's default capacity: a pass attends over the whole buffer, as it will in use.
    cache = StaticKVCache(model, mode=mode.removeprefix("static-"))
    return cache, cache.warm()


def measure_passes(name: str, model, paths: dict[str, object], config: PassesBenchConfig, timer: Timer,
                   rng: torch.Generator) -> tuple[list[dict], list[dict]]:
    """Per-pass and draft-token figures of one model: `paths` holds "eager" (the dynamic cache) and
    each fast path's warmed cache; a row per fast path, beside the eager figure."""
    fast = [path for path in paths if path != "eager"]
    attention = {path: "sdpa" for path in paths}  # each path's attention
    if torch.device(config.device).type == "cpu" and config.decode_attention:
        attention["decode"] = DECODE_ATTENTION  # the eager cache, attending as CPU models are loaded
    records, draft_steps = [], []
    for context in config.contexts:
        prompt = random_tokens(model, context, rng)
        for cache in paths.values():
            cache.prefill(prompt, chunk=None)
        for size in config.sizes:
            times: dict[str, list[float]] = {path: [] for path in attention}
            for repeat in range(config.repeats + 2):  # two untimed: allocator and kernel choice settle
                fed = random_tokens(model, size, rng)
                for path, implementation in attention.items():
                    cache = paths["eager" if path == "decode" else path]
                    with attention_implementation(model, implementation):
                        elapsed = timer(partial(cache.forward, fed))
                    cache.crop(context)
                    if repeat >= 2:
                        times[path].append(elapsed)
            records += [_record(name, context, size, times, mode, decode=i == 0) for i, mode in enumerate(fast)]
        steps = {path: [] for path in paths}
        for repeat in range(config.repeats + 2):
            for path, cache in paths.items():
                elapsed = timer(partial(_draft_step, cache, random_tokens(model, 1, rng)))
                cache.crop(context)
                if repeat >= 2:
                    steps[path].append(elapsed)
        draft_steps += [{"model": name, "context": context, "fast_mode": mode, "eager_ms": statistics.median(steps["eager"]),
                         "fast_ms": statistics.median(steps[mode])} for mode in fast]
    return records, draft_steps


def measure_prefill(name: str, model, paths: dict[str, object], config: PassesBenchConfig, timer: Timer,
                    rng: torch.Generator) -> list[dict]:
    """Cold prompts (nothing cached) read in one forward and in the decoder's 128-token chunks."""
    rows = []
    for context in config.prefill_contexts or config.contexts:
        prompt = random_tokens(model, context, rng)
        for chunk in (None, PREFILL_CHUNK):
            ms = {path: _prefill_ms(cache, prompt, chunk, config.prefill_repeats, timer)
                  for path, cache in paths.items()}
            rows += [{"model": name, "context": context, "chunk": chunk or context, "fast_mode": mode,
                      "eager_ms": ms["eager"], "fast_ms": ms[mode], "eager_tokens_per_s": context / ms["eager"] * 1000,
                      "fast_tokens_per_s": context / ms[mode] * 1000} for mode in paths if mode != "eager"]
    return rows


def _prefill_ms(cache, prompt: list[int], chunk: int | None, repeats: int, timer: Timer) -> float:
    times = []
    for run in range(repeats + (repeats > 1)):  # more than one: the first is untimed
        cache.crop(0)
        elapsed = timer(partial(cache.prefill, prompt, chunk=chunk))
        if repeats == 1 or run > 0:
            times.append(elapsed)
    return statistics.median(times)


def _record(name: str, context: int, size: int, times: dict[str, list[float]], mode: str, decode: bool) -> dict:
    eager, fast = statistics.median(times["eager"]), statistics.median(times[mode])
    record = {"model": name, "context": context, "pass_tokens": size, "k": size - 1, "fast_mode": mode,
              "eager_ms": eager, "fast_ms": fast, "speedup": eager / fast if fast > 0 else None,
              "eager_ms_p90": _p90(times["eager"]), "fast_ms_p90": _p90(times[mode])}
    if decode and times.get("decode"):  # with several fast paths, once: beside the first
        record["decode_ms"] = statistics.median(times["decode"])
        record["decode_speedup"] = eager / record["decode_ms"]
    return record


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def _draft_step(cache, token: list[int]) -> int:
    """What the draft model does per token: a one-token pass, its distribution, the token to the host."""
    probs = cache.forward(token)[-1].softmax(dim=-1)
    return int(probs.argmax())


def _sync_free(cache, model, rng: torch.Generator, context: int) -> bool | str:
    """On CUDA: does a fast pass run with synchronising operations made errors? (Elsewhere: n/a.)"""
    if cache.device.type != "cuda":
        return "n/a (not CUDA)"
    tokens = random_tokens(model, 4, rng)
    try:
        with cuda_graphs.no_host_sync(cache.device):
            cache.forward(tokens)
        return True
    except RuntimeError as error:
        return f"no: {error}"
    finally:
        cuda_graphs.synchronize(cache.device)
        cache.crop(context)


def run_passes_bench(config: PassesBenchConfig, progress: Callable[[str], None] = log.info,
                     checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Everything above, model by model (the draft model and its caches stay for the replays);
    `checkpoint` gets the result so far after each model."""
    from engine.bench.decode import environment

    kind = "quick" if config.quick else "full"
    verifiers = VERIFIERS[kind] if config.verifiers is None else config.verifiers
    for name in verifiers:
        config_for(name)  # an unknown name fails now, not after the draft model's figures
    started = time.perf_counter()

    def say(text: str) -> None:
        progress(f"[{time.perf_counter() - started:4.0f} s] {text}")

    run = _Run(config, Timer(config.device), torch.Generator().manual_seed(config.seed), say)
    result = run.result = {"environment": environment(), "config": _describe(config, verifiers), "records": [],
                           "draft_steps": [], "draft_loops": [], "prefill": [], "warmup_s": {}, "fast_mode_used": {},
                           "replays": [], "profiles": [], "ops": [], "errors": [], "seconds": {}}
    result["environment"].update(device=config.device, dtype=_precision(config))
    draft_name = DRAFT[kind]
    for name in (draft_name, *verifiers):
        model_started = time.perf_counter()
        run.guarded(name, partial(run.model, name, draft_name))
        result["seconds"][name] = time.perf_counter() - model_started
        gc.collect()  # a verifier's weights and caches go before the next is built
        if torch.device(config.device).type == "cuda":
            torch.cuda.empty_cache()
        if checkpoint is not None:
            checkpoint(result)
    if run.draft is not None:
        run.guarded(f"{draft_name} (host sync check)", partial(run.check_sync, draft_name, run.draft, run.draft_paths))
    result["targets"] = targets(result) if torch.device(config.device).type == "cuda" else []
    result["seconds"]["total"] = time.perf_counter() - started
    return result


class _Run:
    """One run's state: the timer and random tokens, the result so far, the draft model and its caches."""

    def __init__(self, config: PassesBenchConfig, timer: Timer, rng: torch.Generator, say: Callable) -> None:
        self.config, self.timer, self.rng, self.say = config, timer, rng, say
        self.result: dict = {}
        self.draft = None
        self.draft_paths: dict[str, object] = {}

    def model(self, name: str, draft_name: str) -> None:
        """Every figure `config.measure` asks for, of one model (kept, when it is the draft model)."""
        config, result = self.config, self.result
        self.say(f"building {name} (random weights)")
        model = build_model(name, config.device, config.dtype, config.seed, config.weights)
        paths = self.open_paths(name, model) if {"times", "profile"} & set(config.measure) else {}
        if name == draft_name:
            self.draft, self.draft_paths = model, paths
        if "times" in config.measure:
            self.say(f"{name}: passes, draft steps, prefill")
            records, steps = measure_passes(name, model, paths, config, self.timer, self.rng)
            result["records"] += records
            result["draft_steps"] += steps
            if name == draft_name and config.draft_loop_ks:
                self.say(f"{name}: draft loops of k = {', '.join(map(str, config.draft_loop_ks))}")
                result["draft_loops"] += measure_draft_loops(name, model, paths, config.draft_loop_ks,
                                                             min(config.contexts), config.repeats, self.timer, self.rng)
            result["prefill"] += measure_prefill(name, model, paths, config, self.timer, self.rng)
            if name != draft_name and self.draft is not None:
                self.say(f"{name}: replayed {config.new_tokens}-token decodes")
                result["replays"] += self.replays(name, model, paths)
        if "profile" in config.measure:
            self.say(f"{name}: one pass of each path under the profiler")
            result["profiles"] += profile_paths(name, model, paths, min(config.contexts), config.ops_sizes, self.rng)
        if "ops" in config.measure:
            self.say(f"{name}: ops per pass, eager vs compiled (compiling)")
            result["ops"] += measure_ops(name, model, min(config.contexts), config.ops_sizes, self.rng)
        if name != draft_name:
            self.check_sync(name, model, paths)

    def check_sync(self, name: str, model, paths: dict[str, object]) -> None:
        """On CUDA, a short pass of each fast path with synchronising operations made errors, once no
        figure depends on its caches any more (the draft model's: at the end of the run), so that a
        check that fails halfway through a pass cannot disturb one."""
        for record in self.result["records"]:
            if record["model"] == name and record["pass_tokens"] == 1:
                cache, context = paths[record["fast_mode"]], record["context"]
                if cache.device.type != "cuda":
                    record["host_sync_free"] = "n/a (not CUDA)"
                    continue
                cache.prefill(random_tokens(model, context, self.rng), chunk=None)
                record["host_sync_free"] = _sync_free(cache, model, self.rng, context)

    def guarded(self, what: str, work: Callable[[], None]) -> None:
        """`work()`; with keep_going, an exception is an entry in "errors" and the run goes on."""
        try:
            work()
        except Exception as error:  # noqa: BLE001 — with keep_going, one figure lost is not the run lost
            if not self.config.keep_going:
                raise
            log.exception("%s failed", what)
            self.result["errors"].append(f"{what}: {type(error).__name__}: {error}")

    def open_paths(self, name: str, model) -> dict[str, object]:
        """The eager cache and each fast path's, warmed; with keep_going, a path that fails to warm
        is an error and the others go on."""
        paths: dict[str, object] = {"eager": KVCache(model)}
        warmup, used = self.result["warmup_s"].setdefault(name, {}), self.result["fast_mode_used"].setdefault(name, {})
        for mode in self.config.resolved_fast_modes():
            self.say(f"{name}: warming the {mode} path")

            def warm(mode: str = mode) -> None:
                paths[mode], warmup[mode] = open_fast_path(model, mode, self.config)
                used[mode] = paths[mode].mode  # "eager" after a failed capture (logged)

            self.guarded(f"{name} {mode} (warming)", warm)
        return paths

    def replays(self, name: str, verifier, paths: dict[str, object]) -> list[dict]:
        """Each replay on the eager path (fresh dynamic caches) and on each fast path (its warmed caches)."""
        config, context = self.config, min(self.config.contexts)
        rows = []
        for replay in config.replays:
            def run(factory, replay=replay):
                return replay_decode(verifier, self.draft, replay, factory, context, config.new_tokens, self.rng,
                                     self.timer)

            eager = run(KVCache)
            for mode in paths:
                if mode == "eager" or (replay.draft_model and mode not in self.draft_paths):
                    continue
                caches = {id(verifier): paths[mode], id(self.draft): self.draft_paths.get(mode)}
                fast = run(lambda model, caches=caches: caches[id(model)])
                rows.append({"verifier": name, "context": context, "name": replay.name, "tau": replay.tau,
                             "draft_tokens": replay.draft_tokens, "fast_mode": mode, "passes": fast["passes"],
                             "new_tokens": fast["new_tokens"], "eager_ms": eager["ms"], "fast_ms": fast["ms"]})
        return rows


def _precision(config: PassesBenchConfig) -> str:
    return describe_precision(config.dtype, config.weights)


def _describe(config: PassesBenchConfig, verifiers) -> dict:
    return {"preset": config.preset, "device": config.device, "dtype": _precision(config), "quick": config.quick,
            "draft": DRAFT["quick" if config.quick else "full"], "verifiers": list(verifiers),
            "contexts": list(config.contexts), "pass_tokens": list(config.sizes), "repeats": config.repeats,
            "fast_modes": list(config.resolved_fast_modes()), "new_tokens": config.new_tokens,
            "measure": list(config.measure), "ops_sizes": list(config.ops_sizes),
            "prefill_contexts": list(config.prefill_contexts or config.contexts),
            "prefill_repeats": config.prefill_repeats, "compiled_buckets": list(config.compiled_buckets),
            "draft_loop_ks": list(config.draft_loop_ks),
            "replays": [r.__dict__ for r in config.replays]}
