"""`quickdraft bench passes`: what one pass costs, today's eager path against the fast one.

Models are built with random weights and the exact Qwen2.5-Coder shapes
(engine/bench/model_configs.py), so the run needs no download and a pass costs what the real
model's does. In one process, for each model:

- per pass of k+1 ∈ {1, 2, 4, 8, 16} tokens at 512 and 2,048 tokens of context: `eager`
  (the dynamic cache, Hugging Face's forward as the CPU runs it) against `fast` (the static
  cache; on CUDA its passes replay captured graphs; elsewhere the same bucketed computation);
  on the CPU also `decode`: the eager path with the attention CPU models are loaded with
  (engine/models/cpu_attention.py; eager and fast run SDPA);
- a draft token as the draft model makes it (one-token pass, softmax, argmax to the host);
- prefill tokens/s (a whole context in one forward, and in the decoder's 128-token chunks);
- 64-token decodes replayed with a fixed acceptance pattern (τ as measured on the CPU with the
  real pair), through the real draft-model drafter and the real acceptance code.

`fast` may also be the compiled step (`fast_mode="compiled"`, engine/decoding/compiled_step.py).
With `measure` holding "ops", each model's ops per pass are counted too, eager against the
compiled step (engine/bench/pass_ops.py; on the CPU); without "times" nothing is timed.
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
from engine.bench.pass_ops import measure_ops
from engine.decoding.compiled_step import CompiledKVCache
from engine.drafters.draft_model import DraftModelDrafter
from engine.decoding.kv import PREFILL_CHUNK, KVCache
from engine.decoding.kv_static import BUCKETS, StaticKVCache
from engine.models.cpu_attention import NAME as DECODE_ATTENTION, attention_implementation
from engine.models.loading import describe_precision
from engine.models.quantize import quantize_weights
from engine.decoding.verify import SamplingParams, greedy_accept

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replay:
    """A 64-token completion replayed with a fixed acceptance pattern."""

    name: str
    tau: float  # tokens per verifier pass: accepted drafts + 1
    draft_tokens: int  # k per pass
    draft_model: bool  # drafts from the draft model (each costs a pass) or free (prompt lookup)


SERVER_OVERHEAD_MS = 3.0  # docs/benchmarks.md, typing session: a type-through answer takes ~3 ms end to end

# τ measured on the CPU with the real pair, bf16 (docs/benchmarks.md): lookup 2.48, hybrid 3.00.
REPLAYS = (
    Replay("plain", 1.0, 0, False),
    Replay("lookup", 2.48, 8, False),
    Replay("draft", 3.0, 4, True),
)


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
    fast_mode: str | None = None  # StaticKVCache mode (graphs on CUDA, bucketed elsewhere) or "compiled"
    measure: tuple[str, ...] = ("times",)  # "times": per-pass timings, replays; "ops": ops per pass
    ops_sizes: tuple[int, ...] = (1, 8)  # pass sizes whose ops are counted, at the shortest context
    seed: int = 0
    replays: tuple[Replay, ...] = field(default=REPLAYS)

    def resolved_fast_mode(self) -> str:
        return self.fast_mode or ("graphs" if torch.device(self.device).type == "cuda" else "bucketed")


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


def random_tokens(model, n: int, generator: torch.Generator) -> list[int]:
    return torch.randint(0, model.config.vocab_size, (n,), generator=generator).tolist()


def fast_cache(model, mode: str):
    """The cache measured as `fast`: the static one in `mode`, or the compiled step (not yet warmed)."""
    if mode == "compiled":
        return CompiledKVCache(model)
    # The engine's default capacity: a pass attends over the whole buffer, as it will in use.
    return StaticKVCache(model, mode=mode)


def caches(model, config: PassesBenchConfig) -> dict[str, object]:
    """Both caches of one model: today's dynamic cache and the fast one."""
    return {"eager": KVCache(model), "fast": fast_cache(model, config.resolved_fast_mode())}


