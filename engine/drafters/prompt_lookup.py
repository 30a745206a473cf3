"""Prompt-lookup drafting: copy what followed the longest earlier match of the current suffix.

Code repeats itself — names, call patterns, the line being re-typed — so an n-gram match
in the prompt, the generated text or another open document often predicts the next
tokens exactly, at no model cost.
"""

from __future__ import annotations

from typing import Sequence

from engine.decoding.draft import Draft
from engine.drafters.base import DraftLength
from engine.decoding.verify import SamplingParams

SCAN_LIMIT = 64  # occurrences of one n-gram looked at when collecting several continuations


class NgramIndex:
    """n-gram → the positions right after its occurrences (oldest first), for n in [min_n, max_n].

    `extend` indexes only the new tokens, so growing the sequence by a few accepted
    tokens costs O(new tokens × n), not a rebuild.
    """

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self.positions: dict[tuple[int, ...], list[int]] = {}

    def extend(self, new_tokens: Sequence[int]) -> None:
        for token in new_tokens:
            # The n-grams ending at the current last token now have a continuation: `token`.
            end = len(self.tokens)
            for n in range(self.min_n, min(self.max_n, end) + 1):
                self.positions.setdefault(tuple(self.tokens[end - n:end]), []).append(end)
            self.tokens.append(token)

    def continuation(self, suffix: Sequence[int], max_tokens: int) -> tuple[int, list[int]]:
        """Longest n-gram match of `suffix`'s tail: (n, the tokens that followed it)."""
        for n in range(min(self.max_n, len(suffix)), self.min_n - 1, -1):
            starts = self.positions.get(tuple(suffix[len(suffix) - n:]))
            if starts:
                return n, self.tokens[starts[-1]:starts[-1] + max_tokens]
        return 0, []

    def continuations(self, suffix: Sequence[int], max_tokens: int, limit: int) -> list[tuple[int, list[int]]]:
        """Up to `limit` distinct continuations as (n, tokens): longest match first, then most recent."""
        found: list[tuple[int, list[int]]] = []
        for n in range(min(self.max_n, len(suffix)), self.min_n - 1, -1):
            starts = self.positions.get(tuple(suffix[len(suffix) - n:]), [])
            for start in reversed(starts[-SCAN_LIMIT:]):  # a common token recurs often: look at the latest only
                continuation = self.tokens[start:start + max_tokens]
                # A continuation that extends or repeats one already found adds no branch.
                if continuation and not any(_prefix_related(continuation, seen) for _, seen in found):
                    found.append((n, continuation))
                    if len(found) >= limit:
                        return found
        return found


def _prefix_related(a: list[int], b: list[int]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


class PromptLookupDrafter:
    name = "lookup"

    def __init__(self, *, min_n: int = 1, max_n: int = 4, max_tokens: int = 10, min_match: int = 1) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.min_match = min_match  # shorter matches propose nothing (the hybrid drafter asks for 2)
        self.length = DraftLength(initial=max_tokens, minimum=2, maximum=max_tokens)
        self.sequence = NgramIndex(min_n, max_n)
        self.streams: list[NgramIndex] = []
        self._indexed: dict[int, tuple[Sequence[int], NgramIndex]] = {}  # id(stream) → (stream, its index)

    def start(self, prompt_ids: Sequence[int], context_streams: Sequence[Sequence[int]] = ()) -> None:
        # A stream the last request had too (another document, the anchor's suffix) keeps its index:
        # indexing thousands of tokens in Python at every keystroke holds the GIL for tens of ms.
        self.sequence = NgramIndex(self.min_n, self.max_n)
        previous, self._indexed = self._indexed, {}
        for stream in context_streams:
            stream_and_index = previous.get(id(stream))
            if stream_and_index is None or stream_and_index[0] is not stream:
                index = NgramIndex(self.min_n, self.max_n)
                index.extend(stream)
                stream_and_index = (stream, index)
            self._indexed[id(stream)] = stream_and_index
        self.streams = [self._indexed[id(stream)][1] for stream in context_streams]

    def match(self, tokens: Sequence[int], max_tokens: int) -> tuple[int, list[int]]:
        """Best continuation over the sequence itself (most recent first) and the context streams."""
        self.sequence.extend(tokens[len(self.sequence.tokens):])
        best_n, best = 0, []
        for index in [self.sequence, *self.streams]:
            n, continuation = index.continuation(tokens, max_tokens)
            if n > best_n and continuation:
                best_n, best = n, continuation
        return best_n, best

    def propose(self, tokens: Sequence[int], max_tokens: int, sampling: SamplingParams) -> Draft:
        n, continuation = self.match(tokens, min(max_tokens, self.length.value))
        return Draft(continuation if n >= self.min_match else [], None, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        self.length.update(len(draft.tokens), accepted)
