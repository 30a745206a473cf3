"""Garbage-collector pauses: what loading the models made is frozen out of the collector's sight.

A full collection scans every container object the process tracks, and once the models are
loaded there are over half a million (576,000 with the 0.5B, its tokenizer and the libraries').
On a 2-core CPU one full collection took 240–270 ms, during which no thread of the server runs
Python: the event loop answers no deadline and the engine feeds no pass. They are rare (two in a
nine-minute typing session), but each stops everything for longer than the budget.

The objects alive once the models are loaded live as long as the models: `gc.freeze()` moves
them to a generation no collection scans (vLLM does so once its model is warmed up; SGLang
offers it as `freeze_gc`), and later full collections see only what requests made, a few
milliseconds' work. Before models are replaced the frozen objects are thawed, so that the old
models' reference cycles can be collected. The full collections made while the models serve
are measured, for `quickdraft/stats`.
"""

from __future__ import annotations

import gc
import time


class Collector:
    """Freezes what the loaded models made, and measures the full collections while they serve."""

    def __init__(self) -> None:
        self.count = 0
        self.longest_ms = 0.0
        self.total_ms = 0.0
        self._serving = False  # loading collects a lot, and is not what a user waits for
        self._began: float | None = None

    def start(self) -> None:
        gc.callbacks.append(self._observe)

    def stop(self) -> None:
        """The service ends: nothing stays frozen for its sake."""
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)
        self.thaw()

    def freeze_loaded(self) -> None:
        """After loading: collect what loading left over, then freeze everything still alive."""
        gc.collect()
        gc.freeze()
        self._serving = True

    def thaw(self) -> None:
        """Before dropping models: let the collector see (and free) them again."""
        self._serving = False
        gc.unfreeze()

    def _observe(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2 or not self._serving:
            return  # the young generations hold few objects: their pauses are microseconds
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            pause_ms = (time.perf_counter() - self._began) * 1000
            self._began = None
            self.count += 1
            self.total_ms += pause_ms
            self.longest_ms = max(self.longest_ms, pause_ms)

    def snapshot(self) -> dict:
        return {"fullCollections": self.count, "longestMs": round(self.longest_ms, 1),
                "totalMs": round(self.total_ms, 1), "frozenObjects": gc.get_freeze_count()}