def measure_passes(name: str, model, config: PassesBenchConfig, timer: Timer, rng: torch.Generator) -> dict:
    """Per-pass, draft-token and prefill figures of one model, eager against fast."""
    by_path = caches(model, config)
    warmup_s = by_path["fast"].warm()
    attention = {"eager": "sdpa", "fast": "sdpa"}  # each path's attention
    if torch.device(config.device).type == "cpu":
        attention["decode"] = DECODE_ATTENTION  # the eager cache, attending as CPU models are loaded
    records, draft_steps, prefills = [], [], []
    for context in config.contexts:
        prompt = random_tokens(model, context, rng)
        prefill_ms = {}
        for path, cache in by_path.items():
            for chunk in (None, PREFILL_CHUNK):
                cache.crop(0)
                prefill_ms[path, chunk] = timer(partial(cache.prefill, prompt, chunk=chunk))
        for chunk in (None, PREFILL_CHUNK):
            prefills.append({"model": name, "context": context, "chunk": chunk or context,
                             "eager_tokens_per_s": context / prefill_ms["eager", chunk] * 1000,
                             "fast_tokens_per_s": context / prefill_ms["fast", chunk] * 1000})
        for size in config.sizes:
            times: dict[str, list[float]] = {path: [] for path in attention}
            for repeat in range(config.repeats + 2):  # two untimed: allocator and kernel choice settle
                fed = random_tokens(model, size, rng)
                for path, implementation in attention.items():
                    cache = by_path["eager" if path == "decode" else path]
                    with attention_implementation(model, implementation):
                        elapsed = timer(partial(cache.forward, fed))
                    cache.crop(context)
                    if repeat >= 2:
                        times[path].append(elapsed)
            records.append(_record(name, context, size, times))
            if size == 1:
                records[-1]["host_sync_free"] = _sync_free(by_path["fast"], model, rng, context)
        steps = {path: [] for path in by_path}
        for repeat in range(config.repeats + 2):
            for path, cache in by_path.items():
                elapsed = timer(partial(_draft_step, cache, random_tokens(model, 1, rng)))
                cache.crop(context)
                if repeat >= 2:
                    steps[path].append(elapsed)
        draft_steps.append({"model": name, "context": context, "eager_ms": statistics.median(steps["eager"]),
                            "fast_ms": statistics.median(steps["fast"])})
    return {"records": records, "draft_steps": draft_steps, "prefill": prefills, "warmup_s": warmup_s,
            "fast_mode": by_path["fast"].mode}  # "eager" after a failed capture (logged)


def _record(name: str, context: int, size: int, times: dict[str, list[float]]) -> dict:
    eager, fast = statistics.median(times["eager"]), statistics.median(times["fast"])
    record = {"model": name, "context": context, "pass_tokens": size, "k": size - 1, "eager_ms": eager,
              "fast_ms": fast, "speedup": eager / fast if fast > 0 else None,
              "eager_ms_p90": _p90(times["eager"]), "fast_ms_p90": _p90(times["fast"])}
    if times.get("decode"):
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


def _sync_free(cache: StaticKVCache, model, rng: torch.Generator, context: int) -> bool | str:
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


def replay_decode(verifier, draft, replay: Replay, factory: Callable, context: int, new_tokens: int,
                  rng: torch.Generator, timer: Timer) -> dict:
    """Decode `new_tokens` like the decoder does — the prompt's forward gives the first token, then
    draft → verify `[last, d1..dk]` → accept → crop — except that the number of drafts kept
    follows the pattern of `replay.tau` instead of the random models' (dis)agreement."""
    vcache = factory(verifier)
    drafter = (DraftModelDrafter(draft, max_tokens=replay.draft_tokens, initial_length=replay.draft_tokens,
                                 confidence_threshold=0.0, kv_factory=factory) if replay.draft_model else None)
    prompt = random_tokens(verifier, context, rng)
    vcache.prefill(prompt[:-1], chunk=None)
    if drafter is not None:
        drafter.kv.prefill(prompt[:-1], chunk=None)  # both caches warm with the context, as after a keystroke
    greedy = SamplingParams()
    passes, emitted = 0, []

    def decode() -> None:
        nonlocal passes
        tokens = list(prompt)
        logits, _ = vcache.prefill(tokens, chunk=None)
        emitted.append(greedy_accept([], logits[None])[1])
        tokens.append(emitted[-1])
        while len(emitted) < new_tokens:
            k = min(replay.draft_tokens, new_tokens - len(emitted) - 1)
            if drafter is not None and k > 0:
                drafts = drafter.propose(tokens, k, greedy).tokens[:k]
            else:
                drafts = random_tokens(verifier, k, rng)  # prompt lookup: drafts cost nothing
            logits = vcache.forward([tokens[-1], *drafts])
            _, token = greedy_accept(drafts, logits)  # the real decision and its one transfer
            kept = min(k, _accepted(passes, replay.tau))
            vcache.crop(len(tokens) + kept)
            new = [*drafts[:kept], token]
            tokens += new
            emitted.extend(new)
            passes += 1

    elapsed = timer(decode)
    return {"name": replay.name, "tau": replay.tau, "draft_tokens": replay.draft_tokens, "passes": passes + 1,
            "new_tokens": len(emitted), "ms": elapsed}


def _accepted(index: int, tau: float) -> int:
    """Drafts kept in pass `index`: an even spread whose mean is τ − 1."""
    return int((index + 1) * (tau - 1)) - int(index * (tau - 1))


