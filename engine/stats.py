"""Decoding figures: what was drafted, accepted and emitted, where time went; percentiles.

No torch here: the server's telemetry and the benchmarks use it too.
"""

from __future__ import annotations

import math
from typing import Sequence
from dataclasses import asdict, dataclass, field


@dataclass
class DrafterStats:
    proposals: int = 0  # verifier passes that carried a draft from this drafter
    drafted: int = 0
    accepted: int = 0


@dataclass
class DecodeStats:
    prompt_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens actually fed; the rest came from the reused KV cache
    reused_tokens: int = 0
    prompt_truncated: bool = False
    verifier_passes: int = 0
    drafted: int = 0
    accepted: int = 0  # drafted tokens the verifier kept
    corrections: int = 0  # one token per pass from the verifier itself (correction or bonus)
    emitted: int = 0  # == accepted + corrections
    prefill_ms: float = 0.0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    decode_ms: float = 0.0  # wall time of the whole call, model loading excluded
    drafters: dict[str, DrafterStats] = field(default_factory=dict)

    @property
    def tau(self) -> float:
        """Mean tokens emitted per verifier pass (1.0 for plain decoding)."""
        return self.emitted / self.verifier_passes if self.verifier_passes else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def record_pass(self, source: str, drafted: int, accepted: int, emitted: int) -> None:
        """One verifier pass: `drafted` proposed, `accepted` kept, `emitted` tokens output.

        `emitted` can be less than accepted + 1 when EOS or max_new_tokens cut the step short.
        """
        self.verifier_passes += 1
        kept = min(accepted, emitted)
        self.drafted += drafted
        self.accepted += kept
        self.corrections += emitted - kept
        self.emitted += emitted
        if drafted:
            per = self.drafters.setdefault(source, DrafterStats())
            per.proposals += 1
            per.drafted += drafted
            per.accepted += kept

    def add(self, later: "DecodeStats") -> None:
        """Count a later call that continued this one's output (its prompt is this one's)."""
        for name in ("verifier_passes", "drafted", "accepted", "corrections", "emitted", "draft_ms", "verify_ms",
                     "decode_ms"):
            setattr(self, name, getattr(self, name) + getattr(later, name))
        for source, figures in later.drafters.items():
            mine = self.drafters.setdefault(source, DrafterStats())
            mine.proposals += figures.proposals
            mine.drafted += figures.drafted
            mine.accepted += figures.accepted

    def to_dict(self) -> dict:
        data = asdict(self)
        data["tau"] = round(self.tau, 4)
        data["acceptance"] = None if self.acceptance is None else round(self.acceptance, 4)
        for key in ("prefill_ms", "draft_ms", "verify_ms", "decode_ms"):
            data[key] = round(data[key], 3)
        return data


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile, q in 0..100: the smallest value with at least q% of the values
    at or below it (rank ceil(q/100 * n), at least 1). Always one of the values, never an
    interpolation; None for no values. p50 of 1..10 is 5, p90 is 9, p100 is 10, p0 is 1.
    """
    if not values:
        return None
    ordered = sorted(values)
    # The epsilon keeps q/100 * n from rounding up past an exact rank (0.29 * 100 = 28.999…).
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered) - 1e-9)))
    return ordered[rank - 1]
