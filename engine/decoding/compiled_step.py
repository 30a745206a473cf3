"""A static KV cache whose short passes run one compiled decode step per shape (gpt-fast's recipe).

Hugging Face's forward launches about a thousand small kernels a pass, which on a GPU costs ~4 ms
whatever the model (docs/benchmarks.md, GPU check). Here a pass runs `StaticQwen2`
(engine/models/qwen2_static.py), compiled by `torch.compile`: inductor fuses the elementwise work
(RMSNorm, rotary, SwiGLU, the cache writes) between the matrix products, and on CUDA
`mode="reduce-overhead"` replays the result as a CUDA graph.

Every compiled graph has fixed shapes (`dynamic=False`): a pass of n ≤ 16 tokens is padded to
the next of 1, 2, 4, 8, 16 tokens (or of the `buckets` given: fewer graphs to compile; a pass
longer than the largest runs uncompiled), and attends over the first `attend` positions of the
cache, a power of two from 256 up: a 500-token context reads 512 positions, not the whole
4,096-position buffer (or the next of the `lengths` given: fewer graphs, a few more keys read).
Each (pass size, attended length) compiles once, on first use (or in `warm`; with `lazy=False` only
there: a pass of a shape `warm` did not compile runs uncompiled, so no request waits for a compile).
Longer passes (prompt chunks) run the same step uncompiled, with exactly their tokens.
A pass attends over keys the cache no longer holds (cropped, padding, zeros): the causal mask
of each row's position keeps them out, so only live keys count.

The interface is `KVCache`'s (tokens, crop, forward, prefill, feed_until), so the decoder and the
draft model take it like the other caches. Opt-in: the engine takes it up with `compiled_step`
(compiled in the background at load: engine/decoding/compile_in_background.py), off by default until
a GPU run measures it; `quickdraft bench passes --fast-mode compiled` measures the passes. Token
trees are not supported.
"""

from __future__ import annotations

import logging
import time

import torch

from engine.decoding import cuda_graphs
from engine.decoding.kv import KVCache, PassCancelled, ShouldStop
from engine.decoding.kv_static import BUCKETS, DEFAULT_CAPACITY, grown_capacity
from engine.models.qwen2_static import StaticQwen2

log = logging.getLogger(__name__)

MIN_ATTEND = 256  # the shortest attended length: below it a pass costs the same, and compiles less
# Each (pass size, attended length) is a graph of its own, by design; with dynamo's default limit
# (8 per function) the ninth would fail (fullgraph=True makes the limit a hard error).
RECOMPILE_LIMIT = 256


def attended_length(needed: int, capacity: int, lengths: tuple[int, ...] = ()) -> int:
    """The first of `lengths` (sorted) that holds `needed` positions, else the power of two (≥ MIN_ATTEND);
    never past the buffers."""
    length = next((length for length in lengths if length >= needed), MIN_ATTEND)
    while length < needed:
        length *= 2
    return min(length, capacity)


def compile_step(step: StaticQwen2, graphs: bool = True) -> torch.nn.Module:
    """`step` compiled whole (a graph break fails loudly): fused kernels, and on CUDA (unless not
    `graphs`: a caller that captures them itself) graphs over them."""
    device = next(step.parameters()).device
    # The global limit: torch.compile's own `recompile_limit` argument is recent (2.13 has it).
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    if device.type == "cuda":
        return torch.compile(step, dynamic=False, fullgraph=True, mode="reduce-overhead" if graphs else None)
    # Each generated C++ kernel records itself, so torch.profiler can count a pass's kernels
    # (engine/bench/pass_ops.py); the record costs nothing while no profiler listens.
    return torch.compile(step, dynamic=False, fullgraph=True, options={"cpp.enable_kernel_profile": True})


