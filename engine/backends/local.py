"""The local backend: quickdraft's speculative engine, loaded in this process."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable

from engine.backends.base import Health, TextCallback
from engine.completion import CompletionEngine, CompletionRequest, CompletionResult


CLOSE_WAIT_S = 10.0  # for a background compile to end its graph: a process must not exit inside one


class LocalBackend:
    kind = "local"
    shared = False  # this editor's alone: it may decode ahead of what is asked
    health = Health("ready", "")  # nothing between it and the editor to go away

    def __init__(self, engine: CompletionEngine) -> None:
        self.engine = engine

    @classmethod
    def load(cls, verifier: str | None, draft: str | None, *, drafter: str, dtype: str | None = None,
             device: str | None = None, compiled_step: bool = False) -> "LocalBackend":
        engine = CompletionEngine.load(verifier, draft, drafter=drafter, dtype=dtype, device=device,
                                       compiled_step=compiled_step)
        engine.template  # noqa: B018 -- a model without fill-in-the-middle tokens fails here, with the reason
        return cls(engine)

    def complete(self, request: CompletionRequest, cancel: threading.Event | None = None,
                 on_text: TextCallback | None = None,
                 on_answer: Callable[[CompletionResult], None] | None = None) -> CompletionResult:
        return self.engine.complete(request, cancel=cancel, on_text=on_text, on_answer=on_answer)

    def warm(self, request: CompletionRequest, cancel: threading.Event | None = None) -> int:
        return self.engine.warm(request, cancel=cancel)

    @property
    def drafter_mode(self) -> str:
        return self.engine.drafter_mode

    def set_drafter(self, mode: str) -> None:
        self.engine.set_drafter(mode)

    def set_context_budget(self, **chosen: int | None) -> None:
        """Token budgets the client chose override the engine's defaults for its device."""
        engine = self.engine
        engine.context_budget = replace(engine.default_budget, **{k: v for k, v in chosen.items() if v is not None})

    def describe(self) -> str:
        verifier = self.engine.verifier
        return f"{verifier.name} ({verifier.precision}, {verifier.device}), drafter {self.engine.drafter_mode}"

    def stats(self) -> dict:
        verifier, draft, compiled = self.engine.verifier, self.engine.draft, self.engine.compiled
        return {"kind": self.kind, "verifier": verifier.name, "draft": draft.name if draft is not None else None,
                "device": str(verifier.device), "dtype": str(verifier.dtype).removeprefix("torch."),
                # "compiling", "ready in N s" or "failed: reason", the graphs compiled, the plan (None: off)
                "compiled_step": compiled.stats() if compiled is not None else None}

    def close(self) -> None:
        if self.engine.compiled is not None:
            self.engine.compiled.stop()  # a compile still running ends after its current graph
            self.engine.compiled.wait(timeout=CLOSE_WAIT_S)
