"""The engine benchmark's figures: per-mode summaries, ratios against the baselines, targets.

Ratios are per prompt against hf-greedy, then the median; pooled ratios divide total
rates. Token-level comparisons (`first_difference`, `positions_matching`) tell how far a
mode's output stays the verifier's own greedy output.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from engine.bench.common import round_or_none as _round
from engine.bench.runs import Run

BASELINE = "hf-greedy"
# Issue 5's targets for the hybrid drafter: tokens/s ratio against each baseline.
TARGETS = {"hf-greedy": 2.5, "hf-assisted": 1.5, "hf-prompt-lookup": 1.5}
TARGET_MODE = "quickdraft-hybrid"


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def positions_matching(a: Sequence[int], b: Sequence[int]) -> tuple[int, int]:
    """(positions where both have the same token, positions in the longer one)."""
    return sum(x == y for x, y in zip(a, b)), max(len(a), len(b))


def _median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# Long: one dict per mode whose fields are the report's columns, each a sum or ratio over the same runs.
def summarize(runs: Sequence[Run], modes: Sequence[str], n_prompts: int) -> list[dict]:
    """Per-mode figures; ratios are per prompt against hf-greedy, then the median."""
    by_mode = {m: {r.prompt: r for r in runs if r.mode == m} for m in modes}
    base = by_mode.get(BASELINE, {})
    summary = []
    for mode in modes:
        mine = by_mode[mode]
        tokens = sum(r.tokens for r in mine.values())
        seconds = sum(r.seconds for r in mine.values())
        passes = sum(r.passes for r in mine.values())
        drafted = sum(r.drafted for r in mine.values())
        accepted = sum(r.accepted for r in mine.values())
        decode_seconds = sum(r.decode_seconds for r in mine.values())
        ratios, decode_ratios, matched, positions, identical, firsts = [], [], 0, 0, 0, []
        for index, run in sorted(mine.items()):
            ref = base.get(index)
            if ref is None:
                continue
            if ref.tokens_per_s > 0:
                ratios.append(run.tokens_per_s / ref.tokens_per_s)
            if ref.decode_tokens_per_s > 0:
                decode_ratios.append(run.decode_tokens_per_s / ref.decode_tokens_per_s)
            m, p = positions_matching(run.token_ids, ref.token_ids)
            matched, positions = matched + m, positions + p
            diff = first_difference(run.token_ids, ref.token_ids)
            if diff is None:
                identical += 1
            else:
                firsts.append(diff)
        compared = len([i for i in mine if i in base])
        timing = {key: _sum_or_none([getattr(r, key) for r in mine.values()])
                  for key in ("prefill_ms", "draft_ms", "verify_ms")}
        decode_ms = seconds * 1000
        known = sum(v for v in timing.values() if v is not None)
        per_drafter: dict[str, dict] = {}
        for run in mine.values():
            for name, figures in run.per_drafter.items():
                total = per_drafter.setdefault(name, {"proposals": 0, "drafted": 0, "accepted": 0})
                for key in total:
                    total[key] += figures.get(key, 0)
        for figures in per_drafter.values():
            figures["acceptance"] = _round(figures["accepted"] / figures["drafted"]) if figures["drafted"] else None
        summary.append({
            "name": mode,
            "prompts": len(mine),
            "tokens": tokens,
            "seconds": _round(seconds),
            "tokens_per_s": _round(tokens / seconds if seconds else 0.0),
            "speedup_vs_hf_greedy": _round(_median(ratios)) if ratios else None,
            "speedup_vs_hf_greedy_pooled": None,  # filled below, once hf-greedy's rate is known
            "speedups_per_prompt": [_round(r) for r in ratios],
            "decode_tokens_per_s": _round(tokens / decode_seconds if decode_seconds else 0.0),
            "decode_speedup_vs_hf_greedy": _round(_median(decode_ratios)) if decode_ratios else None,
            "decode_speedups_per_prompt": [_round(r) for r in decode_ratios],
            "prompt_forward_s": _round(sum(r.prompt_forward_s for r in mine.values())),
            "tau": _round(tokens / passes) if passes else None,
            "tau_per_prompt": [_round(r.tau) if r.tau is not None else None for _, r in sorted(mine.items())],
            "verifier_passes": passes,
            "drafted": drafted,
            "accepted": accepted,
            "draft_acceptance": _round(accepted / drafted) if drafted else None,
            "match_vs_hf_greedy": _round(matched / positions) if positions else None,
            "matched_positions": matched,
            "compared_positions": positions,
            "identical_completions": _round(identical / compared) if compared else None,
            "first_difference_median": _median(firsts),
            "first_differences": firsts,
            "timing_ms": {**{k: _round(v) for k, v in timing.items()},
                          "overhead": _round(decode_ms - known), "total": _round(decode_ms)},
            "per_drafter": per_drafter,
        })
    base_rate = next((m["tokens_per_s"] for m in summary if m["name"] == BASELINE), None)
    for mode in summary:
        if base_rate:
            mode["speedup_vs_hf_greedy_pooled"] = _round(mode["tokens_per_s"] / base_rate)
    return summary


def pairwise_speedup(runs: Sequence[Run], mode: str, other: str, *, decode_only: bool = False
                     ) -> tuple[float | None, float | None]:
    """(median per-prompt tokens/s ratio, pooled ratio) of `mode` over `other`."""
    a = {r.prompt: r for r in runs if r.mode == mode}
    b = {r.prompt: r for r in runs if r.mode == other}

    def rate(r: Run) -> float:
        return r.decode_tokens_per_s if decode_only else r.tokens_per_s

    def secs(r: Run) -> float:
        return r.decode_seconds if decode_only else r.seconds

    ratios = [rate(a[i]) / rate(b[i]) for i in a if i in b and rate(b[i]) > 0]
    sa = sum(secs(r) for r in a.values())
    sb = sum(secs(r) for r in b.values())
    ta = sum(r.tokens for r in a.values())
    tb = sum(r.tokens for r in b.values())
    pooled = (ta / sa) / (tb / sb) if sa and sb and tb else None
    return (_median(ratios) if ratios else None), pooled


def targets(runs: Sequence[Run], modes: Sequence[str]) -> list[dict]:
    rows = []
    for other, goal in TARGETS.items():
        if TARGET_MODE not in modes or other not in modes:
            continue
        median, pooled = pairwise_speedup(runs, TARGET_MODE, other)
        decode_median, decode_pooled = pairwise_speedup(runs, TARGET_MODE, other, decode_only=True)
        rows.append({"mode": TARGET_MODE, "versus": other, "target": goal, "median_ratio": _round(median),
                     "pooled_ratio": _round(pooled), "met": bool(median is not None and median >= goal),
                     "decode_median_ratio": _round(decode_median), "decode_pooled_ratio": _round(decode_pooled),
                     "decode_met": bool(decode_median is not None and decode_median >= goal)})
    return rows


def _sum_or_none(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None

