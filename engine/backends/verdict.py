"""Show the draft, then the verdict: the draft model's own answer inside the budget, the verifier's after it.

Where the better verifier cannot answer inside the budget (the 1.5B on a 2-core CPU), the draft
model (the 0.5B) answers alone, with prompt lookup, exactly as it would as the only model: in time,
and marked `provisional`. The verifier then decodes the same request with no deadline, with the
draft model as its drafter, so its first pass checks what is on screen; its output (exactly what it
alone would write) is the request's final result. The server keeps it, and where it differs from
the ghost text shown, tells the client it is ready (lsp_server/answering/model_runs.py, `verdict`).

Both engines share the draft model's weights; each keeps its own KV caches across requests.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable

from engine.backends.base import TextCallback
from engine.backends.local import LocalBackend
from engine.completion import CompletionEngine, CompletionRequest, CompletionResult
from engine.decoding.stops import StopReason
from engine.errors import ModelError
from engine.modes import needs_draft_model


class DraftThenVerdict(LocalBackend):
    """`engine` (the verifier with its draft model) gives the verdict; `drafts_alone` (the draft model
    as its own verifier) answers first."""

    def __init__(self, engine: CompletionEngine, drafts_alone: CompletionEngine) -> None:
        super().__init__(engine)
        self.drafts_alone = drafts_alone

    @classmethod
    def load(cls, verifier: str | None, draft: str | None, *, drafter: str, dtype: str | None = None,
             device: str | None = None, compiled_step: bool = False) -> "DraftThenVerdict":
        """The verifier drafts with the draft model (hybrid, unless `drafter` is another mode that uses it),
        so its first pass checks the text shown. `compiled_step` is the verifier engine's (the draft model's
        own engine, which shows its answer first, keeps the usual cache)."""
        if draft == "none":
            raise ModelError("showing the draft first needs a draft model: set `draft` (e.g. qwen2.5-coder-0.5b), "
                             "or turn `showDraftFirst` off")
        engine = LocalBackend.load(verifier, draft, drafter=drafter if needs_draft_model(drafter) else "hybrid",
                                   dtype=dtype, device=device, compiled_step=compiled_step).engine
        if engine.draft.name == engine.verifier.name:
            raise ModelError(f"showing the draft first needs a draft model other than the verifier ({verifier}): "
                             "set `verifier` to the larger model")
        return cls(engine, CompletionEngine(engine.draft, None, drafter="lookup", context_budget=engine.default_budget))

    def complete(self, request: CompletionRequest, cancel: threading.Event | None = None,
                 on_text: TextCallback | None = None,
                 on_answer: Callable[[CompletionResult], None] | None = None) -> CompletionResult:
        """With `on_answer`: the draft model's answer to it (at the budget, and as it grows), marked
        provisional, then the verifier's verdict returned. Without, nobody could be told of a later
        verdict: the verifier alone answers, as a `LocalBackend` would."""
        if on_answer is None:
            return self.engine.complete(request, cancel=cancel, on_text=on_text)
        shown_text = EitherEvent(cancel)  # set once text is on screen: the verdict takes over from there
        last_shown: list[str] = []  # the texts handed to on_answer

        def provisional(answer: CompletionResult) -> None:
            last_shown.append(answer.text)
            on_answer(replace(answer, provisional=True))
            if answer.text:
                shown_text.set()

        # Past the budget the draft model decodes on only until it has shown something (after a jump
        # it is still reading the prompt at the budget): the verdict writes the longer text.
        shown = self.drafts_alone.complete(request, cancel=shown_text, on_answer=provisional)
        if cancel is not None and cancel.is_set():
            return replace(shown, stop_reason=StopReason.CANCELLED)
        if shown.stop_reason != StopReason.CANCELLED and last_shown[-1:] != [shown.text]:
            provisional(shown)  # done inside the budget, or grown since without a new line
        return self.engine.complete(replace(request, budget_ms=None), cancel=cancel, on_text=on_text)

    def warm(self, request: CompletionRequest, cancel: threading.Event | None = None) -> int:
        """The draft model's prompt alone: it answers first. A request at the warmed spot waits for its
        warm to end (lsp_server/answering/warming.py, `join`): warming the verifier too made the first
        ghost text after a jump wait for the verifier's prompt (4.4 s on 2 cores against 1.2 s). The
        verifier reads its prompt in the verdict, after the answer is shown."""
        return self.drafts_alone.warm(request, cancel=cancel)

    def set_context_budget(self, **chosen: int | None) -> None:
        super().set_context_budget(**chosen)
        self.drafts_alone.context_budget = self.engine.context_budget

    def describe(self) -> str:
        return f"{self.drafts_alone.verifier.name} shown first, then the verdict of {super().describe()}"

    def stats(self) -> dict:
        return super().stats() | {"shown_first": self.drafts_alone.verifier.name}


class EitherEvent(threading.Event):
    """An event of its own that also reads as set when `other` is: the engine only asks `is_set`."""

    def __init__(self, other: threading.Event | None) -> None:
        super().__init__()
        self.other = other

    def is_set(self) -> bool:
        return super().is_set() or (self.other is not None and self.other.is_set())
