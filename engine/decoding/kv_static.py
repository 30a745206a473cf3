"""A static KV cache: preallocated per layer, written by position, passes a GPU can replay.

The same interface as `engine.decoding.kv.KVCache` (tokens, crop, forward, prefill), so the decoder
and the draft model take either. Differences that matter:

- Keys and values live in buffers of `capacity` positions allocated once. A pass writes
  its tokens' keys and values at their positions (`index_copy_`); cropping a rejected
  draft only shortens `tokens` — the stale positions are overwritten by the next pass
  and never attended to before that (causal mask).
- Short passes (≤ 16 tokens: a verifier pass `[last, d1..dk]`, a draft token) can run
  *bucketed*: padded to 1, 2, 4, 8 or 16 tokens over fixed input buffers, attending over
  the whole buffer with an explicit mask. Every tensor then has a fixed shape and address,
  so on CUDA each bucket is captured once as a CUDA graph and a pass is one replay: no
  Python per layer, no kernel launches, no host synchronisation.

Modes: `eager` runs every pass with exactly its tokens over the live length — the same
computation as the dynamic cache, bit for bit (the CPU default would be this, but the CPU
keeps the dynamic cache: no faster, see docs/benchmarks.md). `bucketed` is the graph-shaped
computation without capture (tested on the CPU). `graphs` is bucketed plus capture (CUDA).
The model itself is Hugging Face's Qwen2 forward; only the cache object is ours.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Callable

import torch
import transformers
from transformers.cache_utils import Cache, CacheLayerMixin

from engine.decoding import cuda_graphs
from engine.decoding.kv import KVCache, PassCancelled, ShouldStop

log = logging.getLogger(__name__)

BUCKETS = (1, 2, 4, 8, 16)  # pass sizes captured as graphs; a pass is padded to the next one
DEFAULT_CAPACITY = 4096  # positions preallocated; grows (and recaptures) when a prompt needs more
MODES = ("eager", "bucketed", "graphs")



def grown_capacity(capacity: int, live: int, max_positions: int) -> int | None:
    """The capacity (doubled as often as needed) that holds `live` positions plus a bucket's worth of
    scratch, or None when `capacity` already does."""
    needed = live + BUCKETS[-1]
    if needed <= capacity:
        return None
    if live > max_positions:
        raise ValueError(f"{live} tokens exceed the model's {max_positions}-token context")
    while capacity < needed:
        capacity *= 2
    return min(capacity, max_positions + BUCKETS[-1])

class _PositionedLayer(CacheLayerMixin):
    """One layer's preallocated keys and values, written where `store.write_positions` says."""

    is_croppable = True
    # Left False on purpose: HF then builds eager-mode masks exactly as for the dynamic cache.
    is_compileable = False

    def __init__(self, store: "StaticKVCache") -> None:
        super().__init__()
        self.store = store
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        store = self.store
        if store.should_stop is not None and store.should_stop():
            raise PassCancelled()  # between layers; positions past len(tokens) are stale anyway
        self.keys.index_copy_(2, store.write_positions, key_states)
        self.values.index_copy_(2, store.write_positions, value_states)
        return self.keys[:, :, :store.attend], self.values[:, :, :store.attend]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.store.attend, 0

    def get_seq_length(self) -> int:
        return self.store.seen

    def get_max_length(self) -> int:
        return self.store.capacity


class _Bucket:
    """Fixed input buffers for passes of `size` tokens, and on CUDA the pass captured over them."""

    def __init__(self, cache: "StaticKVCache", size: int) -> None:
        self.size = size
        self.ids = torch.zeros((1, size), dtype=torch.long, device=cache.device)
        self.positions = torch.zeros(size, dtype=torch.long, device=cache.device)
        self.graph = None
        self.output: torch.Tensor | None = None


