"""The adaptive draft length drafters share (the interface they implement is engine/decoding/draft.py)."""

from __future__ import annotations


class DraftLength:
    """Draft length that follows acceptance: +2 after a fully accepted draft, −1 otherwise.

    The same heuristic as transformers' assisted generation: long drafts when they pay,
    short ones when they don't.
    """

    def __init__(self, initial: int = 4, minimum: int = 1, maximum: int = 16) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.value = max(minimum, min(initial, maximum))

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        step = 2 if accepted == drafted else -1
        self.value = max(self.minimum, min(self.value + step, self.maximum))
