"""Ops per pass: how many kernels one forward pass runs, Hugging Face's eager forward against the
compiled step (engine/decoding/compiled_step.py).

On a GPU an eager pass is bound by its kernel launches, not by its arithmetic (docs/benchmarks.md,
GPU check), so the count is the figure the compiled step must cut, and any CPU can measure it:
torch.profiler records every ATen op a pass dispatches, and each C++ kernel inductor generated
(the compiled step is built with kernel profiling on). An event counts when it does work and no
counted event encloses it: a `linear` counts once, not again for the `addmm` inside it; views,
allocations and the compiled region's own markers count nothing. On a GPU `profile_pass` counts
the kernels the GPU itself ran instead (`bench passes --device-run`: kernels per pass, and the
profiler's top kernels by time).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from engine.decoding import cuda_graphs
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
    return profile_pass(run, reset, torch.device("cpu"))["count"]


def profile_pass(run: Callable[[], object], reset: Callable[[], object], device: torch.device) -> dict:
    """One `run()` (after an untimed one) under torch.profiler: on CUDA the kernels the GPU ran
    (inside a replayed graph too), elsewhere the ops counted as above; their count, their summed
    time, and the five that took longest (by name, all their calls together)."""
    cuda = torch.device(device).type == "cuda"
    reset()
    run()
    reset()
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as recorded:
        run()
        cuda_graphs.synchronize(device)
    events = recorded.events()
    work = [e for e in events if (is_kernel(e) if cuda else counted(e))]
    by_name: dict[str, list[float]] = {}
    for event in work:
        by_name.setdefault(event.name, []).append(event.time_range.elapsed_us() / 1000)
    top = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:5]
    summary = {"unit": "kernels" if cuda else "ops", "count": len(work),
               "ms": sum(sum(times) for times in by_name.values()),
               "top": [{"name": name, "ms": sum(times), "calls": len(times)} for name, times in top]}
    if cuda:  # what the host asked for (one graph launch a replay, or a launch a kernel), what the GPU did
        summary["launches"] = dict(Counter(e.name for e in events
                                           if e.device_type == DeviceType.CPU and "Launch" in e.name))
        summary["device_activities"] = dict(Counter(str(getattr(e, "activity_type", "device")) for e in events
                                                    if e.device_type == DeviceType.CUDA))
    return summary


def is_kernel(event) -> bool:
    """A kernel the GPU ran (not a copy, a fill or a host-side call)."""
    if event.device_type != DeviceType.CUDA:
        return False
    kind = getattr(event, "activity_type", None)
    if kind is not None:
        return kind == "kernel"
    return not event.name.startswith(("Memcpy", "Memset"))


def random_tokens(model, n: int, generator: torch.Generator) -> list[int]:
    return torch.randint(0, model.config.vocab_size, (n,), generator=generator).tolist()


def profile_paths(name: str, model, caches: dict[str, object], context: int, sizes: tuple[int, ...],
                  rng: torch.Generator) -> list[dict]:
    """`profile_pass` of each cache's pass of `sizes` tokens after the same `context` tokens."""
    prompt = random_tokens(model, context, rng)
    for cache in caches.values():
        cache.prefill(prompt, chunk=None)
    rows = []
    for size in sizes:
        fed = random_tokens(model, size, rng)
        for path, cache in caches.items():
            summary = profile_pass(functools.partial(cache.forward, fed), functools.partial(cache.crop, context),
                                   cache.device)
            rows.append({"model": name, "context": context, "pass_tokens": size, "path": path, **summary})
    return rows


def measure_ops(name: str, model, context: int, sizes: tuple[int, ...], rng: torch.Generator) -> list[dict]:
    """Ops per pass of `sizes` tokens after `context` tokens: the dynamic cache's Hugging Face forward
    against the compiled step, with each (size, context) graph's compile time."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("ops per pass are counted on the CPU (a GPU's compiled passes replay CUDA graphs)")
    compiled = CompiledKVCache(model)
    compile_s = {size: compiled.warm((size,), (context,)) for size in sizes}
    profiles = profile_paths(name, model, {"eager": KVCache(model), "compiled": compiled}, context, sizes, rng)
    counts = {(row["pass_tokens"], row["path"]): row["count"] for row in profiles}
    return [{"model": name, "context": context, "pass_tokens": size, "eager_ops": counts[size, "eager"],
             "compiled_ops": counts[size, "compiled"], "ratio": counts[size, "compiled"] / counts[size, "eager"],
             "compile_s": compile_s[size]} for size in sizes]
