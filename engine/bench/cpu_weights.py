"""What each weight format costs a CPU decoding pass: `quickdraft bench passes --device cpu
--compare-weights int8,int4,float`; and what a cold prompt chunk costs with each matmul that
multiplies chunks by the float weights (ATen's, oneDNN's), on the first quantized format.

Each model (random weights, the real shapes: a pass costs the same whatever the values) is built
once in float and given each format on a copy that shares its float weights; the passes of the
formats take turns, so a busy machine slows them alike. A pass is the engine's: the dynamic KV
cache after a prompt, the CPU's decode attention, k + 1 tokens fed.
"""

from __future__ import annotations

import copy
import gc
import logging
import statistics
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch

from engine.decoding.kv import KVCache
from engine.models.cpu_attention import use_decode_attention
from engine.models.quantize import PROMPT_MATMULS, Int8Linear, QuantizedLinear, quantize_weights

log = logging.getLogger(__name__)

FLOAT = "float"  # the float weights: the activations' dtype
# int8 weights as the engine read them until 2026-12-07: the kernel fed the model's float32 rows.
INT8_FLOAT32_ROWS = "int8-f32rows"


@dataclass
class WeightsBenchConfig:
    models: tuple[str, ...] = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
    formats: tuple[str, ...] = ("int8", "int4", FLOAT)
    dtype: torch.dtype = torch.float32  # of the activations (and the float weights)
    context: int = 512
    sizes: tuple[int, ...] = (1, 2, 4, 8)  # tokens a pass feeds: k + 1
    # Cold prompt chunks: a typed line's suffix and prompt tail (17 tokens, just past PASS_PROMPT_TOKENS),
    # and the 128-token window a jump reads first.
    prompt_sizes: tuple[int, ...] = (17, 128)
    repeats: int = 9
    seed: int = 0

    @property
    def baseline(self) -> tuple[str, str]:
        """The ratios' denominator: the first model (the draft) in int8, or in its first format."""
        return self.models[0], "int8" if "int8" in self.formats else self.formats[0]


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a decoding pass reads: the quantized layers' own, every other layer's floats
    (the embedding excepted: a pass reads only its tokens' rows)."""
    total = 0
    for module in model.modules():
        if isinstance(module, QuantizedLinear):
            total += sum(b.numel() * b.element_size() for b in module.buffers(recurse=False))
        elif isinstance(module, torch.nn.Linear):
            total += module.weight.numel() * module.weight.element_size()
    return total


def with_format(model: torch.nn.Module, weights: str) -> torch.nn.Module:
    """`model` in `weights`: a copy sharing its float parameters, or itself for FLOAT."""
    if weights == FLOAT:
        return model
    variant = copy.deepcopy(model, memo={id(p): p for p in model.parameters()})
    quantize_weights(variant, weights.removesuffix("-f32rows"))
    if weights == INT8_FLOAT32_ROWS:
        for module in variant.modules():
            if isinstance(module, Int8Linear):
                module.rows_dtype = torch.float32
    return variant


def run_weights_bench(config: WeightsBenchConfig, progress: Callable[[str], None] = log.info) -> dict:
    from engine.bench.decode import environment
    from engine.bench.passes import Timer, build_model, random_tokens

    timer, rng = Timer("cpu"), torch.Generator().manual_seed(config.seed)
    rows: list[dict] = []
    prompt_rows: list[dict] = []
    for name in config.models:
        progress(f"building {name} (random weights) in {', '.join(config.formats)}")
        base = build_model(name, "cpu", config.dtype, config.seed)
        variants = {weights: with_format(base, weights) for weights in config.formats}
        caches = {}
        for weights, model in variants.items():
            use_decode_attention(model)
            caches[weights] = KVCache(model)
            caches[weights].prefill(random_tokens(model, config.context, rng))
        progress(f"{name}: passes of {', '.join(map(str, config.sizes))} tokens after {config.context}")
        times = {(weights, size): [] for weights in variants for size in config.sizes}
        for repeat in range(config.repeats + 2):  # two untimed: allocator and kernel choice settle
            for size in config.sizes:
                fed = random_tokens(base, size, rng)
                for weights, cache in caches.items():
                    elapsed = timer(partial(cache.forward, fed))
                    cache.crop(config.context)
                    if repeat >= 2:
                        times[weights, size].append(elapsed)
        rows += [{"model": name, "weights": weights, "weight_bytes": weight_bytes(model),
                  "pass_ms": {size: statistics.median(times[weights, size]) for size in config.sizes}}
                 for weights, model in variants.items()]
        quantized = next((caches[w] for w, model in variants.items() if hasattr(model, "quantized_weight_choice")), None)
        if quantized is not None and config.prompt_sizes:
            progress(f"{name}: cold prompt chunks of {', '.join(map(str, config.prompt_sizes))} tokens, "
                     f"{' and '.join(PROMPT_MATMULS)} matmuls")
            prompt_rows += _time_prompt_chunks(name, quantized, config, timer, rng)
        del base, variants, caches
        gc.collect()
    _add_ratios(rows, config.baseline)
    dtype = str(config.dtype).removeprefix("torch.")
    return {"environment": environment(), "config": {"context": config.context, "repeats": config.repeats,
                                                     "activations": dtype, "baseline": list(config.baseline)},
            "rows": rows, "prompt_chunks": prompt_rows}


def _time_prompt_chunks(name: str, cache: KVCache, config: WeightsBenchConfig, timer, rng) -> list[dict]:
    """Each chunk read cold by each prompt matmul in turn, so a busy machine slows them alike."""
    from engine.bench.passes import random_tokens

    choice = cache.model.quantized_weight_choice
    default = choice.prompt_matmul
    times = {(matmul, size): [] for matmul in PROMPT_MATMULS for size in config.prompt_sizes}
    try:
        for repeat in range(config.repeats + 1):  # one untimed
            for size in config.prompt_sizes:
                prompt = random_tokens(cache.model, size, rng)
                for matmul, multiply in PROMPT_MATMULS.items():
                    choice.prompt_matmul = multiply
                    cache.crop(0)
                    elapsed = timer(partial(cache.prefill, prompt))
                    if repeat:
                        times[matmul, size].append(elapsed)
    finally:
        choice.prompt_matmul = default
    return [{"model": name, "matmul": matmul, "default": PROMPT_MATMULS[matmul] is default,
             "chunk_ms": {size: statistics.median(times[matmul, size]) for size in config.prompt_sizes}}
            for matmul in PROMPT_MATMULS]


def _add_ratios(rows: list[dict], baseline: tuple[str, str]) -> None:
    base = next((row for row in rows if (row["model"], row["weights"]) == baseline), None)
    for row in rows:
        if base is not None:
            row["ratio"] = {size: ms / base["pass_ms"][size] for size, ms in row["pass_ms"].items()}


def format_weights_table(result: dict) -> str:
    rows = result["rows"]
    sizes = list(rows[0]["pass_ms"]) if rows else []
    model, weights = result["config"]["baseline"]
    lines = [f"Per-pass cost by weight format ({result['config']['context']} tokens before, activations "
             f"{result['config']['activations']}; ratio: against the {model.removeprefix('qwen2.5-coder-')} {weights})",
             "",
             "| model | weights | MB read | " + " | ".join(f"k+1 = {size}" for size in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]
    for row in rows:
        cells = [f"{ms:.1f} ms" + (f" ({row['ratio'][size]:.2f}x)" if "ratio" in row else "")
                 for size, ms in row["pass_ms"].items()]
        lines.append(f"| {row['model'].removeprefix('qwen2.5-coder-')} | {row['weights']} | "
                     f"{row['weight_bytes'] / 1e6:,.0f} | " + " | ".join(cells) + " |")
    chunks = result.get("prompt_chunks") or []
    if chunks:
        sizes = list(chunks[0]["chunk_ms"])
        lines += ["", "Cold prompt chunks (the float weights, each matmul in turn; * the engine's)", "",
                  "| model | matmul | " + " | ".join(f"{size} tokens" for size in sizes) + " |",
                  "|---|---|" + "---|" * len(sizes)]
        lines += [f"| {row['model'].removeprefix('qwen2.5-coder-')} | {row['matmul']}{' *' if row['default'] else ''} | "
                  + " | ".join(f"{ms:,.0f} ms" for ms in row["chunk_ms"].values()) + " |" for row in chunks]
    return "\n".join(lines)