class CompiledKVCache(KVCache):
    """Feeding prompts is KVCache's; storing keys and values by position and running passes is this
    class's: padded, through the compiled step (or, `compiled=False`, the same step uncompiled)."""

    def __init__(self, model, *, compiled: bool = True, capacity: int | None = None,
                 buckets: tuple[int, ...] = BUCKETS, lengths: tuple[int, ...] = (), lazy: bool = True) -> None:
        config = model.config
        self.model = model
        self.device = next(model.parameters()).device
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 1 << 30)
        self.tokens: list[int] = []
        self.step = StaticQwen2(model, min(capacity or DEFAULT_CAPACITY, self.max_positions + BUCKETS[-1]))
        self.compiled = compiled
        # Pass sizes with a graph each; a longer pass runs the step uncompiled (fewer graphs to compile).
        self.buckets = tuple(sorted(buckets))
        if not self.buckets or self.buckets[-1] > BUCKETS[-1]:
            raise ValueError(f"compiled pass sizes must lie within 1..{BUCKETS[-1]}, not {buckets}")
        self.lengths = tuple(sorted(lengths))  # attended lengths passes round up to (none: powers of two)
        self.lazy = lazy  # False: only the shapes `warm` compiled run compiled
        self.warmed: set[tuple[int, int]] = set()  # (pass size, attended length) compiled by `warm`
        self.device_warmed: set[tuple[int, int]] = set()  # the same for the draft loop's step on CUDA
        self.mode = "compiled" if compiled else "uncompiled"  # as benchmarks name the fast path
        # Uncompiled, the same padded passes run the plain step: what the tests compare cheaply.
        self.padded_step = compile_step(self.step) if compiled else self.step
        self._capturable_step: torch.nn.Module | None = None  # the draft loop's, on CUDA (device_step)

    @property
    def capacity(self) -> int:
        return self.step.capacity

    def _crop_layers(self, length: int) -> None:
        """Positions past the length are masked until the next pass overwrites them."""

    def _layer_states(self) -> list[torch.Tensor]:
        return [states for layer in self.step.layers for states in (layer.keys, layer.values)]

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], *, logits_for: int | None = None,
                should_stop: ShouldStop | None = None, **tree_inputs: torch.Tensor) -> torch.Tensor:
        """Append `new_tokens`; return float32 logits for the last `logits_for` of them (default all).

        A pass cannot stop halfway (a compiled graph has no checkpoints): `should_stop` is asked
        once, before it starts, and PassCancelled leaves the cache unchanged.
        """
        n = len(new_tokens)
        keep = n if logits_for is None else logits_for
        if n == 0 or not 0 < keep <= n:
            raise ValueError(f"a pass needs tokens and 0 < logits_for <= {n}; got {n} tokens, logits_for={keep}")
        if tree_inputs:
            raise ValueError("the compiled step runs chains only; token trees need the dynamic or static cache")
        self._ensure_capacity(len(self.tokens) + n)
        if should_stop is not None and should_stop():
            raise PassCancelled()
        start = len(self.tokens)
        size = next((size for size in self.buckets if size >= n), None)
        if size is not None and self._runs_compiled(size, start + size):
            logits = self._padded_pass(new_tokens, start)[n - keep:n]
        else:
            positions = torch.arange(start, start + n, device=self.device)
            logits = self.step(cuda_graphs.upload(new_tokens, self.device), positions,
                               self.attended_length(start + n), logits_for=keep)
        self.tokens.extend(new_tokens)
        return logits.to(torch.float32, copy=True)  # on CUDA the next replay overwrites the graph's output

    def _runs_compiled(self, size: int, end: int) -> bool:
        """Whether a padded pass of `size` tokens ending before `end` runs its graph (compiled now, if lazy)."""
        return self.lazy or (size, self.attended_length(end)) in self.warmed

    def _padded_pass(self, new_tokens: list[int], start: int) -> torch.Tensor:
        """The next bucket's compiled graph; padding rows write keys past the new length (stale,
        masked, overwritten later) and their logits are dropped."""
        size = next(size for size in self.buckets if size >= len(new_tokens))
        ids = cuda_graphs.upload(new_tokens + [0] * (size - len(new_tokens)), self.device)
        positions = torch.arange(start, start + size, device=self.device)
        if self.compiled and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last replay's output was copied out
        return self.padded_step(ids, positions, self.attended_length(start + size))

    def device_step(self, ids: torch.Tensor, positions: torch.Tensor, end: int) -> torch.Tensor:
        """A pass of `ids` (n,) already on the device at `positions` (n,) that end before position
        `end` (known on the host), exactly as `forward` runs n tokens when n is a bucket: float32
        logits (n, vocab); `tokens` untouched (the caller's: the draft loop, engine/decoding/draft_loop.py).

        On CUDA it runs the step compiled without graphs of its own: the draft loop captures its k
        passes as one graph, and a graph cannot be captured around dynamo's CUDA-graph replays.
        Not lazy, a shape `warm` did not compile (on CUDA: with `device_steps`) runs uncompiled."""
        shape = (len(ids), self.attended_length(end))
        capturable = self.compiled and self.device.type == "cuda"
        if not self.lazy and shape not in (self.device_warmed if capturable else self.warmed):
            return self.step(ids, positions, shape[1]).float()
        return self._device_step_fn()(ids, positions, shape[1]).float()

    def _device_step_fn(self) -> torch.nn.Module:
        if not (self.compiled and self.device.type == "cuda"):
            return self.padded_step
        if self._capturable_step is None:
            self._capturable_step = compile_step(self.step, graphs=False)
        return self._capturable_step

    def attended_length(self, end: int) -> int:
        """The key positions a pass ending before `end` attends over."""
        return attended_length(end, self.capacity, self.lengths)

    @property
    def runs_device_steps(self) -> bool:
        """A one-token `device_step` is what `forward` runs for one token (a pass of 1 is a bucket)."""
        return self.buckets[0] == 1

    def warm(self, sizes: tuple[int, ...] | None = None, contexts: tuple[int, ...] = (0,), *,
             device_steps: bool = False) -> float:
        """Compile the graphs for passes of `sizes` tokens (default: every bucket) after `contexts`
        tokens; returns the seconds. With `device_steps`, on CUDA, the draft loop's one-token step
        too (a graph of its own there; elsewhere it is the pass of 1's).

        Runs at positions past the live tokens, so the cache's contents do not change.
        """
        started = time.perf_counter()
        # On CUDA a graph's first run is a warm-up, its second is recorded: the third replays.
        runs = 3 if self.device.type == "cuda" else 1
        if self.compiled:
            with torch.inference_mode():
                for context in contexts:
                    for size in sizes or self.buckets:
                        self._ensure_capacity(context + size)
                        start = max(context, len(self.tokens))
                        for _ in range(runs):
                            self._padded_pass([0] * size, start)
                        self.warmed.add((size, self.attended_length(start + size)))
                        if device_steps and size == 1 and self.device.type == "cuda":
                            positions = torch.arange(start, start + 1, device=self.device)
                            self._device_step_fn()(positions * 0, positions, self.attended_length(start + 1))
                            self.device_warmed.add((1, self.attended_length(start + 1)))
            cuda_graphs.synchronize(self.device)
        return time.perf_counter() - started

    def _ensure_capacity(self, live: int) -> None:
        """Keep `live` positions plus a bucket's worth of padding in the buffers (grown: graphs recompile)."""
        capacity = grown_capacity(self.capacity, live, self.max_positions)
        if capacity is not None:
            log.info("compiled-step KV cache grows from %d to %d positions (its graphs compile again)",
                     self.capacity, capacity)
            self.step.allocate(capacity)
            self.warmed.clear()  # new buffers: each graph compiles again on first use (if lazy)
            self.device_warmed.clear()
