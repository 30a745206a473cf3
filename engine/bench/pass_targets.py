"""Issue 39's targets for `quickdraft bench passes` on an H100 or H200, judged for each fast path
measured (the device run's, engine/bench/device_run.py, has every figure they read)."""

from __future__ import annotations

COLD_PROMPT = 2300  # tokens: 1,024 before the cursor, 256 after, 1,024 from other files


def targets(result: dict) -> list[dict]:
    """Issue 39's targets for an H100 or H200, each judged for every fast path measured."""
    def find(section: str, **match):
        return next((row for row in result.get(section, []) if all(row.get(k) == v for k, v in match.items())), None)

    rows = []
    for mode in result["config"]["fast_modes"]:
        for model, limit in (("qwen2.5-coder-1.5b", 1.5), ("qwen2.5-coder-7b", 5.0)):
            record = find("records", model=model, context=512, pass_tokens=8, fast_mode=mode)
            if record:
                rows.append(_target(f"{_short(model)} pass, k+1 = 8, 512 context", mode, record["fast_ms"], "≤", limit))
        step = find("draft_steps", model="qwen2.5-coder-0.5b", context=512, fast_mode=mode)
        if step:
            rows.append(_target("0.5B draft token", mode, step["fast_ms"], "≤", 0.6))
        loop = find("draft_loops", model="qwen2.5-coder-0.5b", context=512, fast_mode=mode, k=8)
        if loop:
            rows.append(_target("0.5B draft token, k = 8 in the draft loop", mode, loop["loop_ms"], "≤", 0.6))
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
