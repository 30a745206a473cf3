"""`quickdraft bench passes --device-run`: the GPU session's one command (issue 39), a preset of
`bench passes` (engine/bench/passes.py).

In one process, for the 0.5B (the draft model), the 1.5B and the 7B shapes, today's captured path
(the static cache replaying CUDA graphs) and the compiled step side by side, each beside eager:
passes of k+1 = 1 and 8 at 512 tokens of context, a draft token, a cold 2,300-token prompt
(1,024 before the cursor, 256 after, 1,024 from other files), 64-token replays at the τ measured
on the CPU, and one pass of each path under torch.profiler (kernels per pass, the five that took
longest); then the issue's targets, met or missed. Compiling costs most of the run, so the
compiled step compiles two pass sizes (1 and 8) at one attended length, and the lookup replay
drafts 7 tokens (a pass of 8; its drafts cost nothing, so τ, not k, sets its passes).
`--quick` is the same on the CPU with tiny shapes: `bucketed` stands for the captured path.
"""

from __future__ import annotations

import torch

from engine.bench.pass_replays import REPLAYS, Replay
from engine.bench.passes import PassesBenchConfig

COLD_PROMPT = 2300
REPLAYS_DEVICE = tuple(Replay(r.name, r.tau, 7, r.draft_model) if r.name == "lookup" else r for r in REPLAYS)
OUTPUT = "device-run.json"


def device_run_config(device: str, dtype: torch.dtype, *, quick: bool = False, int8: bool = False,
                      verifiers: tuple[str, ...] | None = None, repeats: int | None = None) -> PassesBenchConfig:
    captured = "graphs" if torch.device(device).type == "cuda" else "bucketed"
    return PassesBenchConfig(
        device=device, dtype=dtype, int8=int8, quick=quick, verifiers=verifiers, preset="device-run",
        contexts=(32,) if quick else (512,), sizes=(1, 8), ops_sizes=(1, 8), compiled_buckets=(1, 8),
        repeats=repeats or (2 if quick else 20), new_tokens=32 if quick else 64,
        fast_modes=(captured, "compiled"), measure=("times", "profile"), decode_attention=False,
        prefill_contexts=(300,) if quick else (COLD_PROMPT,), prefill_repeats=1 if quick else 3,
        keep_going=True, replays=REPLAYS_DEVICE,
    )


def targets(result: dict) -> list[dict]:
    """Issue 39's targets for an H100 or H200, each judged for every fast path measured."""
    def find(section: str, **match):
        return next((row for row in result[section] if all(row.get(k) == v for k, v in match.items())), None)

    rows = []
    for mode in result["config"]["fast_modes"]:
        for model, limit in (("qwen2.5-coder-1.5b", 1.5), ("qwen2.5-coder-7b", 5.0)):
            record = find("records", model=model, context=512, pass_tokens=8, fast_mode=mode)
            if record:
                rows.append(_target(f"{_short(model)} pass, k+1 = 8, 512 context", mode, record["fast_ms"], "≤", limit))
        step = find("draft_steps", model="qwen2.5-coder-0.5b", context=512, fast_mode=mode)
        if step:
            rows.append(_target("0.5B draft token", mode, step["fast_ms"], "≤", 0.6))
        plain = find("replays", verifier="qwen2.5-coder-7b", name="plain", fast_mode=mode)
        draft = find("replays", verifier="qwen2.5-coder-7b", name="draft", fast_mode=mode)
        if plain and draft:
            rows.append(_target("64 tokens, 7B + 0.5B draft at τ = 3, × the 7B plain", mode,
                                plain["fast_ms"] / draft["fast_ms"], "≥", 2.5, unit="×"))
        lookup = find("replays", verifier="qwen2.5-coder-1.5b", name="lookup", fast_mode=mode)
        if lookup:
            rows.append(_target("64 tokens, 1.5B + prompt lookup", mode, lookup["fast_ms"], "≤", 60))
        for model in ("qwen2.5-coder-1.5b", "qwen2.5-coder-7b"):
            prefill = find("prefill", model=model, context=COLD_PROMPT, chunk=COLD_PROMPT, fast_mode=mode)
            if prefill:
                rows.append(_target(f"{_short(model)} cold {COLD_PROMPT:,}-token prompt, one forward", mode,
                                    prefill["fast_ms"], "≤", 40))
    return rows


def _short(model: str) -> str:
    return model.rsplit("-", 1)[-1].upper()


def _target(text: str, mode: str, value: float, sign: str, limit: float, unit: str = "ms") -> dict:
    met = value <= limit if sign == "≤" else value >= limit
    return {"target": f"{text} {sign} {limit:g}{' ' if unit == 'ms' else ''}{unit}", "fast_mode": mode,
            "value": value, "limit": limit, "unit": unit, "met": bool(met),
            "off_by": 0.0 if met else abs(value - limit)}
