"""How the drafters are tuned: one frozen object, passed in when a drafter is made."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterConfig:
    max_draft_tokens: int = 8  # the most tokens one proposal may hold (each drafter's length adapts below it)
    lookup_min_n: int = 1  # n-gram lengths prompt lookup matches on
    lookup_max_n: int = 4
    hybrid_min_match: int = 2  # hybrid: the shortest lookup match that preempts the draft model
    confidence_threshold: float = 0.4  # the draft model stops drafting below this probability
    draft_initial_length: int = 4  # the draft model's first draft length (it then adapts)
    # hybrid with trained heads: at most this many of the heads' nodes where lookup has candidates
    # too (on a CPU every node costs pass time; where lookup has none, the heads draft in full).
    # None: each kind's own (engine/drafters/medusa.py).
    head_nodes_beside_lookup: int | None = None
