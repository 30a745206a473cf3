"""The confidence gate's trade, from one `bench quality` run's recorded confidences.

Every answer's confidence (engine/decoding/confidence.py: the geometric-mean and the least token
probability of the text shown) is recorded with the gate off, so each threshold's outcome
is computed, not re-run: an answer is shown when its statistic reaches the threshold. Per
threshold: shown % (of holes), exact % of shown, parses % of shown, and accepted characters
per request (the Tab-accepted prefix: characters of the answer that match the expected text
from its start, averaged over every hole, empty ones included).

The default threshold is picked on half of the files and judged on the other half (holes
split by a hash of their file's path, so one file never lands on both sides): the highest
threshold that keeps at least `KEEP_ACCEPTED` of the ungated accepted characters on the
picking half. Fewer wrong answers are shown, and little of what users would have taken is lost.
"""

from __future__ import annotations

import zlib
from typing import Sequence

THRESHOLDS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
STATISTICS = ("mean", "min")
KEEP_ACCEPTED = 0.9  # of the ungated accepted characters per request, on the picking half


def accepted_chars(added: str, expected: str) -> int:
    """Characters of `added` that match `expected` from its start: what Tab-by-word would keep."""
    n = 0
    for a, b in zip(added, expected):
        if a != b:
            break
        n += 1
    return n


def half(path: str) -> str:
    """'pick' or 'check': which half of the files a hole's file belongs to (stable across runs)."""
    return "pick" if zlib.crc32(path.encode()) % 2 == 0 else "check"


def gated(result: dict, threshold: float, statistic: str) -> bool:
    """Whether the gate at `threshold` shows this (non-empty) answer."""
    confidence = result.get("confidence")
    return confidence is None or threshold <= 0 or confidence[statistic] >= threshold


def curve_row(results: Sequence[dict], threshold: float, statistic: str) -> dict:
    shown = [r for r in results if not r["empty"] and gated(r, threshold, statistic)]
    parsed = [r["parses"] for r in shown if r["parses"] is not None]
    return {
        "threshold": threshold, "holes": len(results),
        "shown": _share(len(shown), len(results)),
        "exact_of_shown": _share(sum(r["exact"] for r in shown), len(shown)),
        "parses_of_shown": _share(sum(parsed), len(parsed)),
        "accepted_chars": round(sum(r["accepted_chars"] for r in shown) / len(results), 2) if results else None,
    }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def gate_curves(records: Sequence[dict], label: str) -> dict:
    """Per statistic and half ('all', 'pick', 'check'): the curve over THRESHOLDS, and the choice."""
    results = {"all": [r["results"][label] for r in records]}
    for side in ("pick", "check"):
        results[side] = [r["results"][label] for r in records if half(r["path"]) == side]
    curves = {}
    for statistic in STATISTICS:
        rows = {side: [curve_row(rs, t, statistic) for t in THRESHOLDS] for side, rs in results.items()}
        curves[statistic] = {"rows": rows, "choice": choose(rows["pick"])}
    return curves


def choose(rows: Sequence[dict]) -> float:
    """The highest threshold keeping KEEP_ACCEPTED of the ungated accepted characters per request."""
    base = rows[0]["accepted_chars"] or 0.0
    kept = [r["threshold"] for r in rows if (r["accepted_chars"] or 0.0) >= KEEP_ACCEPTED * base]
    return max(kept) if kept else 0.0


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def format_gate_table(curves: dict, label: str) -> str:
    """One row per statistic and threshold: all holes, then the held-out half; the choice marked."""
    rows = [f"Confidence gate, {label}: threshold → shown, exact of shown, parses of shown, accepted chars per "
            "request (all holes | held-out files; * the threshold picked on the other files)", "",
            "| statistic | threshold | shown | exact of shown | parses of shown | accepted chars | "
            "held-out shown | held-out exact of shown | held-out accepted chars |",
            "|---|---|---|---|---|---|---|---|---|"]
    for statistic, entry in curves.items():
        for every, check in zip(entry["rows"]["all"], entry["rows"]["check"]):
            mark = " *" if every["threshold"] == entry["choice"] else ""
            rows.append(f"| {statistic} | {every['threshold']:.2f}{mark} | {_pct(every['shown'])} | "
                        f"{_pct(every['exact_of_shown'])} | {_pct(every['parses_of_shown'])} | {every['accepted_chars']} | "
                        f"{_pct(check['shown'])} | {_pct(check['exact_of_shown'])} | {check['accepted_chars']} |")
    return "\n".join(rows)
