"""What the server measures: per-request figures, user acceptance, and the drafter retune rule.

Two acceptance rates matter and are kept apart: *draft acceptance* (drafted tokens the
verifier kept — whether speculation pays) and *user acceptance* (shown completions the
user took — whether the completions are any good).
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field

from engine.decoding.stops import StopReason
from engine.modes import needs_draft_model
from engine.stats import percentile

log = logging.getLogger(__name__)

WINDOW = 32  # requests in the rolling window
RETUNE_MIN_DRAFTED = 64  # judge a drafter only on enough drafted tokens
RETUNE_THRESHOLD = 0.5  # below this a draft is not paying for itself
TRACKED_ITEMS = 4096  # completion ids remembered to count each shown/accepted item once
MAX_ITEM_ID_CHARS = 64


@dataclass
class RequestRecord:
    id: str
    uri: str
    source: str  # model | typethrough | kept | followed | empty | anticipated (a run no request adopted)
    latency_ms: float
    budget_ms: float
    stop_reason: str = ""
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    reused_tokens: int = 0
    emitted: int = 0
    verifier_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    tau: float = 0.0
    drafters: dict = field(default_factory=dict)
    text_chars: int = 0
    withheld: str = ""  # why an answer the model gave was not shown (engine/decoding/confidence.py)
    confidence: float | None = None  # the gated statistic of the answer, shown or withheld

    @property
    def within_budget(self) -> bool:
        return self.latency_ms <= self.budget_ms

    def add_result(self, result) -> None:
        """The figures of the backend's answer (a CompletionResult, or the loop's empty one with a stop reason only)."""
        self.stop_reason = result.stop_reason
        stats = getattr(result, "stats", None)
        if stats is None:
            return
        self.prompt_tokens, self.prefill_tokens = stats.prompt_tokens, stats.prefill_tokens
        self.reused_tokens, self.emitted = stats.reused_tokens, stats.emitted
        self.verifier_passes, self.drafted, self.accepted = stats.verifier_passes, stats.drafted, stats.accepted
        self.tau = stats.tau
        self.drafters = {name: vars(figures).copy() for name, figures in stats.drafters.items()}
        self.text_chars = len(result.text)
        self.withheld, confidence = result.withheld, result.confidence  # the confidence gate's verdict
        self.confidence = confidence.gated_value() if confidence is not None else None


@dataclass
class Verdicts:
    """What the verifier's verdicts did to the draft model's answers shown first."""

    provisional: int = 0  # runs answered with the draft model's text
    confirmed: int = 0  # the verdict is the text shown
    extended: int = 0  # the verdict goes on from the text shown (or from nothing shown)
    replaced: int = 0  # the verdict changes text that was shown
    replaced_chars: int = 0  # characters of the text shown that the verdicts changed
    unseen: int = 0  # of those three, verdicts that came after the user typed on (no ready notification)
    cancelled: int = 0  # no verdict: the user moved on before it was decoded
    moved: int = 0  # a verdict that came after another answer was kept at that spot

    def add(self, shown: str, verdict: str, seen: bool) -> None:
        common = len(os.path.commonprefix([shown, verdict]))
        if verdict == shown:
            self.confirmed += 1
        elif common == len(shown):
            self.extended += 1
        else:
            self.replaced += 1
            self.replaced_chars += len(shown) - common
        self.unseen += not seen


class RecentItems:
    """Completion item ids seen lately, with a value each: counts every new id, remembers only
    the last TRACKED_ITEMS (a client can send any number of ids; a set of all of them grew
    for ever). An id older than that counts again if it comes back, which real clients,
    reporting within seconds of the answer, do not do."""

    def __init__(self, limit: int = TRACKED_ITEMS) -> None:
        self.limit = limit
        self.items: OrderedDict[str, int] = OrderedDict()
        self.total = 0

    def add(self, item_id: str, value: int = 0) -> None:
        item_id = item_id[:MAX_ITEM_ID_CHARS]
        if item_id not in self.items:
            self.total += 1
        self.items[item_id] = max(value, self.items.get(item_id, value))
        self.items.move_to_end(item_id)
        while len(self.items) > self.limit:
            self.items.popitem(last=False)

    def __getitem__(self, item_id: str) -> int:
        return self.items[item_id[:MAX_ITEM_ID_CHARS]]


class Telemetry:
    def __init__(self) -> None:
        self.recent: deque[RequestRecord] = deque(maxlen=WINDOW)
        self.latencies: deque[float] = deque(maxlen=1000)
        self.counts = {"requests": 0, "model": 0, "typethrough": 0, "empty": 0, "cancelled": 0,
                       "superseded": 0, "stale": 0, "errors": 0}
        self.totals = {"drafted": 0, "accepted": 0, "emitted": 0, "verifier_passes": 0}
        self.per_drafter: dict[str, dict[str, int]] = {}
        self.shown = RecentItems()
        self.accepted_items = RecentItems()
        self.partial = RecentItems()
        # Show the draft, then the verdict (engine/backends/verdict.py): what became of the answers shown first.
        self.verdicts = Verdicts()
        self.started = time.time()

    # -- requests ---------------------------------------------------------------------
    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def record(self, record: RequestRecord) -> None:
        self.count(record.source)
        if record.source != "anticipated":  # no client waited for that one: not a request, no latency
            self.counts["requests"] += 1
            if record.stop_reason == StopReason.CANCELLED:
                self.count("cancelled")
            if record.withheld:
                self.count("withheld")
            self.latencies.append(record.latency_ms)
        self.recent.append(record)
        for key in self.totals:
            self.totals[key] += getattr(record, key)
        for name, figures in record.drafters.items():
            total = self.per_drafter.setdefault(name, {"proposals": 0, "drafted": 0, "accepted": 0})
            for key in total:
                total[key] += figures.get(key, 0)

    # -- what the user did ------------------------------------------------------------
    def did_show(self, item_id: str) -> None:
        self.shown.add(item_id)

    def did_accept(self, item_id: str) -> None:
        self.shown.add(item_id)
        self.accepted_items.add(item_id)

    def did_partially_accept(self, item_id: str, length: int) -> None:
        self.shown.add(item_id)
        self.partial.add(item_id, length)

    # -- the retune rule --------------------------------------------------------------
    def window_acceptance(self, drafter: str) -> tuple[float | None, int]:
        drafted = sum(r.drafters.get(drafter, {}).get("drafted", 0) for r in self.recent)
        accepted = sum(r.drafters.get(drafter, {}).get("accepted", 0) for r in self.recent)
        return (accepted / drafted if drafted else None), drafted

    def retune(self, mode: str) -> tuple[str, str] | None:
        """(new mode, reason) when the draft model's recent acceptance says it is not paying."""
        if not needs_draft_model(mode):
            return None
        rate, drafted = self.window_acceptance("draft")
        if rate is None or drafted < RETUNE_MIN_DRAFTED or rate >= RETUNE_THRESHOLD:
            return None
        reason = (f"draft-model acceptance {rate:.0%} over the last {len(self.recent)} requests "
                  f"({drafted} drafted tokens) is under {RETUNE_THRESHOLD:.0%}: switching to prompt-lookup drafting")
        self.recent.clear()  # judge the new mode on its own requests
        return "lookup", reason

    # -- the stats request ------------------------------------------------------------
    def draft_acceptance(self) -> float | None:
        drafted, accepted = self.totals["drafted"], self.totals["accepted"]
        return accepted / drafted if drafted else None

    def snapshot(self, drafter: str) -> dict:
        latencies = list(self.latencies)
        model_records = [r for r in self.recent if r.source == "model"]
        shown = self.shown.total
        return {
            "drafter": drafter,
            "requests": self.counts["requests"],
            "counts": dict(self.counts),
            "draftAcceptance": self.draft_acceptance(),
            "tau": self.totals["emitted"] / self.totals["verifier_passes"] if self.totals["verifier_passes"] else None,
            "drafters": {name: dict(v, acceptance=v["accepted"] / v["drafted"] if v["drafted"] else None)
                         for name, v in self.per_drafter.items()},
            "latencyMs": {"p50": percentile(latencies, 50), "p90": percentile(latencies, 90),
                          "p99": percentile(latencies, 99)},
            "withinBudget": (sum(r.within_budget for r in model_records) / len(model_records)
                             if model_records else None),
            "shown": shown,
            "accepted": self.accepted_items.total,
            "partiallyAccepted": self.partial.total,
            "userAcceptance": self.accepted_items.total / shown if shown else None,
            "verdicts": asdict(self.verdicts) if self.verdicts.provisional else None,
            "recent": [asdict(r) | {"within_budget": r.within_budget} for r in list(self.recent)[-10:]],
        }
