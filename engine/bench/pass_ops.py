"""Ops per pass: how many kernels one forward pass runs, Hugging Face's eager forward against the
compiled step (engine/decoding/compiled_step.py).

On a GPU an eager pass is bound by its kernel launches, not by its arithmetic (docs/benchmarks.md,
GPU check), so the count is the figure the compiled step must cut, and any CPU can measure it:
torch.profiler records every ATen op a pass dispatches, and each C++ kernel inductor generated
(the compiled step is built with kernel profiling on). An event counts when it does work and no
counted event encloses it: a `linear` counts once, not again for the `addmm` inside it; views,
allocations and the compiled region's own markers count nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from engine.decoding.compiled_step import CompiledKVCache
from engine.decoding.kv import KVCache

# ATen ops that only describe memory (views, metadata, allocations) or dispatch to another op
# that is counted instead (`to` → `_to_copy`, `reshape` → `clone`/`_unsafe_view`).
NO_WORK = frozenset(f"aten::{name}" for name in (
    "_reshape_alias", "_unsafe_view", "alias", "as_strided", "chunk", "contiguous", "detach", "empty",
    "empty_like", "empty_strided", "expand", "expand_as", "flatten", "lift_fresh", "narrow", "permute",
    "reshape", "resize_", "resolve_conj", "resolve_neg", "result_type", "select", "slice", "split", "squeeze",
    "t", "to", "transpose", "unbind", "unflatten", "unsqueeze", "view", "view_as",
))
GENERATED_KERNEL = re.compile(r"^graph_\d+_cpp_")  # inductor's C++ kernels, as they record themselves


def does_work(name: str) -> bool:
    if name.startswith("aten::"):
        return name not in NO_WORK
    return GENERATED_KERNEL.match(name) is not None


def counted(event) -> bool:
    """Does work, and nothing enclosing it was counted already."""
    if not does_work(event.name):
        return False
    parent = event.cpu_parent
    while parent is not None:
        if does_work(parent.name):
            return False
        parent = parent.cpu_parent
    return True


def count_ops(run: Callable[[], object], reset: Callable[[], object]) -> int:
    """Ops of one `run()` (after an untimed one), `reset()` before each, outside the profile."""
    reset()
    run()
    reset()
    with profile(activities=[ProfilerActivity.CPU]) as recorded:
        run()
    return sum(1 for event in recorded.events() if counted(event))


def measure_ops(name: str, model, context: int, sizes: tuple[int, ...], rng: torch.Generator) -> list[dict]:
    """Ops per pass of `sizes` tokens after `context` tokens: the dynamic cache's Hugging Face forward
    against the compiled step, with each (size, context) graph's compile time."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("ops per pass are counted on the CPU (a GPU's compiled passes replay CUDA graphs)")
    prompt = torch.randint(0, model.config.vocab_size, (context,), generator=rng).tolist()
    eager, compiled = KVCache(model), CompiledKVCache(model)
    for cache in (eager, compiled):
        cache.prefill(prompt, chunk=None)
    rows = []
    for size in sizes:
        fed = torch.randint(0, model.config.vocab_size, (size,), generator=rng).tolist()
        compile_s = compiled.warm((size,), (context,))
        counts = {path: count_ops(functools.partial(cache.forward, fed), functools.partial(cache.crop, context))
                  for path, cache in (("eager", eager), ("compiled", compiled))}
        rows.append({"model": name, "context": context, "pass_tokens": size, "eager_ops": counts["eager"],
                     "compiled_ops": counts["compiled"], "ratio": counts["compiled"] / counts["eager"],
                     "compile_s": compile_s})
    return rows
