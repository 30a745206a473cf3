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
    """Everything the server asks of a backend: both implementations have every member, so the
    server never needs to know which one it holds."""

    kind: str  # "local" | "remote": for status lines and figures, never to decide what to do
    # Other users' requests run on it too (an inference server): it is given no work nobody asked
    # for, and a request the client cancels is stopped rather than decoded on for the next keys.
    shared: bool
    drafter_mode: str  # how drafts are made (engine.modes); "server": the inference server's own way
    health: Health  # how it is doing; a local engine is always ready

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

    def set_drafter(self, mode: str) -> None:
        """Draft this way from the next request on (a setting, or adaptive drafting); a backend
        whose server drafts by its own configuration has nothing to switch."""
        ...

    def set_context_budget(self, **chosen: int | None) -> None:
        """The prompt's token budgets the client chose (prefix_tokens, suffix_tokens,
        other_documents_tokens, cold_prefix_tokens); None keeps the backend's default."""
        ...

    def describe(self) -> str:
        """One line for the status bar: what answers the completions."""
        ...

    def stats(self) -> dict:
        """Figures for quickdraft/stats beyond the per-request records (JSON-ready)."""
        ...

    def close(self) -> None:
        ...
