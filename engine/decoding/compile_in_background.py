"""The compiled decode step, compiled at load on a thread of its own and taken up between requests.

Compiling the step's graphs (one per pass size and attended length, per model: engine/decoding/
compiled_step.py) takes seconds on a CPU and longer on a GPU: too long for the first request to wait.
So the engine serves on today's caches (CUDA: the captured static cache; CPU: the dynamic cache)
while a thread compiles the compiled-step caches of the verifier and the draft model (`warm`), and
the engine's worker takes them up at the start of its next request or warm-up (`take`), never inside
one. Their KV starts empty: that request prefills what it needs. A compile that fails (a model the
step cannot run, such as one with quantized weights; an inductor error) is logged once and the
engine stays on today's caches.

Why a thread and not slices of compiling on the worker between requests: a slice is one graph's
compile, seconds, and a request arriving meanwhile would wait for it. The thread shares only the
models' weights with the worker, and only reads them; what making the step mutates is done before
the thread starts, on the loading thread (`BackgroundCompile()`, before today's caches are made):
- the step lays each layer's q/k/v and gate/up weights out as one tensor, re-pointing the model's
  parameters (engine/models/qwen2_static.py): today's CUDA graphs must be captured after that, or
  they would read the freed originals;
- `compile_step` raises dynamo's recompile limit, a process-wide setting.
Dynamo traces only the thread that compiles (its frame hook is per thread), and the caches' buffers
are their own. One global it does touch: after each compile it restores the RNG state it found
(`preserve_global_state`), so unseeded sampling on the worker may repeat draws made meanwhile;
greedy and seeded decoding are unaffected. Untested on CUDA here (no GPU on these machines): the
graph recording of `mode="reduce-overhead"` happens on this thread, its replays on the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from engine.decoding.compiled_step import MIN_ATTEND, CompiledKVCache, attended_length
from engine.decoding.kv_static import BUCKETS, DEFAULT_CAPACITY

log = logging.getLogger(__name__)

# Drafters whose verifier passes are chains read from the logits alone: the compiled step serves
# them. Token trees need a mask the step has no input for, and the heads read a hidden state that
# Hugging Face's forward hands them by a hook (engine/drafters/medusa.py): those keep today's cache.
CHAIN_DRAFTERS = ("lookup", "draft", "hybrid")
OUTPUT_TOKENS = 128  # past the prompt's budget: a completion, its look-ahead line, the template's tokens


def serves_drafter(drafter) -> bool:
    """Whether the verifier can run the compiled step under `drafter` (None: plain decoding)."""
    return drafter is None or getattr(drafter, "name", None) in CHAIN_DRAFTERS


@dataclass(frozen=True)
class CompilePlan:
    """The graphs compiled at load, per model: each pass size at each attended length. A pass pads to
    the next size and attends over the next length; a shape outside the plan runs uncompiled."""

    sizes: tuple[int, ...]
    lengths: tuple[int, ...]

    @classmethod
    def for_engine(cls, max_draft_tokens: int, budget) -> "CompilePlan":
        """Pass sizes up to a verifier pass's k + 1 tokens; attended lengths 512 (a short prompt) and the
        one a full prompt (`budget`, a ContextBudget) reaches with its completion."""
        sizes = [1]
        while sizes[-1] < min(max_draft_tokens + 1, BUCKETS[-1]):
            sizes.append(sizes[-1] * 2)
        context = budget.prefix_tokens + budget.suffix_tokens + budget.other_documents_tokens + OUTPUT_TOKENS
        longest = attended_length(context, DEFAULT_CAPACITY)
        return cls(tuple(sizes), tuple(sorted({min(2 * MIN_ATTEND, longest), longest})))

    def __str__(self) -> str:
        return f"pass sizes {', '.join(map(str, self.sizes))} × attended lengths {', '.join(map(str, self.lengths))}"


class BackgroundCompile:
    """Compiled-step caches for `models` (role → model; None skipped), made now and warmed on a thread
    by `start`; `take` hands them over once, when warm. `state`: compiling, ready or failed."""

    def __init__(self, models: dict[str, object], plan: CompilePlan) -> None:
        self.plan = plan
        self.state, self.reason, self.seconds = "compiling", "", None
        self.graphs = 0  # compiled so far
        self.caches: dict[str, CompiledKVCache] = {}
        self._lock = threading.Lock()  # state, caches and the hand-over, between the thread and the worker
        self._stop = threading.Event()
        self._taken = False
        self._thread: threading.Thread | None = None
        try:
            for role, model in models.items():
                if model is not None:
                    self.caches[role] = CompiledKVCache(model, buckets=plan.sizes, lengths=plan.lengths, lazy=False)
        except (ValueError, TypeError, AttributeError) as error:  # a model the static step cannot run
            self._fail(error)

    def start(self) -> None:
        if self.state == "compiling" and self._thread is None:
            self._thread = threading.Thread(target=self._compile, name="quickdraft-compile", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop after the graph being compiled (the engine is closing); its caches are never taken."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the compile has ended (ready or failed) within `timeout` seconds."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.state != "compiling"

    def take(self) -> dict[str, CompiledKVCache] | None:
        """The warmed caches (role → cache), once, when ready: the worker's call, between requests."""
        with self._lock:
            if self.state != "ready" or self._taken:
                return None
            self._taken = True
            return dict(self.caches)

    def stats(self) -> dict:
        """For quickdraft/stats and doctor: "compiling", "ready in N s" or "failed: reason", and the graphs."""
        with self._lock:
            state = self.state
            if state == "ready":
                state = f"ready in {self.seconds:.1f} s"
            elif state == "failed":
                state = f"failed: {self.reason}"
            return {"state": state, "graphs": self.graphs, "plan": str(self.plan), "taken_up": self._taken}

    def _compile(self) -> None:
        started = time.perf_counter()
        capacity = {role: cache.capacity for role, cache in self.caches.items()}
        try:
            for role, cache in self.caches.items():
                for length in self.plan.lengths:
                    for size in self.plan.sizes:
                        if self._stop.is_set():
                            return
                        # Positions that end where the pass attends over `length` keys (within the buffers).
                        end = min(length, cache.capacity - BUCKETS[-1])
                        cache.warm((size,), (end - size,), device_steps=role == "draft")
                        with self._lock:
                            self.graphs += 1
                if cache.capacity != capacity[role]:  # grown: its graphs would compile again in a request
                    raise RuntimeError(f"the {role}'s compiled-step cache grew while compiling")
        except Exception as error:  # noqa: BLE001 -- any compile error: today's caches serve on
            self._fail(error)
            return
        with self._lock:
            self.seconds = time.perf_counter() - started
            self.state = "ready"
        log.info("compiled the decode step (%d graphs: %s) in %.1f s; the engine takes it up at its next request",
                 self.graphs, self.plan, self.seconds)

    def _fail(self, error: BaseException) -> None:
        reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        with self._lock:
            self.state, self.reason = "failed", reason
            self.caches = {}  # their buffers go; nothing will take them
        log.warning("the compiled decode step is off, the engine stays on its usual caches: %s", reason)


def compile_in_background(compiled_step, verifier, draft, max_draft_tokens: int, budget) -> BackgroundCompile | None:
    """The engine's compile (not started) of the verifier's and the draft model's (LoadedModels) compiled step:
    `compiled_step` True plans it for the engine's draft length and context `budget`; a CompilePlan is the
    plan itself (tests compile a graph or two); False: none."""
    if not compiled_step:
        return None
    plan = compiled_step if isinstance(compiled_step, CompilePlan) else CompilePlan.for_engine(max_draft_tokens, budget)
    return BackgroundCompile({"verifier": verifier.model, "draft": draft.model if draft is not None else None}, plan)
