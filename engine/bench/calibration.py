"""Which verifier this CPU can afford: measured once per machine (`quickdraft doctor
--calibrate`), kept in `$QUICKDRAFT_HOME/calibration.json`, and the rule that picks.
(A benchmark of this machine's own: it loads models and reads prompts as the engine does.)

The rule comes from the typing sessions of 2026-12-07 (docs/benchmarks.md, "On a CPU without
fast bf16"). A model is affordable when
- its typing pass, 4 tokens (the pending one and three drafted: a quantized engine's most),
  takes at most half the budget, so that an answer after the debounce still gets its pass; and
- it reads a prompt at 60 tokens/s or more, so that a jump's fresh 128-token window is read in
  about two seconds. On that machine the calibration measured the 0.5B at 95 tokens/s (its jumps
  showed ghost text in 1.45 s at the median) and the 1.5B at 34 (5.6 s); 4-token passes of 90 and
  217 ms.
The largest affordable model is chosen; where none is, the smallest. A `verifier` the user sets
still wins: this is only the machine's default.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.models import store

log = logging.getLogger(__name__)

CANDIDATES = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")  # smallest first
TYPING_PASS_TOKENS = 4
PASS_SHARE_OF_BUDGET = 0.5
MIN_PROMPT_TOKENS_PER_S = 60.0
PROMPT_CHUNK = 128  # tokens: the cold window a jump reads first
REPEATS = 5


@dataclass
class ModelSpeed:
    name: str
    precision: str  # as the engine loads it, e.g. "int4 weights, float32"
    pass_ms: float  # a TYPING_PASS_TOKENS-token pass after the prompt chunk, median
    one_token_ms: float
    prompt_tokens_per_s: float  # a cold PROMPT_CHUNK-token chunk, read as the engine reads prompts


@dataclass
class Choice:
    verifier: str
    reason: str


def choose_verifier(speeds: list[ModelSpeed], budget_ms: float) -> Choice:
    """The largest affordable model of `speeds` (smallest first), by the rule above."""
    if not speeds:
        raise ValueError("no measured model to choose from")
    verdicts = []
    affordable = []
    for speed in speeds:
        misses = []
        if speed.pass_ms > PASS_SHARE_OF_BUDGET * budget_ms:
            misses.append(f"a {TYPING_PASS_TOKENS}-token pass takes {speed.pass_ms:.0f} ms, over half the "
                          f"{budget_ms:.0f} ms budget")
        if speed.prompt_tokens_per_s < MIN_PROMPT_TOKENS_PER_S:
            misses.append(f"it reads {speed.prompt_tokens_per_s:.0f} prompt tokens/s, under {MIN_PROMPT_TOKENS_PER_S:.0f}")
        verdicts.append(f"{speed.name}: " + ("; ".join(misses) if misses else
                                             f"fits ({speed.pass_ms:.0f} ms a pass, {speed.prompt_tokens_per_s:.0f} tokens/s)"))
        if not misses:
            affordable.append(speed.name)
    chosen = affordable[-1] if affordable else speeds[0].name
    lead = "the largest that fits" if affordable else "none fits: the smallest"
    return Choice(chosen, f"{lead} ({'; '.join(verdicts)})")


def machine_key() -> dict:
    """What the measurement depends on: a changed CPU, core count, torch or 4-bit kernel measures
    again. No torch import: the server reads this before any model is loaded."""
    import hashlib
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from engine.bench.common import cpu_model

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = None
    # The kernel's source and its build flags (cpu_int4.py), read as files: importing it imports torch.
    kernels = Path(__file__).parents[1] / "kernels"
    try:
        kernel = hashlib.sha256(b"".join((kernels / name).read_bytes() for name in ("cpu_int4.cpp", "cpu_int4.py")))
        kernel = kernel.hexdigest()[:16]
    except OSError:
        kernel = None
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch_version, "machine": platform.machine(),
            "int4_kernel": kernel}


def cache_path(home: Path | None = None) -> Path:
    return (home or store.quickdraft_home()) / "calibration.json"


def save(speeds: list[ModelSpeed], choice: Choice, budget_ms: float, home: Path | None = None) -> Path:
    path = cache_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"machine": machine_key(), "budget_ms": budget_ms, "measured": [asdict(s) for s in speeds],
              "verifier": choice.verifier, "reason": choice.reason, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path.write_text(json.dumps(record, indent=1))
    return path


def load(home: Path | None = None) -> dict | None:
    """The cached calibration of this machine, or None (none yet, another machine's, unreadable)."""
    try:
        record = json.loads(cache_path(home).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("machine") == machine_key() else None


def measure(name: str, dtype: str | None = None) -> ModelSpeed:
    """Load `name` as a CPU engine would and time a cold prompt chunk and typing passes on it."""
    import torch

    from engine.decoding.kv import KVCache
    from engine.models.loading import cpu_weights, load_model

    loaded = load_model(name, dtype=dtype or cpu_weights(), device="cpu")
    cache = KVCache(loaded.model)
    vocabulary = loaded.model.config.vocab_size
    generator = torch.Generator().manual_seed(0)

    def tokens(n: int) -> list[int]:
        return torch.randint(100, vocabulary - 100, (n,), generator=generator).tolist()

    with torch.inference_mode():
        chunk_ms = []
        for _ in range(3):  # the first settles the allocator
            cache.crop(0)
            started = time.perf_counter()
            cache.prefill(tokens(PROMPT_CHUNK))
            chunk_ms.append((time.perf_counter() - started) * 1000)
        passes = {1: [], TYPING_PASS_TOKENS: []}
        for repeat in range(REPEATS + 1):
            for size, times in passes.items():
                started = time.perf_counter()
                cache.forward(tokens(size))
                if repeat:
                    times.append((time.perf_counter() - started) * 1000)
                cache.crop(PROMPT_CHUNK)
    return ModelSpeed(name, loaded.precision, statistics.median(passes[TYPING_PASS_TOKENS]),
                      statistics.median(passes[1]), PROMPT_CHUNK / statistics.median(chunk_ms[1:]) * 1000)


def installed_candidates(home: Path | None = None) -> list[str]:
    return [name for name in CANDIDATES if store.installed_path(name, home) is not None]


def needed(home: Path | None = None, *, has_gpu: bool = False) -> bool:
    """Whether this machine should be measured now (`quickdraft models pull` asks after each pull): a CPU
    machine with two or more candidates installed, and no record of this machine that measured them all."""
    installed = installed_candidates(home)
    if has_gpu or len(installed) < 2:
        return False  # a GPU's pair is chosen by its memory; with one model there is nothing to choose
    record = load(home)
    measured = {speed.get("name") for speed in record.get("measured", [])} if record is not None else set()
    return not set(installed) <= measured