class StaticKVCache(KVCache):
    """Feeding prompts (prefill, feed_until: longest common prefix, cancellable chunks) is
    KVCache's; storing keys and values, passes and cropping are this class's."""

    def __init__(self, model, *, mode: str | None = None, capacity: int | None = None) -> None:
        config = model.config
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        if kinds != {"full_attention"}:
            raise ValueError(f"the static KV cache supports full-attention layers only, not {sorted(kinds)}")
        if "cache" not in inspect.signature(type(model).forward).parameters:
            raise ValueError(f"the static KV cache needs a transformers whose forward takes `cache=` "
                             f"(5.24 is tested); this one is {transformers.__version__}")
        self.model = model
        self.device = next(model.parameters()).device
        self.mode = mode or ("graphs" if self.device.type == "cuda" else "eager")
        if self.mode not in MODES:
            raise ValueError(f"unknown static cache mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.mode == "graphs" and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; the model is on {self.device}")
        if self.mode != "eager" and config._attn_implementation not in ("sdpa", "eager"):
            raise ValueError(f"bucketed passes need sdpa or eager attention, not {config._attn_implementation}")
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 1 << 30)
        self.tokens: list[int] = []
        # Read by the layers during a pass (set before each one).
        self.write_positions = torch.zeros(0, dtype=torch.long, device=self.device)
        self.attend = 0  # key positions a pass attends over (the live length, or all in bucketed mode)
        self.seen = 0  # tokens before the pass (HF's mask offsets in eager mode)
        self.should_stop: ShouldStop | None = None
        self._layers = [_PositionedLayer(self) for _ in range(config.num_hidden_layers)]
        self.hf_cache = Cache(layers=self._layers)
        self.capacity = 0
        self._allocate(min(capacity or DEFAULT_CAPACITY, self.max_positions))

    # ------------------------------------------------------------------ passes (feeding prompts is KVCache's)

    def _crop_layers(self, length: int) -> None:
        """Cropping is forgetting tokens: positions past the length are overwritten by the next pass
        and masked until then (no copy, no reallocation)."""

    def _layer_states(self) -> list[torch.Tensor]:
        return [states for layer in self._layers for states in (layer.keys, layer.values)]

    @torch.inference_mode()
    def forward(self, new_tokens: list[int], *, logits_for: int | None = None,
                should_stop: ShouldStop | None = None, **tree_inputs: torch.Tensor) -> torch.Tensor:
        """Append `new_tokens`; return float32 logits for the last `logits_for` of them (default all).

        Raises PassCancelled, with the cache unchanged, when `should_stop` turns true between layers
        (a replayed graph cannot stop halfway: bucketed passes check once, before they start).
        `tree_inputs` (a token tree's attention_mask and position_ids) run an eager pass.
        """
        n = len(new_tokens)
        keep = n if logits_for is None else logits_for
        if n == 0 or not 0 < keep <= n:
            raise ValueError(f"a pass needs tokens and 0 < logits_for <= {n}; got {n} tokens, logits_for={keep}")
        self._ensure_capacity(len(self.tokens) + n)
        self.should_stop = should_stop
        try:
            if self.mode != "eager" and n <= BUCKETS[-1] and not tree_inputs:
                if should_stop is not None and should_stop():
                    raise PassCancelled()
                logits = self._bucketed(new_tokens)[n - keep:n].clone()  # the replay overwrites its output
            else:
                logits = self._eager(new_tokens, keep, **tree_inputs)
        finally:
            self.should_stop = None
        self.tokens.extend(new_tokens)
        return logits

    # ------------------------------------------------------------------ warming

    def warm(self) -> float:
        """Prepare every bucket (on CUDA: capture its graph); returns the seconds it took.

        A capture that fails leaves a working cache: it logs why and runs eager passes.
        """
        started = time.perf_counter()
        try:
            if self.mode != "eager":
                with torch.inference_mode():
                    for size in BUCKETS:
                        self._bucket(size)
            cuda_graphs.synchronize(self.device)
        except RuntimeError as error:
            if self.mode != "graphs":
                raise
            log.warning("capturing CUDA graphs failed, passes run eagerly: %s", " ".join(str(error).split())[:300])
            self.mode, self._buckets = "eager", {}
        return time.perf_counter() - started

    # ------------------------------------------------------------------ passes

    def _eager(self, new_tokens: list[int], keep: int, position_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Exactly the fed tokens over the live length: the dynamic cache's computation. A token
        tree's rows are still written in order; only its positions and mask differ."""
        start, n = len(self.tokens), len(new_tokens)
        self.write_positions = torch.arange(start, start + n, device=self.device)
        self.seen, self.attend = start, start + n
        output = self.model(input_ids=cuda_graphs.upload(new_tokens, self.device)[None],
                            position_ids=self.write_positions[None] if position_ids is None else position_ids,
                            attention_mask=attention_mask, cache=self.hf_cache, use_cache=True, logits_to_keep=keep)
        return output.logits[0].float()

    def _bucketed(self, new_tokens: list[int]) -> torch.Tensor:
        """Pad to the next bucket, fill its fixed buffers, run (or replay) the pass; rows past
        len(new_tokens) are padding. Their keys land past the new length: stale, never attended."""
        n = len(new_tokens)
        bucket = self._bucket(next(size for size in BUCKETS if size >= n))
        bucket.ids[0, :n].copy_(cuda_graphs.upload(new_tokens, self.device), non_blocking=True)
        start = len(self.tokens)
        torch.arange(start, start + bucket.size, out=bucket.positions)
        if bucket.graph is not None:
            bucket.graph.replay()
            return bucket.output
        return self.padded_pass(bucket.ids, bucket.positions)

    @property
    def runs_device_steps(self) -> bool:
        """Bucketed passes (graphs or not) are what `device_step` runs; the eager mode's are not."""
        return self.mode != "eager"

    def device_step(self, ids: torch.Tensor, positions: torch.Tensor, end: int) -> torch.Tensor:
        """A pass of `ids` (n,) already on the device at `positions` (n,): float32 logits (n, vocab), the
        computation `forward` runs for n tokens in a bucket of n; `tokens` untouched (the caller's: the
        draft loop, engine/decoding/draft_loop.py). `end` is unused: the pass attends over the whole buffer."""
        return self.padded_pass(ids[None], positions)

    def attended_length(self, end: int) -> int:
        """The key positions a bucketed pass attends over, wherever it ends: the whole buffer."""
        return self.capacity

    def padded_pass(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The captured computation: `ids` (1, n) at `positions` (n,) over the whole buffer, float32
        logits (n, vocab); only tensor operations, no value read back, `tokens` untouched."""
        self.write_positions = positions
        self.attend = self.capacity
        allowed = self._key_positions[None, :] <= positions[:, None]  # causal, over the whole buffer
        if self.model.config._attn_implementation == "eager":  # eager attention adds its mask
            mask = torch.zeros(allowed.shape, dtype=self._layers[0].keys.dtype, device=self.device)
            mask = mask.masked_fill(~allowed, torch.finfo(mask.dtype).min)
        else:
            mask = allowed
        output = self.model(input_ids=ids, position_ids=positions[None], cache=self.hf_cache,
                            attention_mask={"full_attention": mask[None, None]}, use_cache=True)
        return output.logits[0].float()

    def _bucket(self, size: int) -> _Bucket:
        bucket = self._buckets.get(size)
        if bucket is None:
            bucket = self._buckets[size] = _Bucket(self, size)
            if self.mode == "graphs":
                # Warm-up and capture write keys at the scratch tail, never at live positions.
                tail = self.capacity - size
                torch.arange(tail, tail + size, out=bucket.positions)
                started = time.perf_counter()
                bucket.graph, bucket.output = cuda_graphs.capture(
                    lambda: self.padded_pass(bucket.ids, bucket.positions), self._pool)
                log.debug("captured a %d-token pass in %.0f ms", size, (time.perf_counter() - started) * 1000)
        return bucket

    # ------------------------------------------------------------------ buffers

    def _ensure_capacity(self, live: int) -> None:
        """Keep `live` positions plus a bucket's worth of scratch (padding, capture) in the buffers."""
        capacity = grown_capacity(self.capacity, live, self.max_positions)
        if capacity is not None:
            log.info("static KV cache grows from %d to %d positions (graphs are captured again)", self.capacity, capacity)
            self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        """(Re)allocate every layer's buffers, keeping the live positions; drops captured graphs."""
        config = self.model.config
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dtype = next(self.model.parameters()).dtype
        live = len(self.tokens)
        for layer in self._layers:
            keys, values = (torch.zeros((1, heads, capacity, head_dim), dtype=dtype, device=self.device)
                            for _ in range(2))
            if live:
                keys[:, :, :live] = layer.keys[:, :, :live]
                values[:, :, :live] = layer.values[:, :, :live]
            layer.keys, layer.values = keys, values
        self.capacity = capacity
        self._key_positions = torch.arange(capacity, device=self.device)
        self._buckets: dict[int, _Bucket] = {}
        self._pool = cuda_graphs.new_pool() if self.mode == "graphs" else None


def cache_factory(device: torch.device | str) -> Callable:
    """The KV cache each device is fastest with: static with CUDA graphs on CUDA (warmed here,
    so at load time, not in the first request); the dynamic cache elsewhere (docs/benchmarks.md,
    GPU check: on this CPU the static cache is no faster)."""
    if torch.device(device).type != "cuda":
        return KVCache

    def warmed_static_cache(model) -> StaticKVCache:
        cache = StaticKVCache(model)
        seconds = cache.warm()
        log.info("captured %d CUDA graphs for %s in %.1f s", len(BUCKETS), type(model).__name__, seconds)
        return cache

    return warmed_static_cache
