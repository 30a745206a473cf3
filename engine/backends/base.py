"""What the server needs from whatever produces completions: the Backend interface.

Two implementations: `local.LocalBackend` (quickdraft's own speculative engine in this
process) and `remote.RemoteBackend` (an OpenAI-compatible inference server: vLLM,
SGLang, llama.cpp's llama-server). Both take the same `CompletionRequest`, render the
same FIM prompt, post-process the same way and answer the same `CompletionResult`, so
the LSP side cannot tell them apart. A backend is called from one worker thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from engine.errors import QuickdraftError

if TYPE_CHECKING:  # engine.completion imports torch; a remote backend never needs it at import
    from engine.completion import CompletionRequest, CompletionResult

TextCallback = Callable[[str], None]


class BackendError(QuickdraftError):
    """The inference server is unreachable, refused the request or answered something unusable."""


@dataclass(frozen=True)
class Health:
    """How the backend is doing, as the editor's status line should say it.

    state: ready (answering) | slow (answering, but after the budget) | unavailable
    (unreachable or answering errors; requests answer empty until it recovers).
    """

    state: str
    message: str


HealthCallback = Callable[[Health], None]


@runtime_checkable
class Backend(Protocol):
    kind: str  # "local" | "remote"

    def complete(self, request: "CompletionRequest", cancel: threading.Event | None = None,
                 on_text: TextCallback | None = None,
                 on_answer: "Callable[[CompletionResult], None] | None" = None) -> "CompletionResult":
        """Fill in the middle at the request's cursor, post-processed for display.

        Stops at the request's deadline (answering what it has), or as soon as `cancel` is set.
        With `on_answer`, the deadline hands the completion so far to `on_answer` instead, and
        decoding goes on until it ends or `cancel` is set: the result is the longer text. A
        backend may call `on_answer` again as that text grows (the local engine: by whole lines).
        """
        ...

    def warm(self, request: "CompletionRequest", cancel: threading.Event | None = None) -> int:
        """Prepare caches for a likely request; returns the prompt tokens made ready (0: nothing done)."""
        ...

    def describe(self) -> str:
        """One line for the status bar: what answers the completions."""
        ...

    def stats(self) -> dict:
        """Figures for quickdraft/stats beyond the per-request records (JSON-ready)."""
        ...

    def close(self) -> None:
        ...