def run_passes_bench(config: PassesBenchConfig, progress: Callable[[str], None] = log.info) -> dict:
    """Everything above, model by model (the draft model stays loaded for the replays)."""
    from engine.bench.decode import environment

    kind = "quick" if config.quick else "full"
    verifiers = VERIFIERS[kind] if config.verifiers is None else config.verifiers
    for name in verifiers:
        config_for(name)  # an unknown name fails now, not after the draft model's figures
    rng = torch.Generator().manual_seed(config.seed)
    timer = Timer(config.device)
    result: dict = {"environment": environment(), "config": _describe(config, verifiers),
                    "records": [], "draft_steps": [], "prefill": [], "warmup_s": {}, "fast_mode_used": {},
                    "replays": [], "ops": []}
    result["environment"].update(device=config.device, dtype=_precision(config))
    draft_name = DRAFT[kind]
    progress(f"building {draft_name} (random weights)")
    draft = build_model(draft_name, config.device, config.dtype, config.seed, config.weights)
    for name in (draft_name, *verifiers):
        model = draft if name == draft_name else build_model(name, config.device, config.dtype, config.seed, config.weights)
        if "times" in config.measure:
            _time_model(name, model, draft if name != draft_name else None, config, timer, rng, result, progress)
        if "ops" in config.measure:
            progress(f"{name}: ops per pass, eager vs compiled (compiling)")
            result["ops"] += measure_ops(name, model, min(config.contexts), config.ops_sizes, rng)
        if name != draft_name:
            del model
            gc.collect()
            if torch.device(config.device).type == "cuda":
                torch.cuda.empty_cache()
    result["targets"] = targets(result) if torch.device(config.device).type == "cuda" else []
    return result


def _time_model(name: str, model, draft, config: PassesBenchConfig, timer: Timer, rng: torch.Generator,
                result: dict, progress: Callable[[str], None]) -> None:
    """Per-pass, draft-step and prefill timings into `result`; replayed decodes for a verifier."""
    progress(f"{name}: passes, draft steps, prefill")
    figures = measure_passes(name, model, config, timer, rng)
    for key in ("records", "draft_steps", "prefill"):
        result[key] += figures[key]
    result["warmup_s"][name] = figures["warmup_s"]
    result["fast_mode_used"][name] = figures["fast_mode"]
    if draft is not None:
        progress(f"{name}: replayed {config.new_tokens}-token decodes")
        result["replays"] += _replays(name, model, draft, config, timer, rng)


def _replays(name: str, verifier, draft, config: PassesBenchConfig, timer: Timer, rng) -> list[dict]:
    context = min(config.contexts)
    fast_mode = config.resolved_fast_mode()
    factories = {"eager": KVCache, "fast": lambda model: _warm(fast_cache(model, fast_mode))}
    rows = []
    for replay in config.replays:
        runs = {path: replay_decode(verifier, draft, replay, factory, context, config.new_tokens, rng, timer)
                for path, factory in factories.items()}
        rows.append({"verifier": name, "context": context, "name": replay.name, "tau": replay.tau,
                     "draft_tokens": replay.draft_tokens, "passes": runs["fast"]["passes"],
                     "new_tokens": runs["fast"]["new_tokens"], "eager_ms": runs["eager"]["ms"],
                     "fast_ms": runs["fast"]["ms"]})
    return rows


def _warm(cache):
    cache.warm()
    return cache


def _precision(config: PassesBenchConfig) -> str:
    return describe_precision(config.dtype, config.weights)


def _describe(config: PassesBenchConfig, verifiers) -> dict:
    return {"device": config.device, "dtype": _precision(config), "quick": config.quick,
            "draft": DRAFT["quick" if config.quick else "full"], "verifiers": list(verifiers),
            "contexts": list(config.contexts), "pass_tokens": list(config.sizes), "repeats": config.repeats,
            "fast_mode": config.resolved_fast_mode(), "new_tokens": config.new_tokens,
            "measure": list(config.measure), "ops_sizes": list(config.ops_sizes),
            "replays": [r.__dict__ for r in config.replays]}


def targets(result: dict) -> list[dict]:
    """The issue's H200 targets, each with the measured value."""
    def record(model, context, size):
        return next((r for r in result["records"]
                     if r["model"] == model and r["context"] == context and r["pass_tokens"] == size), None)

    rows = []
    verify = record("qwen2.5-coder-1.5b", 512, 8)
    if verify:
        rows.append(_target("1.5B pass, k+1 = 8, 512 context: fast ≤ 3 ms", verify["fast_ms"], verify["fast_ms"] <= 3))
        rows.append(_target("… and ≥ 5× faster than eager", verify["speedup"], verify["speedup"] >= 5))
    step = next((d for d in result["draft_steps"] if d["model"] == "qwen2.5-coder-0.5b" and d["context"] == 512), None)
    if step:
        rows.append(_target("0.5B draft token ≤ 1.5 ms", step["fast_ms"], step["fast_ms"] <= 1.5))
    replay = next((r for r in result["replays"] if r["verifier"] == "qwen2.5-coder-1.5b" and r["name"] == "draft"), None)
    if replay:
        rows.append(_target("64 tokens at τ = 3 (1.5B + 0.5B draft) ≤ 40 ms", replay["fast_ms"], replay["fast_ms"] <= 40))
        # A keystroke on a warm cache feeds its token with the first draft, then decodes: the replay,
        # plus the server's own time (a type-through answer, all protocol and no model: ~3 ms).
        projected = replay["fast_ms"] + SERVER_OVERHEAD_MS
        rows.append(_target("projected session p50 (that completion + 3 ms of server) ≤ 50 ms", projected,
                            projected <= 50))
    return rows


def _target(text: str, value: float, met: bool) -> dict:
    return {"target": text, "value": value, "met": bool(met)}
