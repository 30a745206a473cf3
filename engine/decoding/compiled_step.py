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
4,096-position buffer. Each (pass size, attended length) compiles once, on first use (or in `warm`).
Longer passes (prompt chunks) run the same step uncompiled, with exactly their tokens.
A pass attends over keys the cache no longer holds (cropped, padding, zeros): the causal mask
of each row's position keeps them out, so only live keys count.

The interface is `KVCache`'s (tokens, crop, forward, prefill, feed_until), so the decoder and the
draft model take it like the other caches. Opt-in: nothing in the engine picks it by default;
`quickdraft bench passes --fast-mode compiled` measures it. Token trees are not supported.
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


def attended_length(needed: int, capacity: int) -> int:
    """The power of two (≥ MIN_ATTEND) a pass attends over, never past the buffers."""
    length = MIN_ATTEND
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
                 buckets: tuple[int, ...] = BUCKETS) -> None:
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
        if n <= self.buckets[-1]:
            logits = self._padded_pass(new_tokens, start)[n - keep:n]
        else:
            positions = torch.arange(start, start + n, device=self.device)
            logits = self.step(cuda_graphs.upload(new_tokens, self.device), positions,
                               attended_length(start + n, self.capacity), logits_for=keep)
        self.tokens.extend(new_tokens)
        return logits.to(torch.float32, copy=True)  # on CUDA the next replay overwrites the graph's output

    def _padded_pass(self, new_tokens: list[int], start: int) -> torch.Tensor:
        """The next bucket's compiled graph; padding rows write keys past the new length (stale,
        masked, overwritten later) and their logits are dropped."""
        size = next(size for size in self.buckets if size >= len(new_tokens))
        ids = cuda_graphs.upload(new_tokens + [0] * (size - len(new_tokens)), self.device)
        positions = torch.arange(start, start + size, device=self.device)
        if self.compiled and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last replay's output was copied out
        return self.padded_step(ids, positions, attended_length(start + size, self.capacity))

    def device_step(self, ids: torch.Tensor, positions: torch.Tensor, end: int) -> torch.Tensor:
        """A pass of `ids` (n,) already on the device at `positions` (n,) that end before position
        `end` (known on the host), exactly as `forward` runs n tokens when n is a bucket: float32
        logits (n, vocab); `tokens` untouched (the caller's: the draft loop, engine/decoding/draft_loop.py).

        On CUDA it runs the step compiled without graphs of its own: the draft loop captures its k
        passes as one graph, and a graph cannot be captured around dynamo's CUDA-graph replays."""
        step = self.padded_step
        if self.compiled and self.device.type == "cuda":
            if self._capturable_step is None:
                self._capturable_step = compile_step(self.step, graphs=False)
            step = self._capturable_step
        return step(ids, positions, self.attended_length(end)).float()

    def attended_length(self, end: int) -> int:
        """The key positions a pass ending before `end` attends over."""
        return attended_length(end, self.capacity)

    @property
    def runs_device_steps(self) -> bool:
        """A one-token `device_step` is what `forward` runs for one token (a pass of 1 is a bucket)."""
        return self.buckets[0] == 1

    def warm(self, sizes: tuple[int, ...] | None = None, contexts: tuple[int, ...] = (0,)) -> float:
        """Compile the graphs for passes of `sizes` tokens (default: every bucket) after `contexts`
        tokens; returns the seconds.

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
                        for _ in range(runs):
                            self._padded_pass([0] * size, max(context, len(self.tokens)))
            cuda_graphs.synchronize(self.device)
        return time.perf_counter() - started

    def _ensure_capacity(self, live: int) -> None:
        """Keep `live` positions plus a bucket's worth of padding in the buffers (grown: graphs recompile)."""
        capacity = grown_capacity(self.capacity, live, self.max_positions)
        if capacity is not None:
            log.info("compiled-step KV cache grows from %d to %d positions (its graphs compile again)",
                     self.capacity, capacity)
            self.step.allocate(capacity)
