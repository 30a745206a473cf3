"""One streamed request to an inference server: what it has brought so far.

Written on the remote backend's I/O loop as the server-sent events arrive, read by the worker
thread that waits for the answer (engine/backends/remote.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from engine.backends.base import BackendError, TextCallback
from engine.backends.wire import StreamEvent
from engine.decoding.decoder import StopReason


@dataclass
class Stream:
    """What one request's stream has brought so far."""

    parts: list[str] = field(default_factory=list)
    chunks: int = 0
    reason: StopReason | None = None
    timings: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    error: BackendError | None = None
    first_text_at: float | None = None
    ended_at: float | None = None
    closed: threading.Event = field(default_factory=threading.Event)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def take(self, event: StreamEvent | None, on_text: TextCallback | None) -> None:
        """One parsed server-sent event (None: a line that carries none)."""
        if event is None:
            return
        if event.error:
            raise BackendError(f"the backend stopped with an error: {event.error}")
        if event.text:
            if self.first_text_at is None:
                self.first_text_at = time.monotonic()
            self.parts.append(event.text)
            self.chunks += 1
            if on_text is not None:
                on_text(event.text)
        self.timings = event.timings or self.timings
        self.usage = event.usage or self.usage
        if event.done:
            self.reason = StopReason(event.finish_reason)
